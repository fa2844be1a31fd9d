"""Serving ASGI apps with uvicorn: free loopback ports, fast loop/parser when installed, in-process runs."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import uvicorn


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def uvicorn_config(app: Any, host: str, port: int, **kw: Any) -> uvicorn.Config:
    loop = "uvloop" if _has("uvloop") else "asyncio"
    http = "httptools" if _has("httptools") else "h11"
    return uvicorn.Config(app, host=host, port=port, loop=loop, http=http, log_level="warning", access_log=False,
                          lifespan="on", **kw)


def _has(mod: str) -> bool:
    try:
        __import__(mod)
        return True
    except ImportError:
        return False


@contextlib.asynccontextmanager
async def running(app: Any, host: str = "127.0.0.1", port: int | None = None) -> AsyncIterator[str]:
    """Serve an ASGI app on a loopback port inside this event loop; yields its base URL."""
    port = port or free_port(host)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError(f"server on {host}:{port} did not start")
        await asyncio.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        await task


async def cancel_tasks(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel background tasks and wait for them to end (whatever they raise); empties the list."""
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t
    tasks.clear()
