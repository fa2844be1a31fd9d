"""The modality registry: parsing errors, lookups, built-in feature schemas, custom `x-` types."""

from __future__ import annotations

from typing import Any

import pytest

from mma2a.errors import FeatureSchemaError, InvalidModality, UnknownModality
from mma2a.modality import (
    EMBEDDING,
    MULTIPART_MIXED,
    SENSOR_DATA,
    ModalityRegistry,
    accepts,
    modality_matches,
    normalize_modality,
    parse_modality,
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "modality: empty media type"),
        ("   ", "modality: empty media type"),
        ("image", "modality: 'image' is not a media type (expected type/subtype); did you mean 'image/*'?"),
        ("image/", "modality: 'image/' has an invalid type or subtype"),
        ("/png", "modality: '/png' has an invalid type or subtype"),
        ("image/png/x", "modality: 'image/png/x' has an invalid type or subtype"),
        ("im age/png", "modality: 'im age/png' has an invalid type or subtype"),
        ("*/png", "modality: '*/png': a wildcard type needs a wildcard subtype"),
        ("text/plain; charset", "modality: 'text/plain; charset' has a malformed parameter 'charset'"),
        ("text/plain; =utf-8", "modality: 'text/plain; =utf-8' has a malformed parameter '=utf-8'"),
        ("text/plain; a=b c", "modality: 'text/plain; a=b c' has a malformed parameter 'a=b c'"),
        ('text/plain; a="b', "modality: unterminated quoted parameter value in 'text/plain; a=\"b'"),
        ('text/plain; a="b"c', "modality: 'text/plain; a=\"b\"c' has a malformed parameter 'a=\"b\"c'"),
    ],
)
def test_malformed_media_types(text: str, message: str) -> None:
    with pytest.raises(InvalidModality) as info:
        parse_modality(text)
    assert info.value.message == message
    assert info.value.field == "modality"


@pytest.mark.parametrize(("value", "kind"), [(None, "NoneType"), (5, "int"), (["image/png"], "list")])
def test_non_string_media_types(value: Any, kind: str) -> None:
    with pytest.raises(InvalidModality) as info:
        parse_modality(value, field="message.parts[2].mediaType")
    assert info.value.message == f"message.parts[2].mediaType: must be a media type string, got {kind}"
    assert info.value.field == "message.parts[2].mediaType"


def test_normalisation() -> None:
    assert normalize_modality("Audio/OGG ;Codecs=opus") == "audio/ogg; codecs=opus"
    assert normalize_modality('text/plain; charset="UTF-8"; format=flowed') == "text/plain; charset=utf-8; format=flowed"
    assert normalize_modality('x/y; name="a b"; q="\\"x\\""') == 'x/y; name="a b"; q="\\"x\\""'
    assert normalize_modality("a/b;c=d;") == "a/b; c=d"  # an empty trailing parameter is tolerated
    assert normalize_modality("text/plain; a=b\n") == "text/plain; a=b"  # trailing whitespace, not part of the value
    assert normalize_modality('text/plain; a="b\n"') == 'text/plain; a="b\n"'  # inside quotes it is


def test_matching_examples() -> None:
    assert modality_matches("image/png", "image/*")
    assert modality_matches("audio/ogg; codecs=opus", "audio/ogg")
    assert modality_matches("audio/ogg; codecs=opus", "audio/ogg; codecs=opus")
    assert not modality_matches("audio/ogg", "audio/ogg; codecs=opus")
    assert not modality_matches("audio/ogg; codecs=vorbis", "audio/ogg; codecs=opus")
    assert modality_matches(MULTIPART_MIXED, "multipart/*")
    assert accepts(["text/plain", "image/*"], "image/webp")
    assert not accepts(["text/plain"], "image/webp")
    assert accepts(["not a type", "*/*"], EMBEDDING)
    with pytest.raises(InvalidModality) as info:
        modality_matches("image/png", "png")
    assert info.value.message == "pattern: 'png' is not a media type (expected type/subtype)"


def test_builtin_lookups_most_specific_first() -> None:
    reg = ModalityRegistry()
    found = {m: reg.lookup(m) for m in ("image/png", "audio/ogg; codecs=opus", "text/markdown", "video/mp4", "model/gltf+json")}
    assert {m: t.feature_schema for m, t in found.items() if t} == {
        "image/png": "image/1",
        "audio/ogg; codecs=opus": "audio/1",
        "text/markdown": "text/1",
        "video/mp4": "video/1",
        "model/gltf+json": "model/1",
    }
    assert reg.lookup(EMBEDDING).feature_schema == "embedding/1"  # type: ignore[union-attr]
    assert reg.lookup(SENSOR_DATA).feature_schema == "sensor/1"  # type: ignore[union-attr]
    assert reg.lookup(MULTIPART_MIXED).feature_schema == "multipart/1"  # type: ignore[union-attr]
    assert reg.lookup("application/pdf") is None
    reg.validate_features("application/pdf", {"anything": object()})  # unknown type: no schema, no check
    assert ModalityRegistry(builtins=False).types() == []


def test_every_builtin_schema_passes_the_checks_a_registered_one_gets() -> None:
    """The built-in schemas are not checked at every start (jsonschema is imported at a registry's first use): they
    pass here what `register` asks of a custom schema, bounded patterns included."""
    from mma2a.schemas import BUILTIN_SCHEMAS

    assert len(BUILTIN_SCHEMAS) == 8
    for pattern, (_, _, schema, _) in BUILTIN_SCHEMAS.items():
        ModalityRegistry.check_schema(pattern, schema)  # raises FeatureSchemaError naming the field otherwise


@pytest.mark.parametrize(
    ("modality", "features", "field", "message"),
    [
        ("image/png", {"width": "wide"}, "features.width", "'wide' is not of type 'integer' (schema image/1)"),
        ("image/png", {"width": 0}, "features.width", "0 is less than the minimum of 1 (schema image/1)"),
        ("image/png", {"objects": ["cat", 3]}, "features.objects[1]", "3 is not of type 'string' (schema image/1)"),
        ("audio/wav", {"voiceActivity": 2}, "features.voiceActivity", "2 is greater than the maximum of 1 (schema audio/1)"),
        ("audio/wav", {"sampleRate": 16000.5}, "features.sampleRate", "16000.5 is not of type 'integer' (schema audio/1)"),
        ("text/plain", {"keywords": "a,b"}, "features.keywords", "'a,b' is not of type 'array' (schema text/1)"),
        ("video/mp4", {"fps": -1}, "features.fps", "-1 is less than the minimum of 0 (schema video/1)"),
        ("model/obj", {"bounds": [[1, 2]]}, "features.bounds[0]", "[1, 2] is too short (schema model/1)"),
        (EMBEDDING, {"dimension": 0}, "features.dimension", "0 is less than the minimum of 1 (schema embedding/1)"),
        (SENSOR_DATA, {"samples": -3}, "features.samples", "-3 is less than the minimum of 0 (schema sensor/1)"),
        (MULTIPART_MIXED, {"modalities": "image/png"}, "features.modalities", "'image/png' is not of type 'array' (schema multipart/1)"),
        ("image/png", {"sha256": "XYZ"}, "features.sha256", "'XYZ' does not match '^[0-9a-f]{64}$' (schema image/1)"),
    ],
)
def test_features_that_break_builtin_schemas(modality: str, features: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(FeatureSchemaError) as info:
        ModalityRegistry().validate_features(modality, features)
    assert info.value.message == f"{field}: {message}"
    assert info.value.field == field


def test_valid_builtin_features_and_doubles_from_protobuf_pass() -> None:
    reg = ModalityRegistry()
    reg.validate_features("image/png", {"width": 1920.0, "height": 1080, "objects": ["cat"], "extra": {"any": 1}})
    reg.validate_features("audio/ogg; codecs=opus", {"duration": 2.5, "sampleRate": 48000.0, "channels": 2})


def test_features_must_be_an_object() -> None:
    with pytest.raises(FeatureSchemaError) as info:
        ModalityRegistry().validate_features("image/png", ["cat"], field="message.parts[1].features")  # type: ignore[arg-type]
    assert info.value.message == "message.parts[1].features: must be an object, got list"


LIDAR = {
    "type": "object",
    "properties": {"points": {"type": "integer", "minimum": 0}, "frame": {"type": "string"}},
    "required": ["points"],
}


def test_register_custom_x_type_with_schema_and_version() -> None:
    reg = ModalityRegistry()
    t = reg.register("application/x-lidar-scan", schema=LIDAR, version=2, description="point clouds")
    assert (t.pattern, t.schema_id, t.version, t.feature_schema, t.builtin) == (
        "application/x-lidar-scan",
        "application/x-lidar-scan",
        2,
        "application/x-lidar-scan/2",
        False,
    )
    assert reg.lookup("Application/X-Lidar-Scan; frame=map") is t
    reg.validate_features("application/x-lidar-scan", {"points": 12000, "frame": "map"})
    with pytest.raises(FeatureSchemaError) as info:
        reg.validate_features("application/x-lidar-scan", {"points": -1})
    assert info.value.message == "features.points: -1 is less than the minimum of 0 (schema application/x-lidar-scan/2)"
    with pytest.raises(FeatureSchemaError) as info:
        reg.validate_features("application/x-lidar-scan", {"frame": "map"})
    assert info.value.message == "features: 'points' is a required property (schema application/x-lidar-scan/2)"
    # a newer version replaces it; a named schema id; vnd. trees are custom too
    assert reg.register("application/x-lidar-scan", schema=LIDAR, version=3, schema_id="lidar").feature_schema == "lidar/3"
    assert reg.register("image/vnd.acme.thermal").feature_schema == "image/vnd.acme.thermal/1"
    assert reg.lookup("image/vnd.acme.thermal").schema == {"type": "object"}  # type: ignore[union-attr]
    reg.unregister("application/x-lidar-scan")
    assert reg.lookup("application/x-lidar-scan") is None
    assert ModalityRegistry().lookup("image/vnd.acme.thermal").feature_schema == "image/1"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("modality", "kwargs", "error", "field", "message"),
    [
        ("image/png", {}, InvalidModality, "modality", "custom types must use an x-, vnd. or prs. subtype, got 'image/png'"),
        ("application/x-a2a-embedding", {}, InvalidModality, "modality", "'application/x-a2a-embedding' is built in and cannot be replaced"),
        ("application/x-foo; v=1", {}, InvalidModality, "modality", "register 'application/x-foo' without parameters"),
        ("application/*", {}, InvalidModality, "modality", "cannot register a wildcard"),
        ("x-foo", {}, InvalidModality, "modality", "'x-foo' is not a media type (expected type/subtype)"),
        ("application/x-foo", {"version": 0}, FeatureSchemaError, "version", "must be a positive integer, got 0"),
        ("application/x-foo", {"version": True}, FeatureSchemaError, "version", "must be a positive integer, got True"),
        ("application/x-foo", {"version": "2"}, FeatureSchemaError, "version", "must be a positive integer, got '2'"),
        ("application/x-foo", {"schema": []}, FeatureSchemaError, "schema", "must be a JSON Schema object, got list"),
        (
            "application/x-foo",
            {"schema": {"type": "objekt"}},
            FeatureSchemaError,
            "schema",
            "invalid JSON Schema for 'application/x-foo': 'objekt' is not valid under any of the given schemas",
        ),
        ("application/x-foo", {"schema_id": "has space"}, FeatureSchemaError, "schema_id", "must be a non-empty name without spaces, got 'has space'"),
        ("application/x-foo", {"schema_id": ""}, FeatureSchemaError, "schema_id", "must be a non-empty name without spaces, got ''"),
    ],
)
def test_registration_errors(modality: str, kwargs: dict[str, Any], error: type[Exception], field: str, message: str) -> None:
    with pytest.raises(error) as info:
        ModalityRegistry().register(modality, **kwargs)
    assert type(info.value) is error
    assert str(info.value) == f"{field}: {message}"
    assert info.value.field == field  # type: ignore[attr-defined]


def test_older_version_cannot_replace_a_newer_one() -> None:
    reg = ModalityRegistry()
    reg.register("application/x-foo", version=3)
    with pytest.raises(FeatureSchemaError) as info:
        reg.register("application/x-foo", version=2)
    assert info.value.message == "version: 'application/x-foo' is registered at version 3; 2 is older"
    assert reg.lookup("application/x-foo").version == 3  # type: ignore[union-attr]


def test_unregister_errors() -> None:
    reg = ModalityRegistry()
    with pytest.raises(UnknownModality) as info:
        reg.unregister("application/x-nope")
    assert info.value.message == "modality: 'application/x-nope' is not registered"
    with pytest.raises(InvalidModality) as info2:
        reg.unregister("image/*")
    assert info2.value.message == "modality: 'image/*' is built in and cannot be removed"
