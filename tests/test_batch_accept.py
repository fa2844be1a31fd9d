"""A listening socket accepts many connections per readiness (`serving.BatchAccept`): libuv (uvloop) accepts one per
loop iteration, and on a busy gateway 1,024 connections opened at once waited seconds in the kernel's accept queue
(wrk's timeouts; bench/connections.py). Counted in loop iterations, not time."""

from __future__ import annotations

import asyncio
import socket

import uvloop

from mma2a.serving import ACCEPT_BATCH, BatchAccept

CLIENTS = 300


class Counted(asyncio.Protocol):
    made = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        Counted.made += 1


async def _iterations_to_accept(server_sock: socket.socket) -> int:
    """Loop iterations until every one of CLIENTS connections (all in the accept queue first) was handed a protocol."""
    loop = asyncio.get_running_loop()
    Counted.made = 0
    server = BatchAccept(loop, server_sock, Counted)
    port = server_sock.getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(CLIENTS)]  # handshakes done by the kernel
    try:
        n = 0
        while Counted.made < CLIENTS and n < 10 * CLIENTS:
            await asyncio.sleep(0)
            n += 1
        return n
    finally:
        server.close()
        await server.wait_closed()
        for c in clients:
            c.close()


def _listening() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(2048)
    return s


def test_every_queued_connection_is_accepted_within_a_few_iterations_on_uvloop_and_asyncio() -> None:
    for runner in (uvloop.run, asyncio.run):
        with _listening() as s:
            n = runner(_iterations_to_accept(s))
        assert Counted.made == CLIENTS, runner
        assert n <= 4 * (CLIENTS // ACCEPT_BATCH + 1), (runner, n)  # one a loop iteration would take >= CLIENTS


def test_uvloops_own_server_takes_one_connection_a_loop_iteration() -> None:
    """Why BatchAccept exists (if a later libuv accepts in a loop again, this fails and BatchAccept can go)."""
    async def own() -> int:
        loop = asyncio.get_running_loop()
        Counted.made = 0
        with _listening() as s:
            server = await loop.create_server(Counted, sock=s, backlog=2048)
            clients = [socket.create_connection(("127.0.0.1", s.getsockname()[1])) for _ in range(CLIENTS)]
            n = 0
            while Counted.made < CLIENTS and n < 10 * CLIENTS:
                await asyncio.sleep(0)
                n += 1
            server.close()
            for c in clients:
                c.close()
            return n
    n = uvloop.run(own())
    assert n >= CLIENTS // 2, n
