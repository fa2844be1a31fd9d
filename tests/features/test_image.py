"""Image and vision extractors on drawn images, a generated QR code, drawn faces and hostile files."""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from PIL import Image, ImageFilter

from mma2a.features import FeaturePipeline, ImageExtractor, Limits, VisionExtractor
from mma2a.errors import MediaError
from mma2a.modality import parse_modality

from . import media as m

PNG = parse_modality("image/png")


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares width x height but carries almost no data (a decompression bomb's header)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_basic_facts_and_dominant_colors() -> None:
    out = ImageExtractor().extract(m.png(m.halves(320, 200)), PNG)
    assert (out["format"], out["width"], out["height"], out["mode"]) == ("png", 320, 200, "RGB")
    assert out["dominantColors"][:2] == ["#ff0000", "#0000ff"]


def test_blur_score_falls_when_the_image_is_blurred() -> None:
    sharp = m.checkerboard()
    blurred = sharp.filter(ImageFilter.GaussianBlur(4))
    ex = ImageExtractor(thumbnail=False)
    s, b = ex.extract(m.png(sharp), PNG)["blur"], ex.extract(m.png(blurred), PNG)["blur"]
    assert s > 10 * b > 0


def test_thumbnail_is_a_small_decodable_jpeg() -> None:
    out = ImageExtractor().extract(m.jpeg(m.halves(1920, 1080)), parse_modality("image/jpeg"))
    thumb = out["thumbnail"]
    assert thumb.media_type == "image/jpeg" and len(thumb.data) <= 4096
    im = Image.open(io.BytesIO(thumb.data))
    assert max(im.size) <= 128 and im.size[0] > im.size[1]


def test_transparent_image_gets_a_png_thumbnail() -> None:
    im = Image.new("RGBA", (100, 50), (0, 255, 0, 128))
    thumb = ImageExtractor().extract(m.png(im), PNG)["thumbnail"]
    assert thumb.media_type == "image/png" and len(thumb.data) <= 4096


def test_qr_code_is_decoded() -> None:
    pytest.importorskip("zxingcpp")
    from mma2a.features import CodesExtractor

    out = CodesExtractor().extract(m.png(m.qr_image("https://mma2a.dev/cat")), PNG)
    assert out["qr"] == ["https://mma2a.dev/cat"]
    assert [(c["format"], c["text"]) for c in out["codes"]] == [("QRCode", "https://mma2a.dev/cat")]


def test_drawn_face_is_a_face() -> None:
    out = VisionExtractor().extract(m.jpeg(m.drawn_face()), parse_modality("image/jpeg"))
    assert out == {"faces": 1}


def test_plain_image_has_no_faces() -> None:
    assert VisionExtractor().extract(m.png(m.halves()), PNG) == {"faces": 0}


def test_ocr_reads_rendered_text(pipeline: FeaturePipeline) -> None:
    result = pipeline.extract_blocking("image/png", m.png(m.text_image("HELLO WORLD")), budget_s=10)
    assert result.features["text"] == "HELLO WORLD"


async def test_pipeline_merges_image_features_with_source_and_schema(pipeline: FeaturePipeline) -> None:
    data = m.png(m.qr_image("route me"))
    result = await pipeline.extract("image/png", data, budget_s=10)
    assert result.features["qr"] == ["route me"] and result.features["width"] > 0
    assert result.features["size"] == len(data)
    assert result.schema == "image/1"
    assert result.source is not None and result.source.kind == "router"
    assert result.source.extractor == "pillow-image+ssd-mobilenet-v2-coco+zxing-cpp+rapidocr-ppocrv6+opencv-faces"
    assert result.source.version == "1.0+1.0+1.1+1.0+2.1"
    assert result.thumbnail is not None and result.errors == [] and not result.timed_out


def test_decompression_bomb_is_refused_before_decoding(pipeline: FeaturePipeline) -> None:
    bomb = png_header_only(20000, 20000)
    with pytest.raises(MediaError) as err:
        ImageExtractor().extract(bomb, PNG)
    expected = "image: 400000000 pixels is over the limit of 40000000 pixels (decompression bomb guard); not decoded"
    assert err.value.message == expected
    # below Pillow's own guard, ours names the dimensions
    with pytest.raises(MediaError) as err:
        ImageExtractor().extract(png_header_only(8000, 6000), PNG)
    assert err.value.message == (
        "image: 8000x6000 = 48000000 pixels is over the limit of 40000000 pixels (decompression bomb guard); not decoded"
    )
    result = pipeline.extract_blocking("image/png", bomb, budget_s=10)
    assert result.features == {"size": len(bomb), "error": expected}


def test_pixel_limit_is_configurable() -> None:
    with pytest.raises(MediaError) as err:
        ImageExtractor(limits=Limits(max_pixels=10_000)).extract(m.png(m.halves(320, 200)), PNG)
    assert err.value.message == (
        "image: 320x200 = 64000 pixels is over the limit of 10000 pixels (decompression bomb guard); not decoded"
    )


def test_byte_limit_is_refused(pipeline: FeaturePipeline) -> None:
    with pytest.raises(MediaError) as err:
        ImageExtractor(limits=Limits(max_bytes=100)).extract(m.png(m.halves()), PNG)
    assert err.value.message.startswith("image: ") and err.value.message.endswith(
        " bytes is over the feature-extraction limit of 100 bytes"
    )


def test_corrupt_truncated_and_wrong_type_images(pipeline: FeaturePipeline) -> None:
    garbage = b"definitely not an image" * 4
    r = pipeline.extract_blocking("image/png", garbage, budget_s=10)
    assert r.features == {"size": len(garbage), "error": "image: not a readable image (unknown or corrupt format, 92 bytes)"}
    truncated = m.png(m.halves())[:300]
    r = pipeline.extract_blocking("image/png", truncated, budget_s=10)
    assert r.features["error"] == "image: cannot decode PNG data: image file is truncated"
    wav = m.wav(m.tone(0.1), 16000)
    r = pipeline.extract_blocking("image/jpeg", wav, budget_s=10)
    assert r.features["error"] == f"image: not a readable image (unknown or corrupt format, {len(wav)} bytes)"
    assert r.errors == [r.features["error"]]


def test_image_extractors_on_a_tiny_image(pipeline: FeaturePipeline) -> None:
    """A 64x48 picture (under OpenCV's 64x128 HOG window, which once crashed the process) goes
    through every image extractor."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(buf, "PNG")
    result = pipeline.extract_blocking("image/png", buf.getvalue(), budget_s=30)
    assert result.errors == []
    f = result.features
    assert (f["faces"], f["objects"], f["codes"], f["text"]) == (0, [], [], "")
