"""Cluster mode's decision history: every gateway publishes its decisions to one JetStream stream, and every
gateway indexes the whole stream into its own SQLite file, so `/admin/history` on any gateway answers for all.

The pipeline's `record()` makes the decision's row (alike decisions' shapes memoised, as the local recorder
does) and appends it to a bounded deque (drops are counted, never a wait). A publisher task
(`publisher.StreamPublisher`) sends batches (one JSON document per batch), gathering for `linger_s` first: at
thousands of decisions a second one stream message (and one read by every follower) carries hundreds of them, not
one or two. A follower task reads the stream from the position the local file last saved and hands each message as
it came to the local recorder, whose writer process reads its rows and saves the position in the same transaction —
so a restarted gateway resumes exactly where its file stops.

The workers of `serve --workers N` share one `data_dir`, so one history file: only the first worker
follows the stream into it (`follow=False` for the others: the same rows indexed N times into one
file cost N times the CPU and contend for its lock); every worker publishes and reads the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from nats.js import api

from ..gateway.history.record import DecisionRecord, Row, ShapeMemo, rows_to_json, to_row
from .link import Member, ensure_stream
from .publisher import StreamPublisher

if TYPE_CHECKING:
    from ..gateway.history import HistoryRecorder

log = logging.getLogger("mma2a.cluster")
LINGER_S = 0.05  # how long the publisher gathers decisions before it sends a batch short of `publisher.BATCH`


class JetStreamHistory(StreamPublisher[Row]):
    """The `HistorySink` of a clustered gateway."""

    kind = "history"
    encode_on_loop = True  # rows made as decisions are recorded: a batch of 200 is ~80 µs of orjson

    def __init__(self, cluster: Member, local: HistoryRecorder, *, capacity: int, max_age_s: float,
                 max_bytes: int, follow: bool = True, linger_s: float = LINGER_S) -> None:
        super().__init__(cluster, capacity=capacity, linger_s=linger_s)
        self.local = local
        self.follow = follow
        self.max_age_s, self.max_bytes = max_age_s, max_bytes
        self._memo = ShapeMemo()  # the request path's (the event loop's thread), as the local recorder's

    # --- the request path -----------------------------------------------------------------
    def record(self, entry: DecisionRecord) -> None:
        """The decision's row, made at once with the shapes of alike decisions memoised (~2 µs; made later on a thread
        without the memo it cost ~10 µs, under the loop's GIL), queued for the publisher."""
        try:
            row = to_row(entry, self._memo)
        except Exception:  # features no JSON takes: this decision is lost, and counted
            log.exception("history: a decision not recorded")
            self.dropped += 1
            self.on_dropped(1)
            return
        self.put(row)

    def encode(self, batch: list[Row]) -> bytes:
        return rows_to_json(batch)

    def on_dropped(self, count: int) -> None:
        self.cluster.gw.metrics.history.labels("dropped").inc(count)

    def on_failed(self, count: int, exc: Exception) -> None:  # these decisions are lost for the history, and counted
        self.cluster.gw.metrics.history.labels("dropped").inc(count)

    # --- lifecycle --------------------------------------------------------------------------
    async def setup(self) -> None:
        self.refused = await ensure_stream(self.cluster.js, self.stream, self.subjects, max_age_s=self.max_age_s,
                                           max_bytes=self.max_bytes, replicas=self.cluster.config.replicas,
                                           setting="history.max_bytes", sizing=self.cluster.sizing)
        self.start_publishing()
        if self.follow:
            self._tasks.append(asyncio.create_task(self._follow()))

    # --- following the stream into the local file -------------------------------------------------
    async def _follow(self) -> None:
        start = await asyncio.to_thread(self.local.store.position) + 1
        sub = await self.cluster.js.subscribe(
            self.subjects, stream=self.stream, ordered_consumer=True,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, config=api.ConsumerConfig(opt_start_seq=start))
        try:
            async for msg in sub.messages:  # the writer reads the rows (or says it skipped a message holding none)
                position = msg.metadata.sequence.stream
                while not self.local.ingest(msg.data, position):  # the writer is behind: wait, never drop
                    await asyncio.sleep(0.05)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
