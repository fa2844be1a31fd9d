"""A lean HTTP/1.1 client for agent calls: keep-alive connections on asyncio protocols, answers parsed by httptools.

An exchange with an agent is one request with a whole body and one whole answer. aiohttp's
per-request machinery (request and response objects, payload registry, timers, tracing
hooks, cookies) costs about ten times what that needs (bench/gateway.py's `client` section,
docs/benchmarks.md), so the gateway's calls to `http://` agents go through this pool:
one write per request, the answer parsed in C, one future per exchange. `https://` agents,
streams (SSE) and card fetches stay on aiohttp.

What it keeps of a real client: a connection limit per host (callers wait for a slot),
a deadline per request covering the wait, the connect, the write and the whole answer;
keep-alive connections closed after `keepalive_s` idle; a stale keep-alive connection the
server closed is replaced once, transparently, when nothing of its answer arrived; answers
delimited by length, by chunks or by the end of the connection; a byte cap on answers;
errors that say what happened (`ConnectFailed`, `Disconnected`, `DeadlineExceeded`,
`BadResponse`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

from ..._frozen import quick_init
from ...loops import running_loop

_BIG_BODY = 64 * 1024  # above this the head and the body are written as two buffers (no copy of the body)


class HttpError(Exception):
    """A call that produced no usable answer. `bare`: the same said without the host and port (what a client of the
    gateway may read; the message names them for the operator)."""

    def __init__(self, message: str, *, bare: str | None = None) -> None:
        super().__init__(message)
        self.bare = bare if bare is not None else message


class ConnectFailed(HttpError):
    """No connection could be made (refused, unknown host, unreachable network)."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(f"cannot connect to {host}:{port} ({reason})", bare=f"cannot connect ({reason})")
        self.host, self.port, self.reason = host, port, reason


class Disconnected(HttpError):
    """The connection closed (or was reset) before the whole answer arrived; `answered`: some of it had."""

    def __init__(self, message: str, *, answered: bool, bare: str | None = None) -> None:
        super().__init__(message, bare=bare)
        self.answered = answered


class DeadlineExceeded(HttpError):
    """The whole exchange (waiting for a connection, connecting, sending, the answer) took longer than allowed."""


class BadResponse(HttpError):
    """The answer is not valid HTTP/1.1, or larger than the pool allows."""


@quick_init  # one a request: stored through its slots, not three `object.__setattr__` calls
@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: tuple[tuple[bytes, bytes], ...]  # as received; names as the server spelled them
    body: bytes

    def header(self, name: str) -> str | None:
        """The first header called `name` (any case), decoded as Latin-1, or None."""
        key = name.lower().encode()
        for k, v in self.headers:
            if k.lower() == key:
                return v.decode("latin-1")
        return None

    def headers_named(self, *names: bytes) -> list[str | None]:
        """The first header of each of `names` (lowercase, as bytes), decoded as Latin-1, or None: one pass over the
        answer's headers for all of them."""
        found: list[str | None] = [None] * len(names)
        for k, v in self.headers:
            low = k.lower()
            if low in names:
                i = names.index(low)
                if found[i] is None:
                    found[i] = v.decode("latin-1")
        return found


@dataclass(frozen=True, slots=True)
class _Target:
    """A parsed `http://` URL: where to connect and what to put in the request line."""

    host: str
    port: int
    path: bytes  # path and query
    host_header: bytes


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one exchange at a time (no pipelining)."""

    def __init__(self, pool: HttpPool, target: _Target) -> None:
        self.pool, self.target = pool, target
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[Response] | None = None
        self.closed = False
        self.reused = False  # it has answered before: a close before any answer may be a stale keep-alive
        self.idle_since = 0.0
        self.deadline = 0.0  # the exchange in flight's, in loop time
        self._timer: asyncio.TimerHandle | None = None  # due at or before `deadline` while an exchange is in flight
        self._due = 0.0
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.size = 0
        self.answered = False
        self.headers_done = False
        self.framed = False  # Content-Length or chunked: the answer ends by itself, not at the close

    # --- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # not TCP (a test's socket pair): nothing to tune
                pass

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # bytes nobody asked for: the connection cannot be trusted any more
            self.close()
            return
        self.answered = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(BadResponse(f"malformed HTTP answer from {self.target.host}:{self.target.port}: {exc}",
                                   bare=f"malformed HTTP answer: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.pool._gone(self)
        if self.waiter is None or self.waiter.done():
            return
        if self.headers_done and not self.framed:  # an answer delimited by the end of the connection
            self._complete(keep=False)
            return
        why = f" ({exc.strerror or exc})" if isinstance(exc, OSError) else ""
        what = "in the middle of its answer" if self.answered else "before answering"
        self._fail(Disconnected(f"{self.target.host}:{self.target.port} closed the connection {what}{why}",
                                answered=self.answered, bare=f"the agent closed the connection {what}{why}"))

    # --- httptools callbacks ----------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))
        low = name.lower()
        if low == b"content-length" or (low == b"transfer-encoding" and b"chunked" in value.lower()):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        if self.waiter is None:  # failed already (too large): the rest of this read is dropped
            return
        self.size += len(body)
        if self.size > self.pool.max_response_bytes:
            self._fail(BadResponse(f"the answer from {self.target.host}:{self.target.port} is larger than "
                                   f"{self.pool.max_response_bytes} bytes",
                                   bare=f"the answer is larger than {self.pool.max_response_bytes} bytes"))
            self.close()
            return
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.waiter is None:
            return
        if 100 <= self.status < 200:  # an interim answer (100 Continue, 103 Early Hints): the real one follows
            self._reset()
            self.answered = True
            return
        self._complete(keep=self.parser.should_keep_alive())

    # --- the exchange -----------------------------------------------------------------------
    def _complete(self, *, keep: bool) -> None:
        waiter = self.waiter
        response = Response(self.status, tuple(self.headers), b"".join(self.body))
        self.waiter = None
        self._reset()
        if not keep:
            self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result(response)

    def _fail(self, exc: HttpError) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def watch(self, deadline: float, loop: asyncio.AbstractEventLoop) -> None:
        """Expire the exchange now in flight at `deadline`. The connection keeps one timer across its exchanges (a timer
        made and cancelled per request cost more than the rest of the pool's work): it is made again only when it is
        due later than `deadline`; when it fires early (the exchange it was made for ended), it looks again."""
        self.deadline = deadline
        timer = self._timer
        if timer is not None:
            if self._due <= deadline:
                return
            timer.cancel()
        self._due = deadline
        self._timer = loop.call_at(deadline, self._check, loop)

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if self.waiter is None or self.closed:  # idle (or gone): nothing to time
            return
        if loop.time() < self.deadline:  # a later exchange's deadline: wait for that one
            self._due = self.deadline
            self._timer = loop.call_at(self.deadline, self._check, loop)
            return
        self.expire()

    def expire(self) -> None:
        """The deadline passed with the answer outstanding: the connection cannot be reused."""
        self._fail(DeadlineExceeded(f"no whole answer from {self.target.host}:{self.target.port} in time"))
        self.close()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()
            self.pool._gone(self)


class HttpPool:
    """Keep-alive HTTP/1.1 connections to `http://` servers, at most `limit_per_host` per host and port."""

    def __init__(self, *, limit_per_host: int = 256, keepalive_s: float = 30.0,
                 max_response_bytes: int = 256 * 1024 * 1024) -> None:
        self.limit_per_host = limit_per_host
        self.keepalive_s = keepalive_s
        self.max_response_bytes = max_response_bytes
        self._targets: dict[str, _Target] = {}
        self._blocks: dict[tuple[tuple[str, str], ...], bytes] = {}  # encoded header lines, by the headers
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._open: dict[tuple[str, int], set[_Connection]] = {}
        self._connecting: dict[tuple[str, int], int] = {}
        self._waiters: dict[tuple[str, int], deque[asyncio.Future[_Connection | None]]] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop its connections are on (`loops.running_loop`)

    def target(self, url: str) -> _Target:
        """The parsed URL (cached); `ValueError` for anything but an `http://` URL with a host."""
        t = self._targets.get(url)
        if t is not None:
            return t
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"not an http:// URL with a host: {url!r}")
        port = parts.port or 80
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        t = _Target(host, port, path.encode("ascii", "strict"),
                    (shown if port == 80 else f"{shown}:{port}").encode("idna" if not host.isascii() else "ascii"))
        if len(self._targets) < 4096:
            self._targets[url] = t
        return t

    async def request(self, method: str, url: str, body: bytes = b"", headers: Mapping[str, str] | None = None, *,
                      timeout_s: float = 30.0, fresh: Callable[[], Mapping[str, str]] | None = None) -> Response:
        """One exchange: `method url` with `body` and `headers`; the whole answer, whatever its status. `fresh`: headers
        made anew for each send (a federation assertion is good for one: the retry on a new connection gets its own).

        Raises `ConnectFailed`, `Disconnected`, `DeadlineExceeded` (after `timeout_s` in all) or `BadResponse`.
        """
        if self._closed:
            raise HttpError("the connection pool is closed")
        target = self.target(url)
        loop = self._loop = running_loop(self._loop)
        deadline = loop.time() + timeout_s
        start = b"%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n%s" % (
            method.encode("ascii"), target.path, target.host_header, len(body), self._header_block(headers))
        head = start + (_lines(fresh()) if fresh is not None else b"") + b"\r\n"
        conn = self._reuse((target.host, target.port)) or await self._acquire(target, deadline, loop)
        waiter = self._send(conn, head, body, deadline, loop)  # (`_exchange`'s, in this frame: no coroutine of its own)
        try:
            response = await waiter
        except BaseException as exc:
            self._abandon(conn, waiter)
            if not isinstance(exc, Disconnected) or not conn.reused or exc.answered or loop.time() >= deadline:
                raise
        else:
            self._release(conn, loop)
            return response
        # a kept-alive connection the server had closed (an idle timeout, a restart): the ones idle beside it are
        # as old, so they go too, and the one retry runs on a new connection
        self._drop_idle((target.host, target.port))
        conn = await self._acquire(target, deadline, loop, fresh=True)
        if fresh is not None:  # the server may have read the first send before the connection went
            head = start + _lines(fresh()) + b"\r\n"
        return await self._exchange(conn, head, body, deadline, loop)

    def _header_block(self, headers: Mapping[str, str] | None) -> bytes:
        """`headers` as request header lines; an agent's calls repeat the same few, so each block is encoded once."""
        if not headers:
            return b""
        key = tuple(headers.items())
        block = self._blocks.get(key)
        if block is None:
            block = _lines(headers)
            if len(self._blocks) >= 1024:  # per-request headers (a trace's traceparent) never repeat: start again
                self._blocks.clear()
            self._blocks[key] = block
        return block

    async def _exchange(self, conn: _Connection, head: bytes, body: bytes, deadline: float,
                        loop: asyncio.AbstractEventLoop) -> Response:
        waiter = self._send(conn, head, body, deadline, loop)
        try:
            response = await waiter
        except BaseException:
            self._abandon(conn, waiter)
            raise
        self._release(conn, loop)
        return response

    def _send(self, conn: _Connection, head: bytes, body: bytes, deadline: float, loop: asyncio.AbstractEventLoop
              ) -> asyncio.Future[Response]:
        """The request sent on `conn`; the future of its answer, expired at `deadline`."""
        waiter: asyncio.Future[Response] = loop.create_future()
        conn.waiter = waiter
        assert conn.transport is not None
        if len(body) > _BIG_BODY:
            conn.transport.writelines((head, body))
        else:
            conn.transport.write(head + body)
        conn.watch(deadline, loop)
        return waiter

    def _abandon(self, conn: _Connection, waiter: asyncio.Future[Response]) -> None:
        """The answer on `conn` is no longer awaited (an error, a cancel): with it still outstanding, nobody will
        read it, and the connection goes."""
        if conn.waiter is waiter:
            conn.waiter = None
            conn.close()

    # --- the pool ---------------------------------------------------------------------------
    async def _acquire(self, target: _Target, deadline: float, loop: asyncio.AbstractEventLoop, *,
                       fresh: bool = False) -> _Connection:
        """An idle connection to `target` (unless `fresh`), else a new one within the host's limit, else the next
        one a finished caller hands over (`fresh` or not: at the limit, every connection is in use)."""
        key = (target.host, target.port)
        idle = None if fresh else self._reuse(key)
        if idle is not None:
            return idle
        opened = self._open.setdefault(key, set())
        while len(opened) + self._connecting.get(key, 0) >= self.limit_per_host:
            got = await self._wait_for_slot(key, deadline, loop)
            if got is not None:
                return got
        return await self._connect(target, key, deadline, loop)

    def _reuse(self, key: tuple[str, int]) -> _Connection | None:
        """An idle connection to `key` (host, port), or None: the common case, without a coroutine."""
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to have been closed by the server
            if not conn.closed:
                return conn
        return None

    async def _wait_for_slot(self, key: tuple[str, int], deadline: float,
                             loop: asyncio.AbstractEventLoop) -> _Connection | None:
        """A connection handed over by a caller that finished, or None: one closed, a new one may be opened."""
        fut: asyncio.Future[_Connection | None] = loop.create_future()
        queue = self._waiters.setdefault(key, deque())
        queue.append(fut)
        def too_late() -> None:
            if not fut.done():
                fut.set_exception(DeadlineExceeded(
                    f"no free connection to {key[0]}:{key[1]} in time ({self.limit_per_host} in use)"))

        timer = loop.call_at(deadline, too_late)
        try:
            return await fut
        except BaseException:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                conn = fut.result()  # handed over as we were cancelled: pass it on
                if conn is not None:
                    self._release(conn, loop)
            with contextlib.suppress(ValueError):
                queue.remove(fut)
            raise
        finally:
            timer.cancel()

    async def _connect(self, target: _Target, key: tuple[str, int], deadline: float,
                       loop: asyncio.AbstractEventLoop) -> _Connection:
        self._connecting[key] = self._connecting.get(key, 0) + 1
        try:
            async with asyncio.timeout_at(deadline):
                _, conn = await loop.create_connection(lambda: _Connection(self, target), target.host, target.port)
        except TimeoutError:
            raise DeadlineExceeded(f"connecting to {target.host}:{target.port} took too long") from None
        except OSError as exc:
            raise ConnectFailed(target.host, target.port, _reason(exc)) from None
        finally:
            self._connecting[key] -= 1
        if self._closed:
            conn.close()
            raise HttpError("the connection pool is closed")
        self._open.setdefault(key, set()).add(conn)
        return conn

    def _release(self, conn: _Connection, loop: asyncio.AbstractEventLoop) -> None:
        if conn.closed:
            return
        conn.reused = True
        key = (conn.target.host, conn.target.port)
        queue = self._waiters.get(key)
        while queue:
            fut = queue.popleft()
            if not fut.done():
                fut.set_result(conn)
                return
        conn.idle_since = loop.time()
        self._idle.setdefault(key, []).append(conn)
        if self._sweep is None:
            self._sweep = loop.call_later(self.keepalive_s, self._close_idle, loop)

    def _gone(self, conn: _Connection) -> None:
        """A connection closed: it no longer counts against its host's limit; a waiter may open another."""
        key = (conn.target.host, conn.target.port)
        opened = self._open.get(key)
        if opened is None or conn not in opened:
            return
        opened.discard(conn)
        queue = self._waiters.get(key)
        while queue:
            fut = queue.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def _drop_idle(self, key: tuple[str, int]) -> None:
        for conn in self._idle.pop(key, []):
            conn.close()

    def _close_idle(self, loop: asyncio.AbstractEventLoop) -> None:
        self._sweep = None
        cutoff = loop.time() - self.keepalive_s
        left = False
        for key, idle in self._idle.items():
            keep = [c for c in idle if not c.closed and c.idle_since > cutoff]
            for c in idle:
                if not c.closed and c.idle_since <= cutoff:
                    c.close()
            self._idle[key] = keep
            left = left or bool(keep)
        if left and not self._closed:
            self._sweep = loop.call_later(self.keepalive_s, self._close_idle, loop)

    def connections(self, url: str) -> int:
        """Open connections to `url`'s host and port (idle and busy)."""
        t = self.target(url)
        return len(self._open.get((t.host, t.port), ()))

    async def close(self) -> None:
        """Close every connection; exchanges in flight fail with `Disconnected`."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for opened in list(self._open.values()):
            for conn in list(opened):
                conn.close()
        self._idle.clear()
        for queue in self._waiters.values():
            for fut in queue:
                if not fut.done():
                    fut.set_exception(HttpError("the connection pool is closed"))
        self._waiters.clear()
        await asyncio.sleep(0)  # let the transports run their close callbacks


def _lines(headers: Mapping[str, str]) -> bytes:
    """`headers` as request header lines; `ValueError` for a line break in a name or value, or a colon in a name."""
    lines = []
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
            raise ValueError(f"header {name!r} has a line break or a colon in its name or value")
        lines.append(b"%s: %s\r\n" % (name.encode("latin-1"), value.encode("latin-1")))
    return b"".join(lines)


def _reason(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror):
        return f"unknown host: {exc.strerror or exc}"
    if exc.errno:  # asyncio words a refusal "Connect call failed (...)": the system's words are clearer
        return os.strerror(exc.errno)
    return exc.strerror or str(exc) or type(exc).__name__
