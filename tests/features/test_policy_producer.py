"""Hybrid extraction (trust, validate, re-extract, drop, fill) and the producer's build_part."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from mma2a.errors import InvalidParams
from mma2a.ext import EXTENSION_URI, read_part
from mma2a.features import FeaturePipeline, FeaturePolicy, build_part, enrich_part, sniff_modality

from . import media as m


def image_part(data: bytes, features: dict[str, Any] | None = None, source: Any = None) -> dict[str, Any]:
    ext: dict[str, Any] = {"modality": "image/png"}
    if features is not None:
        ext["features"] = features
    if source is not None:
        ext["featureSource"] = source
    return {"raw": base64.b64encode(data).decode(), "mediaType": "image/png", "metadata": {EXTENSION_URI: ext}}


QR = m.png(m.qr_image("https://mma2a.dev/cat"))
LIE = {"objects": ["cat"], "faces": 3}


async def test_trusted_sender_keeps_its_features_and_the_router_fills_the_rest(pipeline: FeaturePipeline) -> None:
    policy = FeaturePolicy(budget_s=10, trusted_senders=frozenset({"camera-1"}))
    part = await enrich_part(image_part(QR, dict(LIE)), QR, sender="camera-1", policy=policy, pipeline=pipeline)
    ext = read_part(part)
    assert ext.features["objects"] == ["cat"] and ext.features["faces"] == 3  # trusted, kept as sent
    assert ext.features["qr"] == ["https://mma2a.dev/cat"] and ext.features["width"] == 232  # filled in
    assert ext.feature_source is not None and ext.feature_source.kind == "hybrid"
    assert ext.feature_source.extractor == "pillow-image+ssd-mobilenet-v2-coco+zxing-cpp+rapidocr-ppocrv6+opencv-faces"
    assert ext.feature_schema == "image/1" and ext.thumbnail is not None


async def test_untrusted_features_are_reextracted(pipeline: FeaturePipeline) -> None:
    policy = FeaturePolicy(budget_s=10, untrusted="reextract")
    part = await enrich_part(image_part(QR, dict(LIE), source="router"), QR, sender="stranger", policy=policy, pipeline=pipeline)
    ext = read_part(part)
    assert ext.features["objects"] == [] and ext.features["faces"] == 0 and ext.features["qr"] == ["https://mma2a.dev/cat"]
    assert ext.feature_source is not None and ext.feature_source.kind == "router"


async def test_untrusted_features_are_validated_key_by_key(pipeline: FeaturePipeline) -> None:
    policy = FeaturePolicy(budget_s=10, untrusted="validate", fill_missing=False)
    claimed = {"width": "huge", "objects": ["cat"], "faces": -1}
    part = await enrich_part(image_part(QR, claimed), QR, sender=None, policy=policy, pipeline=pipeline)
    ext = read_part(part)
    assert ext.features == {
        "objects": ["cat"],
        "rejected": [
            "features.faces: -1 is less than the minimum of 0 (schema image/1)",
            "features.width: 'huge' is not of type 'integer' (schema image/1)",
        ],
    }
    assert ext.feature_source is not None and ext.feature_source.kind == "producer"


async def test_validate_then_fill_is_hybrid(pipeline: FeaturePipeline) -> None:
    policy = FeaturePolicy(budget_s=10, untrusted="validate")
    part = await enrich_part(image_part(QR, {"objects": ["cat"]}), QR, sender="x", policy=policy, pipeline=pipeline)
    ext = read_part(part)
    assert ext.features["objects"] == ["cat"] and ext.features["qr"] == ["https://mma2a.dev/cat"]
    assert ext.feature_source is not None and ext.feature_source.kind == "hybrid"


async def test_drop_without_fill_leaves_no_features(pipeline: FeaturePipeline) -> None:
    policy = FeaturePolicy(budget_s=10, untrusted="drop", fill_missing=False)
    part = await enrich_part(image_part(QR, dict(LIE)), QR, sender="x", policy=policy, pipeline=pipeline)
    assert part["metadata"][EXTENSION_URI] == {"modality": "image/png"}


async def test_without_bytes_only_the_producer_features_are_judged(pipeline: FeaturePipeline) -> None:
    part = {"url": "https://example.org/x.png", "mediaType": "image/png",
            "metadata": {EXTENSION_URI: {"features": {"width": 10, "height": "x"}}}}
    out = await enrich_part(part, None, sender="x", policy=FeaturePolicy(budget_s=10, untrusted="validate"), pipeline=pipeline)
    assert read_part(out).features == {"width": 10, "rejected": ["features.height: 'x' is not of type 'integer' (schema image/1)"]}


async def test_plain_text_part_gets_router_features(pipeline: FeaturePipeline) -> None:
    part = {"text": "Bonjour, je voudrais réserver une table pour deux personnes ce soir."}
    policy = FeaturePolicy(budget_s=10)  # generous: the machine running the tests may be busy
    out = await enrich_part(part, part["text"].encode(), sender=None, policy=policy, pipeline=pipeline)
    ext = out["metadata"][EXTENSION_URI]
    assert ext["features"]["language"] == "fr" and ext["featureSchema"] == "text/1"
    assert ext["featureSource"] == {"kind": "router", "extractor": "text-basic", "version": "1.0"}
    assert "mediaType" not in out


async def test_corrupt_bytes_give_an_error_feature_not_an_exception(pipeline: FeaturePipeline) -> None:
    bad = b"\x89PNG\r\n\x1a\n" + b"\0" * 40
    out = await enrich_part(image_part(bad), bad, sender=None, policy=FeaturePolicy(budget_s=10), pipeline=pipeline)
    assert read_part(out).features["error"].startswith("image: ")


def test_policy_rejects_unknown_action() -> None:
    with pytest.raises(ValueError) as err:
        FeaturePolicy(untrusted="ignore")  # type: ignore[arg-type]
    assert str(err.value) == "untrusted: must be one of validate, reextract, drop, got 'ignore'"


def test_build_part_from_image_bytes(pipeline: FeaturePipeline) -> None:
    part = build_part(QR, pipeline=pipeline, budget_s=10)
    assert base64.b64decode(part["raw"]) == QR and part["mediaType"] == "image/png"
    ext = read_part(part)
    assert ext.modality == "image/png" and ext.encoding == "raw" and ext.feature_schema == "image/1"
    assert ext.features["qr"] == ["https://mma2a.dev/cat"]
    assert ext.features["sha256"] == hashlib.sha256(QR).hexdigest() and ext.features["size"] == len(QR)
    assert ext.feature_source is not None and ext.feature_source.kind == "producer"
    assert ext.thumbnail is not None and Image.open(io.BytesIO(ext.thumbnail.data)).format == "JPEG"


def test_build_part_from_a_path_text_and_overrides(tmp_path: Path, pipeline: FeaturePipeline) -> None:
    mesh = tmp_path / "cube.obj"
    mesh.write_bytes(m.cube_obj())
    part = build_part(mesh, pipeline=pipeline, thumbnail=False, budget_s=10)
    assert part["filename"] == "cube.obj" and part["mediaType"] == "model/obj"
    assert read_part(part).features["vertices"] == 8
    text = build_part("hello world, hello routing".encode(), modality="text/plain", pipeline=pipeline, budget_s=10)
    assert text["text"] == "hello world, hello routing" and "raw" not in text
    bare = build_part(str(mesh), features=False, thumbnail=False)
    assert bare["metadata"][EXTENSION_URI] == {"modality": "model/obj", "encoding": "raw"}


def test_build_part_uploads_big_payloads(pipeline: FeaturePipeline) -> None:
    stored: dict[str, bytes] = {}

    def upload(data: bytes, modality: str) -> str:
        url = f"https://blobs.example/{len(stored)}"
        stored[url] = data
        return url

    wav = m.wav(m.tone(1.0), 16000)
    part = build_part(wav, uploader=upload, inline_limit=1000, pipeline=pipeline, budget_s=10)
    assert "raw" not in part and stored[part["url"]] == wav
    ext = read_part(part)
    assert ext.encoding == "native" and ext.payload is not None
    assert (ext.payload.sha256, ext.payload.size) == (hashlib.sha256(wav).hexdigest(), len(wav))
    assert ext.features["duration"] == 1.0


def test_build_part_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidParams) as err:
        build_part(tmp_path / "missing.png")
    assert err.value.message == f"source: no such file: {str(tmp_path / 'missing.png')!r}"
    with pytest.raises(InvalidParams) as err:
        build_part(12)  # type: ignore[arg-type]
    assert err.value.message == "source: must be bytes or a path, got int"
    with pytest.raises(InvalidParams) as err:
        build_part(b"\xff\xfe", modality="text/plain", features=False)
    assert err.value.message == "source: not valid utf-8 text for text/plain"


@pytest.mark.parametrize(
    ("data", "filename", "modality"),
    [
        (m.png(m.halves()), None, "image/png"),
        (m.jpeg(m.halves()), None, "image/jpeg"),
        (m.wav(m.tone(0.1), 16000), None, "audio/wav"),
        (m.h264_clip(), None, "video/mp4"),
        (m.stl_binary(), None, "model/stl"),
        (m.stl_ascii(), None, "model/stl"),
        (m.ply_ascii(), None, "model/x-ply"),
        (m.cube_obj(), "cube.obj", "model/obj"),
        (b"plain words", None, "text/plain"),
        (b"\x00\x01\x02", None, "application/octet-stream"),
    ],
)
def test_sniff_modality(data: bytes, filename: str | None, modality: str) -> None:
    assert sniff_modality(data, filename) == modality


def test_cli_features(tmp_path: Path) -> None:
    from mma2a.cli.main import _register, app

    _register()
    qr = tmp_path / "qr.png"
    qr.write_bytes(QR)
    mesh = tmp_path / "cube.obj"
    mesh.write_bytes(m.cube_obj())
    runner = CliRunner()
    res = runner.invoke(app, ["features", "--json", str(qr), str(mesh)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.output.splitlines()]
    assert rows[0]["features"]["qr"] == ["https://mma2a.dev/cat"] and rows[0]["featureSchema"] == "image/1"
    assert rows[1]["modality"] == "model/obj" and rows[1]["features"]["faces"] == 6
    table = runner.invoke(app, ["features", str(mesh)])
    assert table.exit_code == 0 and "vertices" in table.output and "mesh-basic" in table.output
    missing = runner.invoke(app, ["features", str(tmp_path / "nope.png")])
    assert missing.exit_code == 1
    assert f"error: {tmp_path / 'nope.png'}: cannot read: No such file or directory" in missing.output
    bad = runner.invoke(app, ["features", "--modality", "nonsense", str(mesh)])
    assert bad.exit_code == 2
    assert "error: --modality: 'nonsense' is not a media type (expected type/subtype)" in bad.output
