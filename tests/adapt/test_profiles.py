"""Receiver profiles: parsing card params and gateway.yaml, precedence, matching."""

from __future__ import annotations

import pytest

from mma2a.adapt import receiver_profiles
from mma2a.errors import InvalidParams
from mma2a.modality import parse_modality


def test_operator_fields_win_and_the_card_fills_the_rest() -> None:
    card = {"accepts": {"image/*": {"maxPixels": 2_000_000, "encodings": ["image/png"], "quality": 70}},
            "contentEncodings": ["gzip"]}
    profiles = receiver_profiles(card, {"image/*": {"max_pixels": 500_000}}, None)
    p = profiles.for_modality(parse_modality("image/jpeg"))
    assert p is not None and (p.max_pixels, p.encodings, p.quality) == (500_000, ("image/png",), 70)
    assert profiles.content_encodings == ("gzip",)
    assert receiver_profiles(card, None, ["zstd"]).content_encodings == ("zstd",)
    assert receiver_profiles(card, None, []).content_encodings == ()


def test_the_most_specific_pattern_applies() -> None:
    profiles = receiver_profiles({"accepts": {"*/*": {"maxPixels": 1}, "image/*": {"maxPixels": 2},
                                              "image/png": {"maxPixels": 3}}})
    got = [profiles.for_modality(parse_modality(m)).max_pixels for m in ("image/png", "image/gif", "video/mp4")]
    assert got == [3, 2, 1]
    assert not receiver_profiles({}) and receiver_profiles({}).for_modality(parse_modality("image/png")) is None


def test_encodings_match_with_their_parameters() -> None:
    p = receiver_profiles({"accepts": {"audio/*": {"encodings": ["audio/ogg; codecs=opus"]}}}).profiles[0]
    assert p.accepts_encoding("audio/ogg; codecs=opus; rate=48000")
    assert not p.accepts_encoding("audio/ogg; codecs=vorbis") and not p.accepts_encoding("audio/wav")
    assert p.key == "audio/*;encodings=audio/ogg; codecs=opus"


@pytest.mark.parametrize(("params", "field"), [
    ({"accepts": {"image/*": {"maxPixels": 0}}}, "params.accepts.maxPixels"),
    ({"accepts": {"image/*": {"sampleRate": "fast"}}}, "params.accepts.sampleRate"),
    ({"accepts": {"image/*": {"encodings": ["not a type"]}}}, "params.accepts.encodings"),
    ({"accepts": ["image/*"]}, "params.accepts"),
    ({"contentEncodings": ["br"]}, "params.contentEncodings"),
])
def test_bad_card_params_name_the_field(params: dict, field: str) -> None:
    with pytest.raises(InvalidParams) as err:
        receiver_profiles(params)
    assert err.value.field == field
