"""Large request bodies held at once are bounded, in all and per sender (issue 18, round 3): each body was
capped at `max_body_bytes`, but ten concurrent 60 MB bodies took a gateway from 162 to 839 MB, and nothing
bounded how many. Past `max_body_bytes_in_flight`: 503 + Retry-After naming who holds what."""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest

from tests.security.conftest import API_KEY, TOKEN, bearer, secured

MB = 1 << 20
CFG = {"max_body_bytes": 4 * MB, "max_body_bytes_in_flight": 8 * MB, "features": False}


def _send(mid: str, size: int) -> bytes:
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": mid, "role": "ROLE_USER", "parts": [{"text": "x"}], "metadata": {"pad": ""}}}})
    return body.replace(b'"pad":""', b'"pad":"' + b"p" * (size - len(body)) + b'"')


async def _hold(port: int, body: bytes, token: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A request whose body is sent all but its last byte (the gateway waits for it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\n"
                 b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n" % (token.encode(), len(body)) + body[:-1])
    await writer.drain()
    return reader, writer


async def test_large_bodies_in_flight_are_bounded_per_sender_and_in_all(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)
    async with secured(CFG) as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        port = int(url.rsplit(":", 1)[1])
        held = _send("held", 3 * MB)
        reader, writer = await _hold(port, held, TOKEN)
        while gw.access.bodies.held < len(held):  # the gateway has read the head and reserved the body
            await asyncio.sleep(0.01)
        second = await c.post(url, content=_send("second", 2 * MB), headers=bearer(TOKEN))
        async def chunks():  # no Content-Length: reserved as a body of the cap
            yield _send("chunked", 2 * MB)

        chunked = await c.post(url, content=chunks(), headers=bearer(TOKEN))
        small = await c.post(url, content=_send("small", 64 * 1024), headers=bearer(TOKEN))
        bobs = await c.post(url, content=_send("bob", 2 * MB), headers={"X-API-Key": API_KEY, "A2A-Version": "1.0"})
        writer.write(held[-1:])
        await writer.drain()
        first = await reader.readuntil(b"\r\n\r\n")
        writer.close()
        again = await c.post(url, content=_send("again", 2 * MB), headers=bearer(TOKEN))
        left = gw.access.bodies.held
    expected = (f"alice is already sending {len(held)} bytes of request bodies (at most {4 * MB} at once, "
                "max_body_bytes_in_flight / 2); retry, or send large media by reference (POST /blobs)")
    for refused in (second, chunked):
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["message"] == expected
        assert refused.json()["error"]["data"][0]["metadata"]["field"] == "Content-Length"
    # a declared length within the cap: the connection is kept and the rest of the body read and dropped, so the
    # client reads the 503 rather than a reset; no length: closed (it could go on for ever)
    assert second.headers.get("connection") != "close" and chunked.headers["connection"] == "close"
    assert small.status_code == 200 and "result" in small.json()  # small bodies are not counted
    assert bobs.status_code == 200 and "result" in bobs.json()  # another sender, within the total
    assert first.startswith(b"HTTP/1.1 200")
    assert again.status_code == 200 and "result" in again.json()  # alice's reservation was given back
    assert left == 0


async def test_remembered_answers_stay_in_the_dedupe_byte_budget():
    """With `faults.dedupe_ttl_s` on, 20,000 answers were kept whatever their size: an agent that echoes a large
    message back made each one as large as the message. Now the answers kept are bounded in bytes too."""
    from tests.gateway.conftest import agent, agents, gateway

    specs = {"echo": agent("echo", ["text/plain"], echo=True)}
    async with agents(specs) as urls:
        cfg = {"agents": [{"name": "echo", "url": urls["echo"]}], "features": False,
               "faults": {"dedupe_ttl_s": 600, "dedupe_max_bytes": 1 * MB}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            async def send(mid: str, size: int) -> dict:
                body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                    "messageId": mid, "role": "ROLE_USER", "parts": [{"text": "e" * size}]}}}
                return (await c.post(url, json=body, headers={"A2A-Version": "1.0"})).json()  # type: ignore[no-any-return]

            sizes = []
            for i in range(40):  # 40 answers of about 40 KB (the text, echoed, and the history): more than the budget
                await send(f"m{i}", 20 * 1024)
                sizes.append(gw.pipeline.exchange.dedupe.bytes)
            received = len(specs["echo"][1].received)
            await send("m39", 20 * 1024)  # the newest answer is still remembered: not delivered again
            remembered = len(specs["echo"][1].received) - received
            await send("m0", 20 * 1024)  # the oldest was let go to stay in the budget: delivered again
            first_again = len(specs["echo"][1].received) - received
            await send("huge", 200 * 1024)  # over a sixteenth of the budget (64 KiB): answered, not kept
            await send("huge", 200 * 1024)
            huge_twice = len(specs["echo"][1].received) - received - first_again
    assert max(sizes) <= 1 * MB and sizes[-1] > 512 * 1024
    assert remembered == 0 and first_again == 1 and huge_twice == 2
