"""Direct WebSocket I/O: an ASGI extension for hot byte streams, served by a uvicorn protocol.

ASGI moves every WebSocket message through a queue and a task switch each way, and uvicorn
pauses and resumes the socket around each received message. For a live stream relayed
chunk by chunk (`mma2a.payload.stream_routes`) that bookkeeping costs far more than the
relay itself. `DirectWebSocketProtocol` (uvicorn's sans-I/O `websockets` protocol, plus
this) advertises the extension `mma2a.websocket.direct` in the connection's scope; an app
that finds it may, once it has accepted the socket:

- `feed(sink)`: receive binary messages by a synchronous call `sink(data)` made as the
  bytes are parsed, instead of `websocket.receive` events. Text messages and the
  disconnect still arrive through `receive()`. If the sink raises, it is dropped and that
  message (and every later one) goes through `receive()` as usual, so the app answers the
  error in its normal path. Order is kept: while a message waits in the `receive()`
  queue, binary messages queue behind it rather than jump ahead to the sink.
- `send_bytes(data, more=b"")`: write a binary message at once, without awaiting; it says whether
  the socket can take more (False once it is over its write buffer's high-water mark, or
  closing: that message was still written unless the socket is gone).
- `drained()`: wait until a socket that was over its high-water mark has drained
  (backpressure; `send_bytes` said False).

The bytes themselves take a short path too. A relayed chunk costs little work but comes
alone, every 33 ms at 30 fps, to a process that went idle in between: on the 2-core VM
this was measured on, code run after such a wake-up is ~17x slower than warm (its caches
are cold), so what counts is how much code a chunk touches. While a sink is set, whole
unfragmented masked binary frames (RFC 6455 §5.2: FIN, opcode 2, no extension) that sit
complete in what the socket delivered are unmasked and handed over right here;
everything else — partial frames, text and control frames, fragments — goes through
`websockets`' parser as before (it is only bypassed at a frame boundary, when it holds
nothing, at a boundary followed header by header through what it was given). `send_bytes`
writes a server frame's 2-10 byte header itself. Both paths are
tested against `websockets`' own encoder and decoder.

Apps must keep a plain-ASGI path for servers without the extension (`direct_io(scope)` is
then None). `mma2a.serving` serves every mma2a app with this protocol.

Backpressure both ways: every ping a peer sends is a pong written back, so a peer that sent pings and
never read grew the write buffer without bound (118 MB of pings: +100 MB, held while the socket stayed
open). While the write buffer is over its high-water mark nothing more is read (what one read already
brought is held, not parsed, until the peer has taken what was written), and a peer that does not take it
down to the low-water mark within `ping_interval + ping_timeout` — the time it has to answer a ping queued
behind it anyway — is reset.
"""

from __future__ import annotations

import logging
import struct
from asyncio import TimerHandle
from collections.abc import Callable, MutableMapping
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

from .deadlines import reset, unsent

try:
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - websockets ships its C speedups in its wheels
    from websockets.utils import apply_mask

EXTENSION = "mma2a.websocket.direct"

log = logging.getLogger("mma2a.serving")

Sink = Callable[[bytes], object]  # its return value is ignored
_H16 = struct.Struct("!BBH")
_H64 = struct.Struct("!BBQ")


class DirectIO:
    """The app's handle on one connection's direct I/O (see the module doc)."""

    __slots__ = ("_proto",)

    def __init__(self, proto: DirectWebSocketProtocol) -> None:
        self._proto = proto

    def feed(self, sink: Sink | None) -> None:
        self._proto.sink, self._proto.at_boundary = sink, False  # worked out again at the next bytes

    @property
    def open(self) -> bool:
        p = self._proto
        return p.handshake_complete and not p.close_sent and not p.disconnected

    def send_bytes(self, data: bytes, more: bytes = b"") -> bool:
        """Write one binary message (`data` then `more`, not joined) now; whether the socket can take more."""
        p = self._proto
        if p.close_sent or not p.handshake_complete or p.transport.is_closing():  # not open, closing, or gone
            return False
        n = len(data) + len(more)  # no extension was negotiated (the extension is only offered then): a plain frame
        if n < 126:
            head = bytes((0x82, n))
        elif n < 65536:
            head = _H16.pack(0x82, 126, n)
        else:
            head = _H64.pack(0x82, 127, n)
        if more:
            p.transport.writelines((head + data, more))
        else:
            p.transport.write(head + data)
        return p.can_write

    async def drained(self) -> None:
        """Wait until the write buffer is back under its low-water mark (or the peer is gone)."""
        await self._proto.writable.wait()


class DirectWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol that also serves `mma2a.websocket.direct`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sink: Sink | None = None
        # True while the parser sits at a frame boundary with nothing pending and no message
        # waits in the receive() queue; only the parser path and a failing sink can change
        # that, and both clear it (it is then worked out again from the parser's state).
        self.at_boundary = False
        # Where the next frame starts in the bytes the parser was given, followed header by header from the
        # first bytes after the handshake: bytes of the current frame still to come (`_skip`), or the start of
        # a header cut by a read (`_head`); None once that cannot be known. The parser's empty buffer alone
        # does not tell a frame boundary: a read that ends just after a header leaves it empty mid-frame.
        self._skip: int | None = None
        self._head = b""
        self.can_write = True  # the transport is under its high-water mark (mirrors `writable`, without a call)
        self._held: list[bytes] = []  # what was read while the peer did not take what is written: parsed later
        self._stall: TimerHandle | None = None

    def pause_writing(self) -> None:
        """The peer is not taking what is written: read nothing more from it (each ping read is a pong to write)
        and give it until the stall deadline to take some."""
        self.can_write = False
        super().pause_writing()
        self.transport.pause_reading()
        limit = (self.ping_interval or 0.0) + (self.ping_timeout or 0.0)
        if limit > 0 and self._stall is None:
            self._stall = self.loop.call_later(limit, self._stalled, limit)

    def resume_writing(self) -> None:
        self.can_write = True
        super().resume_writing()
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        if self._held:
            self.loop.call_soon(self._release)
        elif not self.read_paused:  # uvicorn's own pause (a message waiting for the app) stays
            self.transport.resume_reading()

    def _release(self) -> None:
        """Parse what was read while writes were paused, then read again (unless writes paused again)."""
        while self._held and self.can_write and not self.disconnected:
            self._parse(self._held.pop(0))
        if self.can_write and not self._held and not self.read_paused and not self.disconnected:
            self.transport.resume_reading()

    def _stalled(self, limit: float) -> None:
        self._stall = None
        if not self.can_write and not self.disconnected:
            log.info("resetting WebSocket from %s: %d bytes written to it still waiting after %g s", self.client,
                     unsent(self.transport), limit)
            reset(self.transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        self._held.clear()
        super().connection_lost(exc)

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = self.__dict__.get("scope")
        if scope is not None and not self.close_sent and not self.conn.extensions:  # accepted, plain frames
            scope["extensions"][EXTENSION] = {"io": DirectIO(self)}

    def data_received(self, data: bytes) -> None:
        if not self.can_write or self._held:  # the peer is not reading: hold this read (reading stays paused)
            self._held.append(data)
            self.transport.pause_reading()
            return
        self._parse(data)

    def _parse(self, data: bytes) -> None:
        if self.sink is not None and not self.close_sent and (self.at_boundary or self._boundary()):
            # Whole masked binary frames at the start of `data` go to the sink here; the rest, to the parser.
            limit = self.conn.max_message_size
            pos, end = 0, len(data)
            while end - pos >= 8 and data[pos] == 0x82 and data[pos + 1] & 0x80:
                size = data[pos + 1] & 0x7F
                if size == 126:
                    size, head = _H16.unpack_from(data, pos)[2], pos + 4
                elif size == 127:
                    if end - pos < 14:
                        break
                    size, head = _H64.unpack_from(data, pos)[2], pos + 10
                else:
                    head = pos + 2
                stop = head + 4 + size
                if stop > end or (limit is not None and size > limit):
                    break  # incomplete, or too big: the parser buffers it or fails the connection as it should
                payload = apply_mask(data[head + 4 : stop], data[head : head + 4])
                pos = stop
                try:
                    self.sink(payload)
                except Exception:  # noqa: BLE001 - whatever the app's sink raises, the app answers it itself
                    self.sink, self.at_boundary = None, False  # the app meets this message, and its error, through receive()
                    self.queue.put_nowait({"type": "websocket.receive", "bytes": payload})
                    break
            if pos == end:
                return
            data = data[pos:] if pos else data
        self.at_boundary = False
        if self.conn.state is State.OPEN:
            self._follow(data)
        super().data_received(data)

    def _follow(self, data: bytes) -> None:
        """Follow the frame boundaries through `data`, the next bytes the parser is given."""
        if self._skip is None:
            if self._head == b"" and not self.conn.reader.buffer:  # the first bytes after the handshake
                self._skip = 0
            else:
                self._head = b"?"  # lost: the fast path stays off on this connection
                return
        i, n = self._skip, len(data)
        while i < n:
            head = self._head + data[i: i + 14] if self._head else data[i: i + 14]
            if len(head) < 2 or len(head) < 2 + (2 if head[1] & 0x7F == 126 else 8 if head[1] & 0x7F == 127 else 0):
                self._head, i = bytes(head), n
                break
            size = head[1] & 0x7F
            if size == 126:
                size, hl = int.from_bytes(head[2:4], "big"), 4
            elif size == 127:
                size, hl = int.from_bytes(head[2:10], "big"), 10
            else:
                hl = 2
            i += hl + (4 if head[1] & 0x80 else 0) + size - len(self._head)
            self._head = b""
        self._skip = i - n if i > n else 0

    def _boundary(self) -> bool:
        conn = self.conn
        self.at_boundary = (
            self._skip == 0 and not self._head
            and not self.frames and self.queue.empty() and conn.state is State.OPEN and not conn.reader.buffer
            and not conn.expect_continuation_frame and conn.parser_exc is None
        )
        return self.at_boundary

    def send_receive_event_to_app(self) -> None:
        sink = self.sink
        if sink is not None and self.curr_msg_data_type == "bytes" and not self.close_sent and self.queue.empty():
            data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
            try:
                sink(bytes(data))
            except Exception:  # noqa: BLE001 - whatever the app's sink raises, the app answers it itself
                self.sink = None  # the app meets this message, and its error, through receive()
            else:
                self.frames = []
                return
        super().send_receive_event_to_app()


def direct_io(scope: MutableMapping[str, Any]) -> DirectIO | None:
    """The connection's `DirectIO` when the server offers the extension, else None."""
    ext = (scope.get("extensions") or {}).get(EXTENSION)
    io = ext.get("io") if isinstance(ext, dict) else None
    return io if isinstance(io, DirectIO) else None
