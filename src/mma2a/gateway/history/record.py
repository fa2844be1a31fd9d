"""One routing decision as history keeps it, and the sink the pipeline hands it to.

The pipeline builds a `DecisionRecord` from values it already holds (the view's parts, the
decision's part routes: immutable tuples) and calls `sink.record(...)`, which must not block.
Turning a record into a row (JSON, capped features, filter tags) happens on the writer's
thread, never on the request path. Payload bytes never enter a record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import orjson

from ...ext import EXTENSION_URI

MAX_PARTS = 64  # parts kept per decision (the rest are counted, not stored)
MAX_FEATURE_BYTES = 1024  # per part, as JSON
MAX_STRING = 200
MAX_LIST = 16

OUTCOMES = ("completed", "failed", "rejected", "canceled", "input-required", "auth-required", "working",
            "submitted", "message", "refused", "unknown")


class PartSummary(NamedTuple):
    """A part of a refused message: what it claimed to be (its features were never validated, so none)."""

    index: int  # type: ignore[assignment]  # shadows tuple.index, like PartRoute.index
    modality: str
    features: Mapping[str, Any] = {}
    kind: str = "text"
    size: int | None = None


class DecisionRecord(NamedTuple):
    """What history stores of one message: `parts` are `PartView`s or `PartSummary`s, `routes` `PartRoute`s."""

    message_id: str
    time: float  # seconds since the epoch
    sender: str | None
    parts: Sequence[Any]
    routes: Sequence[Any]
    outcome: str  # the task state, "message", or "refused CODE: why"
    latency_s: float
    receivers: tuple[str, ...] = ()


class HistorySink(Protocol):
    """Where the pipeline sends decisions (SQLite by default; a JetStream stream in cluster mode)."""

    def record(self, entry: DecisionRecord) -> None:
        """Take the decision; never block, never raise (a full sink counts a drop)."""


def refused_parts(message: Mapping[str, Any]) -> tuple[PartSummary, ...]:
    """The parts of a message that never got a view: their declared modality only."""
    parts = message.get("parts")
    if not isinstance(parts, list):
        return ()
    out = []
    for i, part in enumerate(parts[:MAX_PARTS]):
        if not isinstance(part, Mapping):
            continue
        ext = (part.get("metadata") or {}).get(EXTENSION_URI) if isinstance(part.get("metadata"), Mapping) else None
        modality = ext.get("modality") if isinstance(ext, Mapping) else None
        if not isinstance(modality, str):
            media_type = part.get("mediaType")
            modality = media_type if isinstance(media_type, str) else (
                "text/plain" if "text" in part else "application/octet-stream")
        out.append(PartSummary(i, modality[:MAX_STRING]))
    return tuple(out)


_KNOWN = {"message": ("message", None), **{
    f"TASK_STATE_{o.upper().replace('-', '_')}": (o, None) for o in OUTCOMES if o != "message"}}


def outcome_class(outcome: str) -> tuple[str, str | None]:
    """("completed", None) from "TASK_STATE_COMPLETED"; ("refused", "-32005: why") from "refused -32005: why"."""
    known = _KNOWN.get(outcome)
    if known is not None:
        return known
    if outcome.startswith("refused"):
        return "refused", outcome[len("refused"):].strip()[:1000] or None
    if outcome == "message":
        return "message", None
    word = outcome.removeprefix("TASK_STATE_").lower().replace("_", "-")
    return (word if word in OUTCOMES else "unknown"), None


def base_modality(modality: str) -> str:
    """`image/png` from `image/png; q=1`: what filters and charts group by."""
    return modality.split(";", 1)[0].strip().lower()


def _small(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return value[:MAX_STRING]
    if isinstance(value, bool | int | float) or value is None:
        return value
    if isinstance(value, Mapping) and depth < 2:
        return {str(k)[:MAX_STRING]: _small(v, depth + 1) for k, v in list(value.items())[:MAX_LIST * 2]}
    if isinstance(value, list | tuple) and depth < 2:
        return [_small(v, depth + 1) for v in value[:MAX_LIST]]
    return str(value)[:MAX_STRING]


def cap_features(features: Mapping[str, Any], budget: int = MAX_FEATURE_BYTES) -> dict[str, Any]:
    """Features small enough to keep: strings, lists and depth cut; then whole keys dropped until it fits."""
    out = {str(k)[:MAX_STRING]: _small(v) for k, v in features.items()}
    if len(orjson.dumps(out, default=str)) <= budget:
        return out
    kept: dict[str, Any] = {"_truncated": True}
    used = 20
    for key in sorted(out, key=lambda k: len(orjson.dumps(out[k], default=str))):
        size = len(orjson.dumps({key: out[key]}, default=str))
        if used + size > budget:
            break
        kept[key] = out[key]
        used += size
    return kept


class Row(NamedTuple):
    """A decision as the store writes it: the columns, the filter tags ((kind, value) pairs)."""

    message_id: str
    time: float
    sender: str | None
    outcome: str
    error: str | None
    latency_ms: float
    parts_json: bytes
    receivers_json: bytes | None
    tags: tuple[tuple[str, str], ...]


def rows_to_json(rows: Sequence[Row]) -> bytes:
    """A batch of rows as one JSON document (what cluster mode publishes to its stream)."""
    return orjson.dumps([[r.message_id, r.time, r.sender, r.outcome, r.error, r.latency_ms, orjson.Fragment(r.parts_json),
                          orjson.Fragment(r.receivers_json) if r.receivers_json else None, r.tags] for r in rows])


def rows_from_json(data: bytes) -> list[Row]:
    """The inverse of `rows_to_json`; raises ValueError on anything else."""
    try:
        return [Row(str(mid), float(ts), sender, str(outcome), error, float(latency), orjson.dumps(parts),
                    orjson.dumps(receivers) if receivers else None, tuple((str(k), str(v)) for k, v in tags))
                for mid, ts, sender, outcome, error, latency, parts, receivers, tags in orjson.loads(data)]
    except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
        raise ValueError(f"not a batch of history rows: {exc}") from None


class RowMemo:
    """The parts JSON and tags of recent decisions, by their routes (the same object for every message a memoised
    decision routed) and their parts' shapes: a stream of alike messages is serialised once. Parts with
    features are never memoised (their features differ from message to message)."""

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self._rows: dict[tuple[Any, ...], tuple[Sequence[Any], bytes, tuple[tuple[str, str], ...]]] = {}

    def key(self, entry: DecisionRecord) -> tuple[Any, ...] | None:
        if len(entry.parts) == 1:  # the common case, without the loop
            p = entry.parts[0]
            return None if p.features else (id(entry.routes), p.index, str(p.modality), p.kind, p.size)
        if len(entry.parts) > 4:
            return None
        shape: list[Any] = [id(entry.routes)]
        for p in entry.parts:
            if p.features:
                return None
            shape.append((p.index, str(p.modality), p.kind, p.size))
        return tuple(shape)

    def get(self, key: tuple[Any, ...], entry: DecisionRecord) -> tuple[bytes, tuple[tuple[str, str], ...]] | None:
        found = self._rows.get(key)
        if found is None or found[0] is not entry.routes:  # an id reused by another object: not the same routes
            return None
        return found[1], found[2]

    def put(self, key: tuple[Any, ...], entry: DecisionRecord, parts_json: bytes, tags: tuple[tuple[str, str], ...]) -> None:
        if len(self._rows) >= self.capacity:
            self._rows.clear()
        self._rows[key] = (entry.routes, parts_json, tags)  # the routes kept alive: their id stays theirs


def to_row(entry: DecisionRecord, memo: RowMemo | None = None) -> Row:
    """Serialise one record (on the writer's thread); `memo` reuses the parts JSON of alike decisions."""
    key = memo.key(entry) if memo is not None and entry.routes else None
    known = memo.get(key, entry) if key is not None and memo is not None else None
    if known is not None:
        parts_json, tag_tuple = known
    else:
        parts_json, tag_tuple = _parts_json(entry)
        if memo is not None and key is not None:
            memo.put(key, entry, parts_json, tag_tuple)
    outcome, error = outcome_class(entry.outcome)
    sender = entry.sender
    return Row(  # positional: the writer makes one per decision
        str(entry.message_id)[:MAX_STRING], entry.time, sender[:MAX_STRING] if sender else None, outcome, error,
        round(entry.latency_s * 1000, 3), parts_json, orjson.dumps(list(entry.receivers)) if entry.receivers else None,
        tag_tuple)


def _parts_json(entry: DecisionRecord) -> tuple[bytes, tuple[tuple[str, str], ...]]:
    """The parts of a record as stored (JSON) and its filter tags."""
    routes = {r.index: r for r in entry.routes}
    parts: list[dict[str, Any]] = []
    tags: dict[tuple[str, str], None] = {}
    for p in list(entry.parts)[:MAX_PARTS]:
        modality = str(p.modality)
        base = base_modality(modality)
        tags[("m", base)] = None
        tags[("f", base.split("/", 1)[0] + "/*")] = None  # the family, so `image/*` is one index range too
        route = routes.get(p.index)
        row: dict[str, Any] = {"index": p.index, "modality": modality, "kind": p.kind, "size": p.size,
                               "features": cap_features(p.features) if p.features else {}}
        if route is not None:
            targets = list(dict.fromkeys(t.agent for t in route.targets))
            transforms = [[{"agent": s.agent, "from": s.from_modality, "to": s.to_modality} for s in t.via]
                          for t in route.targets if t.via]
            row.update(targets=targets, matched=list(route.matched), transforms=transforms,
                       dropped=route.dropped, bottleneck=route.bottleneck)
            for name in targets:
                tags[("a", name)] = None
            for chain in transforms:
                for step in chain:
                    tags[("a", step["agent"])] = None
            for name in route.matched:
                tags[("r", name)] = None
        else:
            row.update(targets=[], matched=[], transforms=[], dropped=None, bottleneck=False)
        parts.append(row)
    return orjson.dumps(parts, default=str), tuple(tags)
