"""The task records of one host's workers, shared through files in one directory (`serve --workers N` over the
nats-server it starts, where the workers are the whole cluster).

Each worker appends its records to its own files (`<origin>.<n>.log`: one writer per file, a new one
every `SEGMENT_S` or once it holds `SEGMENT_BYTES`); every worker reads the others' files, from where it last
stopped, when it needs to (a task id or context it does not know, a listing). A writer maps its file into memory
and appends by copying a frame into it: no system call on the request path (a `write` per record cost a worker ~3 µs
of a request, docs/benchmarks.md), and stored once the copy returns, in the page cache every process of the host
reads (a worker killed after it answers loses nothing it answered) — without a message to a server and back, and
without waking another process per batch, which is what a batch cost through the `tasks` bucket (session 10: ~60 µs
of nats-server CPU a request, besides the workers' own share of the put, its acknowledgement and the watch
delivering every batch to every worker).

A file starts with `FILE_HEAD` (a magic number, then how many of its bytes are frames: the writer's committed
length, raised after each frame) and is allocated ahead (`posix_fallocate`: a full disk is an `OSError` when the file
grows, never a fault on a copy), from `FIRST_BYTES`, doubling as it fills (by `GROW_BYTES` at most: one request
allocates that much at most); it is cut back to its frames when its
writer moves to the next. A frame is `FRAME_HEAD` (the document's length, its Adler-32, the writer's `CLOCK_MONOTONIC`
in ns: one clock for every process of a host, so records read from several files are applied in the order they
were written) then the document (`ClusterTaskMap`'s: one record, or one removal). A reader takes whole frames
below the committed length, each checked against its checksum: a frame being written (or torn by a writer killed
mid-copy, or whose copy another core does not see whole yet) is never taken. Adler-32, not CRC-32: it only has to
tell a whole copy from a partial one (the rest of a file is zeros), and costs half as much on every request. Files are kept while their records may be asked for: a writer removes its own files once
its cache holds none of their records any more (`held_since`: its oldest record was made after the file's last
write), and its oldest past `retain_bytes` whatever they hold; any worker removes files not written for `max_age_s`
(the map's age limit), a dead worker's included (a writer sets its file's modification time at most every `TOUCH_S`,
since copies into a mapping do not, and moves to a new file after half the age limit without an append).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import shutil
import struct
import tempfile
import time
from zlib import adler32
from collections.abc import Callable
from pathlib import Path

FILE_HEAD = struct.Struct(">QQ")  # MAGIC, the committed length (the file's bytes that are whole frames, FILE_HEAD's
# own included)
FRAME_HEAD = struct.Struct(">IIQ")  # the document's length, its Adler-32, the writer's monotonic clock in ns
FRAME_BYTES = FRAME_HEAD.size
COMMITTED = struct.Struct(">Q")  # FILE_HEAD's second field, at offset 8
MAGIC = 0x6D6D6132_74617332  # "mma2tas2" (frames: one record each, Adler-32)
FIRST_BYTES = 64 << 10  # a new file's first allocation; doubled as it fills (by GROW_BYTES at most) ...
GROW_BYTES = 1 << 20
SEGMENT_BYTES = 8 << 20  # ... up to this, then a new file (a frame larger than it: a file as large as it)
SEGMENT_S = 60.0  # a writer starts a new file this often (so files age out whole)
TOUCH_S = 1.0  # a writer sets its file's modification time at most this often (what `max_age_s` is judged by)
RETAIN = 8  # a worker's files hold at most this many times its map's bytes (they hold what its cache holds, each
# record's JSON ~300 B against the ~700 B the map counts it since 8217bce: room to spare)
SHM = "/dev/shm"
PREFIX = "mma2a-tasks-"  # a task directory's name: PREFIX + mkdtemp's random part
NATS_PREFIX = "mma2a-nats-"  # the store of the nats-server `serve --workers N` starts (supervisor.py)
LOCK = ".lock"  # in a task directory: locked (flock) by the process that made it, for as long as that runs


def make_task_dir(workers: int, task_bytes: int) -> str:
    """The directory for the task files of `workers` workers (0700, the caller removes it): in memory (/dev/shm) when
    it has room for all they may keep (`RETAIN` x `task_bytes` each; a container's /dev/shm is often 64 MiB), else
    the temporary directory (files in the page cache, written back to disk in the background). This process holds
    the directory's lock until it ends, however it ends: the directories of makers gone without removing theirs are
    removed first (`remove_orphans`)."""
    try:
        st = os.statvfs(SHM)
        roomy = os.access(SHM, os.W_OK) and st.f_bavail * st.f_frsize >= workers * RETAIN * task_bytes
    except OSError:
        roomy = False
    return held_dir(SHM if roomy else tempfile.gettempdir(), PREFIX)


def held_dir(parent: str, prefix: str) -> str:
    """A new 0700 directory `parent/prefix…` this process holds the lock of until it ends, however it ends (the task
    directory; the supervisor's nats-server store, `NATS_PREFIX`); first the directories of `prefix` whose maker has
    ended are removed (`remove_orphans`)."""
    remove_orphans(parent, prefix)
    path = tempfile.mkdtemp(prefix=prefix, dir=parent)
    fd = os.open(os.path.join(path, LOCK + ".new"), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # never unlocked nor closed: the kernel releases it when this process ends
    os.rename(os.path.join(path, LOCK + ".new"), os.path.join(path, LOCK))  # named once held: never seen free alive
    return path


def remove_orphans(parent: str, prefix: str = PREFIX) -> None:
    """Remove this user's directories `parent/prefix…` whose maker has ended (their lock is free). A supervisor
    killed outright (SIGKILL, the OOM killer) never ran its cleanup: its task directory stayed in /dev/shm, memory the
    host got back only at a reboot (up to `RETAIN` x `task_bytes` a worker), and its nats-server's store on disk
    (the cluster's blobs, up to `blob_max_bytes`; docs/security.md S15-9). A directory without a lock (made before
    this) is left as it is."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            fd = os.open(os.path.join(entry.path, LOCK), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:  # gone, no lock, not readable
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its maker runs
            os.close(fd)
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        os.close(fd)


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
        self._map: mmap.mmap | None = None
        self._size = 0  # the current file's allocated bytes
        self._used = 0  # ... and its committed ones (FILE_HEAD and whole frames)
        self._segment = 0
        self._segment_at = self._touched = 0.0
        self._last_ns = 0  # the last append's time (`time.monotonic_ns`)
        self._due_ns = 0  # when an append next looks at the file's age and time (`_make_room`), the same clock
        self._touch_s = min(TOUCH_S, max_age_s / 4)
        self._own: list[tuple[Path, int, float]] = []  # this writer's files, oldest first: size, last written
        self._read: dict[str, int] = {}  # another writer's file -> the bytes of it taken (whole frames)

    # --- writing ------------------------------------------------------------------------------------------
    def append(self, doc: bytes) -> None:
        """Store one document: when this returns, every worker of the host reads it on its next catch-up. The document
        is copied into the mapped file, then its frame head, then the committed length."""
        stamp = time.monotonic_ns()
        at = self._used
        end = at + FRAME_BYTES + len(doc)
        if end > self._size or stamp >= self._due_ns:  # (no file yet: `_size` is 0)
            at, end = self._make_room(stamp / 1e9, end, FRAME_BYTES + len(doc))  # time.monotonic(), the same clock
        m = self._map
        assert m is not None
        m[at + FRAME_BYTES:end] = doc
        FRAME_HEAD.pack_into(m, at, len(doc), adler32(doc), stamp)
        COMMITTED.pack_into(m, 8, end)  # readers take it from now
        self._used = end
        self._last_ns = stamp

    def _make_room(self, now: float, end: int, frame: int) -> tuple[int, int]:
        """Before an append that does not fit, or once `_due`: a new file (none yet; this one `SEGMENT_S` old, full, or
        idle for half the age limit, which the other workers judge files by), or this one grown; its time touched."""
        if (self._map is None or now - self._segment_at >= SEGMENT_S or now - self._last_ns / 1e9 >= self.max_age_s / 2
                or (end > self._size and self._size >= SEGMENT_BYTES)):
            self._rotate(now, frame)
        elif end > self._size:
            self._grow(end)
        if now - self._touched >= self._touch_s:
            assert self._fd is not None
            os.utime(self._fd)  # (an fd: futimens) copies into a mapping leave the modification time as it was
            self._touched = now
        self._due_ns = int(min(self._segment_at + SEGMENT_S, self._touched + self._touch_s) * 1e9)
        return self._used, self._used + frame

    def _map_file(self, fd: int, size: int) -> mmap.mmap:
        """`size` bytes of `fd` allocated (a full disk: OSError here, never a fault on a copy) and mapped (each page
        faulted in when first copied into: a file's growth costs its request no more than the pages it allocates)."""
        os.posix_fallocate(fd, 0, size)
        return mmap.mmap(fd, size)

    def _grow(self, end: int) -> None:
        """Allocate the current file up to at least `end` bytes (doubling, by `GROW_BYTES` at most, up to
        `SEGMENT_BYTES` unless one frame needs more), and map it anew."""
        assert self._fd is not None and self._map is not None
        size = max(end, min(self._size * 2, self._size + GROW_BYTES, SEGMENT_BYTES))
        m = self._map_file(self._fd, size)
        self._map.close()
        self._map, self._size = m, size

    def _rotate(self, now: float, frame: int) -> None:
        self._finish()
        self._segment += 1
        path = self.dir / f"{self.origin}.{self._segment}.log"
        size = max(min(FIRST_BYTES, SEGMENT_BYTES), FILE_HEAD.size + frame)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            m = self._map_file(fd, size)
        except OSError:
            os.close(fd)
            _unlink(path)
            raise
        m[0:FILE_HEAD.size] = FILE_HEAD.pack(MAGIC, FILE_HEAD.size)
        self._fd, self._map, self._size, self._used = fd, m, size, FILE_HEAD.size
        self._segment_at = self._touched = now
        self._last_ns = int(now * 1e9)
        self._own.append((path, FILE_HEAD.size, now))
        self._prune()

    def _finish(self) -> None:
        """Close the current file, cut back to its frames (what it allocated ahead is given back)."""
        if self._fd is None:
            return
        if self._map is not None:
            self._map.close()
            self._map = None
        try:
            os.ftruncate(self._fd, self._used)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None
        self._size = 0  # no file: the next append makes one (`_make_room`), even if this one's rotation fails
        self._own[-1] = (self._own[-1][0], self._used, self._last_ns / 1e9)

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
        self._finish()

    # --- reading ------------------------------------------------------------------------------------------
    def pending(self) -> list[tuple[str, int, int]]:
        """The other writers' files with frames not taken yet: (name, taken, committed)."""
        out = []
        names = set()
        for entry in os.scandir(self.dir):
            name = entry.name
            if not name.endswith(".log") or name.startswith(self.origin + "."):
                continue
            names.add(name)
            taken = self._read.get(name, 0)
            try:
                if entry.stat().st_size <= max(taken, FILE_HEAD.size):
                    continue
                with open(entry.path, "rb") as f:
                    head = f.read(FILE_HEAD.size)
            except FileNotFoundError:
                continue
            if len(head) < FILE_HEAD.size:
                continue
            magic, committed = FILE_HEAD.unpack(head)
            if magic == MAGIC and committed > max(taken, FILE_HEAD.size):
                out.append((name, max(taken, FILE_HEAD.size), committed))
        for gone in self._read.keys() - names:  # removed (aged out): nothing more to take from it
            del self._read[gone]
        return out

    def read(self, pending: list[tuple[str, int, int]]) -> list[bytes]:
        """The whole frames of `pending` (from `pending()`), in the order they were written: their documents."""
        frames: list[tuple[int, bytes]] = []
        for name, taken, committed in pending:
            try:
                with open(self.dir / name, "rb") as f:
                    f.seek(taken)
                    data = f.read(committed - taken)
            except FileNotFoundError:
                self._read.pop(name, None)
                continue
            at = 0
            while at + FRAME_HEAD.size <= len(data):
                length, check, stamp = FRAME_HEAD.unpack_from(data, at)
                end = at + FRAME_HEAD.size + length
                if end > len(data):  # past the committed length (a file cut short): not whole
                    break
                doc = data[at + FRAME_HEAD.size:end]
                if adler32(doc) != check:  # not as written (not yet visible whole): taken on a later read
                    break
                frames.append((stamp, doc))
                at = end
            self._read[name] = taken + at
        frames.sort(key=lambda f: f[0])
        return [doc for _, doc in frames]


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
