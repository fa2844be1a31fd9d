"""HTTP/1.1 pipelining and a client that goes (session 15's leftover): a client that sends two requests on one
connection without waiting for the first answer, then closes it. uvicorn pauses reading a connection while a
pipelined request waits behind the one being served, so the close went unseen (the connection in CLOSE_WAIT): the
first request's leg, queued for a busy agent, was sent once a slot freed, for a client long gone, and the second
request was then read and routed, its leg shed only as writing the first answer found the close.
Now what a client sends behind a request in progress is read and held (bounded), so its close is seen at once.

Real sockets; the agent is `test_overload`'s (one slot, finishes when the test says so). No timing: each step waits
for a state."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from mma2a import deadlines, serving
from mma2a.deadlines import PIPELINED_HELD
from tests.gateway.test_client_gone import GONE, metrics, queued, request_of, shed_recorded, tcp_entry, tcp_state
from tests.gateway.test_overload import ROUTINE, loaded, send, until


def unread(local: int, remote: int) -> int | None:
    """Bytes the kernel holds unread on the loopback connection from port `local` to `remote`."""
    fields = tcp_entry(local, remote)
    return int(fields[4].split(":")[1], 16) if fields is not None else None


@pytest.mark.parametrize("parser", ["httptools", "h11"])
async def test_a_pipelining_client_that_closes_is_seen_gone_and_its_requests_are_not_run(
        tmp_path: Path, parser: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if parser == "h11":
        monkeypatch.setattr(serving, "_has", lambda mod: mod != "httptools")
    async with loaded(tmp_path) as (gw, url, executor), httpx.AsyncClient(timeout=60) as http:
        holder = asyncio.create_task(send(http, url, ROUTINE, "H", 1))
        await until(lambda: len(executor.started) == 1, "H reaches the agent")
        host, port = url.removeprefix("http://").split(":")
        _, writer = await asyncio.open_connection(host, int(port))
        own = writer.get_extra_info("sockname")[1]
        writer.write(request_of("jsonrpc", "A"))
        await writer.drain()
        await until(lambda: queued(gw) == 1, "A queues")  # (its body read)
        writer.write(request_of("rest", "A2"))  # pipelined: A2 behind A, which is not answered yet
        await writer.drain()
        await until(lambda: unread(int(port), own) == 0, "the gateway reads A2")
        writer.close()
        await writer.wait_closed()
        await until(lambda: queued(gw) == 0, "A's leg leaves the queue as its client goes")
        await until(lambda: tcp_state(own, int(port)) in ("06", None), "the gateway closes the connection")
        assert GONE in await metrics(http, url)
        second = asyncio.create_task(send(http, url, ROUTINE, "B", 5))
        await until(lambda: queued(gw) == 1, "B queues")
        executor.go.release()  # H done: the slot goes to B; A2 is never run
        executor.go.release()
        answers = [await holder, await second]
        assert [a.json()["result"]["task"]["status"]["state"] for a in answers] == ["TASK_STATE_COMPLETED"] * 2
        assert executor.started == [("H", 1), ("B", 5)]  # before: H, A (then B)
        await shed_recorded(http, url, "its client went away while it waited for agent slow")


@pytest.mark.parametrize("parser", ["httptools", "h11"])
async def test_pipelined_requests_of_a_client_that_stays_are_all_answered_in_order(
        tmp_path: Path, parser: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What is held behind a request in progress is served after it, in order, on the same connection — also past
    what the gateway holds (`PIPELINED_HELD`: P2's body is larger; reading pauses, then goes on)."""
    if parser == "h11":
        monkeypatch.setattr(serving, "_has", lambda mod: mod != "httptools")
    async with loaded(tmp_path) as (gw, url, executor):
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        big = "P2" + "." * (2 * PIPELINED_HELD)
        writer.write(request_of("jsonrpc", "P1") + request_of("rest", big) + request_of("jsonrpc", "P3"))
        await writer.drain()
        for i in range(3):
            await until(lambda: len(executor.started) == i + 1, f"request {i + 1} reaches the agent")
            executor.go.release()
        got = b""
        while got.count(b"HTTP/1.1 200") < 3:
            chunk = await reader.read(65536)
            assert chunk, got
            got += chunk
        writer.close()
        await writer.wait_closed()
    assert executor.started == [("P1", 5), (big, 5), ("P3", 5)]
    assert got.index(b'"done P1"') < got.index(b'"done P2..') < got.index(b'"done P3"')


@pytest.mark.parametrize("parser", ["httptools", "h11"])
async def test_a_client_that_closes_behind_more_than_the_gateway_holds_is_seen_gone(
        tmp_path: Path, parser: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past what the gateway holds of a connection's pipelined requests (`PIPELINED_HELD`, here 1 KiB so that every
    byte sent is read before the close: a state to wait for) reading pauses; the client's close was then not seen
    until the requests ahead were answered (its leg sent to the agent for a client long gone). Now the paused socket
    waits for the close, nothing more read (`mma2a.hangups`): the connection closes as at an end of file."""
    if parser == "h11":
        monkeypatch.setattr(serving, "_has", lambda mod: mod != "httptools")
    monkeypatch.setattr(deadlines, "PIPELINED_HELD", 1024)
    async with loaded(tmp_path) as (gw, url, executor), httpx.AsyncClient(timeout=60) as http:
        holder = asyncio.create_task(send(http, url, ROUTINE, "H", 1))
        await until(lambda: len(executor.started) == 1, "H reaches the agent")
        host, port = url.removeprefix("http://").split(":")
        _, writer = await asyncio.open_connection(host, int(port))
        own = writer.get_extra_info("sockname")[1]
        writer.write(request_of("jsonrpc", "A"))
        await writer.drain()
        await until(lambda: queued(gw) == 1, "A queues")
        writer.write(request_of("rest", "A2"))  # pipelined behind A
        await writer.drain()
        await until(lambda: unread(int(port), own) == 0, "the gateway reads A2")
        writer.write(request_of("rest", "A3" + "." * 4096))  # behind A2, past what is held: reading pauses
        await writer.drain()
        await until(lambda: unread(int(port), own) == 0, "the gateway reads A3 (then pauses)")
        writer.close()
        await writer.wait_closed()
        await until(lambda: queued(gw) == 0, "A's leg leaves the queue as its client goes")  # before: never
        await until(lambda: tcp_state(own, int(port)) in ("06", None), "the gateway closes the connection")
        second = asyncio.create_task(send(http, url, ROUTINE, "B", 5))
        await until(lambda: queued(gw) == 1, "B queues")
        executor.go.release()
        executor.go.release()
        answers = [await holder, await second]
        assert [a.json()["result"]["task"]["status"]["state"] for a in answers] == ["TASK_STATE_COMPLETED"] * 2
        assert executor.started == [("H", 1), ("B", 5)]
