"""Property tests: the extension's views encode and decode to the same values, on JSON and over protobuf."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import orjson
from a2a.types import Message, Part, Role
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st

from mma2a.ext import EXTENSION_URI, MessageExtension, decoded_size, PartExtension, normalize_json, read_message, read_part, write_message, write_part
from mma2a.proto import get_message_extension, get_part_extension, set_message_extension, set_part_extension
from tests.strategies import json_values, message_extensions, part_extensions


def canonical(obj: PartExtension | MessageExtension) -> str:
    """The extension's JSON with integral doubles as ints: equal strings mean equal wire values,
    which `==` alone would not show (`True == 1`, `1.0 == 1`)."""
    return json.dumps(normalize_json(obj.to_json()), sort_keys=True)


@given(part_extensions)
def test_part_extension_json_round_trip(ext: PartExtension) -> None:
    back = PartExtension.from_json(orjson.loads(orjson.dumps(ext.to_json())))
    assert back == ext
    assert canonical(back) == canonical(ext)


@given(message_extensions())
def test_message_extension_json_round_trip(ext: MessageExtension) -> None:
    back = MessageExtension.from_json(orjson.loads(orjson.dumps(ext.to_json())))
    assert back == ext
    assert canonical(back) == canonical(ext)


@given(part_extensions)
def test_write_part_read_part_over_protobuf(ext: PartExtension) -> None:
    """JSON part → protobuf `Part` (as the SDK parses it) → JSON → the same extension."""
    part = write_part({"url": "https://media.example/blob"}, ext)
    pb = json_format.ParseDict(part, Part())
    back = read_part(json_format.MessageToDict(pb))
    expected = ext if ext.modality is not None else dataclasses.replace(ext, modality="application/octet-stream")
    assert back == expected
    assert canonical(back) == canonical(expected)


@given(part_extensions)
def test_set_get_part_extension_on_sdk_parts(ext: PartExtension) -> None:
    part = set_part_extension(Part(text="hello"), ext)
    back = get_part_extension(part)
    expected = ext if ext.modality is not None else dataclasses.replace(ext, modality="text/plain")
    assert back == expected and canonical(back) == canonical(expected)
    assert part.media_type == ""  # a text part's mediaType is left alone


@given(message_extensions())
def test_write_read_message_over_protobuf(ext: MessageExtension) -> None:
    msg = write_message({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}, ext)
    pb = json_format.ParseDict(msg, Message())
    assert read_message(json_format.MessageToDict(pb)) == ext
    sdk = set_message_extension(Message(message_id="m", role=Role.ROLE_USER, parts=[Part(text="hi")]), ext)
    back = get_message_extension(sdk)
    assert back == ext and back is not None and canonical(back) == canonical(ext)
    assert list(sdk.extensions) == [EXTENSION_URI]


@given(json_values)
def test_normalize_json_undoes_struct_doubles(value: Any) -> None:
    pb = json_format.ParseDict({"v": value}, Part().metadata)
    assert normalize_json(json_format.MessageToDict(pb)["v"]) == normalize_json(value)
    back = json_format.MessageToDict(pb)["v"]
    assert json.dumps(normalize_json(back), sort_keys=True) == json.dumps(normalize_json(value), sort_keys=True)


def test_struct_turns_integers_into_doubles_and_read_part_turns_them_back() -> None:
    part = write_part({"url": "https://media.example/a.png"}, PartExtension(modality="image/png", features={"width": 1920}))
    wire = json_format.MessageToDict(json_format.ParseDict(part, Part()))
    assert wire["metadata"][EXTENSION_URI]["features"]["width"] == 1920.0
    assert type(wire["metadata"][EXTENSION_URI]["features"]["width"]) is float
    assert type(read_part(wire).features["width"]) is int


@given(st.binary(max_size=64))
def test_decoded_size_is_the_decoded_length_padded_or_not_standard_or_url_safe(data: bytes) -> None:
    for encoded in (base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode()):
        assert decoded_size(encoded) == len(data)
        assert decoded_size(encoded.rstrip("=")) == len(data)
