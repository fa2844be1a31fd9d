"""Bad extension input: each problem is a typed error whose message and `field` name the field."""

from __future__ import annotations

from typing import Any

import pytest

from mma2a.errors import error_info
from mma2a.errors import (
    INVALID_PARAMS,
    VERSION_NOT_SUPPORTED,
    ExtensionError,
    FeatureSchemaError,
    InvalidModality,
    InvalidRequest,
    UnsupportedExtensionVersion,
)
from mma2a.ext import EXTENSION_URI, check_protocol, read_message, read_part
from mma2a.modality import ModalityRegistry
from mma2a.view import view_message

M = f"message.metadata[{EXTENSION_URI}]"
P = f"message.parts[0].metadata[{EXTENSION_URI}]"


def _msg(ext: Any) -> dict[str, Any]:
    return {"messageId": "m", "parts": [{"text": "hi"}], "metadata": {EXTENSION_URI: ext}}


def _part(ext: Any) -> dict[str, Any]:
    return {"messageId": "m", "parts": [{"url": "https://media.example/a", "metadata": {EXTENSION_URI: ext}}]}


def test_unknown_extension_version_is_its_own_error() -> None:
    with pytest.raises(UnsupportedExtensionVersion) as info:
        view_message(_msg({"protocol": "a2a-multimodal/2.0"}))
    err = info.value
    assert err.message == f"{M}.protocol: extension version 'a2a-multimodal/2.0' is not supported (this gateway speaks a2a-multimodal/1.0)"
    assert err.field == f"{M}.protocol"
    assert err.to_jsonrpc() == {"code": VERSION_NOT_SUPPORTED, "message": err.message, "data": [error_info(VERSION_NOT_SUPPORTED, {"field": f"{M}.protocol"})]}
    assert err.http_status == 400


@pytest.mark.parametrize("token", ["a2a-multimodal/1.0", "a2a-multimodal/1", "a2a-multimodal/1.7"])
def test_every_1_x_protocol_is_accepted(token: str) -> None:
    check_protocol(token)


@pytest.mark.parametrize(
    ("ext", "error", "field", "message"),
    [
        ({"protocol": 2}, ExtensionError, "protocol", "must be a protocol token like a2a-multimodal/1.0, got int"),
        ({"protocol": "other/1.0"}, ExtensionError, "protocol", "'other/1.0' is not an a2a-multimodal protocol token"),
        ({"protocol": "a2a-multimodal/1.x"}, ExtensionError, "protocol", "'a2a-multimodal/1.x' is not an a2a-multimodal protocol token"),
        ({"priority": "high"}, ExtensionError, "priority", "must be an integer, got str"),
        ({"priority": True}, ExtensionError, "priority", "must be an integer, got bool"),
        ({"priority": 11}, ExtensionError, "priority", "must be 0..9, got 11"),
        ({"intent": ["auto"]}, ExtensionError, "intent", "must be auto or explicit, got ['auto']"),
        ({"intent": "broadcast"}, ExtensionError, "intent", "must be auto or explicit, got 'broadcast'"),
        ({"intent": "explicit"}, ExtensionError, "receivers", "explicit intent needs at least one receiver"),
        ({"receivers": "inspector"}, ExtensionError, "receivers", "must be a list of agent names, got str"),
        ({"receivers": ["a", 3]}, ExtensionError, "receivers[1]", "must be an agent name, got int"),
        ({"hops": -1}, ExtensionError, "hops", "must be >= 0, got -1"),
        ({"hops": 1.5}, ExtensionError, "hops", "must be an integer, got float"),
        ({"session": {"id": ""}}, ExtensionError, "session.id", "must not be empty"),
        ({"session": {}}, ExtensionError, "session.id", "is required (a string)"),
        ({"session": {"id": "s", "final": "yes"}}, ExtensionError, "session.final", "must be a boolean, got str"),
        ({"session": {"id": "s", "seq": -2}}, ExtensionError, "session.seq", "must be >= 0, got -2"),
        ({"signature": "abc"}, ExtensionError, "signature", "must be an object, got str"),
        ({"via": "gw-a"}, ExtensionError, "via", "must be a list of gateway ids, got str"),
        ({"via": ["gw-a", 2]}, ExtensionError, "via[1]", "must be a gateway id, got int"),
    ],
)
def test_bad_message_fields(ext: dict[str, Any], error: type[Exception], field: str, message: str) -> None:
    with pytest.raises(error) as info:
        view_message(_msg(ext))
    assert type(info.value) is error
    assert str(info.value) == f"{M}.{field}: {message}"
    assert info.value.field == f"{M}.{field}"  # type: ignore[attr-defined]
    assert info.value.code == INVALID_PARAMS  # type: ignore[attr-defined]


def test_message_extension_that_is_not_an_object() -> None:
    with pytest.raises(ExtensionError) as info:
        read_message(_msg("a2a-multimodal/1.0"))
    assert info.value.message == f"{M}: must be an object, got str"


@pytest.mark.parametrize(
    ("ext", "error", "field", "message"),
    [
        ({"modality": "image"}, InvalidModality, "modality", "'image' is not a media type (expected type/subtype); did you mean 'image/*'?"),
        ({"modality": 5}, ExtensionError, "modality", "must be a media type string, got int"),
        ({"modality": "image/png; q"}, InvalidModality, "modality", "'image/png; q' has a malformed parameter 'q'"),
        ({"encoding": ""}, ExtensionError, "encoding", "must be 1 to 32 characters"),
        ({"encoding": 3}, ExtensionError, "encoding", "must be a string, got int"),
        ({"features": []}, ExtensionError, "features", "must be an object, got list"),
        ({"featureSchema": "image"}, ExtensionError, "featureSchema", "must be id/version, e.g. image/1, got 'image'"),
        ({"featureSchema": "/1"}, ExtensionError, "featureSchema", "must be id/version, e.g. image/1, got '/1'"),
        ({"featureSource": "robot"}, ExtensionError, "featureSource.kind", "must be one of producer, router, hybrid, got 'robot'"),
        ({"featureSource": {"kind": ["x"]}}, ExtensionError, "featureSource.kind", "must be one of producer, router, hybrid, got ['x']"),
        ({"featureSource": {"version": 1}}, ExtensionError, "featureSource.version", "must be a version string, got int"),
        ({"featureSource": 7}, ExtensionError, "featureSource", "must be an object or one of producer/router/hybrid, got int"),
        ({"payload": {"sha256": "AB", "size": 1}}, ExtensionError, "payload.sha256", "must be 64 lower-case hex digits"),
        ({"payload": {"size": 1}}, ExtensionError, "payload.sha256", "is required (a hex SHA-256 string)"),
        ({"payload": {"sha256": "a" * 64, "size": -1}}, ExtensionError, "payload.size", "must be >= 0, got -1"),
        ({"payload": {"sha256": "a" * 64, "size": "1"}}, ExtensionError, "payload.size", "must be an integer, got str"),
        ({"stream": {"url": "wss://s", "sessionId": "s", "chunkSize": 0}}, ExtensionError, "stream.chunkSize", "must be >= 1, got 0"),
        ({"stream": {"url": "wss://s"}}, ExtensionError, "stream.sessionId", "is required (a string)"),
        ({"stream": {"url": "wss://s", "sessionId": "s", "open": 1}}, ExtensionError, "stream.open", "must be a boolean, got int"),
        ({"thumbnail": {"mediaType": "image/png", "data": "!!"}}, ExtensionError, "thumbnail.data", "not valid base64"),
        (
            {"thumbnail": {"mediaType": "image/png", "data": "A" * 30000}},
            ExtensionError,
            "thumbnail.data",
            "thumbnail is 22500 bytes, the limit is 16384",
        ),
        ({"thumbnail": {"mediaType": "png", "data": ""}}, InvalidModality, "thumbnail.mediaType", "'png' is not a media type (expected type/subtype)"),
    ],
)
def test_bad_part_fields(ext: dict[str, Any], error: type[Exception], field: str, message: str) -> None:
    with pytest.raises(error) as info:
        view_message(_part(ext))
    assert type(info.value) is error
    assert str(info.value) == f"{P}.{field}: {message}"
    assert info.value.field == f"{P}.{field}"  # type: ignore[attr-defined]


def test_bad_media_type_on_a_plain_part() -> None:
    with pytest.raises(InvalidModality) as info:
        view_message({"parts": [{"url": "https://x/a", "mediaType": "png"}]})
    assert info.value.message == "message.parts[0].mediaType: 'png' is not a media type (expected type/subtype)"
    assert info.value.field == "message.parts[0].mediaType"


def test_features_that_break_their_schema_are_refused_by_the_view() -> None:
    msg = _part({"modality": "image/png", "features": {"width": "wide"}})
    view_message(msg)  # without a registry, features are not checked
    with pytest.raises(FeatureSchemaError) as info:
        view_message(msg, registry=ModalityRegistry())
    assert info.value.message == "message.parts[0].features.width: 'wide' is not of type 'integer' (schema image/1)"
    assert info.value.field == "message.parts[0].features.width"
    assert info.value.data == {"field": "message.parts[0].features.width", "schema": "image/1"}


@pytest.mark.parametrize(
    ("message", "field", "text"),
    [
        ([], "message", "must be an object"),
        ({"parts": []}, "message.parts", "must be a non-empty list"),
        ({"parts": ["hi"]}, "message.parts[0]", "must be an object"),
        ({"parts": [{"mediaType": "text/plain"}]}, "message.parts[0]", "carries no content (one of text, raw, url, data)"),
    ],
)
def test_malformed_messages(message: Any, field: str, text: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        view_message(message)
    assert info.value.message == f"{field}: {text}"
    assert info.value.field == field


def test_part_without_extension_reads_from_media_type() -> None:
    assert read_part({"raw": "AAAA", "mediaType": "Image/PNG"}).modality == "image/png"
    assert read_part({"text": "hi"}).modality == "text/plain"
    assert read_part({"data": {"a": 1}}).modality == "application/json"
    assert read_part({"url": "https://x/y"}).modality == "application/octet-stream"


def test_via_round_trips_and_is_left_out_when_empty() -> None:
    from mma2a.ext import MessageExtension

    ext = MessageExtension.from_json({"via": ["gw-a", "gw-b"], "hops": 2})
    assert ext.via == ("gw-a", "gw-b") and view_message(_msg(ext.to_json())).via == ("gw-a", "gw-b")
    assert MessageExtension.from_json(ext.to_json()) == ext
    assert "via" not in MessageExtension().to_json()
