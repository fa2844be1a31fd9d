"""Response headers' checks remembered (checked_heads): the same heads go out, and a header uvicorn refuses is refused
every time, however often an alike one passed before."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import unquote_to_bytes

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from mma2a import checked_heads
from mma2a.checked_heads import REMEMBERED, CheckedHttpTools, check_header, protocol_class
from mma2a.deadlines import Timeouts, http_protocol
from mma2a.serving import Server, free_port


async def _echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """`/value?V`: a header `x-echo: V`; `/name?N`: a header `N: 1` (V, N percent-decoded)."""
    if scope["type"] != "http":
        return
    raw = unquote_to_bytes(scope["query_string"])
    header = (b"x-echo", raw) if scope["path"] == "/value" else (raw, b"1")
    await send({"type": "http.response.start", "status": 200, "headers": [header, (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def _ask(port: int, target: str) -> bytes:
    """One request on a connection of its own; all the server sent before it closed the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


@pytest.mark.skipif(uvicorn.__version__ != checked_heads.COPIED_FROM, reason="uvicorn's own protocol runs")
async def test_good_headers_go_out_and_bad_ones_are_refused_every_time() -> None:
    port = free_port()
    t = Timeouts()
    protocol = http_protocol(t, "httptools")
    assert issubclass(protocol, CheckedHttpTools)
    server = Server(uvicorn.Config(_echo, host="127.0.0.1", port=port, http=protocol, lifespan="off",
                                   log_level="critical", **t.uvicorn_options()))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        for _ in range(2):  # checked, then remembered
            got = await _ask(port, "/value?fine%09value")
            assert got.startswith(b"HTTP/1.1 200 ") and b"\r\nx-echo: fine\tvalue\r\n" in got and got.endswith(b"ok"), got
            got = await _ask(port, "/name?x-fine")
            assert got.startswith(b"HTTP/1.1 200 ") and b"\r\nx-fine: 1\r\n" in got, got
        for _ in range(2):  # refused as uvicorn refuses them (the head begun: the connection closed, nothing sent)
            assert await _ask(port, "/value?bad%01value") == b""
            assert await _ask(port, "/value?bad%0d%0aset-cookie:%20x=1") == b""
            assert await _ask(port, "/name?bad%20name") == b""
    finally:
        server.exit()
        await task


def test_what_is_remembered_is_bounded_and_never_a_refused_header() -> None:
    for i in range(REMEMBERED + 10):
        check_header(b"x-%d" % i, b"%d" % i)
    assert len(checked_heads._names) <= REMEMBERED and len(checked_heads._values) <= REMEMBERED
    for _ in range(2):
        with pytest.raises(RuntimeError, match="Invalid HTTP header value"):
            check_header(b"x-1", b"a\nb")
        with pytest.raises(RuntimeError, match="Invalid HTTP header name"):
            check_header(b"x 1", b"1")
    assert b"a\nb" not in checked_heads._values and b"x 1" not in checked_heads._names


def test_the_copy_runs_only_on_the_uvicorn_it_was_copied_from() -> None:
    expected = CheckedHttpTools if uvicorn.__version__ == checked_heads.COPIED_FROM else HttpToolsProtocol
    assert protocol_class() is expected
