"""Connections spread evenly among the workers of `mma2a serve --workers N`.

Each worker listens on the one address with SO_REUSEPORT, and the kernel puts each new connection in one worker's
accept queue by a hash of the connection's addresses and ports. Few long-lived connections (a load balancer's pool
of keep-alive connections, a benchmark's 16) then split unevenly — 6 and 10, 3 and 13 as well as 8 and 8 — and the
worker holding most runs at its CPU's limit while the other waits for work. As Envoy's exact connection balance does
among its threads, a worker that accepts a connection while it holds more than a sibling hands it to the sibling
holding fewest, before a byte of it is read: through the sibling's Unix datagram socket (the descriptor passed with
SCM_RIGHTS; TLS, if any, not yet begun). A connection moves once at most: one a worker was handed is its own. A
sibling that does not take it (gone, not started yet, closed to draining: its socket refuses; its queue full)
leaves it with the worker that accepted it, so nothing waits on a sibling.

What each worker holds is in `loads`, a file every worker maps: the number of workers; a slot a worker (its
generation, bumped at each start, and the connections it holds, said after each it keeps or takes and once a
second, when closed ones are counted out); and how many connections each worker placed with each other and has not
sent yet, handed each other and took from each other, so a connection on its way counts as its receiver's at once (a
burst of connections, as a pool opens them, is spread as it comes, not after the receiver has said it took them).
Each worker writes its own slot and rows only. A worker started again zeroes its row of placings: what its
predecessor placed and never sent died with it, and is no longer counted on its way to a sibling. A sibling that refused a connection is not asked again until its generation changes (it was
started again).

The files are in a directory the supervisor makes (0700) and names in the workers' environment: `loads` and
`w<index>.sock`, each worker's socket. Only this user's processes can reach them, and what arrives is served only if
it is a TCP socket (anything else is closed).

Standard library only; no clock.
"""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import mmap
import os
import socket
import struct

Q = struct.Struct("<q")
SLOT = struct.Struct("<qq")  # a worker's: its generation (0: never started), the connections it holds
LOADS = "loads"
BALANCE_PREFIX = "mma2a-balance-"  # the supervisor's directory (in the temporary directory; `task_files.held_dir`)
GONE = 1 << 62  # what a closed worker says it holds: no sibling hands it anything
RECEIVE_BATCH = 64  # messages taken each time the socket is readable
LOCK_TRIES = 1000  # ~0.5-1.5 ms of trying for the file's lock before a placing goes without it
FULL_TRIES = 5  # flushes in a row a busy sibling's queue may have no room before its connections are served here
FULL_RETRY_S = 0.002  # the first wait before the next (`serving.BatchAccept`), doubling: ~62 ms at most in all
FDS_PER_MESSAGE = 64  # descriptors in one message at most (room for them read; more would be closed by the kernel)


def loads_size(workers: int) -> int:
    """The file's bytes: the count, the slots, then the handed, taken and placed tables (workers x workers each)."""
    return Q.size + workers * SLOT.size + 3 * workers * workers * Q.size


def make_loads(directory: str, workers: int) -> None:
    """The `loads` file of `workers` workers, in `directory` (the supervisor's)."""
    with open(os.path.join(directory, LOADS), "xb") as f:
        f.write(Q.pack(workers) + bytes(loads_size(workers) - Q.size))


def socket_path(directory: str, index: int) -> str:
    return os.path.join(directory, f"w{index}.sock")


class Balance:
    """One worker's side: `place` says which sibling a connection it accepted goes to (if any), `hand` passes it
    there, `receive` takes what siblings handed it, `publish` says what it holds."""

    def __init__(self, directory: str, index: int) -> None:
        self.directory, self.index = directory, index
        fd = os.open(os.path.join(directory, LOADS), os.O_RDWR | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            workers = Q.unpack(os.pread(fd, Q.size, 0))[0] if size >= Q.size else 0
            if not 0 <= index < workers or size != loads_size(workers):
                raise ValueError(f"{directory}/{LOADS}: {size} bytes, not the loads of workers 0..{index}")
            self._loads = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._lock = fd  # flock'd around each placing: every worker's decision sees every earlier one
        self.workers = workers
        self._handed_at = Q.size + workers * SLOT.size  # handed[i][j]: row i written by worker i
        self._taken_at = self._handed_at + workers * workers * Q.size  # taken[j][i]: row j written by worker j
        self._placed_at = self._taken_at + workers * workers * Q.size  # placed[i][j], not sent yet: row i by worker i
        self._refused: dict[int, int] = {}  # a sibling that refused a connection -> its generation then
        self._outgoing: dict[int, list[socket.socket]] = {}  # placed with a sibling by `route`, sent by `flush`
        self._full: dict[int, int] = {}  # a sibling whose queue had no room -> the flushes in a row it had none
        self._senders: list[int] = []  # the siblings of the connections received and not yet counted in (`taken_in`)
        self.handed = self.received = 0  # this process's, for tests and stats
        self._inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._outbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._open = False

    # --- the shared file -------------------------------------------------------------------------
    def _slot(self, j: int) -> tuple[int, int]:
        return SLOT.unpack_from(self._loads, Q.size + j * SLOT.size)

    def _handed(self, i: int, j: int) -> int:
        return int(Q.unpack_from(self._loads, self._handed_at + (i * self.workers + j) * Q.size)[0])

    def _bump(self, at: int, by: int = 1) -> None:
        Q.pack_into(self._loads, at, Q.unpack_from(self._loads, at)[0] + by)

    def _on_the_way(self, j: int) -> int:
        """Connections placed with or handed to worker `j` it has not taken yet: its columns of the placed and handed
        tables less its row of the taken one."""
        n = self.workers
        handed = memoryview(self._loads)[self._handed_at:self._taken_at].cast("q")
        taken = memoryview(self._loads)[self._taken_at + j * n * Q.size:self._taken_at + (j + 1) * n * Q.size].cast("q")
        placed = memoryview(self._loads)[self._placed_at:self._placed_at + n * n * Q.size].cast("q")
        try:
            return max(0, sum(handed[j::n]) + sum(placed[j::n]) - sum(taken))
        finally:
            handed.release()
            taken.release()
            placed.release()

    def open(self) -> None:
        """Take connections from now on (when the worker accepts its own): what was handed to this worker's
        predecessors counted as taken (gone with them), the socket bound, the slot's generation bumped. Before, a
        sibling's hand-over is refused (nothing is bound there) and the sibling keeps it. What the predecessors placed
        with siblings and never sent (they died first) is no longer on its way."""
        for i in range(self.workers):
            Q.pack_into(self._loads, self._taken_at + (self.index * self.workers + i) * Q.size, self._handed(i, self.index))
            Q.pack_into(self._loads, self._placed_at + (self.index * self.workers + i) * Q.size, 0)
        path = socket_path(self.directory, self.index)
        with contextlib.suppress(FileNotFoundError):  # this worker's predecessor's
            os.unlink(path)
        self._inbox.bind(path)
        self._inbox.setblocking(False)
        self._outbox.setblocking(False)
        generation = self._slot(self.index)[0] + 1
        SLOT.pack_into(self._loads, Q.size + self.index * SLOT.size, generation, 0)  # holding nothing yet
        self._open = True

    def fileno(self) -> int:
        """The socket siblings hand connections to (readable: `receive`)."""
        return self._inbox.fileno()

    def publish(self, held: int) -> None:
        Q.pack_into(self._loads, Q.size + self.index * SLOT.size + Q.size, held)

    # --- placing ---------------------------------------------------------------------------------
    def place(self, held: int) -> int | None:
        """The sibling a new connection goes to when this worker holds `held` (the new one not counted; those handed
        to it taken first): the one holding fewest, connections on their way to each counted, if fewer than this
        worker (so the spread narrows; alike, it stays here)."""
        best, fewest = None, held
        for j in range(self.workers):
            if j == self.index:
                continue
            generation, theirs = self._slot(j)
            if generation == 0 or self._refused.get(j) == generation or theirs >= fewest:
                continue
            theirs += self._on_the_way(j)
            if theirs < fewest:
                best, fewest = j, theirs
        return best

    def route(self, conn: socket.socket, held: int) -> bool:
        """Place a connection this worker accepted, holding `held` others: True, it goes to a sibling (with the
        others of this accept batch, by `flush`); False, it stays (and is counted here at once). Under the file's
        lock when it is free at once (never waiting on a sibling): two workers placing a burst of connections at the
        same time each see the other's placings."""
        locked = self._try_lock()
        try:
            to = self.place(held)
            if to is not None:
                self._bump(self._placed_at + (self.index * self.workers + to) * Q.size)  # on its way from now
                self._outgoing.setdefault(to, []).append(conn)
                return True
            self.publish(held + 1)
            return False
        finally:
            if locked:
                fcntl.flock(self._lock, fcntl.LOCK_UN)

    def flush(self, *, last: bool = False) -> list[socket.socket]:
        """Send what `route` placed with siblings, each sibling's in one message (a datagram socket queues only
        `net.unix.max_dgram_qlen` messages, 10 by default, however many descriptors each carries); what a sibling
        took is closed here (the sibling has it). What a gone sibling refuses is returned, to be served here, and
        counted off its way; what a busy one has no room for yet stays for the next `flush` (`waiting`), up to
        `FULL_TRIES` times a sibling in a row (or none, `last`), then is returned too. A sent connection moves from
        the placed table to the handed one (counted in the second first: on its way throughout)."""
        kept: list[socket.socket] = []
        for to in list(self._outgoing):
            conns = self._outgoing.pop(to)
            pair = (self.index * self.workers + to) * Q.size
            while conns:
                some = conns[:FDS_PER_MESSAGE]
                sent = self._send(to, some)
                if sent is True:
                    for conn in some:
                        conn.close()
                    self._bump(self._handed_at + pair, len(some))
                    self._bump(self._placed_at + pair, -len(some))
                    self.handed += len(some)
                    self._full.pop(to, None)
                    del conns[:len(some)]
                    continue
                if sent == "full" and not last and self._full.get(to, 0) < FULL_TRIES:
                    self._full[to] = self._full.get(to, 0) + 1
                    self._outgoing[to] = conns  # tried again at the next flush
                else:
                    self._full.pop(to, None)
                    self._bump(self._placed_at + pair, -len(conns))
                    kept += conns
                break
        return kept

    @property
    def waiting(self) -> bool:
        """Connections placed with a sibling that had no room for them yet (`flush` again in `retry_in` s)."""
        return bool(self._outgoing)

    def retry_in(self) -> float:
        """Seconds to the next `flush` of what is waiting: `FULL_RETRY_S`, doubling with each time in a row a sibling
        had no room (a sibling busy for a while is given the time to read, within ~62 ms in all)."""
        return float(FULL_RETRY_S * 2 ** max(0, max(self._full.values(), default=1) - 1))

    def _try_lock(self) -> bool:
        """The file's lock, tried `LOCK_TRIES` times (a sibling holds it for a placing, microseconds, unless it was
        descheduled meanwhile): never waiting on a sibling that stopped while holding it."""
        for _ in range(LOCK_TRIES):
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            return True
        return False  # this decision goes without (a connection may be off by one)

    def taken_in(self, held: int) -> None:
        """The connections `receive` returned are served and counted in `held`: said, and counted off their way
        (together, under the lock when free: never counted on the way and held at once, nor neither)."""
        locked = self._try_lock()
        try:
            self.publish(held)
            for sender in self._senders:
                self._bump(self._taken_at + (self.index * self.workers + sender) * Q.size)
            self._senders.clear()
        finally:
            if locked:
                fcntl.flock(self._lock, fcntl.LOCK_UN)

    def hand(self, conn: socket.socket, to: int) -> bool:
        """Pass `conn` to sibling `to` now (True: it has it, close this copy); False: keep it (the sibling is gone
        or full)."""
        if self._send(to, [conn]) is not True:
            return False
        self._bump(self._handed_at + (self.index * self.workers + to) * Q.size)
        self.handed += 1
        return True

    def _send(self, to: int, conns: list[socket.socket]) -> bool | str:
        """True: sent; "full": the sibling's queue has no room now; "gone": nothing listens there (not asked again
        until it is started again)."""
        try:  # (not `socket.send_fds`, which leaves its `address` out before Python 3.12)
            self._outbox.sendmsg([Q.pack(self.index)],
                                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [c.fileno() for c in conns]))],
                                 0, socket_path(self.directory, to))
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.ENOBUFS):
                return "full"
            self._refused[to] = self._slot(to)[0]
            return "gone"
        return True

    def receive(self) -> list[socket.socket]:
        """The connections siblings handed this worker since the last call (TCP sockets only); once they are served,
        `taken_in` counts them."""
        taken: list[socket.socket] = []
        for _ in range(RECEIVE_BATCH):
            try:
                data, fds, _, _ = socket.recv_fds(self._inbox, 64, FDS_PER_MESSAGE)
            except (BlockingIOError, InterruptedError):
                break
            if len(data) == Q.size and 0 <= (sender := Q.unpack(data)[0]) < self.workers:  # a sibling's
                self._senders += [sender] * len(fds)
            for fd in fds:
                try:
                    conn = socket.socket(fileno=fd)
                except OSError:  # not a socket
                    os.close(fd)
                    continue
                if conn.type != socket.SOCK_STREAM or conn.family not in (socket.AF_INET, socket.AF_INET6):
                    conn.close()
                    continue
                taken.append(conn)
        self.received += len(taken)
        return taken

    def close(self) -> None:
        """No more connections to or from here: siblings' hand-overs are refused (and kept by them)."""
        if self._inbox.fileno() < 0:
            return
        if self._open:
            self.publish(GONE)
        self._inbox.close()  # its path stays (the next worker of this index unlinks it): never another's removed
        self._outbox.close()
        self._loads.close()
        os.close(self._lock)
