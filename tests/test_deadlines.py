"""The server's writes (deadlines._Lingering): a response head goes out with its body in one write (uvicorn wrote
them apart: two system calls, two TCP segments), and a head whose body does not follow at once is not held for it.
And the one timer a connection keeps across its phases and requests (deadlines._Deadline) keeps each phase's own
deadline."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import uvicorn

from mma2a import client_link
from mma2a.client_link import ClientLink
from mma2a.deadlines import Timeouts, http_protocol
from mma2a.serving import Server, free_port

BODY = b'{"jsonrpc":"2.0","id":1,"result":{"ok":true}}'


class _App:
    """`/whole`: head and body sent back to back; `/later`: the head, then the body once `go` is set; `/read`: the
    request's body read to its end, then `/whole`'s answer."""

    def __init__(self) -> None:
        self.go = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = [(b"content-type", b"application/json")]
        if scope["path"] == "/read":
            while (await receive()).get("more_body"):
                pass
        if scope["path"] in ("/whole", "/read"):
            await send({"type": "http.response.start", "status": 200,
                        "headers": [*headers, (b"content-length", b"%d" % len(BODY))]})
            await send({"type": "http.response.body", "body": BODY})
            return
        await send({"type": "http.response.start", "status": 200, "headers": headers})  # chunked: a stream
        await self.go.wait()
        await send({"type": "http.response.body", "body": BODY})


class _Counted:
    """The socket's transport, each write of bytes that reaches it recorded (below the server's own transport
    wrapper; h11's empty end-of-message write sends nothing)."""

    def __init__(self, transport: Any, writes: list[bytes]) -> None:
        self._t, self.writes = transport, writes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._t, name)

    def write(self, data: bytes) -> None:
        if data:
            self.writes.append(bytes(data))
        self._t.write(data)

    def writelines(self, data: Any) -> None:
        self.write(b"".join(data))


async def _serving(app: _App, parser: str, writes: list[bytes] | None = None, t: Timeouts | None = None
                   ) -> tuple[Server, asyncio.Task[None], int]:
    t = t or Timeouts()
    port = free_port()
    protocol = http_protocol(t, parser)
    if writes is not None:
        base = protocol

        class Counting(base):  # type: ignore[misc, valid-type]
            def connection_made(self, transport: Any) -> None:
                super().connection_made(_Counted(transport, writes))

        protocol = Counting
    server = Server(uvicorn.Config(app, host="127.0.0.1", port=port, http=protocol, lifespan="off",
                                   log_level="warning", **t.uvicorn_options()))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    return server, task, port


@pytest.mark.parametrize("parser", ["httptools", "h11"])
async def test_a_head_and_its_body_go_out_in_one_write(parser: str) -> None:
    app, writes = _App(), []
    server, task, port = await _serving(app, parser, writes)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in range(3):  # on a kept-alive connection too
            writer.write(b"GET /whole HTTP/1.1\r\nHost: x\r\n\r\n")
            got = await asyncio.wait_for(reader.readuntil(BODY), 10)
            assert got.startswith(b"HTTP/1.1 200 ") and got.endswith(b"\r\n\r\n" + BODY), got
            assert len(writes) == i + 1 and writes[-1] == got, writes  # one write each: the head with its body
        writer.close()
    finally:
        server.exit()
        await task


@pytest.mark.parametrize("parser", ["httptools", "h11"])
async def test_a_head_whose_body_waits_is_sent_at_once(parser: str) -> None:
    app = _App()
    server, task, port = await _serving(app, parser)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /later HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)  # before the body exists
        assert head.startswith(b"HTTP/1.1 200 ") and b"transfer-encoding: chunked" in head.lower()
        app.go.set()
        chunk = await asyncio.wait_for(reader.readuntil(b"\r\n0\r\n\r\n"), 10)
        assert BODY in chunk
        writer.close()
    finally:
        server.exit()
        await task


@pytest.mark.parametrize("parser", ["httptools", "h11"])
async def test_one_timer_keeps_each_phases_deadline_across_requests(parser: str) -> None:
    """A body that pauses past the header deadline (within its own) is read to its end: the timer made for the head
    looks again rather than cutting it. The next request's head, on the same connection, that never ends is cut at
    the header deadline, not at the later one of the body before (10 s here: the test waits no longer)."""
    app = _App()
    server, task, port = await _serving(app, parser, t=Timeouts(header_s=0.3, body_s=60, keep_alive_s=60))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /read HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
        await asyncio.sleep(0.6)  # the client pauses mid-body: twice the header deadline
        writer.write(b"cd")
        got = await asyncio.wait_for(reader.readuntil(BODY), 10)
        assert got.startswith(b"HTTP/1.1 200 "), got
        writer.write(b"POST /read HTTP/1.1\r\nHost: x\r\nContent-")  # a head that never ends
        cut = await asyncio.wait_for(reader.read(), 10)
        assert cut.startswith(b"HTTP/1.1 408") or cut == b"", cut  # h11 may close without an answer
        writer.close()
    finally:
        server.exit()
        await task


@pytest.mark.parametrize("parser", ["httptools", "h11"])
async def test_a_lost_connection_marks_its_requests_client_gone_at_once(parser: str) -> None:
    """The request's task runs with its connection's `client_link.ClientLink`, each request of a kept-alive
    connection with the same one; when the client closes the connection while the app works on a request, the link
    is gone and its watcher called before the app hears anything, and a request of another connection is not
    touched."""
    links: list[ClientLink | None] = []
    gone: list[int] = []
    hold = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        link = client_link.current.get()
        links.append(link)
        if scope["path"] == "/hold" and link is not None:
            link.watch(lambda: gone.append(len(links)))
            await hold.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(BODY))]})
        await send({"type": "http.response.body", "body": BODY})

    server, task, port = await _serving(app, parser)  # type: ignore[arg-type]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        other_reader, other = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /whole HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.wait_for(reader.readuntil(BODY), 10)
        writer.write(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        other.write(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(10_000):
            if len(links) == 3:
                break
            await asyncio.sleep(0.001)
        first, held, elsewhere = links
        assert isinstance(first, ClientLink) and first is held and elsewhere is not held  # one link a connection
        assert not held.gone and gone == []
        writer.close()
        await writer.wait_closed()
        for _ in range(10_000):
            if held.gone:
                break
            await asyncio.sleep(0.001)
        assert held.gone and gone == [3] and elsewhere is not None and not elsewhere.gone
        hold.set()  # the other connection's request is answered as usual
        assert (await asyncio.wait_for(other_reader.readuntil(BODY), 10)).startswith(b"HTTP/1.1 200 ")
        other.close()
    finally:
        server.exit()
        await task


def test_the_uvicorn_methods_that_start_a_requests_task_are_still_there() -> None:
    """deadlines runs each request's task with its connection's client link by overriding where uvicorn starts it:
    httptools' `_start_asgi_task` (0.45 and later) and h11's `handle_events`. Renamed or gone in an upgrade, the link
    would silently never be set (a client that left would be served again): this names the method first."""
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    assert callable(getattr(HttpToolsProtocol, "_start_asgi_task", None)), uvicorn.__version__
    assert callable(getattr(H11Protocol, "handle_events", None)), uvicorn.__version__
