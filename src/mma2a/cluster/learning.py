"""Cluster mode's learning: every gateway learns from the cluster's whole history of learned tasks and ratings.

Each gateway publishes what its learner notes (a task routed by learning: its parts' keys, vectors and
agents) and takes (a client's rating, a failed outcome) to one JetStream stream, and follows that
stream from its start: a rating given to any gateway, of a task routed by any gateway, reaches every
gateway's index, and a gateway that joins later learns the history the stream still holds (it is
bounded by `MAX_AGE_S` and `cluster.learning_stream_bytes`, oldest out).

- The request path only appends to a bounded deque (drops counted, never a wait); a publisher task
  sends batches (one JSON document each, serialised off the loop): `publisher.StreamPublisher`.
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
from typing import Any

import orjson
from nats.js import api

from ..gateway.state.learning import LearnedPart, LearnedTask, Noted, Rated
from .link import Member, ensure_stream
from .publisher import StreamPublisher

log = logging.getLogger("mma2a.cluster")
QUEUE = 10_000
"""Events waiting to be published; past it new ones are dropped and counted (NATS away for long)."""
MAX_AGE_S = 7 * 24 * 3600.0
"""How long the stream keeps a batch: the history a gateway that joins learns from."""


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


class ClusterLearning(StreamPublisher[dict[str, Any]]):
    """The `LearnJournal` of a clustered gateway, and the follower that feeds its learner the others' events."""

    kind = "learning"

    def __init__(self, cluster: Member) -> None:
        super().__init__(cluster, capacity=QUEUE)
        self.instance = secrets.token_hex(8)  # this run's batches: skipped when they come back
        self.taken = 0

    # --- the request path (LearnJournal) ----------------------------------------------------
    def noted(self, task_id: str, task: LearnedTask) -> None:
        self.put({"note": task_id, "task": task})

    def rated(self, task_id: str, owner: str, agent: str, score: float) -> None:
        self.put({"rate": task_id, "o": owner, "a": agent, "s": score})

    def encode(self, batch: list[dict[str, Any]]) -> bytes:
        return encode(self.instance, batch)

    # --- lifecycle -----------------------------------------------------------------------------
    async def setup(self) -> None:
        c = self.cluster.config
        self.refused = await ensure_stream(self.cluster.js, self.stream, self.subjects, max_age_s=MAX_AGE_S,
                                           max_bytes=c.learning_stream_bytes, replicas=c.replicas,
                                           setting="cluster.learning_stream_bytes", sizing=self.cluster.sizing)
        self.start_publishing()
        self._tasks.append(asyncio.create_task(self._follow()))

    # --- following the stream into the learner ------------------------------------------------------
    async def _follow(self) -> None:
        sub = await self.cluster.js.subscribe(
            self.subjects, stream=self.stream, ordered_consumer=True,
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
