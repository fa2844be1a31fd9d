"""One routing decision as history keeps it, and the sink the pipeline hands it to.

The pipeline builds a `DecisionRecord` from values it already holds (the view's parts, the
decision's part routes: immutable tuples) and calls `sink.record(...)`, which must not block.
The local recorder turns it into a `Row` at once (about a microsecond for a decision alike the
last: its shape, JSON and filter tags, is memoised; a new shape is serialised once), while what it
reads is still in the CPU's cache; the writer thread only hands rows to SQLite. Payload bytes never
enter a record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import orjson

from ..._kept import kept
from ...ext import EXTENSION_URI

MAX_PARTS = 64  # parts kept per decision (the rest are counted, not stored)
MAX_FEATURE_BYTES = 1024  # per part, as JSON
MAX_STRING = 200
MAX_LIST = 16

OUTCOMES = ("completed", "failed", "rejected", "canceled", "input-required", "auth-required", "working",
            "submitted", "message", "refused", "shed", "unknown", "push-delivered", "push-failed", "push-refused",
            "feedback")
# push notifications to clients' webhooks (gateway/push) are recorded too: "push delivered", "push failed: HTTP 503"


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
    explanations: Sequence[Any] = ()  # the decision's `PartExplanation`s: each capability choice's table is kept


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
    """("completed", None) from "TASK_STATE_COMPLETED"; ("refused", "-32005: why") from "refused -32005: why";
    ("shed", "deadline: why") from "shed deadline: why"
    """
    known = _KNOWN.get(outcome)
    if known is not None:
        return known
    if outcome.startswith("refused"):
        return "refused", outcome[len("refused"):].strip()[:1000] or None
    if outcome.startswith("shed"):  # under overload: "shed deadline: agent vision is overloaded ..."
        return "shed", outcome[len("shed"):].strip()[:1000] or None
    if outcome == "message":
        return "message", None
    if outcome.startswith("feedback:"):  # a client's rating of a task (gateway/stages/feedback.py)
        return "feedback", outcome[len("feedback:"):].strip()[:1000] or None
    if outcome.startswith("push "):
        word, _, detail = outcome.partition(":")
        kind = word.replace(" ", "-")
        return (kind if kind in OUTCOMES else "unknown"), detail.strip()[:1000] or None
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


class Shape(NamedTuple):
    """What alike decisions share, stored once: their parts' routes as JSON (modality, kind, targets, rules,
    transforms, drop; no sizes, no features) and the filter tags those imply."""

    parts_json: bytes
    tags: tuple[tuple[str, str], ...]


class Row(NamedTuple):
    """A decision as the store writes it: the columns, its shape, and what is its own of each part (`detail`:
    per part its size, or `[size, features]` when it has features, as JSON)."""

    message_id: str
    time: float
    sender: str | None
    outcome: str
    error: str | None
    latency_ms: float
    shape: Shape
    detail: bytes
    receivers_json: bytes | None

    @property
    def tags(self) -> tuple[tuple[str, str], ...]:
        return self.shape.tags

    def parts(self) -> list[dict[str, Any]]:
        """The parts as queries answer them (the shape's with each part's size and features)."""
        return merge_parts(orjson.loads(self.shape.parts_json), orjson.loads(self.detail))


def merge_parts(shape_parts: Sequence[Mapping[str, Any]], detail: Sequence[Any]) -> list[dict[str, Any]]:
    """A stored decision's parts: each shape part with its own size and features from `detail`."""
    out = []
    for p, d in zip(shape_parts, detail, strict=False):
        size, features = (d[0], d[1]) if isinstance(d, list) else (d, {})
        out.append({"index": p["index"], "modality": p["modality"], "kind": p["kind"], "size": size,
                    "features": features, **p})
    return out


def split_parts(parts: Sequence[Mapping[str, Any]]) -> tuple[Shape, bytes]:
    """The inverse of `merge_parts`, for parts stored whole (a file or a stream batch from before shapes)."""
    shape_parts = [{k: v for k, v in p.items() if k not in ("size", "features")} for p in parts]
    detail = [[p.get("size"), p["features"]] if p.get("features") else p.get("size") for p in parts]
    return Shape(orjson.dumps(shape_parts), shape_tags(shape_parts)), orjson.dumps(detail)


def shape_tags(shape_parts: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
    """The filter tags of a shape: each part's modality and family, its agents (targets and transformers), its rules."""
    tags: dict[tuple[str, str], None] = {}
    for p in shape_parts:
        base = base_modality(str(p["modality"]))
        tags[("m", base)] = None
        tags[("f", base.split("/", 1)[0] + "/*")] = None  # the family, so `image/*` is one index range too
        for name in p.get("targets") or ():
            tags[("a", name)] = None
        for chain in p.get("transforms") or ():
            for step in chain:
                tags[("a", step["agent"])] = None
        for name in p.get("matched") or ():
            tags[("r", name)] = None
    return tuple(tags)


def rows_to_json(rows: Sequence[Row]) -> bytes:
    """A batch of rows as one JSON document (what cluster mode publishes to its stream): each distinct shape's parts
    once (`parts`), each row naming its shape by index, its detail and receivers as their JSON text (so a reader
    need not write them again: ~0.5 µs a row read, where whole parts in every row cost ~3)."""
    shapes: dict[bytes, int] = {}
    out = [[r.message_id, r.time, r.sender, r.outcome, r.error, r.latency_ms,
            shapes.setdefault(r.shape.parts_json, len(shapes)), r.detail.decode(),
            r.receivers_json.decode() if r.receivers_json else None] for r in rows]
    return orjson.dumps({"shapes": 2, "parts": [orjson.Fragment(p) for p in shapes], "rows": out})


def _json_list(text: Any) -> bytes:
    """A row's detail or receivers sent as JSON text: its bytes, once checked to be a JSON list."""
    if not isinstance(text, str):
        raise TypeError("detail and receivers must be JSON text")
    data = text.encode()
    if not isinstance(orjson.loads(data), list):
        raise TypeError("detail and receivers must be lists")
    return data


def rows_from_json(data: bytes) -> list[Row]:
    """The inverse of `rows_to_json`, or a batch of an earlier form (every row with its shape's parts; before shapes,
    a list of rows with whole parts and their tags); raises ValueError on anything else. Alike rows of a batch share
    one `Shape`."""
    shapes: dict[bytes, Shape] = {}
    try:
        doc = orjson.loads(data)
        out = []
        if isinstance(doc, dict) and doc.get("shapes") == 2:
            batch_shapes: list[Shape] = []
            for shape_parts in doc["parts"]:
                if not isinstance(shape_parts, list):
                    raise TypeError("parts must be lists")
                batch_shapes.append(Shape(orjson.dumps(shape_parts), shape_tags(shape_parts)))
            for mid, ts, sender, outcome, error, latency, index, detail, receivers in doc["rows"]:
                if type(index) is not int or not 0 <= index < len(batch_shapes):
                    raise TypeError("a row names no shape of the batch")
                out.append(_new_row(Row, (str(mid), float(ts), sender, str(outcome), error, float(latency), batch_shapes[index],
                                          _json_list(detail), _json_list(receivers) if receivers else None)))
            return out
        if isinstance(doc, list):  # before shapes: whole parts, then receivers and tags (those follow from the parts)
            for mid, ts, sender, outcome, error, latency, parts, receivers, _ in doc:
                shape, detail = split_parts(parts)
                out.append(Row(str(mid), float(ts), sender, str(outcome), error, float(latency),
                               shapes.setdefault(shape.parts_json, shape), detail,
                               orjson.dumps(receivers) if receivers else None))
            return out
        for mid, ts, sender, outcome, error, latency, shape_parts, detail_items, receivers in doc["rows"]:
            if not isinstance(shape_parts, list) or not isinstance(detail_items, list):
                raise TypeError("parts and detail must be lists")
            parts_json = orjson.dumps(shape_parts)
            known = shapes.get(parts_json)
            if known is None:
                known = shapes[parts_json] = Shape(parts_json, shape_tags(shape_parts))
            out.append(Row(str(mid), float(ts), sender, str(outcome), error, float(latency), known,
                           orjson.dumps(detail_items), orjson.dumps(receivers) if receivers else None))
        return out
    except (orjson.JSONDecodeError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ValueError(f"not a batch of history rows: {exc}") from None


class ShapeMemo:
    """The shapes of recent decisions, by their routes and their parts' (index, modality, kind): a stream of alike
    messages is serialised once, whatever their sizes and features (those are each decision's own)."""

    def __init__(self, capacity: int = 1024, max_bytes: int = 4 << 20) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes  # of the shapes' JSON in all (a client's shape of 64 parts is ~45 KB: S17-3)
        self._bytes = 0
        self._shapes: dict[tuple[Any, ...], Shape] = {}
        self._last: tuple[Any, ...] = (None, None, None, None, None, None)  # a one-part decision's routes, part and shape

    def shape(self, entry: DecisionRecord) -> Shape:
        parts = entry.parts
        if len(parts) == 1:  # the common case, without the loop
            p = parts[0]
            routes, modality, index, kind, found, why = self._last
            # the very objects of the last one-part decision (the router's memo hands out the same routes and
            # explanation, the view the same modality): its shape, without hashing the routes
            if routes is entry.routes and modality is p.modality and index == p.index and kind == p.kind \
                    and why is entry.explanations:
                return found  # type: ignore[no-any-return]
            key: tuple[Any, ...] = (entry.routes, _choices(entry), p.index, str(p.modality), p.kind)
        else:
            key = (entry.routes, _choices(entry), *[(p.index, str(p.modality), p.kind) for p in parts[:MAX_PARTS]])
        try:
            found = self._shapes.get(key)
        except TypeError:  # routes that do not hash (not the routers' tuples): serialised every time
            return _shape(entry)
        if found is None:
            found = _shape(entry)
            if len(self._shapes) >= self.capacity or self._bytes + len(found.parts_json) > self.max_bytes:
                self._shapes.clear()
                self._bytes = 0
            self._shapes[key] = found
            self._bytes += len(found.parts_json)
        if len(parts) == 1:
            self._last = (entry.routes, parts[0].modality, parts[0].index, parts[0].kind, found, entry.explanations)
        return found


def _choices(entry: DecisionRecord) -> tuple[Any, ...]:
    """The capability tables of a record, and a learned choice's evidence, as part of its shape's key (scores by words
    and evidence differ per request)."""
    return tuple((getattr(e, "capability", ()), _evidence(e)) for e in entry.explanations)


def _evidence(explanation: Any) -> str | None:
    """A learned choice's evidence (routing/learned.py) from a part's explanation notes, if there is one."""
    for note in reversed(getattr(explanation, "notes", ())):
        if note.startswith("learned:"):
            return str(note)
    return None


def capability_json(choice: Any) -> dict[str, Any]:
    """A capability choice as history keeps it: the chosen agent, its runner-up line, and the first `MAX_LIST` agents
    considered (accepted ones ranked first) with their scores or why not."""
    out: dict[str, Any] = choice.to_json()
    shown = out["agents"]
    out["agents"] = shown[:MAX_LIST]
    if len(shown) > MAX_LIST:
        out["more"] = len(shown) - MAX_LIST
    lost = choice.runner_up()
    if lost is not None:
        out["runnerUp"] = lost
    return out


def detail_json(parts: Sequence[Any]) -> bytes:
    """What is each part's own in a decision: its size, or `[size, features]` (capped) when it has features."""
    if len(parts) == 1 and not parts[0].features and (parts[0].size is None or type(parts[0].size) is int):
        size = parts[0].size
        return b"[null]" if size is None else b"[%d]" % size
    return kept(orjson.dumps([[p.size, cap_features(p.features)] if p.features else p.size for p in parts[:MAX_PARTS]],
                             default=str))


_new_row = tuple.__new__  # Row's own __new__ is a Python function: one per request is worth skipping


def to_row(entry: DecisionRecord, memo: ShapeMemo | None = None) -> Row:
    """Serialise one record (the recorder does it as the request ends); `memo` reuses the shape of alike decisions."""
    shape = memo.shape(entry) if memo is not None else _shape(entry)
    message_id, ts, sender, parts, _, outcome_text, latency_s, receivers, _ = entry
    outcome, error = outcome_class(outcome_text)
    return _new_row(Row, (
        str(message_id)[:MAX_STRING], ts, sender[:MAX_STRING] if sender else None, outcome, error,
        round(latency_s * 1000, 3), shape, detail_json(parts), kept(orjson.dumps(list(receivers))) if receivers else None))


def _shape(entry: DecisionRecord) -> Shape:
    """The shape of a record's parts: their routes as stored (JSON) and its filter tags."""
    routes = {r.index: r for r in entry.routes}
    why = {e.index: e for e in entry.explanations}
    parts: list[dict[str, Any]] = []
    for p in list(entry.parts)[:MAX_PARTS]:
        row: dict[str, Any] = {"index": p.index, "modality": str(p.modality), "kind": p.kind}
        route = routes.get(p.index)
        if route is not None:
            row.update(targets=list(dict.fromkeys(t.agent for t in route.targets)), matched=list(route.matched),
                       transforms=[[{"agent": s.agent, "from": s.from_modality, "to": s.to_modality} for s in t.via]
                                   for t in route.targets if t.via],
                       dropped=route.dropped, bottleneck=route.bottleneck)
            applied = [a for a in route.actions if a.startswith("on_incomplete:")]
            if applied:  # rules judged without a feature that was not extracted, and what each did
                row["onIncomplete"] = applied
        else:
            row.update(targets=[], matched=[], transforms=[], dropped=None, bottleneck=False)
        explained = why.get(p.index)
        if explained is not None and explained.capability:  # the capability choice: every agent considered
            row["capability"] = capability_json(explained.capability[-1])
        evidence = _evidence(explained) if explained is not None else None
        if evidence is not None:  # a learned choice's evidence (routing/learned.py)
            row["learned"] = evidence
        parts.append(row)
    return Shape(kept(orjson.dumps(parts, default=str)), shape_tags(parts))  # kept: ShapeMemo holds up to 1,024
