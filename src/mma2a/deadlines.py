"""Connection deadlines for uvicorn's HTTP protocols: headers, bodies, keep-alive, WebSocket liveness.

Stock uvicorn cuts only idle keep-alive connections: a client that connects and never finishes
its request headers, or stops halfway through a body, holds its connection (and, for a body,
the request's task) forever. `http_protocol(timeouts, "httptools" | "h11")` gives uvicorn a
protocol class with one timer per connection over the phase it is in:

- headers: from the connection (or the first byte of the next request on a kept-alive
  connection) to the end of the headers, at most `header_s` in all — trickling a byte at a
  time does not extend it. Past it: `408 Request Timeout` and the connection is closed.
- body: at most `body_s` without a byte of the body, while the app is reading it (when the
  app stops reading, flow control pauses the socket and the clock waits). Past it the
  connection is closed and the app's `receive()` gets `http.disconnect`.
- between requests: `keep_alive_s` (uvicorn's `timeout_keep_alive`).
- answers: a peer that leaves the app's writes paused for `write_s` (the write buffer went over its high-water
  mark and the peer did not take it down to the low-water mark: 64 and 16 KiB on asyncio) is reset. A consumer of a live stream, an SSE
  subscriber or a download that never reads otherwise held its connection, its task and a buffer forever
  (200 such consumers of one stream: +54 MB, held after the stream ended).
- WebSocket: a ping every `ws_ping_interval_s`; no pong within `ws_ping_timeout_s` closes it.

The request head (request line and headers) is capped too, at `max_header_bytes`: httptools buffers a
header of any size, so a client could otherwise fill memory within the header deadline (four
connections sending 100 MB of headers took a gateway from 175 to 560 MB, kept after they closed).
Past the cap: `431 Request Header Fields Too Large` and the connection is closed. (h11 has its own cap,
`h11_max_incomplete_event_size`, set to the same value.)

While the app works on a request (and streams its answer: SSE) no other deadline runs.

A connection lost while the app works on one of its requests marks the connection's `client_link.ClientLink` gone
at once, before uvicorn tells the app (`http.disconnect`, to an app that asks): the request's task runs with the link
in `client_link.current`, so the work it queued for a client that left is let go (a leg waiting for an agent's slot:
gateway/downstream/overload.py).

HTTP/1.1 pipelining: uvicorn stops reading a connection while a request waits behind the one being served (its
flow control), so a client that pipelined and closed went unseen, its connection left in CLOSE_WAIT — the request
in progress was served (its leg sent once a slot freed) for a client long gone, and the pipelined one routed before
the close was read. What a client sends behind a request in progress is now read and held, unparsed (`_Pipelined`,
at most `PIPELINED_HELD` bytes; past that reading pauses, as before, and the socket waits for the client's close,
nothing more read: `hangups.py`), and parsed once the requests ahead are answered: its close is seen at once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any, cast

import h11
from asyncio import TimerHandle
from uvicorn.protocols.http.h11_impl import H11Protocol

from . import client_link
from .client_link import ClientLink
from .hangups import hangups

log = logging.getLogger("mma2a.serving")

_TIMEOUT_408 = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


def _too_large_431(limit: int) -> bytes:
    body = (b'{"error":{"code":431,"status":"INVALID_ARGUMENT","message":"request line and headers exceed %d bytes '
            b'(server.max_header_bytes)","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo",'
            b'"reason":"HEADERS_TOO_LARGE","domain":"mma2a","metadata":{"field":"headers"}}]}}' % limit)
    return (b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Per-connection deadlines (seconds), and the request head's byte cap that keeps the header phase bounded in
    memory as its deadline bounds it in time. The defaults cut a stalled client within 30 s."""

    header_s: float = 10.0
    body_s: float = 30.0
    keep_alive_s: float = 5.0
    ws_ping_interval_s: float = 20.0
    ws_ping_timeout_s: float = 10.0
    max_header_bytes: int = 64 * 1024
    write_s: float = 30.0

    def uvicorn_options(self) -> dict[str, Any]:
        """The `uvicorn.Config` options these map to (besides the protocol class)."""
        return {"timeout_keep_alive": self.keep_alive_s, "ws_ping_interval": self.ws_ping_interval_s,
                "ws_ping_timeout": self.ws_ping_timeout_s, "h11_max_incomplete_event_size": self.max_header_bytes}

    def to_json(self) -> dict[str, float]:
        return asdict(self)


class _Deadline:
    """The current phase's deadline on one connection; closes the connection when it passes.

    One timer serves the connection's phases and requests: it is made again only when it is due later than a new
    deadline, and when it fires early (the phase it was made for ended, or moved its deadline on) it looks again.
    A timer made and cancelled for every request cost more than the rest of this class's work."""

    __slots__ = ("deadline", "due", "limit", "phase", "proto", "timer")

    def __init__(self, proto: Any) -> None:
        self.proto = proto
        self.phase: str | None = None
        self.limit = 0.0
        self.deadline = 0.0
        self.due = 0.0  # when `timer` fires
        self.timer: TimerHandle | None = None

    def arm(self, phase: str, limit: float) -> None:
        loop = self.proto.loop
        self.phase, self.limit = phase, limit
        self.deadline = deadline = loop.time() + limit
        timer = self.timer
        if timer is not None:
            if self.due <= deadline:
                return
            timer.cancel()
        self.due = deadline
        self.timer = loop.call_at(deadline, self._fire)

    def touch(self) -> None:
        """Progress in a body: its silence starts again (no new timer: the old one re-checks)."""
        self.deadline = self.proto.loop.time() + self.limit

    def clear(self) -> None:
        """No deadline until the next phase is armed (the timer, if any, finds none when it fires)."""
        self.phase = None

    def stop(self) -> None:
        """The connection is gone: no timer left behind."""
        self.phase = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _fire(self) -> None:
        self.timer = None
        proto = self.proto
        transport = getattr(proto, "transport", None)
        if self.phase is None or transport is None or transport.is_closing():
            return
        loop = proto.loop
        if self.phase == "body" and proto.flow is not None and proto.flow.read_paused:
            self.deadline = loop.time() + self.limit  # the app is not reading: the client is not the one stalling
        if loop.time() < self.deadline:
            self.due = self.deadline
            self.timer = loop.call_at(self.deadline, self._fire)
            return
        client = getattr(proto, "client", None)
        log.info("closing connection from %s: request %s not complete within %g s", client, self.phase, self.limit)
        if self.phase == "headers":
            transport.write(_TIMEOUT_408)
        self.phase = None
        transport.close()


def reset(transport: Any) -> None:
    """Close a connection with a reset: what waits to be sent, in the process and in the kernel, is dropped (an
    abort alone leaves the kernel's send buffer to a peer that does not read it)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except (OSError, AttributeError):  # pragma: no cover - not a TCP socket
            pass
    transport.abort()


def unsent(transport: Any) -> int:
    """The bytes a transport still holds to send; 0 once it has none to hold (asyncio's TLS transport drops its
    protocol when the connection is lost, and then cannot even say so: AttributeError)."""
    try:
        return int(transport.get_write_buffer_size())
    except AttributeError:
        return 0


def _reap(transport: Any, loop: asyncio.AbstractEventLoop, before: int) -> None:
    """A closed connection's unsent bytes, `CLOSE_GRACE_S` later: gone (nothing to do), fewer (the peer reads, slowly:
    look again later), or as many (it does not read: reset)."""
    left = unsent(transport)
    if not left:
        return
    if left < before:
        loop.call_later(CLOSE_GRACE_S, _reap, transport, loop, left)
        return
    log.info("resetting a closed connection: its peer took none of the last %d bytes in %g s", left, CLOSE_GRACE_S)
    reset(transport)


LINGER_S = 1.0  # how long a refused request's remaining body is read and dropped before the close
CLOSE_GRACE_S = 30.0  # how long a closed connection's unsent answer waits for a peer that does not read it


_HEAD = b"HTTP/1.1 "  # how every response head uvicorn (httptools or h11) writes begins; it ends with a blank line
_JOIN_MAX = 64 * 1024  # a body up to this size is copied behind its head (one bytes); a larger one goes beside it


class _Lingering:
    """A connection's transport as uvicorn sees it: a response head goes out with its body, and `close()` lingers
    while the client is still sending its request body.

    Heads: uvicorn writes a response's head (status line and headers) and its body in two writes, two system calls
    and two TCP segments for an answer of a few hundred bytes. A head is held here and sent with the next write
    (the body, in the same step of the event loop on the fast path), or at the end of that step (`call_soon`)
    when no write follows: nothing waits past the loop's current turn, and the order of the bytes is kept.

    Lingering: an answer sent before the body was read (413, a 503 that closes) used to be followed by a plain
    close; the client's unread bytes made the kernel answer with a reset, which threw the answer away before the
    client read it (httpx: `ReadError`). Here the answer goes with a FIN, what the client goes on sending is read and
    dropped for `LINGER_S`, then the socket closes."""

    def __init__(self, transport: Any, proto: Any) -> None:
        self._t = transport
        self._proto = proto
        self._lingering = False
        self._held: bytes | None = None

    # The rest of asyncio's Transport, passed on (each its own method: a class with `__getattr__` has every attribute
    # read on its objects go through the slow generic path, ~20 reads a request, none of them specialised)
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._t.get_extra_info(name, default)

    def set_protocol(self, protocol: Any) -> None:
        self._t.set_protocol(protocol)

    def get_protocol(self) -> Any:
        return self._t.get_protocol()

    def is_reading(self) -> Any:
        return self._t.is_reading()

    def pause_reading(self) -> None:
        self._t.pause_reading()

    def resume_reading(self) -> None:
        self._t.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._t.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> Any:
        return self._t.get_write_buffer_limits()

    def can_write_eof(self) -> Any:
        return self._t.can_write_eof()

    def abort(self) -> None:
        self._t.abort()

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:  # the head, then this (its body, usually): one write
            self._held = None
            if len(data) <= _JOIN_MAX:
                self._t.write(held + data)
            else:
                self._t.writelines((held, data))
        elif data[:9] == _HEAD and data[-4:] == b"\r\n\r\n":
            self._held = data
            self._proto.loop.call_soon(self.flush)
        else:
            self._t.write(data)

    def writelines(self, data: Any) -> None:
        self.flush()
        self._t.writelines(data)

    def flush(self) -> None:
        """Send a head still held (its body did not follow in the loop's turn)."""
        held = self._held
        if held is not None:
            self._held = None
            if not self._t.is_closing():
                self._t.write(held)

    def get_write_buffer_size(self) -> int:
        return int(self._t.get_write_buffer_size()) + len(self._held or b"")

    def write_eof(self) -> None:
        self.flush()
        self._t.write_eof()

    def is_closing(self) -> bool:
        return self._lingering or bool(self._t.is_closing())

    def close_now(self) -> None:
        """Close as at an end of file read: no lingering (the peer is gone)."""
        self._t.close()

    def close(self) -> None:
        self.flush()
        t, proto = self._t, self._proto
        if self._lingering:
            return
        cycle = getattr(proto, "cycle", None)
        if cycle is None or not getattr(cycle, "more_body", False) or t.is_closing() or not t.can_write_eof():
            t.close()  # the body was read (or TLS: no half-close)
            if left := unsent(t):  # a peer that never reads what is left would hold it open
                proto.loop.call_later(CLOSE_GRACE_S, _reap, t, proto.loop, left)
            return
        self._lingering = True
        proto._deadline.clear()
        log.info("lingering close for %s: answered before its request body was read", getattr(proto, "client", None))
        t.write_eof()
        t.resume_reading()  # the app stopped reading: what still comes is dropped (`data_received`)
        proto.loop.call_later(LINGER_S, t.close)


class _WriteDeadline:
    """Mixin over uvicorn's HTTP protocols: a peer that leaves the app's writes paused (it reads nothing, or too
    little) for `timeouts.write_s` is reset (the app's `send` then finds the client gone)."""

    timeouts: Timeouts = Timeouts()
    _stall: TimerHandle | None = None

    def pause_writing(self) -> None:
        super().pause_writing()  # type: ignore[misc]
        if self._stall is None:
            self._stall = self.loop.call_later(self.timeouts.write_s, self._stalled)  # type: ignore[attr-defined]

    def resume_writing(self) -> None:
        super().resume_writing()  # type: ignore[misc]
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _stalled(self) -> None:
        self._stall = None
        transport = getattr(self, "transport", None)
        flow = getattr(self, "flow", None)
        if transport is None or flow is None or not flow.write_paused:
            return
        log.info("resetting connection from %s: %d bytes of its answer still waiting after %g s",
                 getattr(self, "client", None), unsent(transport), self.timeouts.write_s)
        reset(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        super().connection_lost(exc)  # type: ignore[misc]


PIPELINED_HELD = 64 * 1024  # bytes a connection's pipelined requests may hold unparsed (uvicorn's body high-water mark)
MAX_PIPELINED = 64  # pipelined requests parsed and waiting on a connection (httptools): past it, `_trim_pipeline`
PARSE_AHEAD = 8192  # a read longer than this that starts a request is parsed up to its MAX_PIPELINED + 2'th head


def _heads_end(data: bytes, heads: int, start: int = 0) -> int | None:
    """Where the `heads`'th blank line (`\r\n\r\n`: the end of a request head, or bytes of a body) of `data` from
    `start` ends; None if it has fewer."""
    end = start
    for _ in range(heads):
        found = data.find(b"\r\n\r\n", end)
        if found < 0:
            return None
        end = found + 4
    return end


class _Pipelined(ABC):
    """Mixin over uvicorn's HTTP protocols: bytes that arrive behind a request in progress (`_behind`: another
    request waits behind it, or it was read whole and not answered) are held, unparsed, while reading goes on, so a
    client that closes is seen (`connection_lost`) while its requests wait; they are parsed once the requests ahead
    are answered (`_release`). Past `PIPELINED_HELD` reading pauses (uvicorn's own behaviour), and the socket waits
    for the client's close meanwhile, nothing more read (`hangups.py`): a close (or reset) then closes the connection
    as an end of file read would."""

    _held: bytearray | None = None
    _watched: int | None = None  # the socket waiting in `hangups` for its peer's close
    _lingering: _Lingering
    flow: Any
    loop: asyncio.AbstractEventLoop

    @abstractmethod
    def _behind(self) -> bool:
        """Whether a request is in progress ahead of bytes that arrive now (each protocol's parser says it its way)."""

    def _hold(self, data: bytes | memoryview) -> None:
        held = self._held
        if held is None:
            held = self._held = bytearray()
        held += data
        if len(held) >= PIPELINED_HELD:
            self.flow.pause_reading()
            self._watch_hangup()

    def _read_on(self) -> None:
        """uvicorn paused reading for a pipelined request: read on (into `_hold`) while there is room."""
        if self.flow.read_paused:
            if self._held is None or len(self._held) < PIPELINED_HELD:
                self.flow.resume_reading()
            else:
                self._watch_hangup()

    def _watch_hangup(self) -> None:
        watch = hangups(self.loop)
        sock = self._lingering.get_extra_info("socket")
        if watch is not None and sock is not None and self._watched is None:
            self._watched = sock.fileno()
            watch.watch(self._watched, self._hung_up)

    def _hung_up(self) -> None:
        """The client closed (or reset) the connection while reading was paused: closed as uvicorn's protocols close
        it at an end of file read (`eof_received`), what was held dropped; when reading resumed meanwhile, it reads
        the end itself. Watched again at the next pause."""
        self._watched = None
        if self.flow.read_paused:
            log.info("closing connection from %s: it closed while its pipelined requests waited (%d bytes held)",
                     getattr(self, "client", None), len(self._held or b""))
            self._lingering.close_now()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._watched is not None:
            watch = hangups(self.loop)
            if watch is not None:
                watch.forget(self._watched)
            self._watched = None
        super().connection_lost(exc)  # type: ignore[misc]

    def _release(self) -> None:
        """What was held is parsed once nothing waits ahead of it (after the answer of the request ahead)."""
        held = self._held
        if held and not self._behind() and not self.transport.is_closing():  # type: ignore[attr-defined]
            self._held = None
            self.data_received(bytes(held))  # type: ignore[attr-defined]


class _TimedHttpTools(_Pipelined, _WriteDeadline):
    """Mixin over uvicorn's `HttpToolsProtocol`: the parser's callbacks move the deadline."""

    timeouts: Timeouts = Timeouts()
    _deadline: _Deadline
    _head: int
    _link: ClientLink

    def connection_made(self, transport: Any) -> None:
        self._deadline = _Deadline(self)
        self._link = ClientLink()
        self._lingering = _Lingering(transport, self)
        super().connection_made(self._lingering)  # type: ignore[misc]
        self._deadline.arm("headers", self.timeouts.header_s)
        self._head = 0

    def data_received(self, data: bytes) -> None:
        """A read parsed (`_parse`) up to the end of its `MAX_PIPELINED` + 2'th blank line at a time, whatever the
        connection is doing (a head awaited, a body being read, a request read whole and not answered): httptools
        parses all it is given, and uvicorn makes a request cycle for each head in it (one step of the loop made
        ~10,000 for a 256 KiB read); once requests wait behind the one in progress, the rest is held unparsed
        (`_hold`). The cut was made only while a head was awaited: a read that came while a request's body was being
        read (or its answer awaited) made a cycle for each request in it (docs/security.md S18-2)."""
        if len(data) <= PARSE_AHEAD:
            self._parse(data)
            return
        start = 0
        view = memoryview(data)
        while start < len(data):
            if self._head < 0 or self._lingering._lingering or self.transport.is_closing():  # type: ignore[attr-defined]
                return  # (refused, or closed by what was parsed: a 400)
            if self.pipeline:  # type: ignore[attr-defined]  # requests wait behind the one in progress
                self._hold(view[start:])
                return
            cut = _heads_end(data, MAX_PIPELINED + 2, start)
            end = len(data) if cut is None else cut
            self._parse(data[start:end] if start or end < len(data) else data)
            start = end

    def _parse(self, data: bytes) -> None:
        """Count the bytes of an unfinished head (a chunk that starts a message on a kept-alive connection is not
        counted, so the head held is at most the cap plus one read); past the cap, 431 and close."""
        if self._head < 0 or self._lingering._lingering:  # refused: what the client still sends is dropped
            return
        if self.pipeline:  # type: ignore[attr-defined]  # a request waits behind the one being served
            self._hold(data)
            return
        waiting = self._deadline.phase == "headers"
        super().data_received(data)  # type: ignore[misc]
        if len(self.pipeline) > MAX_PIPELINED:  # type: ignore[attr-defined]
            self._trim_pipeline()
            return
        if waiting and self._deadline.phase == "headers":
            self._head += len(data)
            if self._head > self.timeouts.max_header_bytes:
                self._refuse_head()

    def _trim_pipeline(self) -> None:
        """httptools parses all of a read, and uvicorn queues a request cycle for each pipelined request in it: a read
        of 64 KiB of 26-byte requests queued ~2,500 (~2 KB each) on the connection. The first `MAX_PIPELINED` waiting
        are kept and answered, the last of them closing the connection; the newer ones are dropped unanswered, as
        a server closing a persistent connection may (RFC 9112 9.3.2: the client sends them again), and what the
        client sends after is dropped (docs/security.md S17-4)."""
        pipeline = self.pipeline  # type: ignore[attr-defined]  # newest first: uvicorn appends on the left
        dropped = len(pipeline) - MAX_PIPELINED
        for _ in range(dropped):
            pipeline.popleft()
        last = pipeline[0][0]
        last.keep_alive = False  # uvicorn closes the connection once it has answered this one
        self.cycle = last  # the connection's newest request, as uvicorn's callbacks and its end read it
        self._head = -1  # nothing more is parsed: what still comes is dropped (`data_received`)
        self._held = None
        self._deadline.clear()
        log.info("connection from %s: %d pipelined requests waiting, the most is %d: the %d newest dropped, the "
                 "connection closed after the others are answered", getattr(self, "client", None),
                 dropped + MAX_PIPELINED, MAX_PIPELINED, dropped)

    def _refuse_head(self) -> None:
        """431, then a lingering close: the answer is sent with a FIN and what the client goes on sending is
        dropped for a second, so the client reads the 431 rather than a reset."""
        self._head = -1
        self._deadline.clear()
        transport = self.transport  # type: ignore[attr-defined]
        if transport.is_closing():
            return
        log.info("closing connection from %s: request head over %d bytes", getattr(self, "client", None),
                 self.timeouts.max_header_bytes)
        transport.write(_too_large_431(self.timeouts.max_header_bytes))
        if transport.can_write_eof():
            transport.write_eof()
            self.loop.call_later(1.0, transport.close)
        else:  # TLS: no half-close
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline.stop()
        self._link.leave()  # before uvicorn marks its request disconnected: what waits for it is let go first
        super().connection_lost(exc)

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        """The request's task, made with this connection's link in its context; the last request that waited behind
        another has started (uvicorn starts it as the one ahead is answered): what was held behind it is read now."""
        token = client_link.current.set(self._link)
        try:
            super()._start_asgi_task(cycle, app)  # type: ignore[misc]
        finally:
            client_link.current.reset(token)
        if self._held is not None:
            self._release()

    def on_message_begin(self) -> None:
        super().on_message_begin()  # type: ignore[misc]
        if self._deadline.phase != "headers":
            self._deadline.arm("headers", self.timeouts.header_s)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()  # type: ignore[misc]
        self._head = 0
        if self.parser.should_upgrade():  # type: ignore[attr-defined]  # WebSocket: its own liveness checks
            self._deadline.clear()
        else:
            self._deadline.arm("body", self.timeouts.body_s)
        if self.pipeline:  # type: ignore[attr-defined]  # this one waits behind another: uvicorn paused reading
            self._read_on()

    def _behind(self) -> bool:
        return bool(self.pipeline)  # type: ignore[attr-defined]

    def on_body(self, body: bytes) -> None:
        super().on_body(body)  # type: ignore[misc]
        self._deadline.touch()

    def on_message_complete(self) -> None:
        super().on_message_complete()  # type: ignore[misc]
        self._deadline.clear()


class _TimedH11(_Pipelined, _WriteDeadline, H11Protocol):
    """uvicorn's `H11Protocol`, its deadline moved by h11's state after each read."""

    timeouts: Timeouts = Timeouts()

    def connection_made(self, transport: Any) -> None:
        self._deadline = _Deadline(self)
        self._link = ClientLink()
        self._lingering = _Lingering(transport, self)
        super().connection_made(cast(asyncio.Transport, self._lingering))  # the transport, its close() lingering
        self._deadline.arm("headers", self.timeouts.header_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline.stop()
        self._link.leave()  # (as `_TimedHttpTools`)
        super().connection_lost(exc)

    def handle_events(self) -> None:
        """h11 starts a request's task from here: with this connection's link in its context."""
        token = client_link.current.set(self._link)
        try:
            super().handle_events()
        finally:
            client_link.current.reset(token)
        if self.flow.read_paused and self._behind():  # (h11 said PAUSED: a request behind this one)
            self._read_on()
        elif self._held is not None:  # (after an answer, uvicorn starts the next request h11 holds from here)
            self._release()

    def _behind(self) -> bool:
        cycle = self.cycle
        return cycle is not None and not cycle.response_complete and self.conn.their_state is h11.DONE

    def data_received(self, data: bytes) -> None:
        if self._lingering._lingering:  # answered and closing: what the client still sends is dropped
            return
        if self._behind():  # the request in progress was read whole: this is a request behind it
            self._hold(data)
            return
        super().data_received(data)
        state, d = self.conn.their_state, self._deadline
        if state is h11.IDLE:
            if self.conn.trailing_data[0] and d.phase != "headers":
                d.arm("headers", self.timeouts.header_s)
        elif state is h11.SEND_BODY:
            if d.phase != "body":
                d.arm("body", self.timeouts.body_s)
            else:
                d.touch()
        else:
            d.clear()


def http_protocol(timeouts: Timeouts, parser: str = "httptools") -> type[Any]:
    """A uvicorn HTTP protocol class (`uvicorn.Config(http=...)`) that keeps `timeouts`."""
    if parser == "httptools":
        from .checked_heads import protocol_class  # uvicorn's, its response headers' checks remembered

        return type("TimedHttpToolsProtocol", (_TimedHttpTools, protocol_class()), {"timeouts": timeouts})
    if parser == "h11":
        return type("TimedH11Protocol", (_TimedH11,), {"timeouts": timeouts})
    raise ValueError(f"http parser {parser!r}: httptools or h11")
