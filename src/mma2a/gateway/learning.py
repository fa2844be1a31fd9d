"""Learning from outcomes: the decisions learned routing made, the ratings clients give their tasks, the evidence.

The routing engine stays pure (routing/learned.py): it reads an immutable `Evidence`. This module
keeps the mutable side for one gateway: each learned decision's parts (key, vector, agent) by the
gateway task id, bounded and oldest out; `rate` turns a client's rating of a task into ratings of
its parts and publishes the next `Evidence`, which the next decision reads (one reference swap on the
event loop). Per client, ratings are limited to `rate_per_s` with a burst of `burst`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

from ..errors import RateLimited
from ..routing import NO_EVIDENCE, Evidence, EvidenceIndex, RouteDecision
from ..routing.learned import part_key
from ..view import MessageView


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


def learned(actions: tuple[str, ...]) -> bool:
    """Was a part routed by a learning action (`capability:learned`, `learn:...`)?"""
    return any(a == "capability:learned" or a.startswith("learn:") for a in actions)


class Learner:
    """Learned decisions by task, ratings in, evidence out."""

    def __init__(self, *, max_tasks: int = 100_000, max_cells: int = 4096, max_owners: int = 256,
                 rate_per_s: float = 20.0, burst: float = 100.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.index = EvidenceIndex(max_cells=max_cells, max_owners=max_owners)
        self.evidence: Evidence = NO_EVIDENCE  # what the next decision reads
        self.max_tasks = max_tasks
        self.rate_per_s, self.burst = rate_per_s, burst
        self.clock = clock
        self._tasks: OrderedDict[str, LearnedTask] = OrderedDict()
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # owner -> (tokens, at)

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
        self._tasks[task_id] = LearnedTask(view.message_id, owner or "", tuple(parts))
        self._tasks.move_to_end(task_id)
        while len(self._tasks) > self.max_tasks:
            self._tasks.popitem(last=False)

    def task(self, task_id: str) -> LearnedTask | None:
        return self._tasks.get(task_id)

    def admit(self, owner: str) -> None:
        """Take one of `owner`'s ratings from its bucket, or raise `RateLimited` (HTTP 429, with Retry-After)."""
        now = self.clock()
        tokens, at = self._buckets.pop(owner, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate_per_s)
        if tokens < 1.0:
            self._buckets[owner] = (tokens, now)
            wait = (1.0 - tokens) / self.rate_per_s
            raise RateLimited(f"feedback: at most {self.rate_per_s:g} ratings a second per client "
                              f"(burst {self.burst:g}); retry in {wait:.2f} s", retry_after=wait)
        self._buckets[owner] = (tokens - 1.0, now)
        while len(self._buckets) > 65_536:  # the least recently rating clients' buckets go (they were full again)
            self._buckets.popitem(last=False)

    def rate(self, task_id: str, owner: str | None, agent: str, score: float) -> int:
        """A rating of `agent`'s answer on a task: taken in for each of its parts that `agent` took by learning;
        return how many (0: the task was not routed by learning, or is no longer remembered)."""
        found = self._tasks.get(task_id)
        if found is None:
            return 0
        n = 0
        for part in found.parts:
            if part.agent == agent:
                self.index.rate(part.key, part.vector, owner or "", agent, score)
                n += 1
        if n:
            self.evidence = self.index.freeze()
        return n
