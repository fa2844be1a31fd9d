"""Text, video, 3D model and embedding extractors on generated inputs and broken ones."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from mma2a.errors import MediaError
from mma2a.features import EmbeddingExtractor, FeaturePipeline, Limits, MeshExtractor, TextExtractor, VideoExtractor
from mma2a.modality import parse_modality

from . import media as m

TEXT = parse_modality("text/plain")


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("The quick brown fox jumps over the lazy dog while the farmer sleeps in the barn.", "en"),
        ("Der schnelle braune Fuchs springt über den faulen Hund, während der Bauer schläft.", "de"),
        ("这是一个用于测试语言检测的中文句子，我们希望它被正确识别。", "zh-CN"),
    ],
)
def test_language_is_detected_and_deterministic(text: str, language: str) -> None:
    ex = TextExtractor()
    results = {ex.extract(text.encode(), TEXT)["language"] for _ in range(5)}
    assert results == {language}


def test_length_words_and_keywords() -> None:
    text = "Routing images: the router routes images and audio. Images win; audio second. 42 42 42"
    out = TextExtractor().extract(text.encode(), TEXT)
    assert out["length"] == len(text) and out["words"] == 15
    assert out["keywords"] == ["images", "audio", "router", "routes", "routing"]


def test_text_charset_and_binary_errors() -> None:
    assert TextExtractor().extract("café".encode("latin-1"), parse_modality("text/plain; charset=latin-1"))["length"] == 4
    with pytest.raises(MediaError) as err:
        TextExtractor().extract(b"ok \xe9t\xe9", TEXT)  # Latin-1 sent without a charset
    assert err.value.message == "text: not valid utf-8 at byte 3 (0xe9) (no charset given: UTF-8 assumed)"
    with pytest.raises(MediaError) as err:
        TextExtractor().extract(b"abc\x00def", TEXT)
    assert err.value.message == "text: contains NUL characters; this looks like binary data, not text"
    with pytest.raises(MediaError) as err:
        TextExtractor().extract(b"abc", parse_modality("text/plain; charset=klingon"))
    assert err.value.message == "text: unknown charset 'klingon'"


def test_h264_clip() -> None:
    clip = m.h264_clip(seconds=2.0, fps=10, size=(320, 240))
    out = VideoExtractor().extract(clip, parse_modality("video/mp4"))
    thumb = out.pop("thumbnail")
    assert out == {
        "container": "mp4",
        "codec": "h264",
        "fps": 10.0,
        "duration": 2.0,
        "width": 320,
        "height": 240,
        "audio": False,
        "frames": 20,
    }
    assert thumb.media_type == "image/jpeg" and len(thumb.data) <= 4096
    assert Image.open(io.BytesIO(thumb.data)).size == (128, 96)


def test_a_clip_says_whether_it_has_a_sound_track() -> None:
    clip = m.h264_clip(seconds=1.0, sound=m.tone(1.0))
    out = VideoExtractor(thumbnail=False).extract(clip, parse_modality("video/mp4"))
    assert (out["audio"], out["audioCodec"], out["audioSampleRate"]) == (True, "aac", 16000)
    assert (out["codec"], out["frames"]) == ("h264", 10)


def test_audio_only_containers_are_sniffed_as_audio() -> None:
    from mma2a.features import sniff_modality

    assert sniff_modality(m.ogg_opus(m.tone(0.3, rate=48000), container="webm")) == "audio/webm"
    assert sniff_modality(m.h264_clip()) == "video/mp4"
    assert sniff_modality(m.h264_clip(container="matroska")) == "video/x-matroska"


def test_h264_in_matroska() -> None:
    """FFmpeg reads Matroska and WebM with one demuxer; the EBML DocType names the container."""
    from mma2a.features.containers import ebml_doctype

    clip = m.h264_clip(container="matroska")
    out = VideoExtractor(thumbnail=False).extract(clip, parse_modality("video/x-matroska"))
    assert (out["container"], out["codec"], out["frames"]) == ("matroska", "h264", 10)
    assert ebml_doctype(clip[:64]) == "matroska"
    assert ebml_doctype(m.ogg_opus(m.tone(0.3, rate=48000), container="webm")[:64]) == "webm"
    assert ebml_doctype(m.h264_clip()[:64]) is None


def test_broken_and_wrong_type_video(pipeline: FeaturePipeline) -> None:
    clip = m.h264_clip()
    r = pipeline.extract_blocking("video/mp4", clip[: len(clip) // 2], budget_s=10)
    assert r.features["error"] == "video: not a readable video container: Invalid data found when processing input"
    r = pipeline.extract_blocking("video/mp4", m.png(m.halves()), budget_s=10)
    assert r.features["error"] == "video: the bytes are a still image (png), not a video"
    r = pipeline.extract_blocking("video/mp4", m.wav(m.tone(0.2), 16000), budget_s=10)
    assert r.features["error"] == "video: the wav container has no video stream (audio only: send it as audio/*)"
    with pytest.raises(MediaError) as err:
        VideoExtractor(limits=Limits(max_pixels=1000)).extract(clip, parse_modality("video/mp4"))
    assert err.value.message == (
        "video: 320x240 = 76800 pixels is over the limit of 1000 pixels (decompression bomb guard); not decoded"
    )


@pytest.mark.parametrize(
    ("data", "modality", "expected"),
    [
        (m.cube_obj(), "model/obj", {"format": "obj", "vertices": 8, "faces": 6, "bounds": [[0.0, 0.0, -1.0], [2.0, 3.0, 1.0]]}),
        (m.stl_binary(), "model/stl", {"format": "stl", "vertices": 12, "faces": 4, "bounds": [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]}),
        (m.stl_ascii(), "model/stl", {"format": "stl", "vertices": 12, "faces": 4, "bounds": [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]}),
        (m.ply_ascii(), "model/x-ply", {"format": "ply", "vertices": 4, "faces": 2, "bounds": [[-1.0, -1.0, 0.0], [1.0, 1.0, 0.5]]}),
    ],
)
def test_meshes(data: bytes, modality: str, expected: dict) -> None:
    assert MeshExtractor().extract(data, parse_modality(modality)) == expected


def test_broken_meshes() -> None:
    cases = [
        (m.stl_binary()[:150], "model/stl", "model: truncated binary STL: 4 triangles need 284 bytes, got 150"),
        (b"hello", "model/obj", "model: not an OBJ, STL or PLY model (declared model/obj, 5 bytes)"),
        (m.ply_ascii().replace(b"format ascii", b"format binary_little_endian"), "model/x-ply",
         "model: PLY format 'binary_little_endian' is not supported (only ascii)"),
        (m.ply_ascii().replace(b"element vertex 4", b"element vertex 9"), "model/x-ply",
         "model: truncated PLY: header declares 11 elements, found 6 lines"),
        (b"ply\nformat ascii 1.0\nelement vertex 1\n", "model/x-ply", "model: PLY header without end_header"),
        (b"o thing\nv 1 2 x\nf 1 1 1\n", "model/obj", "model: OBJ has a vertex that is not three numbers"),
    ]
    for data, modality, message in cases:
        with pytest.raises(MediaError) as err:
            MeshExtractor().extract(data, parse_modality(modality))
        assert err.value.message == message


def test_embeddings() -> None:
    ex = EmbeddingExtractor()
    out = ex.extract(b"[3, 4]", parse_modality("application/x-a2a-embedding; model=mini-lm"))
    assert out == {"dimension": 2, "norm": 5.0, "dtype": "json", "model": "mini-lm"}
    vec = np.array([1, 2, 2, 0], "<f4").tobytes()
    assert ex.extract(vec, parse_modality("application/x-a2a-embedding")) == {"dimension": 4, "norm": 3.0, "dtype": "float32"}


def test_broken_embeddings() -> None:
    emb = parse_modality("application/x-a2a-embedding")
    cases = [
        (b"[1, NaN]", emb, "embedding: the vector holds NaN or infinite values"),
        (b"abc", emb, "embedding: 3 bytes is not a whole number of float32 values"),
        (b"[]", emb, "embedding: the JSON list is empty"),
        (b'[1, "a"]', emb, "embedding: the JSON list must hold only numbers"),
        (b"[1, 2", emb, "embedding: invalid JSON list: Expecting ',' delimiter: line 1 column 6 (char 5)"),
        (b"[1, 2]", parse_modality("application/x-a2a-embedding; dimension=3"),
         "embedding: the modality says dimension 3, the vector has 2 values"),
        (b"\0\0\0\0", parse_modality("application/x-a2a-embedding; dtype=int8"),
         "embedding: dtype 'int8' is not supported (float32, float16, float64)"),
    ]
    for data, modality, message in cases:
        with pytest.raises(MediaError) as err:
            EmbeddingExtractor().extract(data, modality)
        assert err.value.message == message
