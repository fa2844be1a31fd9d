"""The lean HTTP/1.1 client (gateway/downstream/http1.py) against real servers on loopback: keep-alive reuse, servers that
close connections, chunked and close-delimited answers, large bodies, limits, deadlines and every error a caller sees."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Awaitable, Callable

import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response as StarletteResponse
from starlette.routing import Route

from mma2a.errors import DispatchError
from mma2a.gateway.downstream.http1 import BadResponse, ConnectFailed, DeadlineExceeded, Disconnected, HttpPool
from mma2a.gateway.downstream.transport import Transport
from mma2a.serving import free_port, running

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "RawServer"], Awaitable[None]]


class RawServer:
    """A real TCP server on loopback whose every connection runs `handler`; counts connections and requests."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.live = 0
        self.most_live = 0
        self.requests: list[tuple[bytes, dict[bytes, bytes], bytes]] = []
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/rpc?x=1"

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.live += 1
        self.most_live = max(self.most_live, self.live)
        try:
            await self.handler(reader, writer, self)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.live -= 1
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> tuple[bytes, dict[bytes, bytes], bytes] | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        line, *lines = head[:-4].split(b"\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (h.split(b":", 1) for h in lines)}
        body = await reader.readexactly(int(headers.get(b"content-length", b"0")))
        self.requests.append((line, headers, body))
        return line, headers, body


def answer(body: bytes, *extra: bytes, status: bytes = b"200 OK") -> bytes:
    return b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(body) + \
        b"".join(h + b"\r\n" for h in extra) + b"\r\n" + body


async def echo_forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
    while (req := await srv.read_request(reader)) is not None:
        writer.write(answer(req[2]))
        await writer.drain()


async def test_keep_alive_reuses_one_connection_and_forwards_headers() -> None:
    pool = HttpPool()
    async with RawServer(echo_forever) as srv:
        for i in range(3):
            r = await pool.request("POST", srv.url, b'{"n":%d}' % i, {"Authorization": "Bearer t", "A2A-Version": "1.0"})
            assert (r.status, r.body) == (200, b'{"n":%d}' % i)
            assert r.header("content-type") == "application/json"
        assert srv.connections == 1
        line, headers, _ = srv.requests[0]
        assert line == b"POST /rpc?x=1 HTTP/1.1"
        assert headers[b"host"] == f"127.0.0.1:{srv.port}".encode()
        assert headers[b"authorization"] == b"Bearer t" and headers[b"a2a-version"] == b"1.0"
        await pool.close()


async def test_a_server_that_closes_after_each_answer_gets_a_fresh_connection_each_time() -> None:
    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        req = await srv.read_request(reader)
        assert req is not None
        writer.write(answer(b"[1]", b"Connection: close"))
        await writer.drain()

    pool = HttpPool()
    async with RawServer(once) as srv:
        for _ in range(3):
            assert (await pool.request("POST", srv.url, b"{}")).body == b"[1]"
        assert srv.connections == 3
        assert pool.connections(srv.url) == 0  # none kept: each was closed as its answer said
        await pool.close()


async def test_a_kept_alive_connection_the_server_dropped_is_replaced_once() -> None:
    async def answers_once_then_drops(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        req = await srv.read_request(reader)
        assert req is not None
        writer.write(answer(b'"first"'))
        await writer.drain()
        await srv.read_request(reader)  # the next request on this connection: closed unanswered (an idle timeout's race)

    pool = HttpPool()
    async with RawServer(answers_once_then_drops) as srv:
        assert (await pool.request("POST", srv.url, b"{}")).body == b'"first"'
        assert (await pool.request("POST", srv.url, b"{}")).body == b'"first"'  # on a second connection
        assert srv.connections == 2 and len(srv.requests) == 3
        await pool.close()


async def test_after_a_restart_every_kept_alive_connection_is_stale_and_the_retry_opens_a_new_one() -> None:
    async def answers_once_then_drops(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        req = await srv.read_request(reader)
        assert req is not None
        writer.write(answer(b'"first"'))
        await writer.drain()
        await srv.read_request(reader)  # like a restarted agent: any later request on an old connection is dropped

    pool = HttpPool()
    async with RawServer(answers_once_then_drops) as srv:
        firsts = await asyncio.gather(*(pool.request("POST", srv.url, b"{}") for _ in range(3)))
        assert [r.body for r in firsts] == [b'"first"'] * 3 and srv.connections == 3  # three kept alive, idle
        assert (await pool.request("POST", srv.url, b"{}")).body == b'"first"'  # one stale try, then a new connection
        assert srv.connections == 4 and len(srv.requests) == 5
        assert pool.connections(srv.url) == 1  # the other stale ones were closed, not kept to fail later calls
        await pool.close()


async def test_a_fresh_connection_closed_before_any_answer_is_an_error_not_a_retry() -> None:
    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        await srv.read_request(reader)

    pool = HttpPool()
    async with RawServer(drop) as srv:
        with pytest.raises(Disconnected, match=f"127.0.0.1:{srv.port} closed the connection before answering") as err:
            await pool.request("POST", srv.url, b"{}")
        assert not err.value.answered
        assert srv.connections == 1
        await pool.close()


async def test_a_connection_cut_in_the_middle_of_an_answer() -> None:
    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        await srv.read_request(reader)
        writer.write(answer(b"x" * 100)[:-50])
        await writer.drain()

    pool = HttpPool()
    async with RawServer(half) as srv:
        with pytest.raises(Disconnected, match="in the middle of its answer") as err:
            await pool.request("POST", srv.url, b"{}")
        assert err.value.answered
        await pool.close()


async def test_chunked_and_close_delimited_answers_and_interim_100() -> None:
    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        while await srv.read_request(reader) is not None:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"4\r\n{\"a\"\r\n")
            await writer.drain()
            writer.write(b"3\r\n:1}\r\n0\r\n\r\n")
            await writer.drain()

    async def until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        await srv.read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n[1,")
        await writer.drain()
        writer.write(b"2]")
        await writer.drain()

    pool = HttpPool()
    async with RawServer(chunked) as a, RawServer(until_close) as b:
        for _ in range(2):
            r = await pool.request("POST", a.url, b"{}")
            assert (r.status, r.body) == (200, b'{"a":1}')
        assert a.connections == 1
        r = await pool.request("POST", b.url, b"{}")
        assert (r.status, r.body) == (200, b"[1,2]")
        await pool.close()


async def test_large_bodies_both_ways_and_the_answer_cap() -> None:
    big = bytes(range(256)) * 24_000  # ~6 MB
    pool = HttpPool(max_response_bytes=len(big))
    async with RawServer(echo_forever) as srv:
        r = await pool.request("POST", srv.url, big)
        assert r.body == big
        with pytest.raises(BadResponse, match=f"larger than {len(big)} bytes"):
            await pool.request("POST", srv.url, big + b"!")
        assert (await pool.request("POST", srv.url, b"ok")).body == b"ok"  # the pool goes on
        await pool.close()


async def test_malformed_answer_is_a_bad_response() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        await srv.read_request(reader)
        writer.write(b"HELLO THERE\r\n\r\n")
        await writer.drain()
        await reader.read()  # until the client hangs up

    pool = HttpPool()
    async with RawServer(garbage) as srv:
        with pytest.raises(BadResponse, match=f"malformed HTTP answer from 127.0.0.1:{srv.port}"):
            await pool.request("POST", srv.url, b"{}")
        await pool.close()


async def test_deadline_refused_and_bad_urls() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        await srv.read_request(reader)
        await reader.read()  # never answers; returns when the client hangs up

    pool = HttpPool()
    async with RawServer(silent) as srv:
        with pytest.raises(DeadlineExceeded, match="no whole answer"):
            await pool.request("POST", srv.url, b"{}", timeout_s=0.2)
        assert pool.connections(srv.url) == 0  # an answer still owed: that connection is closed, never reused
        one = HttpPool(limit_per_host=1)
        first = asyncio.ensure_future(one.request("POST", srv.url, b"{}", timeout_s=5))
        while len(srv.requests) < 2:
            await asyncio.sleep(0.005)
        with pytest.raises(DeadlineExceeded, match=f"no free connection to 127.0.0.1:{srv.port} in time \\(1 in use\\)"):
            await one.request("POST", srv.url, b"{}", timeout_s=0.1)
        await one.close()
        with pytest.raises(Disconnected):  # closing the pool fails what is in flight
            await first
    port = free_port()
    with pytest.raises(ConnectFailed, match=f"cannot connect to 127.0.0.1:{port} \\(.*refused"):
        await pool.request("POST", f"http://127.0.0.1:{port}/", b"{}")
    with pytest.raises(ValueError, match="not an http:// URL"):
        await pool.request("POST", "https://127.0.0.1/", b"{}")
    with pytest.raises(ValueError, match="line break"):
        await pool.request("POST", f"http://127.0.0.1:{port}/", b"{}", {"X-Bad": "a\r\nInjected: 1"})
    await pool.close()


async def test_one_connection_keeps_each_exchanges_own_deadline_across_exchanges() -> None:
    """A connection keeps one timer across its exchanges: a short deadline's timer left from an exchange that ended
    does not cut a later one with a longer deadline, and a later short deadline is kept though the timer was due
    later."""
    async def paced(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        while (req := await srv.read_request(reader)) is not None:
            if req[2] == b'"never"':
                await reader.read()
                return
            if req[2] == b'"slow"':
                await asyncio.sleep(0.5)  # past the first exchange's deadline, within its own
            writer.write(answer(req[2]))

    pool = HttpPool(limit_per_host=1)
    async with RawServer(paced) as srv:
        assert (await pool.request("POST", srv.url, b'"fast"', timeout_s=0.2)).body == b'"fast"'
        assert (await pool.request("POST", srv.url, b'"slow"', timeout_s=5)).body == b'"slow"'
        assert (await pool.request("POST", srv.url, b'"fast"', timeout_s=30)).body == b'"fast"'
        async with asyncio.timeout(4):  # not the 30 s of the exchange before
            with pytest.raises(DeadlineExceeded, match="no whole answer"):
                await pool.request("POST", srv.url, b'"never"', timeout_s=0.2)
        assert srv.connections == 1 and len(srv.requests) == 4
    await pool.close()


async def test_connections_per_host_are_limited_and_callers_wait_their_turn() -> None:
    async def slow_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        while (req := await srv.read_request(reader)) is not None:
            await asyncio.sleep(0.02)
            writer.write(answer(req[2]))
            await writer.drain()

    pool = HttpPool(limit_per_host=2)
    async with RawServer(slow_echo) as srv:
        bodies = await asyncio.gather(*(pool.request("POST", srv.url, b"%d" % i) for i in range(8)))
        assert [r.body for r in bodies] == [b"%d" % i for i in range(8)]
        assert srv.connections == 2 and srv.most_live == 2
        await pool.close()


async def test_a_cancelled_call_closes_its_connection_and_the_pool_goes_on() -> None:
    async def slow_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        while (req := await srv.read_request(reader)) is not None:
            if req[2] == b"slow":
                await reader.read()  # never answers; returns when the client hangs up
                return
            writer.write(answer(req[2]))
            await writer.drain()

    pool = HttpPool()
    async with RawServer(slow_echo) as srv:
        task = asyncio.ensure_future(pool.request("POST", srv.url, b"slow"))
        while not srv.requests:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await pool.request("POST", srv.url, b"fast")).body == b"fast"
        assert srv.connections == 2  # the cancelled call's connection was not handed to the next caller
        await pool.close()


async def test_transport_calls_an_http_agent_through_the_pool() -> None:
    """Transport.call on http:// goes through the lean pool: a real Starlette agent, a gzip answer decoded,
    a JSON-RPC error passed on, an agent that is gone named as unreachable."""
    seen: list[dict[str, str]] = []

    async def rpc(request: Request) -> StarletteResponse:
        doc = orjson.loads(await request.body())
        seen.append(dict(request.headers))
        if doc["method"] == "Fail":
            return StarletteResponse(orjson.dumps({"jsonrpc": "2.0", "id": doc["id"], "error": {"code": -32001,
                                                   "message": "task not found"}}), media_type="application/json")
        body = gzip.compress(orjson.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": {"echo": doc["params"]}}))
        return StarletteResponse(body, media_type="application/json", headers={"Content-Encoding": "gzip"})

    app = Starlette(routes=[Route("/", rpc, methods=["POST"])])
    transport = Transport(timeout_s=5)
    async with running(app) as url:
        assert await transport.call("a", url + "/", "Echo", {"x": 1}, headers={"Authorization": "Bearer tok"}, extension=True) == {"echo": {"x": 1}}
        assert seen[0]["authorization"] == "Bearer tok" and "a2a-extensions" in seen[0]
        assert transport.http1.connections(url + "/") == 1
        with pytest.raises(Exception, match="task not found") as err:
            await transport.call("a", url + "/", "Fail", {})
        assert getattr(err.value, "code", None) == -32001
    port = free_port()
    with pytest.raises(DispatchError, match=r"^agent gone unreachable: cannot connect \(") as gone:
        await transport.call("gone", f"http://127.0.0.1:{port}/", "Echo", {})
    # the client reads the agent's name; the operator (`described`: the admin API, logs) its address too
    assert str(port) not in gone.value.message and f"cannot connect to 127.0.0.1:{port}" in gone.value.described
    await transport.close()
