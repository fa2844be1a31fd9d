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

Each record names its owner, the client that created the task (None when the caller had no identity:
auth off), and the map remembers which owner each context id belongs to: `TaskOperations` and
`Admission` answer another client's task or context as not found (docs/security.md, round 3).

Each owner's records are bounded by bytes too (`max_bytes_per_owner`, `limits.task_bytes_per_client`), inside the
map's own budget: a client past its share loses its own oldest records, never another client's (five 3.6 MB
fan-out messages of one client made another's task `not found`: security round 4 #6). Records without an owner
(auth off) count in the map's budget only. A stored aggregate keeps of the request only its ids (`stored`): the
request's parts went to the agents and back to the client, who has them.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ..._frozen import quick_init
from ..._kept import kept
from ...errors import TaskNotFound


@quick_init
@dataclass(frozen=True, slots=True)
class DownstreamTask:
    agent: str
    task_id: str
    context_id: str | None = None


# (flat legs: agent, task id, agent, task id, ...; route JSON; aggregate JSON or None; created at; size estimate;
#  owner; context id)
_Row = tuple[tuple[str, ...], bytes, bytes | None, float, int, str | None, str | None]
_OVERHEAD = 640  # bytes a record costs beyond its strings' characters: its entries in the map (and its owner's and
# context's), the row and legs tuples, the time and size objects, the key's and context's string headers
ROUTES_BYTES = 4 << 20  # routes the map interns (shared by records on the same route) at most, in bytes
_LEG = 64  # and each leg of a `put` record beyond its characters: its task id's own string, its slots in the legs tuple
# (tracemalloc: a record held 333-824 B where 240 B beyond its characters were counted, and a fan-out's aggregate 4 KiB
# more than its length, orjson's buffer (`_kept`); with these a map at its budget holds 0.56-0.91 of it in memory, by
# how full its dicts' tables are: tests/gateway/test_task_map.py)
_MESSAGE_IDS = ("messageId", "role", "contextId", "taskId")


def stored(aggregate: dict[str, Any]) -> dict[str, Any]:
    """An aggregate as the map keeps it: its history's messages reduced to their ids (the request's parts, up to
    the body cap, are not kept for a later GetTask)."""
    history = aggregate.get("history")
    if not isinstance(history, list) or not history:
        return aggregate
    light = [{k: m[k] for k in _MESSAGE_IDS if k in m} | {"parts": []} if isinstance(m, dict) else {} for m in history]
    return {**aggregate, "history": light}


class TaskRecord:
    """What the gateway remembers of one of its tasks (decoded from its compact row on demand)."""

    __slots__ = ("task_id", "legs", "route", "_aggregate", "owner")

    def __init__(self, task_id: str, legs: Sequence[DownstreamTask], aggregate: dict[str, Any] | None = None,
                 route: list[dict[str, Any]] | None = None, owner: str | None = None) -> None:
        self.task_id = task_id
        self.legs = list(legs)
        self.route: list[dict[str, Any]] = route if route is not None else []
        self._aggregate = aggregate
        self.owner = owner  # the client that created the task (None: no identity, auth off)

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

    @property
    def context_id(self) -> str | None:
        """The task's context: the aggregate's, else its one leg's."""
        if self._aggregate is not None:
            ctx = self._aggregate.get("contextId")
            return ctx if isinstance(ctx, str) else None
        return self.legs[0].context_id if len(self.legs) == 1 else None


class TaskMap:
    """Bounded map of task records: oldest forgotten first, past `max_bytes`, `max_age_s` or `capacity`."""

    def __init__(self, capacity: int = 100_000, *, max_bytes: int = 16 << 20, max_age_s: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic, max_bytes_per_owner: int | None = 4 << 20) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.max_bytes_per_owner = max_bytes_per_owner  # None: owners share `max_bytes` alone
        self._by_owner: dict[str, dict[str, None]] = {}  # owner -> its task ids, oldest first
        self._owner_bytes: dict[str, int] = {}
        self.max_age_s = max_age_s
        self.clock = clock
        self.bytes = 0
        self._rows: OrderedDict[str, _Row] = OrderedDict()
        self._routes: dict[bytes, bytes] = {}  # identical routes share one bytes object
        self._routes_bytes = 0  # ... of at most ROUTES_BYTES in all
        self._contexts: dict[str, tuple[str | None, int]] = {}  # context id -> (owner, live records in it)
        self._owned: dict[tuple[str, str], int] = {}  # (owner, agent) -> live single-agent records (ListTasks totals)
        self._age_check_at = float("-inf")  # no row can be past max_age_s before then: `put` skips `_expire`

    def put(self, record: TaskRecord) -> None:
        legs: tuple[str, ...] = ()
        context = record.context_id
        size = _OVERHEAD + 2 * len(record.task_id) + len(context or "")  # a client's context id: any length it likes
        for d in record.legs:
            legs += (d.agent, d.task_id)
            size += _LEG + len(d.agent) + len(d.task_id)
        agg = orjson.dumps(stored(record.aggregate)) if record.aggregate is not None else None
        self._store(record.task_id, legs, record.route, agg, size, record.owner, context)

    def put_leg(self, task_id: str, agent: str, context_id: str | None, route: list[dict[str, Any]] | bytes,
                owner: str | None) -> None:
        """`put` of the commonest record, an agent's own task (one leg, no aggregate), without building it."""
        size = _OVERHEAD + 3 * len(task_id) + len(agent) + len(context_id or "")
        self._store(task_id, (agent, task_id), route, None, size, owner, context_id)

    def _store(self, task_id: str, legs: tuple[str, ...], route_doc: list[dict[str, Any]] | bytes, agg: bytes | None,
               size: int, owner: str | None, context: str | None, at: float | None = None) -> None:
        """`at`: when the record was made on this map's clock (a record adopted from another gateway keeps its age)."""
        route = route_doc if isinstance(route_doc, bytes) else orjson.dumps(route_doc)
        routes = self._routes
        shared = routes.get(route)
        new = shared is None
        if shared is None:  # identical routes share one bytes object, right-sized (`kept`: orjson's own holds 4 KiB)
            if len(routes) >= 4096 or self._routes_bytes + len(route) > ROUTES_BYTES:
                routes.clear()
                self._routes_bytes = 0
            shared = kept(route)
            routes[shared] = shared
            self._routes_bytes += len(shared)
        route = shared
        if agg is None:  # the record that brings a route pays for it; the others share it, mostly (a client's routes
            size += len(route) if new else len(route) // 8  # of 64 parts of its own media types, ~22 KB each, all
            # new, were counted an eighth: S17-3)
        else:
            agg = kept(agg)
            size += len(agg) + len(route)
        now = self.clock()
        rows = self._rows
        old = rows.pop(task_id, None)
        if old is not None:
            self._forget(task_id, old)
        rows[task_id] = (legs, route, agg, now if at is None else min(at, now), size, owner, context)
        self.bytes += size
        if context is not None:
            held = self._contexts.get(context)
            self._contexts[context] = (owner, 1) if held is None else (held[0], held[1] + 1)  # a context keeps its
            # first owner while it has records
        if owner is not None and agg is None and len(legs) == 2:
            key = (owner, legs[0])
            self._owned[key] = self._owned.get(key, 0) + 1
        if owner is not None:
            self._by_owner.setdefault(owner, {})[task_id] = None
            mine = self._owner_bytes[owner] = self._owner_bytes.get(owner, 0) + size
            if self.max_bytes_per_owner is not None and mine > self.max_bytes_per_owner:
                self._expire_owner(owner)
        if len(rows) > self.capacity or self.bytes > self.max_bytes or now >= self._age_check_at:
            self._expire(now)

    def _forget(self, task_id: str, row: _Row) -> None:
        """Account for a row leaving the map (its bytes, its context's count, its owner's count and bytes)."""
        self.bytes -= row[4]
        context, owner, legs = row[6], row[5], row[0]
        if owner is not None:
            mine = self._by_owner.get(owner)
            if mine is not None:
                mine.pop(task_id, None)
            if mine:
                self._owner_bytes[owner] = self._owner_bytes.get(owner, 0) - row[4]
            else:  # its last record: nothing left to count (an owner costs nothing once it holds no record)
                self._by_owner.pop(owner, None)
                self._owner_bytes.pop(owner, None)
        if context is not None:
            held = self._contexts.get(context)
            if held is not None:
                if held[1] <= 1:
                    del self._contexts[context]
                else:
                    self._contexts[context] = (held[0], held[1] - 1)
        if owner is not None and row[2] is None and len(legs) == 2:
            key = (owner, legs[0])
            left = self._owned.get(key, 0) - 1
            if left > 0:
                self._owned[key] = left
            else:
                self._owned.pop(key, None)

    def _expire_owner(self, owner: str) -> list[str]:
        """Forget `owner`'s oldest records until it is within its budget again (its newest is kept); the ids forgotten."""
        assert self.max_bytes_per_owner is not None
        mine = self._by_owner[owner]
        gone = []
        while self._owner_bytes.get(owner, 0) > self.max_bytes_per_owner and len(mine) > 1:
            task_id = next(iter(mine))
            self._forget(task_id, self._rows.pop(task_id))
            gone.append(task_id)
        return gone

    def held_by(self, owner: str) -> int:
        """The bytes `owner`'s records are counted at."""
        return self._owner_bytes.get(owner, 0)

    def _expire(self, now: float) -> None:
        rows = self._rows
        while rows:
            _, row = next(iter(rows.items()))
            if len(rows) <= self.capacity and self.bytes <= self.max_bytes and now - row[3] <= self.max_age_s:
                # the oldest row is young enough: none is due before it is (a later look at an older-than-needed
                # time only checks again)
                self._age_check_at = row[3] + self.max_age_s
                return
            self._forget(*rows.popitem(last=False))
        self._age_check_at = now + self.max_age_s  # empty: nothing can be due before a row put now is

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
            del self._rows[task_id]
            self._forget(task_id, row)
            return None
        legs, route, agg, _, _, owner, context = row
        single = agg is None and len(legs) == 2
        return TaskRecord(task_id, [DownstreamTask(legs[i], legs[i + 1], context if single else None)
                                    for i in range(0, len(legs), 2)],
                          aggregate=orjson.loads(agg) if agg is not None else None, route=orjson.loads(route), owner=owner)

    def owner_of(self, task_id: str) -> tuple[bool, str | None]:
        """(known, owner) of a task id, without decoding its record."""
        row = self._rows.get(task_id)
        if row is None or self.clock() - row[3] > self.max_age_s:
            return False, None
        return True, row[5]

    def context_owner(self, context_id: str) -> tuple[bool, str | None]:
        """(known, owner) of a context id: the client whose task first used it, while any task in it is remembered."""
        held = self._contexts.get(context_id)
        return (False, None) if held is None else (True, held[0])

    def owned(self, owner: str, agents: Iterable[str]) -> int:
        """How many single-agent tasks of `owner` on `agents` the map remembers."""
        return sum(self._owned.get((owner, a), 0) for a in agents)

    def update(self, record: TaskRecord) -> None:
        """Store a record read with `get` and changed (a fan-out's refreshed aggregate) without renewing its age."""
        row = self._rows.get(record.task_id)
        if row is None:
            return
        agg = kept(orjson.dumps(stored(record.aggregate))) if record.aggregate is not None else None
        size = row[4] - (len(row[2]) if row[2] else 0) + (len(agg) if agg else 0)
        self.bytes += size - row[4]
        owner = row[5]
        if owner is not None:
            self._owner_bytes[owner] = self._owner_bytes.get(owner, 0) + size - row[4]
        self._rows[record.task_id] = (row[0], row[1], agg, row[3], size, row[5], row[6])

    def discard(self, task_id: str) -> None:
        """Forget a record (another gateway of the cluster dropped it)."""
        row = self._rows.pop(task_id, None)
        if row is not None:
            self._forget(task_id, row)

    async def fetch(self, task_id: str) -> None:
        """Before a lookup of a task this map may not hold: a shared map reads it from the cluster (here: nothing)."""

    async def fetch_context(self, context_id: str) -> None:
        """Before a context's owner is looked up: a shared map may read it from the cluster (here: nothing)."""

    async def sync(self) -> None:
        """Before reading what every gateway holds (ListTasks' totals): a shared map catches up (here: nothing)."""

    async def flush(self, task_id: str) -> None:
        """Before answering with a task just recorded: a shared map waits until the cluster holds it (here: nothing)."""

    def __len__(self) -> int:
        return len(self._rows)
