"""An answer sent before the request body was read reaches the client (round 4): a 413 for a declared length
over `max_body_bytes` was followed by a plain close while the client was still sending, so the kernel reset the
connection and the client lost the answer (httpx: `ReadError`). Now the answer goes with a FIN and the rest of
the body is read and dropped for a second before the close."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.conformance.sut import sample_agent
from tests.gateway.conftest import gateway

TOKEN = "tok-early-1"
CAP = 1 << 20
TOO_LARGE = f"request body exceeds {CAP} bytes; send large media by reference (POST /blobs)"


async def raw_post(url: str, path: str, total: int) -> bytes:
    """POST `total` declared bytes with a plain socket, sending all of them whatever the server does; what came back."""
    host, port = url.split("//")[1].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"POST {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {total}\r\n\r\n".encode())
    block = b"x" * (1 << 16)
    for _ in range(total // len(block)):
        writer.write(block)
        await writer.drain()  # a reset would raise here
    answer = await reader.read()  # to the server's FIN
    writer.close()
    return answer


@pytest.mark.parametrize("path", ["/", "/message:send"])
async def test_a_413_sent_before_the_body_is_read_arrives_rather_than_a_reset(path: str) -> None:
    async with sample_agent("a") as a:
        cfg: dict[str, Any] = {"agents": [{"name": "a", "url": a.url}], "max_body_bytes": CAP,
                               "auth": {"clients": [{"name": "c", "token": TOKEN}]}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            raw = await raw_post(url, path, 48 << 20)
            r = await c.post(url + path, content=b"x" * (32 << 20), headers={"Authorization": f"Bearer {TOKEN}"})
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ") and b"connection: close" in head.lower()
    assert TOO_LARGE.encode() in body
    assert r.status_code == 413
    message = r.json()["error"]["message"]
    assert message == TOO_LARGE
