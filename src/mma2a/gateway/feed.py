"""The live feed of routing decisions: a bounded ring the console polls (`GET /admin/decisions`)."""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from ..ext import EXTENSION_URI


def thumbnails(parts: Sequence[Any]) -> list[dict[str, Any]]:
    """The tiny previews parts carry (`metadata[ext].thumbnail`), by part index."""
    out = []
    for i, part in enumerate(parts):
        if not isinstance(part, Mapping):
            continue
        thumb = ((part.get("metadata") or {}).get(EXTENSION_URI) or {}).get("thumbnail")
        if isinstance(thumb, Mapping) and isinstance(thumb.get("data"), str):
            out.append({"index": i, "mediaType": thumb.get("mediaType"), "data": thumb["data"]})
    return out


class DecisionFeed:
    """The last `capacity` decisions with a sequence number, so a poller asks only for what is new."""

    def __init__(self, capacity: int = 200) -> None:
        self._items: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._seq = itertools.count(1)

    def record(self, message: Mapping[str, Any], route: list[dict[str, Any]], outcome: str) -> None:
        self._items.append({
            "seq": next(self._seq),
            "ts": round(time.time(), 3),
            "messageId": message.get("messageId"),
            "route": route,
            "outcome": outcome,
            "thumbnails": thumbnails(message.get("parts") or ()),
        })

    def since(self, seq: int = 0) -> list[dict[str, Any]]:
        return [d for d in self._items if d["seq"] > seq]
