"""A gateway's events published to one JetStream stream in batches, off the request path: what the cluster's
decision history (`history.JetStreamHistory`) and its learning (`learning.ClusterLearning`) share.

The request path only appends to a bounded deque (past `capacity`, the event is dropped and counted: never a
wait). A publisher task sends what is queued in batches of up to `BATCH` events, one stream message each,
encoded off the loop (`encode`), after gathering for `linger_s` when fewer than a batch are queued. A batch that
NATS does not take is counted as failed (`on_failed`). `stop` sends what is still queued (if NATS is there, within
5 s), then cancels the publisher and the subclass's own tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections import deque
from typing import Any, Generic, TypeVar

from ..serving import cancel_tasks
from .link import Member

log = logging.getLogger("mma2a.cluster")
E = TypeVar("E")
BATCH = 200
"""Events in one stream message at most."""
STOP_FLUSH_S = 5.0
"""How long `stop` gives what is still queued to go out."""


class StreamPublisher(ABC, Generic[E]):
    """Batches of events of type `E` to the subject `<cluster>.<kind>.<member id>` of the stream `<CLUSTER>_<KIND>`."""

    kind = ""  # the stream's and subjects' middle name: "history", "learning"

    def __init__(self, cluster: Member, *, capacity: int, linger_s: float = 0.0) -> None:
        self.cluster = cluster
        self.capacity = capacity
        self.linger_s = linger_s
        self.published = self.failed = self.dropped = 0
        self._queue: deque[E] = deque()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []

    @property
    def stream(self) -> str:
        return f"{self.cluster.names.cluster}_{self.kind}".upper()

    @property
    def subject(self) -> str:
        return f"{self.cluster.names.cluster}.{self.kind}.{self.cluster.id}"

    @property
    def subjects(self) -> str:
        """Every gateway's subjects of this stream."""
        return f"{self.cluster.names.cluster}.{self.kind}.>"

    # --- the request path ---------------------------------------------------------------------
    def put(self, event: E) -> None:
        if len(self._queue) >= self.capacity:
            self.dropped += 1
            self.on_dropped(1)
            return
        self._queue.append(event)
        self._wake.set()

    # --- what a subclass says -------------------------------------------------------------------
    @abstractmethod
    def encode(self, batch: list[E]) -> bytes:
        """One stream message of `batch` (run in a thread)."""

    def on_dropped(self, count: int) -> None:
        """`count` events dropped (queue full), before they were published."""

    def on_failed(self, count: int, exc: Exception) -> None:
        """`count` events NATS did not take."""

    # --- lifecycle --------------------------------------------------------------------------------
    def start_publishing(self) -> None:
        self._tasks.append(asyncio.create_task(self._publish_loop()))

    async def stop(self) -> None:
        with contextlib.suppress(Exception):  # what is still queued goes out if NATS is there
            await asyncio.wait_for(self._publish_pending(), STOP_FLUSH_S)
        await cancel_tasks(self._tasks)

    async def _publish_loop(self) -> None:
        while True:
            await self._wake.wait()
            if self.linger_s and len(self._queue) < BATCH:
                await asyncio.sleep(self.linger_s)  # a batch gathers: one message per many events
            self._wake.clear()
            await self._publish_pending()

    async def _publish_pending(self) -> None:
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
            data = await asyncio.to_thread(self.encode, batch)
            try:
                await self.cluster.js.publish(self.subject, data, stream=self.stream)
                self.published += len(batch)
            except Exception as exc:  # NATS away: counted, and said
                self.failed += len(batch)
                self.on_failed(len(batch), exc)
