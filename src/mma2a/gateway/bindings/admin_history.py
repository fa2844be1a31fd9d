"""The history's admin API: `GET /admin/history`, `GET /admin/history/counts`, `GET /admin/history/flows` (the
console's route map), `POST /admin/history/replay`.

Query values are checked here; a bad one answers 400 naming the parameter.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...errors import Forbidden, InvalidParams, RuleError
from ...request_body import decimal
from ...responses import json_response
from ...routing import build_snapshot, parse_rules
from ..downstream.directory import AgentDirectory
from ..history.record import OUTCOMES
from ..history.recorder import HistoryRecorder
from ..history.replay import Replay
from ..history.store import HistoryFilter
from ..state.routing import RoutingState

Endpoint = Callable[[Request], Awaitable[Response]]
"""A Starlette endpoint: the admin API's handlers, and what its `guard` wraps them into."""

MAX_LIMIT = 1000
MAX_BUCKETS = 2000
REPLAY_DEFAULT, REPLAY_MAX = 500, 5000
_DURATION = re.compile(r"^-?(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_MODALITY = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]*/(\*|[a-z0-9][a-z0-9!#$&^_.+-]*)$")


LATEST = 253402300799.0  # 9999-12-31T23:59:59Z: times are read between the epoch and this


def parse_time(name: str, value: str, now: float) -> float:
    """Seconds since the epoch from `1700000000`, `2026-11-30T20:00:00Z` or a duration back from now (`90m`, `1h`),
    between 1970 and 9999 (further out, the counts' buckets passed SQLite's 64-bit integers: a 500)."""
    ts = _seconds(name, value, now)
    if not 0.0 <= ts <= LATEST:
        raise InvalidParams(f"{name}: must be a time between 1970 and 9999, got {value[:80]!r}", field=name)
    return ts


def _seconds(name: str, value: str, now: float) -> float:
    v = value.strip()
    if m := _DURATION.match(v):
        return now - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        ts = float(v)
        if math.isfinite(ts):
            return ts
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(v)
    except ValueError:
        raise InvalidParams(f"{name}: must be an ISO 8601 time, seconds since the epoch, or a duration such as 1h; "
                            f"got {value[:80]!r}", field=name) from None
    if dt.tzinfo is None:
        raise InvalidParams(f"{name}: an ISO 8601 time needs a zone (Z or +hh:mm); got {value[:80]!r}", field=name)
    return dt.timestamp()


def _int(q: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = q.get(name)
    if raw is None or raw == "":
        return default
    value = decimal(raw)
    if value is None or not lo <= value <= hi:
        raise InvalidParams(f"{name}: must be an integer from {lo} to {hi}, got {raw[:80]!r}", field=name)
    return value


def _name(q: Mapping[str, str], name: str) -> str | None:
    raw = q.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > 200:
        raise InvalidParams(f"{name}: at most 200 characters", field=name)
    return raw


def parse_filter(q: Mapping[str, str], now: float, *, default_limit: int = 100, max_limit: int = MAX_LIMIT) -> HistoryFilter:
    """A `HistoryFilter` from query parameters (or a JSON body's fields); errors name the parameter."""
    known = {"since", "until", "modality", "agent", "rule", "sender", "outcome", "limit", "cursor"}
    for key in q:
        if key not in known:
            raise InvalidParams(f"{key}: unknown parameter; use {', '.join(sorted(known))}", field=key)
    since = parse_time("since", q["since"], now) if q.get("since") else None
    until = parse_time("until", q["until"], now) if q.get("until") else None
    if since is not None and until is not None and until <= since:
        raise InvalidParams("until: must be later than since", field="until")
    modality = _name(q, "modality")
    if modality is not None:
        modality = modality.lower()
        if not _MODALITY.match(modality):
            raise InvalidParams(f"modality: must be a media type such as image/png or a family such as image/*, "
                                f"got {modality[:80]!r}", field="modality")
    outcome = _name(q, "outcome")
    if outcome is not None and outcome not in OUTCOMES:
        raise InvalidParams(f"outcome: must be one of {', '.join(OUTCOMES)}, got {outcome[:80]!r}", field="outcome")
    raw_cursor = q.get("cursor") or None
    cursor = decimal(raw_cursor) if raw_cursor is not None else None
    if raw_cursor is not None and cursor is None:
        raise InvalidParams(f"cursor: must be a cursor returned by a previous page, got {raw_cursor[:80]!r}",
                            field="cursor")
    return HistoryFilter(
        since=since, until=until, modality=modality, agent=_name(q, "agent"), rule=_name(q, "rule"),
        sender=_name(q, "sender"), outcome=outcome, limit=_int(q, "limit", default_limit, 1, max_limit),
        before=cursor)


class HistoryParts(Protocol):
    """What the history API reads of the gateway: its history, agents and rules in force."""

    @property
    def history(self) -> HistoryRecorder | None: ...

    @property
    def directory(self) -> AgentDirectory: ...

    @property
    def state(self) -> RoutingState: ...


def history_routes(gw: HistoryParts, guard: Callable[[Endpoint], Endpoint]) -> list[Route]:
    """The routes, each wrapped by the admin API's `guard` (bearer admin token)."""

    def recorder() -> HistoryRecorder:
        if gw.history is None:
            raise Forbidden("history is disabled (history.enabled: false in the gateway config)")
        return gw.history

    async def query(request: Request) -> Response:
        f = parse_filter(request.query_params, time.time())
        rec = recorder()
        await asyncio.to_thread(rec.flush, 2.0)  # what was decided before this request is in the answer
        decisions, cursor = await asyncio.to_thread(rec.store.query, f)
        return json_response({"decisions": decisions, "cursor": cursor})

    async def counts(request: Request) -> Response:
        q = request.query_params
        for key in q:
            if key not in ("by", "since", "until", "bucket"):
                raise InvalidParams(f"{key}: unknown parameter; use by, since, until, bucket", field=key)
        by = q.get("by") or "modality"
        if by not in ("modality", "agent", "outcome"):
            raise InvalidParams(f"by: must be modality, agent or outcome, got {by[:80]!r}", field="by")
        now = time.time()
        since = parse_time("since", q["since"], now) if q.get("since") else now - 3600
        until = parse_time("until", q["until"], now) if q.get("until") else now
        if until <= since:
            raise InvalidParams("until: must be later than since", field="until")
        auto = 60 * max(1, math.ceil((until - since) / 3600))  # about 60 buckets, whole minutes
        bucket = _int(q, "bucket", auto, 60, 366 * 86400)
        if bucket % 60:
            raise InvalidParams(f"bucket: must be a whole number of minutes in seconds (60, 120, ...), got {bucket}",
                                field="bucket")
        if (until - since) / bucket > MAX_BUCKETS:
            raise InvalidParams(f"bucket: {bucket} s makes more than {MAX_BUCKETS} buckets over that span; "
                                "use a larger bucket or a shorter span", field="bucket")
        rec = recorder()
        await asyncio.to_thread(rec.flush, 2.0)
        series = await asyncio.to_thread(rec.store.counts, by, since, until, bucket)
        return json_response({"by": by, "bucket": bucket, "since": since, "until": until, "series": series})

    async def flows(request: Request) -> Response:
        """The console's route map: parts per (modality, target) over a span (`since`, `until`; default the last hour)."""
        q = request.query_params
        for key in q:
            if key not in ("since", "until"):
                raise InvalidParams(f"{key}: unknown parameter; use since, until", field=key)
        now = time.time()
        since = parse_time("since", q["since"], now) if q.get("since") else now - 3600
        until = parse_time("until", q["until"], now) if q.get("until") else now
        if until <= since:
            raise InvalidParams("until: must be later than since", field="until")
        rec = recorder()
        await asyncio.to_thread(rec.flush, 2.0)
        found = await asyncio.to_thread(rec.store.flows, since, until)
        return json_response({"since": since, "until": until, **found})

    async def replay_rules(request: Request) -> Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            raise InvalidParams(f"body: not valid JSON: {exc}", field="body") from None
        if not isinstance(body, dict) or not isinstance(body.get("rules"), str) or not body["rules"].strip():
            raise InvalidParams("rules: required, the candidate rule file's text (YAML or JSON)", field="rules")
        text = body["rules"]
        rules = await asyncio.to_thread(parse_rules, text)  # RuleError (400) lists every problem; off the event loop
        candidate = await asyncio.to_thread(build_snapshot, rules, gw.directory.infos(), mode=gw.state.mode,
                                            embedder=gw.state.embedder)
        filters = {k: str(v) for k, v in body.items() if k != "rules"}
        f = parse_filter(filters, time.time(), default_limit=REPLAY_DEFAULT, max_limit=REPLAY_MAX)
        rec = recorder()
        await asyncio.to_thread(rec.flush, 2.0)
        # page by page (each at most `PAGE_BYTES` of parts, read and replayed in a thread), newest first, until `limit`
        # decisions: it read one page of its limit and examined that alone, or, of small decisions, up to 5,000 at once
        run = Replay(gw.state.snapshot, candidate)
        left, cursor = f.limit, f.before
        while left > 0:
            items, more = await asyncio.to_thread(rec.store.query, dataclasses.replace(f, limit=left, before=cursor))
            await asyncio.to_thread(run.add, items)
            left -= len(items)
            if more is None or not items:
                break
            cursor = int(more)
        return json_response({"rules": len(rules.rules), **run.result()})

    async def validate_rules(request: Request) -> Response:
        text = (await request.body()).decode("utf-8", errors="replace")
        if not text.strip():
            raise RuleError("rules: body is empty", errors=["rules: body is empty"])
        rules = await asyncio.to_thread(parse_rules, text)  # off the event loop, as every rule text
        await asyncio.to_thread(build_snapshot, rules, gw.directory.infos(), mode=gw.state.mode,
                                embedder=gw.state.embedder)  # names agents and groups that exist
        return json_response({"valid": True, "rules": len(rules.rules)})

    return [
        Route("/admin/history", guard(query), methods=["GET"]),
        Route("/admin/history/counts", guard(counts), methods=["GET"]),
        Route("/admin/history/flows", guard(flows), methods=["GET"]),
        Route("/admin/history/replay", guard(replay_rules), methods=["POST"]),
        Route("/admin/rules/validate", guard(validate_rules), methods=["POST"]),
    ]
