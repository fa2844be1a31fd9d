"""Shared test support: a real uvicorn server on a loopback port, a settable clock, the test secret."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from starlette.types import ASGIApp

from mma2a.serving import WEBSOCKETS

SECRET = b"test-secret-0123456789abcdef"


class Clock:
    """A settable clock for signed-URL expiry."""

    def __init__(self, now: float = 1_700_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def serve(app: ASGIApp, *, direct: bool = False) -> AsyncIterator[str]:
    """Run `app` under uvicorn on 127.0.0.1:<free port>; yields its base URL.

    `direct`: with mma2a's WebSocket protocol (the `mma2a.websocket.direct` extension, as
    every mma2a server runs), else with uvicorn's plain sans-I/O one (the ASGI-only path).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    ws = WEBSOCKETS if direct else {"ws": "websockets-sansio"}
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False, **ws)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()
