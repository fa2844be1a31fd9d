"""Writes decisions off the request path: a bounded queue drained by one thread in batches.

`record()` is an append to a deque (no lock, no I/O); when the queue holds `capacity`
decisions, new ones are dropped and counted, so a slow disk never slows a request. The
writer thread turns records into rows and inserts each batch in one transaction, and
prunes by age and size now and then.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from .record import DecisionRecord, to_row
from .store import HistoryStore

log = logging.getLogger("mma2a.history")


class HistoryRecorder:
    """The default `HistorySink`: SQLite through a background writer."""

    def __init__(self, store: HistoryStore, *, capacity: int = 10_000, batch: int = 500, interval_s: float = 0.2,
                 prune_interval_s: float = 30.0, on_drop: Callable[[], None] | None = None,
                 on_write: Callable[[int], None] | None = None) -> None:
        self.store = store
        self.capacity, self.batch, self.interval_s, self.prune_interval_s = capacity, batch, interval_s, prune_interval_s
        self.dropped = 0
        self._queue: deque[DecisionRecord] = deque()
        self._on_drop, self._on_write = on_drop, on_write
        self._enqueued = 0
        self._written = 0  # records taken off the queue and committed (or given up on)
        self._done = threading.Condition()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None

    # --- the request path -------------------------------------------------------------------
    def record(self, entry: DecisionRecord) -> None:
        if len(self._queue) >= self.capacity:
            self.dropped += 1
            if self._on_drop is not None:
                self._on_drop()
            return
        self._queue.append(entry)
        self._enqueued += 1

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
        next_prune = time.monotonic() + 1.0
        while True:
            if not self._queue:
                if self._stopping:
                    return
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
            taken: list[DecisionRecord] = []
            while self._queue and len(taken) < self.batch:
                taken.append(self._queue.popleft())
            try:
                self.store.write([to_row(e) for e in taken])
                if self._on_write is not None:
                    self._on_write(len(taken))
            except Exception:  # never let the thread die: these decisions are lost, and said so
                log.exception("history: %d decisions not written", len(taken))
            with self._done:
                self._written += len(taken)
                self._done.notify_all()
