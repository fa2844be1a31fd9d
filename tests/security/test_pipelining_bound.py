"""HTTP/1.1 pipelining bounded in requests, not only in bytes held (docs/security.md S17-4): httptools parses all of a
read, and uvicorn queued a request cycle (~2 KB) for every pipelined request in it, so a read of 64 KiB of 40-byte
requests became ~1,600 queued cycles on one connection, with no credential needed. Real sockets on a live gateway."""

from __future__ import annotations

import asyncio

import httpx

from mma2a.deadlines import MAX_PIPELINED
from tests.gateway.conftest import gateway

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"


async def answers_until_close(host: str, port: int, requests: int) -> tuple[int, bool]:
    """Pipeline `requests` GETs in one write, then read: how many answers came, and whether the gateway closed."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(REQUEST * requests)
    await writer.drain()
    got = b""
    closed = False
    while got.count(b"HTTP/1.1 200") < requests:
        data = await reader.read(1 << 16)
        if not data:
            closed = True
            break
        got += data
    writer.close()
    return got.count(b"HTTP/1.1 200"), closed


async def test_a_connection_pipelining_past_the_bound_gets_the_first_answers_then_its_close() -> None:
    """64 KiB of pipelined requests (1,872) in one write, by a client without a credential: the request in progress
    and the `MAX_PIPELINED` waiting behind it are answered, in order, and the connection is then closed (the newer
    ones were never queued: the client sends them again, as after any close of a persistent connection). Before:
    all 1,872 were queued as request cycles at once and answered (200 such connections held 518 MB more of the
    gateway's memory, 236 -> 754 MB). A client pipelining within the bound is answered whole on an open
    connection, and others are served meanwhile."""
    async with gateway({}) as (_, url):
        host, port = url.removeprefix("http://").split(":")
        many = (64 * 1024) // len(REQUEST)
        results = await asyncio.gather(*(answers_until_close(host, int(port), many) for _ in range(8)))
        assert results == [(MAX_PIPELINED + 1, True)] * 8  # before: [(1872, False)] * 8
        assert await answers_until_close(host, int(port), MAX_PIPELINED + 1) == (MAX_PIPELINED + 1, False)
        async with httpx.AsyncClient() as c:
            assert (await c.get(url + "/healthz")).status_code == 200


def count_cycles(monkeypatch) -> list[int]:  # noqa: ANN001
    """uvicorn's request cycles made from now on, counted in the list's one item (each parsed request makes one)."""
    from uvicorn.protocols.http import httptools_impl

    made = [0]
    real = httptools_impl.RequestResponseCycle.__init__

    def counted(self, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        made[0] += 1
        real(self, *args, **kwargs)

    monkeypatch.setattr(httptools_impl.RequestResponseCycle, "__init__", counted)
    return made


async def test_a_read_of_many_pipelined_requests_makes_cycles_for_the_bound_only(monkeypatch) -> None:
    """One write of 256 KiB of pipelined requests (7,489), without a credential: uvicorn makes a request cycle for
    each request httptools parses, and httptools parses all of a read — before, every request of the first read in
    one step of the event loop (3,656 here; ~10,000 for a 256 KiB read of 26-byte requests: `/healthz` waited 202 ms
    beside four clients sending such reads, 21 ms now), then dropped past the bound. Now a read is parsed up to the
    bound's heads, and the rest is dropped unparsed."""
    made = count_cycles(monkeypatch)
    async with gateway({}) as (_, url):
        host, port = url.removeprefix("http://").split(":")
        answered, closed = await answers_until_close(host, int(port), (256 * 1024) // len(REQUEST))
        assert (answered, closed) == (MAX_PIPELINED + 1, True)
        assert made[0] <= MAX_PIPELINED + 2  # before: 3,656 (every request of the first read)


async def test_a_read_of_many_pipelined_requests_behind_a_body_being_read_makes_cycles_for_the_bound_only(
        monkeypatch) -> None:  # noqa: ANN001
    """docs/security.md S18-2: the parse was cut at the bound's heads only while a head was awaited. A client that
    sends a request's head and part of its body, then (a read later) the rest of the body and 64 KiB of pipelined
    requests, had every request of that read parsed in one step (1,872 cycles made here). Now the same bound holds
    whatever the connection is doing; and a body holding many blank lines is read whole, in order."""
    made = count_cycles(monkeypatch)
    async with gateway({}) as (_, url):
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /healthz HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\n\r\nab")
        await writer.drain()
        while made[0] == 0:  # its head parsed: its body is being read
            await asyncio.sleep(0.001)
        writer.write(b"cde" + REQUEST * ((64 * 1024) // len(REQUEST)))
        await writer.drain()
        got = await reader.read()  # to the gateway's close
        writer.close()
        assert got.count(b"HTTP/1.1 ") == MAX_PIPELINED + 2  # the POST's answer, then the bound's
        assert made[0] <= MAX_PIPELINED + 3  # the POST and the heads up to the cut; before: 1,873
        blank = b"\r\n\r\n" * 20_000  # whitespace in JSON, each a blank line to the cut
        body = b'{"jsonrpc": "2.0", "id": 7, ' + blank + b'"method": "GetTask", "params": {"id": "none"}}'
        async with httpx.AsyncClient() as c:
            r = await c.post(url + "/", content=body, headers={"A2A-Version": "1.0"})
        assert r.json()["id"] == 7 and r.json()["error"]["code"] == -32001  # read whole: task not found
