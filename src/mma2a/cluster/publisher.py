"""A gateway's events published to one JetStream stream in batches, off the request path: what the cluster's
decision history (`history.JetStreamHistory`) and its learning (`learning.ClusterLearning`) share.

The request path only appends to a bounded deque (past `capacity`, the event is dropped and counted: never a
wait). A publisher task sends what is queued in batches of up to `BATCH` events, one stream message each (or as
`messages` divides a batch: the history's, a message per client),
encoded off the loop (`encode`; on it when `encode_on_loop`: a few µs a batch), after gathering for `linger_s` when fewer than a batch are queued. A batch that
NATS does not take is counted as failed (`on_failed`) and said once: the first failure is logged (with why the
stream was refused at start, `refused`, when it was), then failures are only counted until a batch goes out again,
which is logged with how many were lost meanwhile (a stream JetStream refused used to log a warning per batch).
`stop` sends what is still queued (if NATS is there, within 5 s), then cancels the publisher and the subclass's own
tasks.
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
    encode_on_loop = False  # True: `encode` is cheap enough for the loop (a thread's hand-off and GIL cost more)

    def __init__(self, cluster: Member, *, capacity: int, linger_s: float = 0.0) -> None:
        self.cluster = cluster
        self.capacity = capacity
        self.linger_s = linger_s
        self.published = self.failed = self.dropped = 0
        self.refused: str | None = None  # why JetStream refused the stream at start (`link.ensure_stream`), if it did
        self._failing_since: int | None = None  # `failed` when the current run of failures began
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
        """One stream message of `batch` (run in a thread, unless `encode_on_loop`)."""

    def on_dropped(self, count: int) -> None:
        """`count` events dropped (queue full), before they were published."""

    def on_failed(self, count: int, exc: Exception) -> None:
        """`count` events NATS did not take."""

    def messages(self, batch: list[E]) -> list[tuple[str, list[E], dict[str, str] | None]]:
        """The stream messages of a batch: each its subject, its events and its headers (by default one message on
        `subject`)."""
        return [(self.subject, batch, None)]

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
            messages = self.messages(batch)
            if self.encode_on_loop:
                datas = [self.encode(events) for _, events, _ in messages]
            else:
                datas = await asyncio.to_thread(lambda: [self.encode(events) for _, events, _ in messages])
            # a batch's messages sent at once (their acknowledgements awaited together, not one round trip each)
            results = await asyncio.gather(*(
                self.cluster.js.publish(subject, data, stream=self.stream, headers=headers)
                for (subject, _, headers), data in zip(messages, datas, strict=True)), return_exceptions=True)
            for (_, events, _), result in zip(messages, results, strict=True):
                if isinstance(result, BaseException):
                    if isinstance(result, asyncio.CancelledError):
                        raise result
                    self._failure(len(events), result if isinstance(result, Exception) else Exception(str(result)))
                    continue
                self.published += len(events)
                if self._failing_since is not None:
                    log.warning("%s: publishing to the stream %s again; %d events were not published", self.kind,
                                self.stream, self.failed - self._failing_since)
                    self._failing_since = None

    def _failure(self, count: int, exc: Exception) -> None:
        """`count` events NATS did not take (away, or the stream refused): counted, and said once."""
        if self._failing_since is None:
            self._failing_since = self.failed
            log.warning("%s: %d events not published to the stream %s: %s; %s", self.kind, count,
                        self.stream, exc or type(exc).__name__,
                        "JetStream refused the stream at start (logged then, naming the setting to lower); "
                        "further failures are counted" if self.refused else
                        "further failures are counted, and said once publishing works again")
        self.failed += count
        self.on_failed(count, exc)
