"""Learning from outcomes: the decisions learned routing made, the ratings clients give their tasks, the evidence.

The routing engine stays pure (routing/learned.py): it reads an immutable `Evidence`. This module
keeps the mutable side for one gateway: each learned decision's parts (key, vector, agent) by the
gateway task id, bounded and oldest out; `rate` turns a client's rating of a task into ratings of
its parts and publishes the next `Evidence`, which the next decision reads (one reference swap on the
event loop). Per client, ratings are limited to `rate_per_s` with a burst of `burst`.

Outcomes count as ratings too: a learned task that comes back failed or rejected (an agent's error, a
timeout, a refusal: `outcome`) rates each agent whose leg failed 0, as its owner would.

In a cluster, a `LearnJournal` (cluster/learning.py) shares every noted task and every rating with the
other gateways, which take them in with `take`: each gateway learns from the cluster's whole history.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, Protocol

from ...errors import RateLimited
from ...ext import EXTENSION_URI
from ...routing import NO_EVIDENCE, Evidence, EvidenceIndex, RouteDecision
from ...routing.learned import part_key
from ...view import MessageView
from ..access.clients import RateLimiter


class LearnedPart(NamedTuple):
    """One part a learned decision routed: what makes it similar to others, and the agent that took it."""

    index: int  # type: ignore[assignment]
    key: tuple[Any, ...]
    vector: Any
    agent: str


class LearnedTask(NamedTuple):
    message_id: str
    owner: str
    parts: tuple[LearnedPart, ...]


PART_BYTES = 224
"""What a remembered learned part costs besides its vector's bytes (measured with tracemalloc: a part with a 384-float
vector, 1,758 bytes)."""


def task_bytes(task: LearnedTask) -> int:
    """The memory a remembered learned task holds: its parts and their sentence vectors."""
    return sum(PART_BYTES + int(getattr(p.vector, "nbytes", 0)) for p in task.parts)


WAITING = 10_000
"""In a cluster: tasks whose ratings wait for their note (the oldest out past it; a task never routed by learning
is rated into the history only, and its waiting rating goes out this way)."""


class LearnJournal(Protocol):
    """Where a gateway's learning goes besides its own index: the other gateways of its cluster."""

    def noted(self, task_id: str, task: LearnedTask) -> None:
        """A task routed by learning (its parts, for the ratings that may come to any gateway)."""

    def rated(self, task_id: str, owner: str, agent: str, score: float) -> None:
        """A rating (or a failed outcome, 0) of `agent` on a task, as this gateway took it."""


Noted = tuple[str, LearnedTask]
Rated = tuple[str, str, str, float]  # (task id, owner, agent, score)

FAILED_STATES = frozenset({"TASK_STATE_FAILED", "TASK_STATE_REJECTED"})


def failed_agents(task: Mapping[str, Any]) -> set[str] | None:
    """The agents whose legs of an answered task failed (an error, a timeout, a failed or rejected task), from the
    task's `downstream` legs; None: the task's own state failed with no legs named (every agent of it failed)."""
    meta = (task.get("metadata") or {}).get(EXTENSION_URI) or {}
    legs = meta.get("downstream") if isinstance(meta, Mapping) else None
    if isinstance(legs, list) and legs:
        return {str(leg.get("agent")) for leg in legs if isinstance(leg, Mapping) and leg.get("state") in FAILED_STATES}
    state = (task.get("status") or {}).get("state")
    return None if state in FAILED_STATES else set()


def learned(actions: tuple[str, ...]) -> bool:
    """Was a part routed by a learning action (`capability:learned`, `learn:...`)?"""
    return any(a == "capability:learned" or a.startswith("learn:") for a in actions)


class Learner:
    """Learned decisions by task, ratings in, evidence out."""

    def __init__(self, *, max_tasks: int = 100_000, max_bytes: int = 128 << 20, max_cells: int = 4096,
                 max_owners: int = 256, rate_per_s: float = 20.0, burst: float = 100.0,
                 clock: Callable[[], float] = time.monotonic, journal: LearnJournal | None = None) -> None:
        self.index = EvidenceIndex(max_cells=max_cells, max_owners=max_owners)
        self.evidence: Evidence = NO_EVIDENCE  # what the next decision reads
        self.max_tasks = max_tasks
        self.max_bytes = max_bytes  # the remembered tasks' parts and vectors (a message may have 64 parts)
        self.bytes = 0
        self._owner_bytes: dict[str, int] = {}
        self.rate_per_s, self.burst = rate_per_s, burst
        self.clock = clock
        self.journal = journal  # a cluster's: what this gateway notes and takes goes to the others
        self._tasks: OrderedDict[str, LearnedTask] = OrderedDict()
        # each client's noted tasks, oldest first: one client keeps at most a quarter of `max_tasks` (its own oldest
        # go past it), so a flood of learned messages cannot make every other client's ratings learn nothing
        self._by_owner: dict[str, OrderedDict[str, None]] = {}
        # in a cluster: ratings of tasks whose note has not reached this gateway yet, taken in when it does
        self._waiting: OrderedDict[str, list[tuple[str, str, float]]] = OrderedDict()
        # each owner's ratings (in a cluster, charged with what it rated on the other gateways); the least recently
        # rating owners' buckets go past 65,536 (they were full again)
        self.ratings = RateLimiter(rate_per_s, burst, capacity=65_536)

    def note(self, task_id: str, view: MessageView, decision: RouteDecision, owner: str | None) -> None:
        """Remember the learned parts of a decision whose task is `task_id` (no-op when none was learned)."""
        parts = []
        by_index = {p.index: p for p in view.parts}
        for route in decision.parts:
            if route.targets and learned(route.actions):
                p = by_index.get(route.index)
                if p is not None:
                    parts.append(LearnedPart(route.index, part_key(p), p.embedding, route.targets[0].agent))
        if not parts:
            return
        task = LearnedTask(view.message_id, owner or "", tuple(parts))
        self._keep(task_id, task)
        if self.journal is not None:
            self.journal.noted(task_id, task)

    def _keep(self, task_id: str, task: LearnedTask) -> None:
        old = self._tasks.pop(task_id, None)
        if old is not None:
            self._forget(task_id, old)
        cost = task_bytes(task)
        self._tasks[task_id] = task
        self.bytes += cost
        if task.owner:  # anonymous ("": auth off) is everyone: the global bounds only
            mine = self._by_owner.setdefault(task.owner, OrderedDict())
            mine[task_id] = None
            self._owner_bytes[task.owner] = self._owner_bytes.get(task.owner, 0) + cost
            while len(mine) > 1 and (len(mine) > max(1, self.max_tasks // 4)
                                     or self._owner_bytes[task.owner] > self.max_bytes // 4):
                gone = next(iter(mine))
                self._forget(gone, self._tasks.pop(gone))
        while len(self._tasks) > self.max_tasks or (self.bytes > self.max_bytes and len(self._tasks) > 1):
            gone, was = self._tasks.popitem(last=False)
            self._forget(gone, was)

    def _forget(self, task_id: str, task: LearnedTask) -> None:
        """The bookkeeping of a task taken out of `_tasks`: its bytes, its owner's index."""
        cost = task_bytes(task)
        self.bytes -= cost
        mine = self._by_owner.get(task.owner)
        if mine is not None and mine.pop(task_id, 0) is None:
            left = self._owner_bytes.pop(task.owner, 0) - cost
            if mine:
                self._owner_bytes[task.owner] = left
            else:
                del self._by_owner[task.owner]

    def task(self, task_id: str) -> LearnedTask | None:
        return self._tasks.get(task_id)

    def admit(self, owner: str) -> None:
        """Take one of `owner`'s ratings from its bucket, or raise `RateLimited` (HTTP 429, with Retry-After)."""
        wait = self.ratings.take(owner, self.clock())
        if wait is not None:
            raise RateLimited(f"feedback: at most {self.rate_per_s:g} ratings a second per client "
                              f"(burst {self.burst:g}); retry in {wait:.2f} s", retry_after=wait)

    def rate(self, task_id: str, owner: str | None, agent: str, score: float) -> int:
        """A rating of `agent`'s answer on a task: taken in for each of its parts that `agent` took by learning;
        return how many (0: the task was not routed by learning, or is no longer remembered)."""
        n = self._apply(task_id, owner or "", agent, score)
        if n:
            self.evidence = self.index.freeze()
        if self.journal is not None:  # even when not known here: the gateway that routed it knows it
            self.journal.rated(task_id, owner or "", agent, score)
        return n

    def outcome(self, task_id: str, task: Mapping[str, Any], owner: str | None) -> int:
        """A learned task's answer as an outcome: each agent whose leg failed (agent error, timeout, failed or rejected
        task) is rated 0 for the parts it took; return how many parts were rated."""
        found = self._tasks.get(task_id)
        if found is None:
            return 0
        failed = failed_agents(task)
        agents = {p.agent for p in found.parts} if failed is None else failed
        return sum(self.rate(task_id, owner, agent, 0.0) for agent in sorted(agents))

    def failed(self, view: MessageView, decision: RouteDecision, owner: str | None) -> int:
        """A learned message whose only call failed with no task to answer (an agent's error, a timeout, a broken
        answer): each agent of its learned parts rated 0, as a task of its own (`failed:<messageId>`, which no
        client can rate); return how many parts were rated."""
        task_id = f"failed:{view.message_id}"
        self.note(task_id, view, decision, owner)
        found = self._tasks.get(task_id)
        if found is None:
            return 0
        return sum(self.rate(task_id, owner, agent, 0.0) for agent in sorted({p.agent for p in found.parts}))

    def take(self, noted: Iterable[Noted], rated: Iterable[Rated]) -> int:
        """What other gateways of the cluster noted and rated (in their order: notes first); return the parts
        rated. Publishes the next evidence once."""
        n = 0
        for task_id, task in noted:
            self._keep(task_id, task)
            for owner, agent, score in self._waiting.pop(task_id, ()):
                n += self._apply(task_id, owner, agent, score)
        n += sum(self._apply(task_id, owner, agent, score) for task_id, owner, agent, score in rated)
        if n:
            self.evidence = self.index.freeze()
        return n

    def _apply(self, task_id: str, owner: str, agent: str, score: float) -> int:
        found = self._tasks.get(task_id)
        if found is None:
            if self.journal is not None:  # its note may still be on its way from the gateway that routed it
                waiting = self._waiting.setdefault(task_id, [])
                if len(waiting) < 16:  # a client rating one task again and again: its first 16
                    waiting.append((owner, agent, score))
                self._waiting.move_to_end(task_id)
                while len(self._waiting) > WAITING:
                    self._waiting.popitem(last=False)
            return 0
        n = 0
        for part in found.parts:
            if part.agent == agent:
                self.index.rate(part.key, part.vector, owner, agent, score)
                n += 1
        return n
