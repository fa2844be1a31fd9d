"""What a producer can send: files, bytes, text, embeddings, live streams, each with an optional modality.

`MultimodalClient.send` takes these or plain values (`Path` → `File`, `bytes` → `Blob`,
`str` → `Text`, a list of numbers → `Embedding`, an async iterator of bytes → `Live`).
"""

from __future__ import annotations

import numbers
from collections.abc import AsyncIterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a2a.types import Part

from ..errors import InvalidParams


@dataclass(frozen=True)
class File:
    """A file on disk; big files are streamed to the gateway's store, never read whole."""

    path: Path
    modality: str | None = None
    filename: str | None = None
    features: Mapping[str, Any] | None = None  # the producer's own facts (`{"camera": "dock-3"}`), schema-checked


@dataclass(frozen=True)
class Blob:
    """Bytes in memory (modality sniffed from the bytes unless given)."""

    data: bytes
    modality: str | None = None
    filename: str | None = None
    features: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Text:
    text: str
    modality: str = "text/plain"
    features: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Embedding:
    """A vector, sent as little-endian float32 (`application/x-a2a-embedding; dtype=float32`)."""

    vector: Sequence[float]
    model: str | None = None


@dataclass(frozen=True)
class Live:
    """A live stream: chunks as they come; sent through a gateway stream, announced by one message."""

    chunks: AsyncIterable[bytes]
    modality: str | None = None
    session_id: str | None = None
    features: Mapping[str, Any] | None = None


Item = File | Blob | Text | Embedding | Live | Part


def as_item(value: Any, index: int, modality: str | None = None) -> Item:
    """Wrap a plain value as an item; `modality` overrides detection for binary items."""
    where = f"items[{index}]"
    if isinstance(value, (File, Blob, Live)):
        if modality and value.modality is None:
            return type(value)(**{**value.__dict__, "modality": modality})
        return value
    if isinstance(value, (Text, Embedding, Part)):
        return value
    if isinstance(value, Path):
        if not value.is_file():
            raise InvalidParams(f"{where}: no such file: {str(value)!r}", field=where)
        return File(value, modality)
    if isinstance(value, str):
        return Text(value, modality or "text/plain")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return Blob(bytes(value), modality)
    if hasattr(value, "__aiter__"):
        return Live(value, modality)
    if hasattr(value, "tolist"):  # numpy arrays
        value = value.tolist()
    if isinstance(value, (list, tuple)) and value and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value
    ):
        return Embedding([float(v) for v in value])
    raise InvalidParams(
        f"{where}: cannot send a {type(value).__name__}; send a Path, bytes, str, list[float], "
        "an async iterator of bytes, or an a2a Part",
        field=where,
    )
