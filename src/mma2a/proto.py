"""Adapters between the SDK's protobuf types and the extension's JSON views.

Agent developers hold `a2a.types.Part`/`Message`; the extension logic works on the JSON
form. These convert both ways (protobuf Struct carries numbers as doubles, so features read
back through `normalize_json`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from a2a.types import Message, Part
from google.protobuf import json_format

from .ext import (
    EXTENSION_URI,
    MessageExtension,
    PartExtension,
    downgrade_message,
    read_message,
    read_part,
    write_message,
    write_part,
)

__all__ = [
    "downgrade",
    "get_message_extension",
    "get_part_extension",
    "message_from_json",
    "message_to_json",
    "part_to_json",
    "set_message_extension",
    "set_part_extension",
]


def message_to_json(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = json_format.MessageToDict(message)
    return out


def message_from_json(data: dict[str, Any]) -> Message:
    out = Message()
    json_format.ParseDict(data, out, ignore_unknown_fields=True)
    return out


def part_to_json(part: Part) -> dict[str, Any]:
    out: dict[str, Any] = json_format.MessageToDict(part)
    return out


def get_part_extension(part: Part, where: str = "part") -> PartExtension:
    """The extension view of a protobuf part (derived from `media_type` when it carries none)."""
    return read_part(part_to_json(part), where)


def set_part_extension(part: Part, ext: PartExtension) -> Part:
    """Write the extension onto a protobuf part (in place)."""
    data = write_part({}, ext)
    part.metadata.update({EXTENSION_URI: data["metadata"][EXTENSION_URI]})
    if ext.modality and not part.media_type and part.WhichOneof("content") not in ("text", "data"):
        part.media_type = ext.modality
    return part


def get_message_extension(message: Message) -> MessageExtension | None:
    return read_message(message_to_json(message))


def set_message_extension(message: Message, ext: MessageExtension) -> Message:
    data = write_message({}, ext)
    message.metadata.update({EXTENSION_URI: data["metadata"][EXTENSION_URI]})
    if EXTENSION_URI not in message.extensions:
        message.extensions.append(EXTENSION_URI)
    return message


def downgrade(message: Message, *, input_modes: Iterable[str] | None = None) -> Message:
    """The plain A2A message an agent without the extension receives (see `ext.downgrade_message`)."""
    return message_from_json(downgrade_message(message_to_json(message), input_modes=input_modes))
