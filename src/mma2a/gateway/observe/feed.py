"""The live feed of routing decisions: a ring bounded in entries and in bytes, polled by the console
(`GET /admin/decisions`).

Refused messages are recorded without thumbnails (their parts did not pass validation); an
accepted message's thumbnails passed the guard's size limits. Whatever an entry holds, the ring
keeps its total encoded size under `max_bytes` by dropping the oldest entries, and strings taken
from the message (its id, the refusal text) are cut short.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ...ext import EXTENSION_URI

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
_MAX_TEXT = 512  # characters of a message id or an outcome kept in the feed


def thumbnails(parts: Sequence[Any]) -> list[dict[str, Any]]:
    """The tiny previews parts carry (`metadata[ext].thumbnail`), by part index."""
    out: list[dict[str, Any]] = []
    for i, part in enumerate(parts):
        if not (isinstance(part, dict) or isinstance(part, Mapping)) or not part.get("metadata"):
            continue
        thumb = ((part.get("metadata") or {}).get(EXTENSION_URI) or {}).get("thumbnail")
        if isinstance(thumb, Mapping) and isinstance(thumb.get("data"), str):
            out.append({"index": i, "mediaType": thumb.get("mediaType"), "data": thumb["data"]})
    return out


def _short(value: Any) -> Any:
    return value[:_MAX_TEXT] + "…" if isinstance(value, str) and len(value) > _MAX_TEXT else value


class DecisionFeed:
    """The last decisions (at most `capacity`, at most `max_bytes` encoded) with a sequence number,
    so a poller asks only for what is new."""

    def __init__(self, capacity: int = 200, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._items: deque[tuple[dict[str, Any], int]] = deque()
        self._bytes = 0
        self._seq = itertools.count(1)

    @property
    def size_bytes(self) -> int:
        """The encoded size of what the feed holds now."""
        return self._bytes

    def record(self, message: Mapping[str, Any], route: list[dict[str, Any]], outcome: str, *,
               refused: bool = False, route_json: bytes | None = None) -> None:
        """Add a decision; `refused`: the message failed validation, so none of its parts' previews are kept;
        `route_json`: `route` as orjson writes it, when the caller has it (its size is not written again)."""
        parts = message.get("parts")
        mid = message.get("messageId")
        thumbs: list[dict[str, Any]] = []
        if refused or not (isinstance(parts, list) or isinstance(parts, Sequence)):
            pass
        elif parts.__class__ is list:
            for p in parts:  # plain parts: no previews to look for (a loop: no generator to make)
                if p.__class__ is not dict or "metadata" in p:
                    thumbs = thumbnails(parts)
                    break
        else:
            thumbs = thumbnails(parts)
        entry = {
            "seq": next(self._seq),
            "ts": int(time.time() * 1000) / 1000,  # milliseconds (`round` costs several times this)
            "messageId": _short(mid) if isinstance(mid, str) else None,
            "route": route if route_json is None else None,
            "outcome": _short(outcome),
            "thumbnails": thumbs,
        }
        if route_json is None:
            size = len(orjson.dumps(entry))
        else:  # the entry written with `null` for its route, and the route's own JSON in its place
            size = len(orjson.dumps(entry)) - 4 + len(route_json)
            entry["route"] = route  # (the key keeps its place)
        if size > self.max_bytes and thumbs:
            entry["thumbnails"] = []
            size = len(orjson.dumps(entry))
        if size > self.max_bytes:
            return
        items = self._items
        items.append((entry, size))
        self._bytes += size
        if len(items) > self.capacity:  # full: the oldest makes room (as the byte budget below may ask too)
            self._bytes -= items.popleft()[1]
        while self._bytes > self.max_bytes:
            self._bytes -= items.popleft()[1]

    def since(self, seq: int = 0) -> list[dict[str, Any]]:
        return [d for d, _ in self._items if d["seq"] > seq]
