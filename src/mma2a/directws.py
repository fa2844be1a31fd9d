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
- `send_bytes(data)`: write a binary message at once, without awaiting; it says whether
  the socket can take more (False once it is over its write buffer's high-water mark, or
  closing: that message was still written unless the socket is gone).
- `writable` / `drained()`: whether the socket is under its write buffer's high-water
  mark, and waiting until it is again (backpressure).

The bytes themselves take a short path too. A relayed chunk costs little work but comes
alone, every 33 ms at 30 fps, to a process that went idle in between: on the 2-core VM
this was measured on, code run after such a wake-up is ~17x slower than warm (its caches
are cold), so what counts is how much code a chunk touches. While a sink is set, whole
unfragmented masked binary frames (RFC 6455 §5.2: FIN, opcode 2, no extension) that sit
complete in what the socket delivered are unmasked and handed over right here;
everything else — partial frames, text and control frames, fragments — goes through
`websockets`' parser as before (it is only bypassed at a frame boundary, when it holds
nothing). `send_bytes` writes a server frame's 2-10 byte header itself. Both paths are
tested against `websockets`' own encoder and decoder.

Apps must keep a plain-ASGI path for servers without the extension (`direct_io(scope)` is
then None). `mma2a.serving` serves every mma2a app with this protocol.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, MutableMapping
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

try:
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - websockets ships its C speedups in its wheels
    from websockets.utils import apply_mask

EXTENSION = "mma2a.websocket.direct"

Sink = Callable[[bytes], None]
_H16 = struct.Struct("!BBH")
_H64 = struct.Struct("!BBQ")


class DirectIO:
    """The app's handle on one connection's direct I/O (see the module doc)."""

    __slots__ = ("_proto",)

    def __init__(self, proto: DirectWebSocketProtocol) -> None:
        self._proto = proto

    def feed(self, sink: Sink | None) -> None:
        self._proto.sink = sink

    @property
    def open(self) -> bool:
        p = self._proto
        return p.handshake_complete and not p.close_sent and not p.disconnected

    @property
    def writable(self) -> bool:
        return self.open and self._proto.writable.is_set()

    def send_bytes(self, data: bytes) -> bool:
        """Write one binary message now; whether the socket can take more (see the module doc)."""
        p = self._proto
        if p.close_sent or p.disconnected or p.conn.state is not State.OPEN or p.transport.is_closing():
            return False
        n = len(data)
        if p.conn.extensions:  # none are offered (see mma2a.serving); kept correct if that changes
            p.conn.send_binary(data)
            p.transport.write(b"".join(p.conn.data_to_send()))
        elif n < 126:
            p.transport.write(bytes((0x82, n)) + data)
        elif n < 65536:
            p.transport.write(_H16.pack(0x82, 126, n) + data)
        else:
            p.transport.write(_H64.pack(0x82, 127, n) + data)
        return p.writable.is_set()

    async def drained(self) -> None:
        """Wait until the write buffer is back under its low-water mark (or the peer is gone)."""
        await self._proto.writable.wait()


class DirectWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol that also serves `mma2a.websocket.direct`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sink: Sink | None = None

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = self.__dict__.get("scope")
        if scope is not None and not self.close_sent:  # a handshake that goes on to the app
            scope["extensions"][EXTENSION] = {"io": DirectIO(self)}

    def data_received(self, data: bytes) -> None:
        if self.sink is not None:
            data = self._take_binary_frames(data)
            if not data:
                return
        super().data_received(data)

    def _take_binary_frames(self, data: bytes) -> bytes:
        """Hand whole masked binary frames at the start of `data` to the sink; returns the rest."""
        conn = self.conn
        if (
            self.close_sent or self.frames or not self.queue.empty() or conn.state is not State.OPEN or conn.reader.buffer
            or conn.expect_continuation_frame or conn.extensions or conn.parser_exc is not None
        ):
            return data
        limit = conn.max_message_size
        pos, end = 0, len(data)
        while end - pos >= 6 and data[pos] == 0x82 and data[pos + 1] & 0x80:
            size, head = data[pos + 1] & 0x7F, pos + 2
            if size == 126:
                size, head = int.from_bytes(data[head : head + 2]), head + 2
            elif size == 127:
                size, head = int.from_bytes(data[head : head + 8]), head + 8
            stop = head + 4 + size
            if stop > end or (limit is not None and size > limit):
                break  # incomplete, or too big: the parser buffers it or fails the connection as it should
            payload = apply_mask(data[head + 4 : stop], data[head : head + 4])
            pos = stop
            try:
                self.sink(payload)  # type: ignore[misc]
            except Exception:  # noqa: BLE001 - whatever the app's sink raises, the app answers it itself
                self.sink = None  # the app meets this message, and its error, through receive()
                self.queue.put_nowait({"type": "websocket.receive", "bytes": payload})
                break
        return data[pos:] if pos else data

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
