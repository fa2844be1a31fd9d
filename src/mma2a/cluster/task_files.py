"""The task records of one host's workers, shared through files in one directory (`serve --workers N` over the
nats-server it starts, where the workers are the whole cluster).

Each worker appends its batches of records to its own files (`<origin>.<n>.log`: one writer per file, a new one
every `SEGMENT_S` or `SEGMENT_BYTES`); every worker reads the others' files, from where it last stopped, when it
needs to (a task id or context it does not know, a listing). Appending is one `write` into the page cache:
stored once it returns, for every process of the host to read (a worker killed after it answers loses nothing
it answered), without a message to a server and back, and without waking another process per batch — what a
batch cost through the `tasks` bucket: session 10 measured ~60 µs of nats-server CPU a request, besides the
workers' own share of the put, its acknowledgement and the watch delivering every batch to every worker.

A frame is `>IQ` (the document's length, the writer's `CLOCK_MONOTONIC` in ns: one clock for every process of a
host, so records read from several files are applied in the order they were written) then the batch document
(`ClusterTaskMap`'s: `{"origin", "put", "del"}`). A frame is written with one `write` on a file opened for
appending; a reader takes whole frames only (a torn tail, from a writer killed mid-write, is never taken: its
batch was never acknowledged). Files are kept while their records may be asked for: a writer removes its own
files once its cache holds none of their records any more (`held_since`: its oldest record was made after the
file's last write), and its oldest past `retain_bytes` whatever they hold; any worker removes files not written
for `max_age_s` (the map's age limit), a dead worker's included.
"""

from __future__ import annotations

import os
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HEAD = struct.Struct(">IQ")
SEGMENT_S = 60.0  # a writer starts a new file this often (so files age out whole) ...
SEGMENT_BYTES = 8 << 20  # ... or once its file holds this much
RETAIN = 8  # a worker's files hold at most this many times its map's bytes (they hold what its cache holds, whose
# records' JSON is larger than the map counts them: measured 337 B a record in the files for 276 counted)
SHM = "/dev/shm"


def make_task_dir(workers: int, task_bytes: int) -> str:
    """The directory for the task files of `workers` workers (0700, the caller removes it): in memory (/dev/shm) when
    it has room for all they may keep (`RETAIN` x `task_bytes` each; a container's /dev/shm is often 64 MiB), else
    the temporary directory (files in the page cache, written back to disk in the background)."""
    try:
        st = os.statvfs(SHM)
        roomy = os.access(SHM, os.W_OK) and st.f_bavail * st.f_frsize >= workers * RETAIN * task_bytes
    except OSError:
        roomy = False
    return tempfile.mkdtemp(prefix="mma2a-tasks-", dir=SHM if roomy else None)


class TaskFiles:
    """One worker's view of the shared directory: its own files to append to, the others' to read on."""

    def __init__(self, directory: str | os.PathLike[str], origin: str, *, max_age_s: float, retain_bytes: int,
                 held_since: Callable[[], float] = lambda: float("-inf")) -> None:
        self.dir = Path(directory)
        self.origin = origin
        self.max_age_s = max_age_s
        self.retain_bytes = retain_bytes
        self.held_since = held_since  # time.monotonic() before which no record the writer's cache holds was made
        self._fd: int | None = None
        self._segment = 0
        self._segment_at = self._segment_last = 0.0
        self._segment_bytes = 0
        self._own: list[tuple[Path, int, float]] = []  # this writer's files, oldest first: size, last written
        self._read: dict[str, int] = {}  # another writer's file -> the bytes of it taken (whole frames)
        self.appended = 0  # frames written, and bytes
        self.bytes = 0

    # --- writing ------------------------------------------------------------------------------------------
    def append(self, *parts: bytes) -> None:
        """Store one batch document (`parts` joined): when this returns, every worker of the host reads it on its next
        catch-up. One frame, built in one join and written with one `write`."""
        stamp = time.monotonic_ns()
        now = stamp / 1e9  # time.monotonic(), on the same clock
        if self._fd is None or now - self._segment_at >= SEGMENT_S or self._segment_bytes >= SEGMENT_BYTES:
            self._rotate(now)
        assert self._fd is not None
        length = 0
        for part in parts:
            length += len(part)
        frame = b"".join((HEAD.pack(length, stamp), *parts))
        written = os.write(self._fd, frame)
        if written < len(frame):  # a regular file takes it whole unless the disk is full (then OSError)
            view = memoryview(frame)[written:]
            while view:
                view = view[os.write(self._fd, view):]
        self._segment_bytes += len(frame)
        self._segment_last = now
        self.appended += 1
        self.bytes += len(frame)

    def _rotate(self, now: float) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._own[-1] = (self._own[-1][0], self._segment_bytes, self._segment_last)
        self._segment += 1
        path = self.dir / f"{self.origin}.{self._segment}.log"
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
        self._segment_at = self._segment_last = now
        self._segment_bytes = 0
        self._own.append((path, 0, now))
        self._prune()

    def _prune(self) -> None:
        """Remove this writer's files whose records its cache no longer holds, its oldest past `retain_bytes`, and
        every file not written for `max_age_s`."""
        held = sum(size for _, size, _ in self._own)
        since = self.held_since()
        while len(self._own) > 1 and (held > self.retain_bytes or self._own[0][2] < since):
            path, size, _ = self._own.pop(0)
            held -= size
            _unlink(path)
        stale = time.time() - self.max_age_s
        for entry in os.scandir(self.dir):
            try:
                if entry.name.endswith(".log") and entry.stat().st_mtime < stale:
                    _unlink(Path(entry.path))
            except FileNotFoundError:
                pass
        self._own = [own for own in self._own if own[0].exists()]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # --- reading ------------------------------------------------------------------------------------------
    def pending(self) -> list[tuple[str, int, int]]:
        """The other writers' files with bytes not taken yet: (name, taken, size)."""
        out = []
        names = set()
        for entry in os.scandir(self.dir):
            name = entry.name
            if not name.endswith(".log") or name.startswith(self.origin + "."):
                continue
            names.add(name)
            try:
                size = entry.stat().st_size
            except FileNotFoundError:
                continue
            taken = self._read.get(name, 0)
            if size > taken:
                out.append((name, taken, size))
        for gone in self._read.keys() - names:  # removed (aged out): nothing more to take from it
            del self._read[gone]
        return out

    def read(self, pending: list[tuple[str, int, int]]) -> list[bytes]:
        """The whole frames of `pending` (from `pending()`), in the order they were written, as batch documents."""
        frames: list[tuple[int, bytes]] = []
        for name, taken, size in pending:
            try:
                with open(self.dir / name, "rb") as f:
                    f.seek(taken)
                    data = f.read(size - taken)
            except FileNotFoundError:
                self._read.pop(name, None)
                continue
            at = 0
            while at + HEAD.size <= len(data):
                length, stamp = HEAD.unpack_from(data, at)
                end = at + HEAD.size + length
                if end > len(data):  # a frame being written (or torn): taken once whole
                    break
                frames.append((stamp, data[at + HEAD.size:end]))
                at = end
            self._read[name] = taken + at
        frames.sort(key=lambda f: f[0])
        return [doc for _, doc in frames]


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
