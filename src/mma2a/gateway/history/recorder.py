"""Writes decisions off the request path: a bounded queue drained by one thread in batches.

`record()` turns the decision into its row (a few µs of Python, while the view and routes it
reads are still in the CPU's cache; alike decisions share a memoised shape) and appends it to
a deque: no lock, no I/O. When the queue holds `capacity` decisions, new ones are dropped and
counted, so a slow disk never slows a request. The writer thread inserts each batch in one
transaction, and prunes by age and size now and then.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from .record import DecisionRecord, Row, ShapeMemo, to_row
from .store import HistoryStore

log = logging.getLogger("mma2a.history")


class _Followed:
    """Rows that arrived from the cluster's stream, and the stream position of the last."""

    __slots__ = ("position", "rows")

    def __init__(self, rows: list[Row], position: int) -> None:
        self.rows, self.position = rows, position


class HistoryRecorder:
    """The default `HistorySink`: SQLite through a background writer."""

    def __init__(self, store: HistoryStore, *, capacity: int = 10_000, batch: int = 500, interval_s: float = 0.2,
                 prune_interval_s: float = 30.0, on_drop: Callable[[], None] | None = None,
                 on_write: Callable[[int], None] | None = None) -> None:
        self.store = store
        self.capacity, self.batch, self.interval_s, self.prune_interval_s = capacity, batch, interval_s, prune_interval_s
        self.dropped = 0
        self._queue: deque[Row | _Followed] = deque()
        self._on_drop, self._on_write = on_drop, on_write
        self._enqueued = 0
        self._written = 0  # records taken off the queue and committed (or given up on)
        self._done = threading.Condition()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._memo = ShapeMemo()  # the request path's (the event loop's thread)

    # --- the request path -------------------------------------------------------------------
    def record(self, entry: DecisionRecord) -> None:
        if len(self._queue) >= self.capacity:
            self._drop()
            return
        try:
            row = to_row(entry, self._memo)
        except Exception:  # features no JSON takes: this decision is lost, and counted
            log.exception("history: a decision not recorded")
            self._drop()
            return
        self._queue.append(row)
        self._enqueued += 1

    def _drop(self) -> None:
        self.dropped += 1
        if self._on_drop is not None:
            self._on_drop()

    def ingest(self, rows: list[Row], position: int) -> bool:
        """Queue rows read from the cluster's stream; False when the queue is full (the follower waits and retries)."""
        if len(self._queue) >= self.capacity:
            return False
        self._queue.append(_Followed(rows, position))
        self._enqueued += 1
        return True

    @property
    def pending(self) -> int:
        """Decisions queued and not yet taken by the writer."""
        return len(self._queue)

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="mma2a-history", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Write what is queued, then stop the thread and close the store."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self.store.close()

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Block until every decision recorded before the call is in the store (True), or the timeout."""
        target = self._enqueued
        self._wake.set()
        with self._done:
            return self._done.wait_for(lambda: self._written >= target, timeout=timeout_s)

    # --- the writer thread --------------------------------------------------------------------
    def _run(self) -> None:
        next_prune = time.monotonic()  # once at start (what aged while the gateway was down), then every interval
        while True:
            # wait out the interval unless a batch is full, a flush asks or the gateway stops: draining as soon as
            # anything is queued commits many small transactions under load, each rewriting the same index pages
            if len(self._queue) < self.batch:
                if self._stopping:
                    if not self._queue:
                        return
                else:
                    self._wake.wait(self.interval_s)
                    self._wake.clear()
            self._drain()
            if time.monotonic() >= next_prune:
                next_prune = time.monotonic() + self.prune_interval_s
                try:
                    self.store.prune(time.time())
                except Exception:  # a locked or full disk: try again next time
                    log.exception("history: prune failed")

    def _drain(self) -> None:
        while self._queue:
            taken = 0
            rows: list[Row] = []
            position: int | None = None
            while self._queue and len(rows) < self.batch:
                item = self._queue.popleft()
                taken += 1
                if isinstance(item, _Followed):
                    rows += item.rows
                    position = item.position
                else:
                    rows.append(item)
            try:
                self.store.write(rows, position)
                if self._on_write is not None and rows:
                    self._on_write(len(rows))
            except Exception:  # never let the thread die: these decisions are lost, and said so
                log.exception("history: %d decisions not written", taken)
            with self._done:
                self._written += taken
                self._done.notify_all()
