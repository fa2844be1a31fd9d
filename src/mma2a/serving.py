"""Serving ASGI apps with uvicorn: fast loop/parser when installed, in-process runs (listen sockets and free loopback
ports: `mma2a.listen`, imported here too).

Every app is served with `DirectWebSocketProtocol` (WebSockets, plus the direct I/O that
live streams use) by `Server`, uvicorn's server with a quieter idle loop, and with connection
deadlines (`mma2a.deadlines`: headers, bodies, keep-alive, WebSocket pings).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import functools
import gc
import logging
import os
import resource
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any

import uvicorn

from .balance import Balance
from .deadlines import Timeouts, http_protocol
from .directws import DirectWebSocketProtocol
from .listen import ListenError as ListenError
from .listen import free_port as free_port
from .listen import listen_socket as listen_socket

if TYPE_CHECKING:
    from .tls import ServerTLS


log = logging.getLogger("mma2a.serving")


# WebSockets here carry media (already compressed: Opus, JPEG, H.264...): per-message deflate
# would spend more CPU than the relay itself for nothing, so it is not offered.
WEBSOCKETS: dict[str, Any] = {"ws": DirectWebSocketProtocol, "ws_per_message_deflate": False}


def uvicorn_config(app: Any, host: str, port: int, *, timeouts: Timeouts | None = None, tls: ServerTLS | None = None,
                   **kw: Any) -> uvicorn.Config:
    loop = "uvloop" if _has("uvloop") else "asyncio"
    timeouts = timeouts or Timeouts()
    http = http_protocol(timeouts, "httptools" if _has("httptools") else "h11")
    # no `server: uvicorn` on every answer: it names the software to whoever probes (as nginx's `server_tokens off`)
    # and is checked and sent for nothing; `date` stays (RFC 9110 6.6.1: an origin server with a clock sends it)
    options: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "on", "server_header": False,
                               **WEBSOCKETS,
                               **timeouts.uvicorn_options(), "http": http, **kw}
    options.update(tls_options(tls, options["http"], options["ws"]))
    return uvicorn.Config(app, host=host, port=port, loop=loop, **options)


def tls_options(tls: ServerTLS | None, http: str | type[Any], ws: Any) -> dict[str, Any]:
    """uvicorn options serving TLS from `tls`' context, with the protocols that pass client certificates on."""
    if tls is None:
        return {}
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    from .tls import with_peer_identity

    context = tls.context
    http_class = import_from_string(HTTP_PROTOCOLS[http]) if isinstance(http, str) else http
    return {
        "ssl_context_factory": lambda _config, _default: context,
        "http": with_peer_identity(http_class),
        "ws": with_peer_identity(ws),
    }


ACCEPT_BATCH = 128  # connections a listening socket accepts each time it is readable (`BatchAccept`)
ACCEPT_RETRY_S = 1.0  # out of descriptors (EMFILE): accepting pauses this long, as asyncio's own server does


class BatchAccept:
    """A listening socket served by accepting up to `ACCEPT_BATCH` connections each time it is readable, each handed
    to `loop.connect_accepted_socket` with the server's protocol (what `loop.create_server` does, less the accept).

    libuv (uvloop's) accepts one connection per loop iteration since 1.45 (libuv#3696, "don't accept() connections in
    a loop"): on a busy gateway an iteration runs every ready callback of every connection, tens of milliseconds,
    and 1,024 wrk connections opened at once waited in the kernel's accept queue for seconds (300-600 still queued
    after 5 s, accepted ~16 a second: wrk's 2 s timeouts, bench/connections.py), as would clients that connect per
    request. asyncio's own loop accepts up to its backlog per readiness; this does the same on either loop. The
    socket is the caller's to close (uvicorn closes the sockets it was given); `close` stops accepting. A socket given
    bound but not yet listening is put to listen with `backlog`, as `loop.create_server` does with its sockets."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol_factory: Callable[[], Any],
                 ssl: Any = None, ssl_handshake_timeout: float | None = None, *, backlog: int = 2048,
                 balance: Balance | None = None, held: Callable[[], Collection[Any]] | None = None) -> None:
        self.loop, self.sock, self.protocol_factory = loop, sock, protocol_factory
        self.ssl, self.ssl_handshake_timeout = ssl, ssl_handshake_timeout
        self.sockets = [sock]
        self._tasks: dict[asyncio.Task[Any], list[Any]] = {}  # a connection being set up -> its protocol, once made
        self._serving = True
        self._tcp = sock.family in (socket.AF_INET, socket.AF_INET6)
        # `serve --workers N`: connections spread evenly among the workers (`mma2a.balance`); `held`: the protocols of
        # the connections the server holds (those being set up here are added: `held()`)
        self.balance, self._held = balance, held
        self._retry: asyncio.TimerHandle | None = None  # the next flush of hand-overs a busy sibling had no room for
        sock.listen(backlog)
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._accept)
        if balance is not None:
            balance.open()
            loop.add_reader(balance.fileno(), self._receive)

    def held(self) -> int:
        """The connections this server holds: its protocols' (`held`: the server's set of them), and those accepted
        whose protocol is not among them yet (being set up, a TLS handshake under way): each once."""
        if self._held is None:
            return len(self._tasks)
        connections = self._held()
        return len(connections) + sum(1 for made in self._tasks.values() if not made or made[0] not in connections)

    def _accept(self) -> None:
        balance = self.balance
        if balance is not None:  # what siblings handed this worker first: what it holds, counted
            self._receive()
        try:
            self._accept_batch(balance)
        finally:
            self._flush()

    def _flush(self) -> None:
        """The hand-overs placed since the last flush sent; what a sibling refused served here; what a busy sibling
        had no room for sent again in a moment (`Balance.flush`)."""
        balance = self.balance
        if balance is None or not self._serving:
            return
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        for conn in balance.flush():
            self._serve(conn)
        balance.publish(self.held())
        if balance.waiting and self._retry is None:
            self._retry = self.loop.call_later(balance.retry_in(), self._flush)

    def _accept_batch(self, balance: Balance | None) -> None:
        held = self.held() if balance is not None else 0  # counted once a batch: nothing else runs meanwhile
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return  # nothing more waits
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.error("cannot accept a connection (%s): accepting again in %.0f s (raise the open files limit)",
                              os.strerror(exc.errno), ACCEPT_RETRY_S)
                    self.loop.remove_reader(self.sock.fileno())
                    self.loop.call_later(ACCEPT_RETRY_S, self._resume)
                    return
                log.warning("accept failed: %s", exc)
                return
            conn.setblocking(False)
            if self._tcp:
                with contextlib.suppress(OSError):
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if balance is not None:
                if balance.route(conn, held):
                    continue  # a sibling holding fewer will have it (`flush`)
                held += 1
            self._serve(conn)

    def _receive(self) -> None:
        """Connections a sibling worker accepted and handed here (`mma2a.balance`)."""
        if self.balance is None or not self._serving:
            return
        taken = self.balance.receive()
        for conn in taken:
            conn.setblocking(False)
            self._serve(conn)
        self.balance.taken_in(self.held())

    def publish_held(self) -> None:
        """Say again what this server holds (closed connections counted out): once a second, from the server's tick."""
        if self.balance is not None and self._serving:
            self.balance.publish(self.held())

    def _serve(self, conn: socket.socket) -> None:
        options: dict[str, Any] = {} if self.ssl is None else {
            "ssl": self.ssl, "ssl_handshake_timeout": self.ssl_handshake_timeout}
        made: list[Any] = []
        task = self.loop.create_task(self._connect(conn, options, made))
        self._tasks[task] = made
        task.add_done_callback(self._connected)

    def _connected(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)

    async def _connect(self, conn: socket.socket, options: dict[str, Any], made: list[Any]) -> None:
        def protocol() -> Any:
            made.append(self.protocol_factory())
            return made[0]

        try:
            await self.loop.connect_accepted_socket(protocol, conn, **options)
        except (OSError, asyncio.TimeoutError) as exc:  # a TLS handshake that failed or took too long, a reset
            log.debug("connection dropped before it was served: %s", exc)
            conn.close()

    def _resume(self) -> None:
        if self._serving and self.sock.fileno() >= 0:
            self.loop.add_reader(self.sock.fileno(), self._accept)

    def close(self) -> None:
        if self._serving:
            self._serving = False
            if self.sock.fileno() >= 0:
                self.loop.remove_reader(self.sock.fileno())
            if self.balance is not None:  # siblings keep what they accept from now on
                if self._retry is not None:
                    self._retry.cancel()
                for conn in self.balance.flush(last=True):  # placed, and no sibling had room: never served
                    conn.close()
                self.loop.remove_reader(self.balance.fileno())
                self.balance.close()

    async def wait_closed(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class Server(uvicorn.Server):
    """uvicorn's server, ticking once a second rather than ten times, and woken at once to exit.

    uvicorn's main loop wakes every 0.1 s only to refresh the `Date` header (once a second)
    and notice `should_exit`; on a virtual machine each wake of an idle process costs about
    0.1-0.2 ms of CPU. Here a signal or `exit()` wakes the loop directly, so only the
    once-a-second work stays on a timer. Subclasses can tick faster while they wait for
    something (`tick_interval`).
    """

    def __init__(self, config: uvicorn.Config, *, on_started: Callable[[], None] | None = None,
                 tls: ServerTLS | None = None, balance: Balance | None = None) -> None:
        super().__init__(config)
        self.balance = balance  # a worker of `serve --workers N`: its sockets' connections spread (`mma2a.balance`)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tick: asyncio.Future[None] | None = None
        self._on_started = on_started
        self._tls = tls
        self._tls_checked = time.monotonic()
        self._trimmed = time.monotonic()
        self._trim: asyncio.Future[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up, then `on_started` once the server accepts connections. Sockets passed in (the
        gateway's: `listen_socket`) are served by `BatchAccept`."""
        if sockets is not None or (self.config.ssl is not None and self.config.uds is None and self.config.fd is None):
            await self._startup_tls(sockets)
        else:
            await super().startup(sockets=sockets)
        if self.started and self._on_started is not None:
            self._on_started()

    async def _startup_tls(self, sockets: list[socket.socket] | None) -> None:
        """uvicorn's start-up for a TLS listener, with the TLS handshake held to the header deadline, and for sockets
        passed in (TLS or not: served by `BatchAccept`).

        The header deadline (`mma2a.deadlines`) starts when the HTTP protocol sees the connection, which over TLS is
        after the handshake: uvicorn leaves the handshake to asyncio's default of 60 s, so silent TCP connections to
        a TLS port stayed open a minute each (100 of them 60 s+ against a 10 s deadline: security round 4 #7).
        Here the listener is made as uvicorn makes it (the standard host/port case and passed sockets), with
        `ssl_handshake_timeout` = `header_timeout_s`."""
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            raise SystemExit(3)  # uvicorn's STARTUP_FAILURE
        config = self.config
        timeouts = getattr(config.http_protocol_class, "timeouts", None)
        handshake_s = timeouts.header_s if isinstance(timeouts, Timeouts) else Timeouts().header_s

        def create_protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            return config.http_protocol_class(config=config, server_state=self.server_state,  # type: ignore[call-arg]
                                              app_state=self.lifespan.state, _loop=_loop)

        loop = asyncio.get_running_loop()
        if sockets is not None:
            self.servers = [BatchAccept(loop, sock, create_protocol, config.ssl,  # type: ignore[misc]
                                        handshake_s if config.ssl is not None else None, backlog=config.backlog,
                                        balance=self.balance if i == 0 else None, held=self._connections)
                            for i, sock in enumerate(sockets)]
        else:
            options: dict[str, Any] = {"ssl": config.ssl, "backlog": config.backlog, "ssl_handshake_timeout": handshake_s}
            try:
                server = await loop.create_server(create_protocol, host=config.host, port=config.port, **options)
            except OSError as exc:
                uvicorn.server.logger.error(exc)
                await self.lifespan.shutdown()
                raise SystemExit(3) from None
            assert server.sockets is not None
            self.servers = [server]
            self._log_started_message(list(server.sockets))
            if self.balance is not None:  # no socket of its own to spread
                self.balance.close()
        self.started = True

    def _connections(self) -> Collection[Any]:
        return self.server_state.connections

    def tick_interval(self) -> float:
        return 1.0

    async def serve_between(self, sockets: list[socket.socket], *, start: Callable[[], Awaitable[None]],
                            stop: Callable[[], Awaitable[None]]) -> None:
        """Serve with the app's own start and stop around it (for apps run with `lifespan="off"`).

        All of it runs inside uvicorn's signal capture, so a SIGTERM that uvicorn re-raises
        after its graceful shutdown (as supervisors expect) comes only after `stop` ran; an
        error from `start` propagates after `stop`.
        """
        with self.capture_signals():
            try:
                await start()
                await self._serve(sockets)
            finally:
                await stop()

    async def main_loop(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 10) % 864000  # uvicorn does its once-a-second work when counter % 10 == 0
            self._tick = tick = loop.create_future()  # a bare future and timer: no task per tick
            timer = loop.call_later(self.tick_interval(), _resolve, tick)
            try:
                await tick
            finally:
                timer.cancel()
            should_exit = await self.on_tick(counter)

    async def on_tick(self, counter: int) -> bool:
        if self._tls is not None and time.monotonic() - self._tls_checked >= self._tls.config.reload_s:
            self._tls_checked = time.monotonic()
            self._tls.reload_if_changed()  # a few stat() calls; a changed file is loaded into the same context
        if self.balance is not None:  # connections closed since the last accept counted out
            for server in self.servers:
                if isinstance(server, BatchAccept):
                    server.publish_held()
        now = time.monotonic()
        if now - self._trimmed >= TRIM_EVERY_S and self._trim is None:
            self._release_memory(now)
        return await super().on_tick(counter)

    def _release_memory(self, now: float) -> None:
        """Give the memory freed by closed connections back to the system, in a thread, every `TRIM_EVERY_S`.

        Each TLS connection holds about 50 KB of OpenSSL state and buffers (uvloop; about 300 KB on asyncio's
        own loop; gRPC's core its own) while it is open; freed, it stayed in the C allocator's heap: 2,000 silent
        connections left the gateway +104 MB after they had all closed (security round 4 #7), both because their
        cycles waited for a full collection and because freed C memory stays in the heap. So: a full collection
        when the process has frozen its start-up heap (~1 ms on a started gateway), then `malloc_trim` in a thread (~35 ms to give back 100 MB,
        ~0.1 ms when there is nothing to give back; bench/tls_handshakes.py)."""
        self._trimmed = now
        if _settled:  # a served process (`settle_heap`): only what came since start is looked at, ~1 ms;
            gc.collect()  # closed connections are cycles (protocol, transport, SSL object) that outlived the young
            # generation. (A process that froze nothing, such as a test run, is not collected in full here.)
            # (Not `gc.get_freeze_count()`, which walks every frozen object: 4-30 ms of the loop every 10 s.)
        trim = self._trim = asyncio.ensure_future(asyncio.to_thread(release_freed_memory))
        trim.add_done_callback(self._trimmed_done)

    def _trimmed_done(self, trim: asyncio.Future[None]) -> None:
        self._trim = None
        if not trim.cancelled() and trim.exception() is not None:
            log.warning("releasing freed memory failed: %r", trim.exception())

    def wake(self) -> None:
        """Run the next tick now (safe from signal handlers and other threads)."""
        loop, tick = self._loop, self._tick
        if loop is not None and tick is not None and not loop.is_closed():
            loop.call_soon_threadsafe(_resolve, tick)

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        self.wake()

    def exit(self) -> None:
        """Ask the server to finish (as SIGTERM would)."""
        self.should_exit = True
        self.wake()


# Past this many open files a server says so at start: every client connection, every connection to an agent, every
# open file of the history and the blobs takes one, and 1,024 (many systems' default soft limit) is reached by
# 512 clients whose legs each hold a connection to an agent
FEW_OPEN_FILES = 4096
# where the hard limit is unlimited (macOS), the soft one is raised this far (Linux's default fs.nr_open)
OPEN_FILES_CAP = 1 << 20


def raise_open_files_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit, as servers do (nginx's worker_rlimit_nofile, Go's
    runtime since 1.19), so connections are not refused with EMFILE at the soft limit a login shell leaves (often
    1,024). Children inherit it. Returns the soft limit now in force (logged as a warning when still low)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = OPEN_FILES_CAP if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError) as exc:  # a sandbox that refuses: keep the soft limit, said below
            log.debug("could not raise RLIMIT_NOFILE from %d to %d: %s", soft, want, exc)
    if soft != resource.RLIM_INFINITY and soft < FEW_OPEN_FILES:
        log.warning("this process may open only %d files (RLIMIT_NOFILE, hard limit %s): each client connection and "
                    "each connection to an agent takes one; raise the hard limit (`ulimit -Hn`, systemd's "
                    "LimitNOFILE=, docker's --ulimit nofile=) to serve more clients at once", soft,
                    "unlimited" if hard == resource.RLIM_INFINITY else hard)
    return soft


TRIM_EVERY_S = 10.0  # how often a server gives the C heap's free pages back (`Server._release_memory`)


def release_freed_memory() -> None:
    """Return the C heap's free pages to the system (glibc `malloc_trim(0)`; nothing where there is none)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): freed memory is the allocator's to return
        return None


# Young-generation threshold for a server process. A request leaves a few dozen short-lived
# containers behind (freed by reference counting, not by the collector); CPython's default of
# 700 allocations runs a young collection every few requests and, through the older
# generations, a full one every few thousand — a pause that grows with the live heap.
GC_THRESHOLDS = (20_000, 50, 100)


_settled = False  # whether this process froze its start-up heap (`settle_heap`)


def settle_heap() -> None:
    """After start: collect once, move every surviving object out of the collector's sight
    (`gc.freeze`), and collect the young generation less often. Full collections then
    traverse only what was allocated since start, so their pauses stay short and flat."""
    global _settled
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    _settled = True


def _has(mod: str) -> bool:
    try:
        __import__(mod)
        return True
    except ImportError:
        return False


@contextlib.asynccontextmanager
async def running(app: Any, host: str = "127.0.0.1", port: int | None = None, *,
                  timeouts: Timeouts | None = None, tls: ServerTLS | None = None,
                  sock: socket.socket | None = None) -> AsyncIterator[str]:
    """Serve an ASGI app on a loopback port inside this event loop; yields its base URL (https:// with `tls`).

    Without `port`, on a socket bound here to a port the system picks (or `sock`, one the caller bound with
    `listen_socket` because it needed the port first, for a config), served as `serve` serves its sockets: a port
    picked by `free_port` and bound later could be taken meanwhile by any other process's connection (an outgoing
    connection's port comes from the same range), which failed a test run once in ~2,000 servers."""
    if sock is None and not port:
        sock = listen_socket(host, 0)
    if sock is not None:
        port = int(sock.getsockname()[1])
    server = Server(uvicorn_config(app, host, port or 0, timeouts=timeouts, tls=tls), tls=tls)  # as `serve` serves
    task = asyncio.create_task(server.serve(sockets=None if sock is None else [sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError(f"server on {host}:{port} did not start")
            await asyncio.sleep(0.01)
        yield f"{'https' if tls else 'http'}://{host}:{port}"
    finally:
        server.exit()
        await task
        if sock is not None:
            sock.close()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


RECANCEL_S = 1.0  # a task still running this long after its cancel is cancelled again


async def cancel_tasks(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel background tasks and wait for them to end (whatever they raise); empties the list.

    A task still running `RECANCEL_S` after its cancel is cancelled again, until it ends: on Python 3.11
    `asyncio.wait_for` loses a cancel that arrives as its inner future completes (CPython gh-86296, fixed in 3.12;
    nats-py's fetch and KV watchers use it), and a loop around such a call then runs on — awaited once, its stop
    (and a gateway's SIGTERM) waited forever."""
    pending = {t for t in tasks if not t.done()}
    for t in pending:
        t.cancel()
    while pending:
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_S)
        for t in pending:
            log.info("background task %s still running after its cancel: cancelled again", t.get_name())
            t.cancel()
    for t in tasks:
        if not t.cancelled():
            t.exception()  # retrieved (whatever it raised): never 'exception was never retrieved'
    tasks.clear()
