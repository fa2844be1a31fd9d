"""Connections spread evenly among the workers of `mma2a serve --workers N`.

Each worker listens on the one address with SO_REUSEPORT, and the kernel puts each new connection in one worker's
accept queue by a hash of the connection's addresses and ports. Few long-lived connections (a load balancer's pool
of keep-alive connections, a benchmark's 16) then split unevenly — 3 and 13 as often as 8 and 8 — and the worker
holding most runs at its CPU's limit while the other waits for work. As Envoy's exact connection balance does among
its threads, a worker that accepts a connection while it holds more than a sibling hands it to the sibling holding
fewest, before a byte of it is read: through the sibling's Unix datagram socket (the descriptor passed with
SCM_RIGHTS; TLS, if any, not yet begun). A connection moves once at most: one a worker was handed is its own. A
sibling that does not take it (gone, restarting, draining: its socket refuses; its queue full) leaves it with the
worker that accepted it, so nothing waits on a sibling.

What each worker holds is in `loads`, a file of one slot a worker (its generation, bumped at each start, and the
connections it holds), mapped by all and written by each in its own slot only: at each accept and hand-over and once
a second (a closed connection counts until then). A sibling that refused a connection is not asked again until its
generation changes (it was started again).

The files are in a directory the supervisor makes (0700) and names in the workers' environment: `loads` and
`w<index>.sock`, each worker's socket. Only this user's processes can reach them, and what arrives is served only if
it is a TCP socket (anything else is closed).

Standard library only; no clock.
"""

from __future__ import annotations

import array
import contextlib
import errno
import mmap
import os
import socket
import struct

SLOT = struct.Struct("<qq")  # a worker's: its generation (0: never started), the connections it holds
HELD = struct.Struct("<q")
LOADS = "loads"
BALANCE_PREFIX = "mma2a-balance-"  # the supervisor's directory (in the temporary directory; `task_files.held_dir`)
GONE = 1 << 62  # what a closed worker says it holds: no sibling hands it anything
RECEIVE_BATCH = 64  # connections taken each time the socket is readable
FDS_PER_MESSAGE = 4  # room for descriptors in one message (a sibling sends one; more are closed by the kernel)


def make_loads(directory: str, workers: int) -> None:
    """The `loads` file of `workers` workers, in `directory` (the supervisor's)."""
    with open(os.path.join(directory, LOADS), "xb") as f:
        f.write(bytes(SLOT.size * workers))


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
            if size < SLOT.size * (index + 1) or size % SLOT.size:
                raise ValueError(f"{directory}/{LOADS}: {size} bytes, no slot for worker {index}")
            self._loads = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.workers = size // SLOT.size
        self._refused: dict[int, int] = {}  # a sibling that refused a connection -> its generation then
        self.handed = self.received = 0
        self._inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._outbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._open = False

    def open(self) -> None:
        """Take connections from now on (when the worker accepts its own): the socket bound, the slot's generation
        bumped. Before, a sibling's hand-over is refused (nothing is bound there) and the sibling keeps it."""
        path = socket_path(self.directory, self.index)
        with contextlib.suppress(FileNotFoundError):  # this worker's predecessor's
            os.unlink(path)
        self._inbox.bind(path)
        self._inbox.setblocking(False)
        self._outbox.setblocking(False)
        generation = SLOT.unpack_from(self._loads, self.index * SLOT.size)[0] + 1
        SLOT.pack_into(self._loads, self.index * SLOT.size, generation, 0)  # holding nothing yet
        self._open = True

    def fileno(self) -> int:
        """The socket siblings hand connections to (readable: `receive`)."""
        return self._inbox.fileno()

    def publish(self, held: int) -> None:
        HELD.pack_into(self._loads, self.index * SLOT.size + 8, held)

    def place(self, held: int, given: dict[int, int]) -> int | None:
        """The sibling a new connection goes to, when this worker holds `held` (the new one not counted) and has
        handed `given` (sibling -> connections) since it last read them: the one holding fewest, if fewer than
        `held` (so the spread narrows; alike, it stays here)."""
        best, fewest = None, held
        for j in range(self.workers):
            if j == self.index:
                continue
            generation, theirs = SLOT.unpack_from(self._loads, j * SLOT.size)
            if generation == 0 or self._refused.get(j) == generation:
                continue
            theirs += given.get(j, 0)
            if theirs < fewest:
                best, fewest = j, theirs
        return best

    def hand(self, conn: socket.socket, to: int) -> bool:
        """Pass `conn` to sibling `to` (True: it has it, close this copy); False: keep it (the sibling is gone or
        full)."""
        try:
            # (not `socket.send_fds`, which leaves its `address` out before Python 3.12)
            self._outbox.sendmsg([b"c"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [conn.fileno()]))],
                                 0, socket_path(self.directory, to))
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ENOBUFS):  # gone: not asked again until it is started again
                self._refused[to] = SLOT.unpack_from(self._loads, to * SLOT.size)[0]
            return False
        self.handed += 1
        return True

    def receive(self) -> list[socket.socket]:
        """The connections siblings handed this worker since the last call (TCP sockets only)."""
        taken: list[socket.socket] = []
        for _ in range(RECEIVE_BATCH):
            try:
                _, fds, _, _ = socket.recv_fds(self._inbox, 16, FDS_PER_MESSAGE)
            except (BlockingIOError, InterruptedError):
                break
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
