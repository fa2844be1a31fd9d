"""Writes decisions off the request path: a bounded queue handed to a writer in batches.

`record()` turns the decision into its row (a few µs of Python, while the view and routes it
reads are still in the CPU's cache; alike decisions share a memoised shape) and appends it to
a deque: no lock, no I/O. When the queue holds `capacity` decisions, new ones are dropped and
counted, so a slow disk never slows a request.

Started on an event loop (the gateway), every `interval_s` the loop frames what is queued (a
batch a frame, ~0.3 µs a decision) into the pipe of the history's writer process
(`writer.py`), which inserts, prunes and checkpoints: SQLite's work leaves the gateway's process
(on the loop it was ~10-15 µs a decision; on a thread of the gateway more, for the GIL's hand-offs,
docs/benchmarks.md). The process starts with the first frame, and again after it dies (the frames
it had not acknowledged go to the next, as they were: each keeps its number, so the next skips those the file says
were committed, and every decision is stored once); when the pipe is full, frames wait in memory
(`MAX_UNSENT`) and then the queue does. If no process can be started (`SILENT_DEATHS`), a thread
of the gateway writes instead. Started without a loop, the thread does it all.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import secrets
import select
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable

import orjson

from ...cpus import free_process
from .record import DecisionRecord, Row, ShapeMemo, to_row
from .store import HistoryStore
from .writer import ACK, LAUNCH, encode, encode_stream, stream_rows

log = logging.getLogger("mma2a.history")

MAX_UNSENT = 8 << 20
"""Framed bytes the gateway holds for a writer process whose pipe is full (~120,000 decisions); past it, the queue."""
PIPE_BYTES = 1 << 20
"""The pipe to the writer process is asked to hold this much (Linux; 64 KiB otherwise): a few seconds of decisions."""
RESPAWN_S = (0.5, 30.0)
"""After the writer process dies, the next one starts no sooner than this, doubling each time it dies again."""
SILENT_DEATHS = 3
"""Writer processes in a row that end before acknowledging anything (one that cannot start: an interpreter that
cannot import mma2a, say): then a thread of the gateway writes instead."""


class _Followed:
    """A message of the cluster's history stream (`record.rows_to_json`'s document) and its stream position."""

    __slots__ = ("data", "position")

    def __init__(self, data: bytes, position: int) -> None:
        self.data, self.position = data, position


class _Framed:
    """A frame of the gateway's own decisions: its rows and its number in the recorder's sequence (committed with them,
    so a frame sent again to the next writer is not stored twice)."""

    __slots__ = ("number", "rows")

    def __init__(self, rows: list[Row], number: int) -> None:
        self.rows, self.number = rows, number


def _items(frame: _Framed | _Followed) -> int:
    """The queue items a frame took: its rows, or one stream message."""
    return len(frame.rows) if isinstance(frame, _Framed) else 1


class _Process:
    """A writer process and its pipes (used on the loop's thread, or by `stop` once the loop has let go of it)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.to, self.back = proc.stdin.fileno(), proc.stdout.fileno()
        self.unsent = bytearray()  # framed, not yet in the pipe
        self.frames: deque[_Framed | _Followed] = deque()  # each frame's queue items, until it is acknowledged
        self.acks = bytearray()  # what came back, short of a whole acknowledgement
        self.watched = False  # the loop reads its acknowledgements
        self.silent = True  # it has acknowledged nothing yet
        self.writing = False  # the loop watches the pipe for room

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()


class HistoryRecorder:
    """The default `HistorySink`: SQLite, written by a process of its own (or a thread, without an event loop)."""

    def __init__(self, store: HistoryStore, *, capacity: int = 10_000, batch: int = 500, interval_s: float = 0.2,
                 prune_interval_s: float = 30.0, on_drop: Callable[[], None] | None = None,
                 on_write: Callable[[int], None] | None = None) -> None:
        self.store = store
        self.capacity, self.batch, self.interval_s, self.prune_interval_s = capacity, batch, interval_s, prune_interval_s
        self.dropped = 0
        self._queue: deque[Row | _Followed] = deque()
        self._again: deque[_Framed | _Followed] = deque()  # a dead writer's unacknowledged frames, first to the next
        self.id = secrets.randbits(63)  # its frames' numbers are this recorder's own among the file's writers
        self._numbered = 0  # the last frame number given
        self._on_drop, self._on_write = on_drop, on_write
        self._enqueued = 0
        self._written = 0  # records taken off the queue and committed (or given up on)
        self._done = threading.Condition()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._memo = ShapeMemo()  # the request path's (the event loop's thread)
        self._loop: asyncio.AbstractEventLoop | None = None  # set: the loop hands rows to a writer process
        self._loop_thread: int | None = None
        self._process: _Process | None = None
        self._deaths = 0  # writer processes that died since one last acknowledged a frame
        self._respawn_at = 0.0
        self._io = threading.Lock()  # the store's writer connection (thread mode): one user at a time

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

    def _drop(self, count: int = 1) -> None:
        self.dropped += count
        if self._on_drop is not None:
            for _ in range(count):
                self._on_drop()

    def ingest(self, data: bytes, position: int) -> bool:
        """Queue a message of the cluster's history stream as it came (the writer reads its rows; one that holds none
        still moves the file's position); False when the queue is full (the follower waits and retries)."""
        if len(self._queue) >= self.capacity:
            return False
        self._queue.append(_Followed(data, position))
        self._enqueued += 1
        return True

    @property
    def pending(self) -> int:
        """Decisions queued and not yet taken by the writer."""
        return len(self._queue) + sum(_items(f) for f in self._again)

    @property
    def writer_pid(self) -> int | None:
        """The writer process's pid (None: none running now; it starts with the first decisions to write)."""
        return self._process.proc.pid if self._process is not None else None

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start writing: through a writer process fed by the running event loop if there is one, else on a thread."""
        if self._thread is not None or self._loop is not None:
            return
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._start_thread()
            return
        self._loop_thread = threading.get_ident()
        self._loop.call_later(self.interval_s, self._turn)

    def _start_thread(self) -> None:
        self._loop = None
        self._thread = threading.Thread(target=self._run, name="mma2a-history", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Write what is queued, then stop the writer and close the store: the writer process is given `timeout_s` to
        acknowledge what it was handed, then as long to end once its input is closed, then killed. What it had not
        acknowledged is counted by what the file says: the frames it committed as written, the rest as dropped."""
        if self._loop is not None:
            self._let_go()
            self._finish(time.monotonic() + timeout_s)  # starts a writer if none has yet and decisions are queued
            if self._process is not None:
                process, self._process = self._process, None
                process.close()  # the end of its input: it exits once it has written what it read
                try:
                    process.proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    log.error("history: the writer process did not end in %g s: killed", timeout_s)
                    process.proc.kill()
                    process.proc.wait()
                self._lose(process)
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        with self._io:
            if self._loop is None:
                self._drain()
            self.store.close()

    def _let_go(self) -> None:
        """The loop stops feeding the writer process and watching its pipes (done on the loop's thread, and waited
        for, while the loop runs); this thread then owns the process."""
        loop = self._loop
        assert loop is not None

        def detach() -> None:
            self._stopping = True
            if self._process is not None and not loop.is_closed():
                loop.remove_reader(self._process.back)
                loop.remove_writer(self._process.to)
                self._process.writing = False

        if threading.get_ident() == self._loop_thread or loop.is_closed() or not loop.is_running():
            detach()
            return
        done = threading.Event()

        def detach_and_say() -> None:
            try:
                detach()
            finally:
                done.set()

        try:
            loop.call_soon_threadsafe(detach_and_say)
        except RuntimeError:  # closed in between
            detach()
            return
        if not done.wait(10):
            log.error("history: the event loop did not let go of the writer process in 10 s")

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Block until every decision recorded before the call is in the store (True), or the timeout."""
        target = self._enqueued
        deadline = time.monotonic() + timeout_s
        if self._loop is not None and threading.get_ident() == self._loop_thread:  # hands the queue over and waits
            if not self._stopping:  # itself for the writer (tests and tools: no request flushes)
                self._finish(deadline)
            return self._written >= target
        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._send)
            except RuntimeError:  # the loop is closed (the gateway has stopped): nothing more will be committed
                return self._written >= target
        else:
            self._wake.set()
        with self._done:
            return self._done.wait_for(lambda: self._written >= target, timeout=max(0.0, deadline - time.monotonic()))

    # --- the event loop's side of the writer process ----------------------------------------------
    def _turn(self) -> None:
        if self._stopping:
            return
        assert self._loop is not None
        self._send()
        if self._thread is None:  # still feeding a process (not fallen back to a thread)
            self._loop.call_later(self.interval_s, self._turn)

    def _send(self) -> None:
        """Frame what is queued into the writer process's pipe: as much as it takes now, the rest as it drains."""
        if self._stopping or not (self._queue or self._again):
            return
        process = self._process if self._process is not None else self._spawn()
        if process is None:
            return
        if not process.watched:
            assert self._loop is not None
            self._loop.add_reader(process.back, self._on_answer, process)
            process.watched = True
        self._frame(process)
        self._push(process)

    def _frame(self, process: _Process) -> None:
        """Queued rows into frames of at most `batch` rows (a position from the stream ends a frame's rows), after the
        frames a dead writer left, as they were."""
        while self._again and len(process.unsent) < MAX_UNSENT:
            frame = self._again.popleft()
            process.unsent += encode(frame.rows, frame.number) if isinstance(frame, _Framed) else \
                encode_stream(frame.data, frame.position)
            process.frames.append(frame)
        while self._queue and len(process.unsent) < MAX_UNSENT:
            head = self._queue[0]
            if isinstance(head, _Followed):  # a stream message: a frame of its own, read by the writer
                self._queue.popleft()
                process.unsent += encode_stream(head.data, head.position)
                process.frames.append(head)
                continue
            rows: list[Row] = []
            while self._queue and len(rows) < self.batch and not isinstance(self._queue[0], _Followed):
                rows.append(self._queue.popleft())  # type: ignore[arg-type]
            self._numbered += 1
            process.unsent += encode(rows, self._numbered)
            process.frames.append(_Framed(rows, self._numbered))

    def _push(self, process: _Process) -> None:
        """Write framed bytes into the pipe until it is full (the loop then says when it has room)."""
        try:
            while process.unsent:
                sent = os.write(process.to, process.unsent)
                del process.unsent[:sent]
        except BlockingIOError:
            pass
        except OSError:  # it has gone: its reader sees the end of its answers
            process.unsent.clear()
            return
        wants = bool(process.unsent) and not self._stopping
        if wants != process.writing and self._loop is not None:
            if wants:
                self._loop.add_writer(process.to, self._on_room, process)
            else:
                self._loop.remove_writer(process.to)
            process.writing = wants

    def _on_room(self, process: _Process) -> None:
        self._frame(process)
        self._push(process)

    def _on_answer(self, process: _Process) -> None:
        """Acknowledgements from the writer process; its end when it has died."""
        try:
            data = os.read(process.back, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self._acknowledged(process, data)
            return
        assert self._loop is not None
        self._loop.remove_reader(process.back)
        process.watched = False
        if process.writing:
            self._loop.remove_writer(process.to)
            process.writing = False
        process.close()
        code = process.proc.poll()
        if process is self._process:
            self._process = None
            self._deaths += 1
            wait = min(RESPAWN_S[1], RESPAWN_S[0] * 2 ** (self._deaths - 1))
            self._respawn_at = time.monotonic() + wait
            if process.silent and self._deaths >= SILENT_DEATHS:
                log.error("history: %d writer processes in a row ended (the last: exit %s) before writing anything: "
                          "a thread of the gateway writes the history", self._deaths, code)
                self._lose(process, again=True)
                self._start_thread()
                return
            log.error("history: the writer process ended (exit %s) with %d frames not acknowledged, handed to the "
                      "next, which starts in %.1f s", code, len(process.frames), wait)
        self._lose(process, again=not self._stopping)

    def _acknowledged(self, process: _Process, data: bytes) -> None:
        process.acks += data
        whole = len(process.acks) - len(process.acks) % ACK.size
        items = 0
        for (count,) in ACK.iter_unpack(process.acks[:whole]):
            items += _items(process.frames.popleft())
            if self._on_write is not None and count:
                self._on_write(count)
        del process.acks[:whole]
        self._deaths = 0
        process.silent = False
        with self._done:
            self._written += items
            self._done.notify_all()

    def _lose(self, process: _Process, again: bool = False) -> None:
        """Frames a process will not acknowledge: with `again` (it died), kept as they were, first, for the next writer
        (those it committed in the instant before it died are skipped by the next: the file holds their numbers);
        else (the gateway stops) dropped, and counted."""
        frames = list(process.frames)
        process.frames.clear()
        process.unsent.clear()
        if again:
            self._again.extendleft(reversed(frames))
            return
        items = sum(_items(f) for f in frames)
        committed, lost = self._committed(frames)
        if committed and self._on_write is not None:
            self._on_write(committed)
        if lost:
            self._drop(lost)
        if items:
            with self._done:
                self._written += items
                self._done.notify_all()

    def _committed(self, frames: list[_Framed | _Followed]) -> tuple[int, int]:
        """Of the gateway's own decisions in frames a stopped writer did not acknowledge: (how many it committed, how
        many it did not), by the last frame number the file holds for this recorder (a writer ended or killed after
        committing a frame whose acknowledgement was never read had them counted dropped, though stored)."""
        rows = [f for f in frames if isinstance(f, _Framed)]
        if not rows:
            return 0, 0
        try:
            done = self.store.committed_frame(self.id)
        except Exception:  # the file cannot be read: what was not acknowledged counts as lost
            log.exception("history: the file's committed frames not read")
            done = 0
        committed = sum(len(f.rows) for f in rows if f.number <= done)
        return committed, sum(len(f.rows) for f in rows) - committed

    def _spawn(self, now: bool = False) -> _Process | None:
        """Start a writer process (None while a dead one's wait lasts, unless `now`; a thread takes over if none can
        start). Its acknowledgements are read by whoever feeds it (the loop: `_send`; `_finish`)."""
        if not now and time.monotonic() < self._respawn_at:
            return None
        settings = {"path": str(self.store.path), "max_age_s": self.store.max_age_s, "max_bytes": self.store.max_bytes,
                    "max_bytes_per_client": self.store.max_bytes_per_client, "prune_interval_s": self.prune_interval_s,
                    "recorder": self.id,
                    "sys_path": [p for p in sys.path if p]}  # where this process found mma2a, the writer finds it
        try:
            proc = subprocess.Popen([sys.executable, "-c", LAUNCH, orjson.dumps(settings).decode()],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        except OSError as exc:
            log.error("history: no writer process (%s): a thread of the gateway writes the history", exc)
            self._start_thread()
            return None
        with contextlib.suppress(OSError):  # started from a worker's bound loop thread: on any CPU, as its pools are
            free_process(proc.pid)
        process = self._process = _Process(proc)
        os.set_blocking(process.to, False)
        os.set_blocking(process.back, False)
        with contextlib.suppress(OSError, AttributeError):  # Linux only; the default (64 KiB) works, in more turns
            fcntl.fcntl(process.to, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        return process

    def _finish(self, deadline: float) -> None:
        """Hand everything queued to the writer process and wait for its acknowledgements, or the deadline (blocking:
        a flush on the loop's thread, or `stop` once the loop has let go)."""
        process = self._process if self._process is not None else \
            (self._spawn(now=True) if self._queue or self._again else None)
        if process is None:
            return
        while self._queue or self._again or process.unsent or process.frames:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._frame(process)
            ready, room, _ = select.select([process.back], [process.to] if process.unsent else [], [], left)
            if room:
                try:
                    sent = os.write(process.to, process.unsent)
                    del process.unsent[:sent]
                except BlockingIOError:
                    pass
                except OSError:
                    process.unsent.clear()
            if ready:
                try:
                    data = os.read(process.back, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:  # it died: what it had goes to the next (stopping: lost, and counted)
                    if process is self._process:
                        self._process = None
                    self._lose(process, again=not self._stopping)
                    return
                self._acknowledged(process, data)

    # --- the writer thread (no event loop, or no process) -------------------------------------------
    def _run(self) -> None:
        next_prune = time.monotonic()  # once at start (what aged while the gateway was down), then every interval
        while not self._stopping:
            # wait out the interval unless a batch is full, a flush asks or the gateway stops: draining as soon
            # as anything is queued commits many small transactions under load
            if len(self._queue) < self.batch and not self._again:
                self._wake.wait(self.interval_s)
                self._wake.clear()
            with self._io:
                self._drain()
            if time.monotonic() >= next_prune:
                next_prune = time.monotonic() + self.prune_interval_s
                with self._io:
                    try:
                        self.store.prune(time.time())
                    except Exception:  # a locked or full disk: try again next time
                        log.exception("history: prune failed")

    def _drain(self) -> int:
        """Write what is queued in batches (the caller holds `_io`), after the frames a dead writer left (each skipped
        if the file says it committed it); returns how many were taken off the queue."""
        taken_all = 0
        while self._again:
            frame = self._again.popleft()
            try:
                if isinstance(frame, _Framed):
                    self.store.write(frame.rows, frame=(self.id, frame.number))  # skipped if committed: rows there
                    written = len(frame.rows)
                else:
                    written = 0
                    if frame.position > self.store.position():
                        followed = stream_rows(frame.data)
                        self.store.write(followed, frame.position)
                        written = len(followed)
                if self._on_write is not None and written:
                    self._on_write(written)
            except Exception:  # never let the writer die: these decisions are lost, and said so
                log.exception("history: %d decisions not written", _items(frame))
            taken_all += _items(frame)
            with self._done:
                self._written += _items(frame)
                self._done.notify_all()
        while self._queue:
            taken: list[Row | _Followed] = []
            rows: list[Row] = []
            position: int | None = None
            while self._queue and len(rows) < self.batch:
                item = self._queue.popleft()
                taken.append(item)
                if isinstance(item, _Followed):
                    rows += stream_rows(item.data)
                    position = item.position
                else:
                    rows.append(item)
            try:
                self.store.write(rows, position)
                if self._on_write is not None and rows:
                    self._on_write(len(rows))
            except Exception:  # never let the writer die: these decisions are lost, and said so
                log.exception("history: %d decisions not written", len(taken))
            taken_all += len(taken)
            with self._done:
                self._written += len(taken)
                self._done.notify_all()
        return taken_all
