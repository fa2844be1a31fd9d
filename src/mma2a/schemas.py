"""Built-in feature schemas (JSON Schema, draft 2020-12), one per modality family.

Each entry: pattern -> (schema id, version, schema, description). `featureSchema` on the
wire is `"{id}/{version}"`, e.g. `image/1`. Schemas type the well-known features and allow
extra ones, so producers may add facts the router does not know yet.
"""

from __future__ import annotations

from typing import Any

_NUM = {"type": "number"}
_NONNEG = {"type": "number", "minimum": 0}
_COUNT = {"type": "integer", "minimum": 0}
_STR = {"type": "string"}
_STRS = {"type": "array", "items": {"type": "string"}}
_BOOL = {"type": "boolean"}
_BOX = {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4}

_COMMON: dict[str, Any] = {
    "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    "size": _COUNT,
    "error": _STR,
    "incomplete": _STRS,  # features the router could not make: an extractor cut off at its budget, a missing package
    "streaming": _BOOL,
    "priority": _STR,
}


def _schema(title: str, props: dict[str, Any]) -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
        "type": "object",
        "properties": {**_COMMON, **props},
        "additionalProperties": True,
    }


IMAGE = _schema(
    "image features",
    {
        "format": _STR,
        "width": {"type": "integer", "minimum": 1},
        "height": {"type": "integer", "minimum": 1},
        "mode": _STR,
        "dominantColors": _STRS,
        "colors": _STRS,
        "blur": _NONNEG,
        "objects": _STRS,
        "detections": {"type": "array", "items": {"type": "object", "required": ["label", "score", "box"],
                                                  "properties": {"label": _STR, "score": _NUM, "box": _BOX}}},
        "faces": _COUNT,
        "people": _COUNT,
        "catFaces": _COUNT,
        "qr": _STRS,
        "codes": {"type": "array", "items": {"type": "object", "required": ["format", "text"],
                                             "properties": {"format": _STR, "text": _STR, "box": _BOX}}},
        "text": _STR,
        "textLines": {"type": "array", "items": {"type": "object", "required": ["text"],
                                                 "properties": {"text": _STR, "confidence": _NUM, "box": _BOX}}},
    },
)
AUDIO = _schema(
    "audio features",
    {
        "format": _STR,
        "duration": _NONNEG,
        "sampleRate": {"type": "integer", "minimum": 1},
        "channels": {"type": "integer", "minimum": 1},
        "loudness": _NUM,
        "voiceActivity": {"type": "number", "minimum": 0, "maximum": 1},
        "language": _STR,
        "keywords": _STRS,
        "transcript": _STR,
        "words": {"type": "array", "items": {"type": "object", "required": ["word", "start", "end"],
                                             "properties": {"word": _STR, "start": _NONNEG, "end": _NONNEG, "p": _NUM}}},
        "unclear": {"type": "array", "items": {"type": "array", "items": _NONNEG, "minItems": 2, "maxItems": 2}},
    },
)
TEXT = _schema(
    "text features",
    {
        "language": _STR,
        "length": _COUNT,
        "words": _COUNT,
        "keywords": _STRS,
        "embedding": {"type": "object", "required": ["model", "values"],
                      "properties": {"model": _STR, "dimension": _COUNT, "values": {"type": "array", "items": _NUM}}},
    },
)
VIDEO = _schema(
    "video features",
    {
        "container": _STR,
        "codec": _STR,
        "fps": _NONNEG,
        "duration": _NONNEG,
        "width": {"type": "integer", "minimum": 1},
        "height": {"type": "integer", "minimum": 1},
        "frames": _COUNT,
        "audio": _BOOL,
        "audioCodec": _STR,
        "audioSampleRate": {"type": "integer", "minimum": 1},
    },
)
MODEL = _schema(
    "3D model features",
    {
        "format": _STR,
        "vertices": _COUNT,
        "faces": _COUNT,
        "bounds": {"type": "array", "items": {"type": "array", "items": _NUM, "minItems": 3, "maxItems": 3}},
    },
)
EMBEDDING = _schema(
    "embedding features",
    {
        "dimension": {"type": "integer", "minimum": 1},
        "norm": _NONNEG,
        "model": _STR,
        "dtype": _STR,
    },
)
SENSOR = _schema(
    "sensor data features",
    {
        "sensor": _STR,
        "unit": _STR,
        "samples": _COUNT,
        "alarm": {},
    },
)
MULTIPART = _schema("composite features", {"parts": _COUNT, "modalities": _STRS})

BUILTIN_SCHEMAS: dict[str, tuple[str, int, dict[str, Any], str]] = {
    "image/*": ("image", 1, IMAGE, "still images"),
    "audio/*": ("audio", 1, AUDIO, "sound and speech"),
    "text/*": ("text", 1, TEXT, "natural-language and structured text"),
    "video/*": ("video", 1, VIDEO, "moving pictures"),
    "model/*": ("model", 1, MODEL, "3D meshes and scenes"),
    "application/x-a2a-embedding": ("embedding", 1, EMBEDDING, "vector embeddings"),
    "application/x-a2a-sensor-data": ("sensor", 1, SENSOR, "sensor readings"),
    "multipart/mixed": ("multipart", 1, MULTIPART, "composite parts"),
}
