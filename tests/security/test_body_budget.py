"""Large request bodies held at once are bounded, in all and per sender (issue 18, round 3): each body was
capped at `max_body_bytes`, but ten concurrent 60 MB bodies took a gateway from 162 to 839 MB, and nothing
bounded how many. Past `max_body_bytes_in_flight`: 503 + Retry-After naming who holds what."""

from __future__ import annotations

import asyncio
import gzip
import logging

import httpx
import orjson
import pytest

from tests.security.conftest import API_KEY, CLIENTS, TOKEN, bearer, secured

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


DAVE = "tok-dave-4e2a91"
WITH_DAVE = {"auth": {"clients": [*CLIENTS, {"name": "dave", "token": DAVE}]}}


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


async def _chunked(port: int, auth: bytes, first: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A chunked `POST /` whose body starts with `first` (one chunk); the rest is sent by the caller."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\n"
                 + auth + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunk(first))
    await writer.drain()
    return reader, writer


async def _finish(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rest: bytes) -> bytes:
    """Send the rest of a chunked body and its end; the answer's status line and headers."""
    writer.write(_chunk(rest) + b"0\r\n\r\n")
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    return head


async def _until(check) -> None:  # type: ignore[no-untyped-def]
    """Wait for the gateway to have read what was sent (a state to reach; no time is asserted)."""
    while not check():
        await asyncio.sleep(0.01)


ALICE, BOB = b"Authorization: Bearer " + TOKEN.encode(), b"X-API-Key: " + API_KEY.encode()


async def test_clients_trickling_chunked_bodies_no_longer_hold_the_budget(monkeypatch: pytest.MonkeyPatch):
    """Round 5 (the attack as found): two clients, four chunked `POST /` sockets each, sending a byte at a time,
    reserved the body cap each up front and held all of `max_body_bytes_in_flight` (32 MiB with a 4 MiB cap):
    every other client's chunked bodies and bodies over 1 MiB got 503. Now a body holds what has arrived of it."""
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)
    cfg = {"max_body_bytes": 4 * MB, "max_body_bytes_in_flight": 32 * MB, "features": False, **WITH_DAVE}
    async with secured(cfg) as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        port = int(url.rsplit(":", 1)[1])
        docs = [_send(f"trickle-{i}", 1000) for i in range(8)]
        tricklers = [await _chunked(port, ALICE if i < 4 else BOB, doc[:1]) for i, doc in enumerate(docs)]
        await _until(lambda: gw.drain.inflight == 8)  # all eight admitted and reading their bodies
        for (_, writer), doc in zip(tricklers, docs):  # one more byte each: still coming
            writer.write(_chunk(doc[1:2]))
            await writer.drain()
        held_by_tricklers = gw.access.bodies.held

        async def chunks():
            yield _send("dave-chunked", 3 * MB)

        declared = await c.post(url, content=_send("dave-declared", 3 * MB), headers=bearer(DAVE))
        chunked = await c.post(url, content=chunks(), headers=bearer(DAVE))
        heads = [await _finish(reader, writer, doc[2:]) for (reader, writer), doc in zip(tricklers, docs)]
        left = gw.access.bodies.held
    assert held_by_tricklers == 0  # two bytes each: nothing reserved (under 1 MiB, as small bodies always were)
    for answer in (declared, chunked):
        assert answer.status_code == 200 and "result" in answer.json()
    assert all(h.startswith(b"HTTP/1.1 200") for h in heads)
    assert left == 0


async def test_the_budget_is_reached_and_held_as_bodies_really_arrive(monkeypatch: pytest.MonkeyPatch):
    """Bodies without a length, reserved as their bytes come: per sender (half the total) and in all, reached
    exactly and refused one step past it, mid-body, with the same 503; what a refused body held is given back."""
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)
    async with secured({**CFG, **WITH_DAVE}) as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        port = int(url.rsplit(":", 1)[1])
        budget = gw.access.bodies
        a_doc, b_doc = _send("alice-open", 3 * MB + 1000), _send("bob-open", 3 * MB + 1000)
        alice = await _chunked(port, ALICE, a_doc[:3 * MB])  # 3 MiB arrived: 3 MiB held
        await _until(lambda: budget.held == 3 * MB)
        bob = await _chunked(port, BOB, b_doc[:3 * MB])
        await _until(lambda: budget.held == 6 * MB)

        async def chunks(body: bytes):
            yield body

        alice_more = await c.post(url, content=chunks(_send("alice-more", 2 * MB)), headers=bearer(TOKEN))
        after_alice = budget.held
        d_doc = _send("dave", 2 * MB + 4096)
        dave = await _chunked(port, b"Authorization: Bearer " + DAVE.encode(), d_doc[:2 * MB])
        await _until(lambda: budget.held == 8 * MB)  # the total reached exactly: granted
        dave[1].write(_chunk(d_doc[2 * MB:]) + b"0\r\n\r\n")  # one step past it
        await dave[1].drain()
        refused = await dave[0].read()  # the 503, then the connection is closed
        dave[1].close()
        after_dave = budget.held
        small = await c.post(url, content=_send("small", 64 * 1024), headers=bearer(DAVE))
        heads = [await _finish(*alice, a_doc[3 * MB:]), await _finish(*bob, b_doc[3 * MB:])]
        left = budget.held
    assert alice_more.status_code == 503 and alice_more.headers["retry-after"] == "1"
    assert alice_more.headers["connection"] == "close"
    assert alice_more.json()["error"]["message"] == (
        f"alice is already sending {3 * MB} bytes of request bodies (at most {4 * MB} at once, "
        "max_body_bytes_in_flight / 2); retry, or send large media by reference (POST /blobs)")
    assert after_alice == 6 * MB  # the refused body's steps were given back
    head, _, body = refused.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in head.lower()
    assert orjson.loads(body)["error"]["message"] == (
        f"the gateway is reading {8 * MB} bytes of request bodies already (max_body_bytes_in_flight); "
        "retry, or send large media by reference (POST /blobs)")
    assert after_dave == 6 * MB
    assert small.status_code == 200 and "result" in small.json()
    assert all(h.startswith(b"HTTP/1.1 200") for h in heads)
    assert left == 0


async def test_a_coded_body_holds_its_decoded_size_and_a_client_leaving_gives_back_what_it_held(
        monkeypatch: pytest.MonkeyPatch):
    """A coded body is reserved as it decodes (a 2 MiB body gzipped to a few KB is not small), and every way out —
    an answer, a refusal mid-decoding, the client leaving mid-body — gives back exactly what was taken."""
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)
    async with secured(CFG) as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        port = int(url.rsplit(":", 1)[1])
        budget = gw.access.bodies
        doc = _send("alice-open", 3 * MB + 1000)
        alice = await _chunked(port, ALICE, doc[:3 * MB])
        await _until(lambda: budget.held == 3 * MB)
        zipped = gzip.compress(_send("zipped", 2 * MB))
        coded = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        alice_zipped = await c.post(url, content=zipped, headers={**bearer(TOKEN), **coded})
        after_refusal = budget.held
        bob_zipped = await c.post(url, content=zipped, headers={"X-API-Key": API_KEY, "A2A-Version": "1.0", **coded})
        after_answer = budget.held
        leaving = await _chunked(port, BOB, _send("bob-leaves", 3 * MB)[:2 * MB])
        await _until(lambda: budget.held == 5 * MB)
        leaving[1].transport.abort()  # gone mid-body
        await _until(lambda: budget.held == 3 * MB)
        head = await _finish(*alice, doc[3 * MB:])
        left = budget.held
    assert len(zipped) < 64 * 1024
    assert alice_zipped.status_code == 503 and alice_zipped.json()["error"]["message"] == (
        f"alice is already sending {3 * MB} bytes of request bodies (at most {4 * MB} at once, "
        "max_body_bytes_in_flight / 2); retry, or send large media by reference (POST /blobs)")
    assert after_refusal == 3 * MB
    assert bob_zipped.status_code == 200 and "result" in bob_zipped.json()
    assert after_answer == 3 * MB
    assert head.startswith(b"HTTP/1.1 200")
    assert left == 0


async def test_a_body_refused_mid_way_on_rest_and_agent_routes_gets_the_503_in_their_shape(
        caplog: pytest.LogCaptureFixture):
    """The refusal mid-body on the REST binding (its body checked whole first) and an `/agents/{name}` route: the
    route's own error shape, and nothing logged (the REST binding, run on the disconnect, logged a traceback)."""
    caplog.set_level(logging.WARNING)
    async with secured(CFG) as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        port = int(url.rsplit(":", 1)[1])
        doc = _send("alice-open", 3 * MB + 1000)
        alice = await _chunked(port, ALICE, doc[:3 * MB])
        await _until(lambda: gw.access.bodies.held == 3 * MB)

        async def chunks(body: bytes):
            yield body

        rest = await c.post(url + "/message:send", headers=bearer(TOKEN), content=chunks(orjson.dumps({"message": {
            "messageId": "rest", "role": "ROLE_USER", "parts": [{"text": "x" * (2 * MB)}]}})))
        routed = await c.post(url + "/agents/text", content=chunks(_send("routed", 2 * MB)), headers=bearer(TOKEN))
        logged = [r.getMessage() for r in caplog.records]
        head = await _finish(*alice, doc[3 * MB:])
        left = gw.access.bodies.held
    expected = (f"alice is already sending {3 * MB} bytes of request bodies (at most {4 * MB} at once, "
                "max_body_bytes_in_flight / 2); retry, or send large media by reference (POST /blobs)")
    assert rest.status_code == 503 and rest.json()["error"]["status"] == "UNAVAILABLE"
    assert rest.json()["error"]["message"] == expected
    assert routed.status_code == 503 and routed.json()["error"]["message"] == expected and routed.json()["id"] is None
    assert logged == []
    assert head.startswith(b"HTTP/1.1 200") and left == 0


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
