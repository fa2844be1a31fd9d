"""The uvicorn and websockets internals `mma2a.directws` builds on are still there.

directws subclasses uvicorn's sans-I/O WebSocket protocol and reads the state of its
`websockets` connection (pyproject pins both below their next release). When an upgrade
renames or drops one of these, this test fails naming it, before the relay tests fail
somewhere deep in a socket.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator

import pytest
import uvicorn
from uvicorn.server import ServerState

from mma2a.directws import DirectWebSocketProtocol

WHAT_DIRECTWS_READS = (
    "handshake_complete", "close_sent", "disconnected", "transport", "writable", "queue", "frames",
    "curr_msg_data_type", "conn",
)
WHAT_IT_OVERRIDES = ("pause_writing", "resume_writing", "handle_connect", "data_received", "send_receive_event_to_app")
CONNECTION_STATE = ("extensions", "max_message_size", "state", "reader", "expect_continuation_frame", "parser_exc")


async def _app(scope: object, receive: object, send: object) -> None:
    return None


@pytest.fixture
def protocol() -> Iterator[DirectWebSocketProtocol]:
    config = uvicorn.Config(_app, ws="websockets-sansio", lifespan="off")
    config.load()
    loop = asyncio.new_event_loop()
    try:
        yield DirectWebSocketProtocol(config, ServerState(), {}, _loop=loop)
    finally:
        loop.close()


def test_uvicorn_protocol_state_directws_reads(protocol: DirectWebSocketProtocol) -> None:
    missing = [name for name in WHAT_DIRECTWS_READS if not hasattr(protocol, name)]
    assert not missing, f"uvicorn {uvicorn.__version__}: WebSocketsSansIOProtocol no longer has {missing} (mma2a.directws reads them)"
    assert isinstance(protocol.writable, asyncio.Event) and isinstance(protocol.queue, asyncio.Queue)
    assert protocol.frames == [] and protocol.curr_msg_data_type == "bytes"


def test_uvicorn_methods_directws_overrides() -> None:
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    missing = [name for name in WHAT_IT_OVERRIDES if not callable(getattr(WebSocketsSansIOProtocol, name, None))]
    assert not missing, f"uvicorn {uvicorn.__version__}: WebSocketsSansIOProtocol no longer has {missing} (overridden by directws)"
    assert "self.scope" in inspect.getsource(WebSocketsSansIOProtocol.handle_connect), (
        f"uvicorn {uvicorn.__version__}: handle_connect no longer sets self.scope (directws adds its extension there)")


def test_websockets_connection_state_directws_reads(protocol: DirectWebSocketProtocol) -> None:
    import websockets
    from websockets.protocol import State

    conn = protocol.conn
    missing = [name for name in CONNECTION_STATE if not hasattr(conn, name)]
    assert not missing, f"websockets {websockets.__version__}: the connection no longer has {missing} (mma2a.directws reads them)"
    assert hasattr(conn.reader, "buffer"), f"websockets {websockets.__version__}: StreamReader.buffer is gone"
    assert hasattr(State, "OPEN") and isinstance(conn.extensions, list)


def test_websockets_unmasks_as_directws_calls_it() -> None:
    try:
        from websockets.speedups import apply_mask
    except ImportError:
        from websockets.utils import apply_mask
    assert apply_mask(b"\x00\x01\x02\x03\x04", b"\x01\x01\x01\x01") == b"\x01\x00\x03\x02\x05"
