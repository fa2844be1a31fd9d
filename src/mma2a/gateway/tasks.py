"""Task id mapping: the gateway's task ids to the downstream agents' tasks.

A message that went to one agent keeps that agent's task id (nothing to rewrite on the
hot path); a message fanned out to several gets a gateway id `gw-…` whose task is the
aggregate. `GetTask`, `CancelTask` and `SubscribeToTask` look the id up here.

Records are compact and invisible to the garbage collector: each is a tuple of strings
and bytes (agents and downstream ids, the route as JSON shared between identical routes,
a fan-out's aggregate as JSON), so a gateway that has answered a million messages keeps a
flat heap and its collections stay short. The map is bounded by an estimate of its bytes,
by record age and by count; the oldest record goes first. Exchanges answered with a
`message` (no task) are never recorded: nobody can ask about them.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from .._frozen import quick_init
from ..errors import TaskNotFound


@quick_init
@dataclass(frozen=True, slots=True)
class DownstreamTask:
    agent: str
    task_id: str
    context_id: str | None = None


# (flat legs: agent, task id, agent, task id, ...; route JSON; aggregate JSON or None; created at; size estimate)
_Row = tuple[tuple[str, ...], bytes, bytes | None, float, int]
_OVERHEAD = 240  # bytes a record costs beyond its strings: the map's entry, the tuples, the key object


class TaskRecord:
    """What the gateway remembers of one of its tasks (decoded from its compact row on demand)."""

    __slots__ = ("task_id", "legs", "route", "_aggregate")

    def __init__(self, task_id: str, legs: Sequence[DownstreamTask], aggregate: dict[str, Any] | None = None,
                 route: list[dict[str, Any]] | None = None) -> None:
        self.task_id = task_id
        self.legs = list(legs)
        self.route: list[dict[str, Any]] = route if route is not None else []
        self._aggregate = aggregate

    @property
    def aggregate(self) -> dict[str, Any] | None:
        """The aggregated task, for fan-out tasks (and failed ones no agent holds)."""
        return self._aggregate

    @aggregate.setter
    def aggregate(self, task: dict[str, Any] | None) -> None:
        self._aggregate = task

    @property
    def fanned_out(self) -> bool:
        return self._aggregate is not None


class TaskMap:
    """Bounded map of task records: oldest forgotten first, past `max_bytes`, `max_age_s` or `capacity`."""

    def __init__(self, capacity: int = 100_000, *, max_bytes: int = 16 << 20, max_age_s: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.clock = clock
        self.bytes = 0
        self._rows: OrderedDict[str, _Row] = OrderedDict()
        self._routes: dict[bytes, bytes] = {}  # identical routes share one bytes object

    def put(self, record: TaskRecord) -> None:
        route = orjson.dumps(record.route)
        route = self._routes.setdefault(route, route) if len(self._routes) < 4096 else route
        legs: tuple[str, ...] = ()
        size = _OVERHEAD + 2 * len(record.task_id)
        for d in record.legs:
            legs += (d.agent, d.task_id)
            size += len(d.agent) + len(d.task_id)
        agg = orjson.dumps(record.aggregate) if record.aggregate is not None else None
        if agg:
            size += len(agg)
        if record.aggregate is None:
            size += len(route) // 8  # shared with other records on the same route, mostly
        else:
            size += len(route)
        now = self.clock()
        old = self._rows.pop(record.task_id, None)
        if old is not None:
            self.bytes -= old[4]
        self._rows[record.task_id] = (legs, route, agg, now, size)
        self.bytes += size
        self._expire(now)

    def _expire(self, now: float) -> None:
        rows = self._rows
        while rows:
            _, row = next(iter(rows.items()))
            if len(rows) <= self.capacity and self.bytes <= self.max_bytes and now - row[3] <= self.max_age_s:
                break
            self.bytes -= rows.popitem(last=False)[1][4]
        if len(self._routes) >= 4096:
            self._routes.clear()

    def get(self, task_id: str) -> TaskRecord:
        rec = self.find(task_id)
        if rec is None:
            raise TaskNotFound(f"task {task_id!r} not found", field="id")
        return rec

    def find(self, task_id: str) -> TaskRecord | None:
        row = self._rows.get(task_id)
        if row is None:
            return None
        if self.clock() - row[3] > self.max_age_s:
            self.bytes -= row[4]
            del self._rows[task_id]
            return None
        legs, route, agg, _, _ = row
        return TaskRecord(task_id, [DownstreamTask(legs[i], legs[i + 1]) for i in range(0, len(legs), 2)],
                          aggregate=orjson.loads(agg) if agg is not None else None, route=orjson.loads(route))

    def update(self, record: TaskRecord) -> None:
        """Store a record read with `get` and changed (a fan-out's refreshed aggregate) without renewing its age."""
        row = self._rows.get(record.task_id)
        if row is None:
            return
        agg = orjson.dumps(record.aggregate) if record.aggregate is not None else None
        size = row[4] - (len(row[2]) if row[2] else 0) + (len(agg) if agg else 0)
        self.bytes += size - row[4]
        self._rows[record.task_id] = (row[0], row[1], agg, row[3], size)

    def __len__(self) -> int:
        return len(self._rows)
