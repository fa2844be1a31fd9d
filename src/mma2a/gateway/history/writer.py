"""The history's writer process: SQLite's inserts, prunes and checkpoints off the gateway's process.

The recorder (`recorder.HistoryRecorder`, started on an event loop) hands this process its
decisions in frames and reads back how many of each it took. SQLite's work is C, but it ran on the
gateway's event loop (a thread writing took the GIL back from the loop at every step and cost
more): ~10-15 µs of the loop's CPU a decision at 5,000 a second, a tenth of what a routed request
costs. Here it runs beside the loop, on another core when there is one; the loop's share is the
frame, ~0.3 µs a decision (docs/benchmarks.md).

On stdin, frames: `FRAME_HEAD` (the payload's length, its number, its kind) and the payload: `ROWS`, the gateway's own
decisions, a pickled `(shapes, rows)` — each distinct shape's JSON once, then each row as a tuple of `Row`'s fields
with its shape's index in `shapes`, numbered in the recorder's sequence (from 1; the recorder's id is in the settings);
`STREAM`, a message of the cluster's history stream as it came (`record.rows_to_json`'s document, read here: the
gateway that follows the stream only passes it on), numbered by the stream position its rows end at. On stdout, per
frame: `ACK` (how many rows it took: committed, found committed already, or given up on and logged). The process exits
at the end of stdin, after it has written everything it read; a pipe closed by the gateway's death is that end too.

Each frame's number is committed with its rows (the file's stream position; the recorder's last frame, `recorders`), so
a frame at or below it — one a writer before this one committed and died before it said so, sent again by the
gateway — is skipped: every decision is stored once.

It runs as a batch process (Linux's `SCHED_BATCH`): it gets its share of the CPU, but a frame that wakes it does not
preempt the gateway's loop that wrote it (on a busy host the loop then waited for the writer's transaction to end).

Trusted input only: the gateway that started it writes the pipe (pickle).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import sqlite3
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any, BinaryIO

import orjson

from .record import Row, Shape, rows_from_json, shape_tags
from .store import HistoryStore

FRAME_HEAD = struct.Struct(">QqB")
ROWS, STREAM = range(2)
ACK = struct.Struct(">Q")
LAUNCH = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN); "
          "import json, sys; sys.path[:0] = [p for p in json.loads(sys.argv[1])['sys_path'] if p not in sys.path]; "
          "import runpy; runpy.run_module('mma2a.gateway.history.writer', run_name='__main__')")
"""What `python -c` runs to start the process (its settings in argv[1], JSON, with the gateway's `sys.path`: it
imports mma2a where the gateway did). It ignores SIGINT and SIGTERM, which a terminal's Ctrl-C or a service manager
sends the gateway's whole group: the gateway's stop hands it what is queued, then closes the pipe, and that end is its
own."""

log = logging.getLogger("mma2a.history")
_new_row = tuple.__new__


def encode(rows: Sequence[Row], number: int) -> bytes:
    """Frame `number` of the gateway's own rows (alike rows share their shape's JSON, sent once)."""
    shapes: dict[bytes, int] = {}
    flat = [(r[0], r[1], r[2], r[3], r[4], r[5], shapes.setdefault(r[6].parts_json, len(shapes)), r[7], r[8])
            for r in rows]
    payload = pickle.dumps((list(shapes), flat), protocol=5)
    return FRAME_HEAD.pack(len(payload), number, ROWS) + payload


def encode_stream(data: bytes, position: int) -> bytes:
    """One frame of a history stream message (its rows end at `position`)."""
    return FRAME_HEAD.pack(len(data), position, STREAM) + data


def stream_rows(data: bytes) -> list[Row]:
    """The rows of a stream message; none (and a warning) for one that holds no rows: its position still counts."""
    try:
        return rows_from_json(data)
    except ValueError as exc:
        log.warning("history: skipped a stream message: %s", exc)
        return []


class Shapes:
    """The shapes this process has seen (a bounded memo): their filter tags are computed once, not per frame."""

    def __init__(self, capacity: int = 1024, max_bytes: int = 4 << 20) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes  # of their JSON in all (a client's shape of 64 parts is ~45 KB: S17-3)
        self._bytes = 0
        self._known: dict[bytes, Shape] = {}

    def get(self, parts_json: bytes) -> Shape:
        shape = self._known.get(parts_json)
        if shape is None:
            if len(self._known) >= self.capacity or self._bytes + len(parts_json) > self.max_bytes:
                self._known.clear()
                self._bytes = 0
            shape = self._known[parts_json] = Shape(parts_json, shape_tags(orjson.loads(parts_json)))
            self._bytes += len(parts_json)
        return shape


def decode(payload: bytes, shapes: Shapes) -> list[Row]:
    """The rows of a frame's payload."""
    parts, flat = pickle.loads(payload)
    known = [shapes.get(p) for p in parts]
    return [_new_row(Row, (mid, ts, sender, outcome, error, latency, known[i], detail, receivers))
            for mid, ts, sender, outcome, error, latency, i, detail, receivers in flat]


def _read_exactly(fd: int, n: int) -> bytes | None:
    """`n` bytes from `fd` (a pipe gives them in pieces), or None at its end."""
    chunks = []
    while n > 0:
        data = os.read(fd, min(n, 1 << 20))
        if not data:
            return None
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def _write(store: HistoryStore, recorder: int, payload: bytes, number: int, kind: int, shapes: Shapes) -> int:
    """One frame into the file: how many rows it holds (committed now or before). A file another process holds past
    the busy timeout is waited for again (the pipe, then the gateway's memory, then its queue hold what comes
    meanwhile; only the queue drops, and counts); any other error loses the frame's rows, and says so. A frame at or
    below the number the file holds (the stream's position; the recorder's last frame) is one a writer before this
    one committed and died before it said so: skipped."""
    rows: list[Row] = []
    if kind == STREAM and number <= store.position():
        return 0
    try:
        rows = decode(payload, shapes) if kind == ROWS else stream_rows(payload)
        while True:
            try:
                if kind == ROWS:
                    store.write(rows, frame=(recorder, number))  # skipped if committed: its rows are there
                else:
                    store.write(rows, number)
                return len(rows)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                log.warning("history: the file is held by another process; waiting on")
    except Exception:  # never let the writer die: these decisions are lost, and said so
        log.exception("history: %d decisions not written", len(rows))
        return 0


def serve(fd: int, out: BinaryIO, store: HistoryStore, recorder: int, prune_interval_s: float) -> None:
    """Write every frame read on `fd` (the gateway's own decisions: of recorder `recorder`) into `store` and acknowledge
    it on `out`; prune every `prune_interval_s` (once at start: what aged while the gateway was down) between frames;
    return at the end of `fd`. Unbuffered reads: a frame read ahead into a buffer would wait for `select` to see
    more."""
    shapes = Shapes()
    next_prune = time.monotonic()
    answering = True
    while True:
        now = time.monotonic()
        if now >= next_prune:
            next_prune = now + prune_interval_s
            try:
                store.prune(time.time())
            except Exception:  # a locked or full disk: try again next time
                log.exception("history: prune failed")
        ready, _, _ = select.select([fd], [], [], max(0.0, next_prune - time.monotonic()))
        if not ready:
            continue
        head = _read_exactly(fd, FRAME_HEAD.size)
        if head is None:
            return
        size, number, kind = FRAME_HEAD.unpack(head)
        payload = _read_exactly(fd, size)
        if payload is None:
            return
        taken = _write(store, recorder, payload, number, kind, shapes)
        if answering:
            try:
                out.write(ACK.pack(taken))
                out.flush()
            except BrokenPipeError:  # the gateway stopped listening (its stop gave up waiting): write on, unheard
                answering = False


def main() -> None:
    settings: dict[str, Any] = orjson.loads(sys.argv[1])
    with contextlib.suppress(AttributeError, OSError):  # Linux: woken by a frame, it no longer preempts the gateway
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: history writer: %(message)s")
    store = HistoryStore(settings["path"], max_age_s=settings["max_age_s"], max_bytes=settings["max_bytes"],
                         max_bytes_per_client=settings["max_bytes_per_client"])
    try:
        serve(sys.stdin.fileno(), sys.stdout.buffer, store, settings["recorder"], settings["prune_interval_s"])
    finally:
        store.close()
    os._exit(0)  # nothing else to tidy: the store is closed


if __name__ == "__main__":
    main()
