"""Cluster mode's learning: every gateway learns from the cluster's whole history of learned tasks and ratings.

Each gateway publishes what its learner notes (a task routed by learning: its parts' keys, vectors and
agents) and takes (a client's rating, a failed outcome) to one JetStream stream, and follows that
stream from its start: a rating given to any gateway, of a task routed by any gateway, reaches every
gateway's index, and a gateway that joins later learns the history the stream still holds (it is
bounded by `MAX_AGE_S` and `MAX_BYTES`, oldest out).

- The request path only appends to a bounded deque (drops counted, never a wait); a publisher task
  sends batches (one JSON document each, serialised off the loop).
- A follower decodes each batch off the loop and hands it to `Learner.take` on the loop (notes first,
  then ratings; one evidence published per batch). A gateway skips the batches it published itself in
  this run (it took them in already); after a restart its own earlier batches are replayed like any.
- A rating that reaches a gateway before the note of its task (the note still queued at the gateway
  that routed it) waits in the learner for the note (`Learner.take`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
from collections import deque
from typing import Any

import orjson
from nats.js import api

from ..gateway.state.learning import LearnedPart, LearnedTask, Noted, Rated
from ..serving import cancel_tasks
from .link import Member, ensure_stream

log = logging.getLogger("mma2a.cluster")
BATCH = 200
QUEUE = 10_000
"""Events waiting to be published; past it new ones are dropped and counted (NATS away for long)."""
MAX_AGE_S = 7 * 24 * 3600.0
"""How long the stream keeps a batch: the history a gateway that joins learns from."""
MAX_BYTES = 256 * 1024 * 1024
"""The stream's size bound (a note with a 384-d vector is ~2.2 kB: ~100,000 learned tasks)."""


def learning_stream(cluster: str) -> str:
    return f"{cluster}_learning".upper()


def _event_of_note(task_id: str, task: LearnedTask) -> dict[str, Any]:
    parts = []
    for p in task.parts:
        vector = None
        if p.vector is not None:
            import numpy as np

            vector = base64.b64encode(np.asarray(p.vector, dtype="<f4").tobytes()).decode()
        parts.append([p.index, list(p.key), vector, p.agent])
    return {"note": task_id, "m": task.message_id, "o": task.owner, "p": parts}


def _key(raw: list[Any]) -> tuple[Any, ...]:
    essence, language, objects, codes, model = raw
    return (str(essence), language, tuple(str(o) for o in objects), bool(codes), model)


def encode(origin: str, batch: list[dict[str, Any]]) -> bytes:
    """One stream message: the events of `batch` (notes with their `LearnedTask`, ratings) published by `origin`."""
    events = [_event_of_note(e["note"], e["task"]) if "note" in e else e for e in batch]
    return orjson.dumps({"from": origin, "events": events})


def decode(data: bytes) -> tuple[str, list[Noted], list[Rated]]:
    """(publisher, notes, ratings) of one stream message; ValueError when it is not one."""
    try:
        doc = orjson.loads(data)
        noted: list[Noted] = []
        rated: list[Rated] = []
        for ev in doc["events"]:
            if "note" in ev:
                parts = []
                for index, key, vector, agent in ev["p"]:
                    vec = None
                    if vector is not None:
                        import numpy as np

                        vec = np.frombuffer(base64.b64decode(vector), dtype="<f4").astype(np.float32)
                    parts.append(LearnedPart(int(index), _key(key), vec, str(agent)))
                noted.append((str(ev["note"]), LearnedTask(str(ev["m"]), str(ev["o"]), tuple(parts))))
            else:
                score = float(ev["s"])
                if not 0.0 <= score <= 1.0:
                    raise ValueError(f"score {score} out of 0..1")
                rated.append((str(ev["rate"]), str(ev["o"]), str(ev["a"]), score))
        return str(doc["from"]), noted, rated
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a learning batch: {exc!r}"[:200]) from None


class ClusterLearning:
    """The `LearnJournal` of a clustered gateway, and the follower that feeds its learner the others' events."""

    def __init__(self, cluster: Member) -> None:
        self.cluster = cluster
        self.instance = secrets.token_hex(8)  # this run's batches: skipped when they come back
        self.published = self.failed = self.dropped = self.taken = 0
        self._queue: deque[dict[str, Any]] = deque()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []

    @property
    def stream(self) -> str:
        return learning_stream(self.cluster.names.cluster)

    @property
    def subject(self) -> str:
        return f"{self.cluster.names.cluster}.learning.{self.cluster.id}"

    # --- the request path (LearnJournal) ----------------------------------------------------
    def noted(self, task_id: str, task: LearnedTask) -> None:
        self._put({"note": task_id, "task": task})

    def rated(self, task_id: str, owner: str, agent: str, score: float) -> None:
        self._put({"rate": task_id, "o": owner, "a": agent, "s": score})

    def _put(self, event: dict[str, Any]) -> None:
        if len(self._queue) >= QUEUE:
            self.dropped += 1
            return
        self._queue.append(event)
        self._wake.set()

    # --- lifecycle -----------------------------------------------------------------------------
    async def setup(self) -> None:
        await ensure_stream(self.cluster.js, self.stream, f"{self.cluster.names.cluster}.learning.>", max_age_s=MAX_AGE_S,
                            max_bytes=MAX_BYTES, replicas=self.cluster.config.replicas)
        self._tasks += [asyncio.create_task(self._publish_loop()), asyncio.create_task(self._follow())]

    async def stop(self) -> None:
        with contextlib.suppress(Exception):  # what is still queued goes out if NATS is there
            await asyncio.wait_for(self._publish_pending(), 5.0)
        await cancel_tasks(self._tasks)

    # --- publishing ---------------------------------------------------------------------------
    async def _publish_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._publish_pending()

    async def _publish_pending(self) -> None:
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
            data = await asyncio.to_thread(encode, self.instance, batch)
            try:
                await self.cluster.js.publish(self.subject, data, stream=self.stream)
                self.published += len(batch)
            except Exception as exc:  # NATS away: the others do not learn these (this gateway did)
                self.failed += len(batch)
                log.warning("learning: %d events not shared: %s", len(batch), exc)

    # --- following the stream into the learner ------------------------------------------------------
    async def _follow(self) -> None:
        sub = await self.cluster.js.subscribe(
            f"{self.cluster.names.cluster}.learning.>", stream=self.stream, ordered_consumer=True,
            deliver_policy=api.DeliverPolicy.ALL)
        learner = self.cluster.gw.learner
        try:
            async for msg in sub.messages:
                try:
                    origin, noted, rated = await asyncio.to_thread(decode, msg.data)
                except ValueError as exc:
                    log.warning("learning: skipped a stream message: %s", exc)
                    continue
                if origin != self.instance:
                    self.taken += learner.take(noted, rated)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
