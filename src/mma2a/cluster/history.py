"""Cluster mode's decision history: every gateway publishes its decisions to one JetStream stream, and every
gateway indexes the whole stream into its own SQLite file, so `/admin/history` on any gateway answers for all.

The pipeline's `record()` only appends to a bounded deque (drops are counted, never a
wait). A publisher task sends batches (one JSON document per batch, serialised off the
loop), gathering for `linger_s` first: at thousands of decisions a second one stream message (and
one read by every follower) carries hundreds of them, not one or two. A follower task reads the
stream from the position the local file last saved and hands the rows to the local writer
thread, which saves the position in the same transaction — so a restarted gateway resumes
exactly where its file stops.

The workers of `serve --workers N` share one `data_dir`, so one history file: only the first worker
follows the stream into it (`follow=False` for the others: the same rows indexed N times into one
file cost N times the CPU and contend for its lock); every worker publishes and reads the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from nats.js import api

from ..gateway.history.record import DecisionRecord, rows_from_json, rows_to_json, to_row
from ..serving import cancel_tasks
from .link import Member, ensure_stream

if TYPE_CHECKING:
    from ..gateway.history import HistoryRecorder

log = logging.getLogger("mma2a.cluster")
BATCH = 200
LINGER_S = 0.05  # how long the publisher gathers decisions before it sends a batch short of BATCH


class JetStreamHistory:
    """The `HistorySink` of a clustered gateway."""

    def __init__(self, cluster: Member, local: HistoryRecorder, *, capacity: int, max_age_s: float,
                 max_bytes: int, follow: bool = True, linger_s: float = LINGER_S) -> None:
        self.cluster, self.local = cluster, local
        self.follow, self.linger_s = follow, linger_s
        self.capacity, self.max_age_s, self.max_bytes = capacity, max_age_s, max_bytes
        self.dropped = self.published = self.failed = 0
        self._queue: deque[DecisionRecord] = deque()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []

    @property
    def stream(self) -> str:
        return f"{self.cluster.names.cluster}_history".upper()

    @property
    def subject(self) -> str:
        return f"{self.cluster.names.cluster}.history.{self.cluster.id}"

    # --- the request path -----------------------------------------------------------------
    def record(self, entry: DecisionRecord) -> None:
        if len(self._queue) >= self.capacity:
            self.dropped += 1
            self.cluster.gw.metrics.history.labels("dropped").inc()
            return
        self._queue.append(entry)
        self._wake.set()

    # --- lifecycle --------------------------------------------------------------------------
    async def setup(self) -> None:
        await ensure_stream(self.cluster.js, self.stream, f"{self.cluster.names.cluster}.history.>",
                            max_age_s=self.max_age_s, max_bytes=self.max_bytes, replicas=self.cluster.config.replicas)
        self._tasks.append(asyncio.create_task(self._publish_loop()))
        if self.follow:
            self._tasks.append(asyncio.create_task(self._follow()))

    async def stop(self) -> None:
        with contextlib.suppress(Exception):  # what is still queued goes out if NATS is there
            await asyncio.wait_for(self._publish_pending(), 5.0)
        await cancel_tasks(self._tasks)

    # --- publishing ---------------------------------------------------------------------------
    async def _publish_loop(self) -> None:
        while True:
            await self._wake.wait()
            if len(self._queue) < BATCH:
                await asyncio.sleep(self.linger_s)  # a batch gathers: one message per many decisions
            self._wake.clear()
            await self._publish_pending()

    async def _publish_pending(self) -> None:
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
            data = await asyncio.to_thread(lambda: rows_to_json([to_row(e) for e in batch]))
            try:
                await self.cluster.js.publish(self.subject, data, stream=self.stream)
                self.published += len(batch)
            except Exception as exc:  # NATS away: these decisions are lost for the history, and counted
                self.failed += len(batch)
                self.cluster.gw.metrics.history.labels("dropped").inc(len(batch))
                log.warning("history: %d decisions not published: %s", len(batch), exc)

    # --- following the stream into the local file -------------------------------------------------
    async def _follow(self) -> None:
        start = await asyncio.to_thread(self.local.store.position) + 1
        sub = await self.cluster.js.subscribe(
            f"{self.cluster.names.cluster}.history.>", stream=self.stream, ordered_consumer=True,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, config=api.ConsumerConfig(opt_start_seq=start))
        try:
            async for msg in sub.messages:
                try:
                    rows = await asyncio.to_thread(rows_from_json, msg.data)
                except ValueError as exc:
                    log.warning("history: skipped a stream message: %s", exc)
                    rows = []
                position = msg.metadata.sequence.stream
                while not self.local.ingest(rows, position):  # the writer is behind: wait, never drop
                    await asyncio.sleep(0.05)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
