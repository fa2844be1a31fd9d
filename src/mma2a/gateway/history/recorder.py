"""Writes decisions off the request path: a bounded queue drained in batches.

`record()` turns the decision into its row (a few µs of Python, while the view and routes it
reads are still in the CPU's cache; alike decisions share a memoised shape) and appends it to
a deque: no lock, no I/O. When the queue holds `capacity` decisions, new ones are dropped and
counted, so a slow disk never slows a request.

Started on an event loop (the gateway), the loop itself inserts each batch, every `interval_s`,
in one transaction of at most `SLICE` rows at a time: SQLite's work is C, and a second thread
writing would take the GIL back each time the loop lets it go for a socket call (measured: 33-47
µs of CPU a request with the thread, 21 with the loop, docs/operations.md). It never waits: when
another process or the prune holds the file, the batch stays queued for the next turn. A thread
prunes by age and size and checkpoints the WAL (the fsyncs) off the loop. Started without a loop,
the thread does it all.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable

from .record import DecisionRecord, Row, ShapeMemo, to_row
from .store import HistoryStore

log = logging.getLogger("mma2a.history")

SLICE = 64
"""Rows a loop turn commits at most before it lets requests in again: 128 held the 1-connection p99 at 1.5-2.0 ms,
32 cut it by a fifth but cost 5% of throughput at 16 connections (bench/ab.py, docs/benchmarks.md)."""
CHECKPOINT_EVERY = 4096
"""Rows written between WAL checkpoints run by the thread (the file's fsyncs stay off the loop)."""


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
        self._loop: asyncio.AbstractEventLoop | None = None  # set: the loop writes, the thread prunes
        self._loop_thread: int | None = None
        self._io = threading.Lock()  # the store's writer connection: one user at a time
        self._since_checkpoint = 0

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
        """Start writing: on the running event loop if there is one (the thread then only prunes), else on a thread."""
        if self._thread is not None:
            return
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        if self._loop is not None:
            self._loop_thread = threading.get_ident()
            self.store.defer_checkpoints()
            self._loop.call_later(self.interval_s, self._turn)
        self._thread = threading.Thread(target=self._run, name="mma2a-history", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Write what is queued, then stop the thread and close the store."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        with self._io:
            self._drain()
            self.store.close()

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Block until every decision recorded before the call is in the store (True), or the timeout."""
        target = self._enqueued
        if self._loop is not None and threading.get_ident() == self._loop_thread:  # the loop waits for no one
            with self._io:
                self._drain()
            return self._written >= target
        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._flush_turns)
            except RuntimeError:  # the loop is closed (the gateway has stopped): nothing more will be committed
                return self._written >= target
        else:
            self._wake.set()
        with self._done:
            return self._done.wait_for(lambda: self._written >= target, timeout=timeout_s)

    # --- the event loop's turns ------------------------------------------------------------------
    def _turn(self) -> None:
        if self._stopping:
            return
        assert self._loop is not None
        more = self._turn_now(least=SLICE)  # a full slice still queued: go on at once, else wait for more
        self._loop.call_later(0 if more else self.interval_s, self._turn)

    def _flush_turns(self) -> None:
        """A flush asked from another thread: slice after slice until the queue is empty, requests in between."""
        if self._turn_now(least=1) and self._loop is not None:
            self._loop.call_soon(self._flush_turns)

    def _turn_now(self, least: int) -> bool:
        """Commit one slice if the store is free; True when it did and at least `least` rows are still queued
        (False when the file or the lock was taken: the next turn is the next interval, no spinning)."""
        if not self._queue or self._stopping or not self._io.acquire(blocking=False):
            return False
        try:
            wrote = self._drain(limit=SLICE, wait=False)
        finally:
            self._io.release()
        return wrote > 0 and len(self._queue) >= least

    # --- the writer thread --------------------------------------------------------------------
    def _run(self) -> None:
        next_prune = time.monotonic()  # once at start (what aged while the gateway was down), then every interval
        while not self._stopping:
            if self._loop is None:
                # wait out the interval unless a batch is full, a flush asks or the gateway stops: draining as soon
                # as anything is queued commits many small transactions under load
                if len(self._queue) < self.batch:
                    self._wake.wait(self.interval_s)
                    self._wake.clear()
                with self._io:
                    self._drain()
            else:
                self._wake.wait(self.interval_s)
                self._wake.clear()
                if self._since_checkpoint >= CHECKPOINT_EVERY:
                    with self._io:
                        self._since_checkpoint = 0
                        try:
                            self.store.checkpoint()
                        except sqlite3.Error:  # busy: next time
                            log.debug("history: checkpoint postponed", exc_info=True)
            if time.monotonic() >= next_prune:
                next_prune = time.monotonic() + self.prune_interval_s
                with self._io:
                    try:
                        self.store.prune(time.time())
                    except Exception:  # a locked or full disk: try again next time
                        log.exception("history: prune failed")

    def _drain(self, limit: int | None = None, wait: bool = True) -> int:
        """Write what is queued (at most `limit` rows) in batches; the caller holds `_io`; returns how many were
        taken off the queue. `wait=False`: a file another process holds is not waited for, the batch goes back
        to the queue's front."""
        budget = limit
        taken_all = 0
        while self._queue and (budget is None or budget > 0):
            taken: list[Row | _Followed] = []
            rows: list[Row] = []
            position: int | None = None
            most = self.batch if budget is None else min(self.batch, budget)
            while self._queue and len(rows) < most:
                item = self._queue.popleft()
                taken.append(item)
                if isinstance(item, _Followed):
                    rows += item.rows
                    position = item.position
                else:
                    rows.append(item)
            if budget is not None:
                budget -= len(rows)
            try:
                self.store.write(rows, position, wait=wait)
                self._since_checkpoint += len(rows)
                if self._on_write is not None and rows:
                    self._on_write(len(rows))
            except sqlite3.OperationalError as exc:
                if not wait and "locked" in str(exc):  # another writer has the file: next turn
                    self._queue.extendleft(reversed(taken))
                    return taken_all
                log.exception("history: %d decisions not written", len(taken))
            except Exception:  # never let the writer die: these decisions are lost, and said so
                log.exception("history: %d decisions not written", len(taken))
            taken_all += len(taken)
            with self._done:
                self._written += len(taken)
                self._done.notify_all()
        return taken_all
