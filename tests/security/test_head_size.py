"""The request head is bounded in memory as its deadline bounds it in time (issue 18, round 3): httptools
buffered a header of any size, so four connections sending 100 MB of headers took a gateway from 175 to
560 MB. Past `server.max_header_bytes`: 431 naming the setting, the connection closed, others served."""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mma2a.deadlines import Timeouts, http_protocol
from mma2a.serving import Server, free_port
from tests.gateway.conftest import agent, agents, gateway

CAP = 8 * 1024


async def _flood_head(port: int, piece: bytes, pieces: int) -> bytes:
    """Send a request head that never ends, `pieces` × `piece`; everything the server answered before closing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    try:
        for _ in range(pieces):
            writer.write(piece)
            await writer.drain()
    except ConnectionError:
        pass  # closed by the server while we were still sending: what it answered is in the reader
    data = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), 60):
            data += chunk
    except ConnectionResetError:
        data += b"<reset>"
    writer.close()
    return data


async def test_an_endless_header_gets_431_and_the_gateway_keeps_serving():
    async with agents({"text": agent("text", ["text/plain"])}) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}], "server": {"max_header_bytes": CAP}}
        async with gateway(cfg) as (gw, url):
            port = int(url.rsplit(":", 1)[1])
            one_header = await _flood_head(port, b"X-Big: " + b"v" * (64 * 1024), 1)  # one header past the cap
            many = await _flood_head(port, b"X-H: v\r\n", 4096)  # many small headers, 32 KiB in all
            async with httpx.AsyncClient(timeout=30) as c:
                fits = await c.get(url + "/healthz", headers={"X-Fits": "v" * (CAP // 2)})
                card = await c.get(url + "/.well-known/agent-card.json")
    for answer in (one_header, many):
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 431 Request Header Fields Too Large"), answer[:200]
        error = orjson.loads(body)["error"]
        assert error["message"] == f"request line and headers exceed {CAP} bytes (server.max_header_bytes)"
        assert error["details"][0]["metadata"]["field"] == "headers"
    assert fits.status_code == 200 and card.status_code == 200


@pytest.mark.parametrize("parser", ["httptools", "h11"])
async def test_both_parsers_cap_the_head_and_serve_heads_within_it(parser: str):
    async def echo(request: Request) -> Response:
        return Response(str(len(request.headers.get("x-fits", ""))).encode())

    t = Timeouts(max_header_bytes=CAP)
    port = free_port()
    server = Server(uvicorn.Config(Starlette(routes=[Route("/healthz", echo)]), host="127.0.0.1", port=port,
                                   http=http_protocol(t, parser), log_level="warning", **t.uvicorn_options()))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        refused = await _flood_head(port, b"X-Big: " + b"v" * (64 * 1024) + b"\r\n", 4)
        async with httpx.AsyncClient(timeout=30) as c:
            fits = await c.get(f"http://127.0.0.1:{port}/healthz", headers={"X-Fits": "v" * (CAP // 2)})
    finally:
        server.exit()
        await task
    if parser == "httptools":  # ours: the 431 with a lingering close
        assert refused.startswith(b"HTTP/1.1 431") and not refused.endswith(b"<reset>"), refused[:200]
    else:  # uvicorn's h11 protocol refuses past h11_max_incomplete_event_size and closes at once
        assert refused.startswith(b"HTTP/1.1 4") or refused == b"<reset>", refused[:200]
    assert fits.status_code == 200 and fits.text == str(CAP // 2)
