"""Gateway fixtures: real a2a-sdk agents on loopback ports and a real gateway in front of them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import AgentCard

from mma2a.card import declare_extension
from mma2a.gateway import Gateway, parse_config
from mma2a.serving import listen_socket, running
from mma2a.tls import ServerTLS
from tests.agents import RecordingExecutor, make_card, run_agent

ADMIN = "test-admin-token"


async def until(check: Callable[[], bool], what: str) -> None:
    """Wait for a state of the gateway or the agent (yielding to the loop they run on), within the test's timeout."""
    for _ in range(20_000):
        if check():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never happened: {what}")


@contextlib.asynccontextmanager
async def agents(specs: Mapping[str, tuple[AgentCard, Any]]) -> AsyncIterator[dict[str, str]]:
    """Start every (card, executor) in `specs`; yields name -> base URL."""
    async with contextlib.AsyncExitStack() as stack:
        urls = {}
        for name, (card, executor) in specs.items():
            urls[name] = (await stack.enter_async_context(run_agent(card, executor))).rstrip("/")
        yield urls


@contextlib.asynccontextmanager
async def gateway(config: dict[str, Any], *, wrap: Callable[[Any], Any] | None = None, **kw: Any
                  ) -> AsyncIterator[tuple[Gateway, str]]:
    """A gateway on a free loopback port (lifespan on: agents registered, rules loaded; HTTPS with `tls:`); `wrap`
    puts ASGI middleware in front of its app (what a peer answers before it); `kw` go to `Gateway` (a test's
    `clock`)."""
    sock = listen_socket("127.0.0.1", 0)  # bound now, served below: no other process can take the port meanwhile
    port = sock.getsockname()[1]
    try:
        cfg = {"listen": f"127.0.0.1:{port}", "admin": {"token": ADMIN}, "health_interval_s": 3600, **config}
        gw = Gateway(parse_config(cfg), **kw)
        tls = ServerTLS(gw.config.tls, gw.config.base_dir) if gw.config.tls else None
    except BaseException:
        sock.close()
        raise
    app = wrap(gw.app) if wrap is not None else gw.app
    async with running(app, "127.0.0.1", timeouts=gw.config.server.timeouts(), tls=tls, sock=sock) as url:
        yield gw, url


def agent(name: str, modes: list[str], *, out: list[str] | None = None, reply: str | None = None, ext: bool = True,
          echo: bool = False) -> tuple[AgentCard, RecordingExecutor]:
    card = make_card(name, input_modes=modes, output_modes=out or ["text/plain"])
    if ext:
        declare_extension(card)
    return card, RecordingExecutor(reply=reply or f"{name} ok", echo=echo)


async def sdk_client(url: str) -> Any:
    return await create_client(url, ClientConfig(streaming=False))


async def rpc(url: str, method: str, params: dict[str, Any], *, version: str | None = "1.0", path: str = "/") -> dict[str, Any]:
    headers = {"A2A-Version": version} if version else {}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(url + path, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=headers)
    return r.json()  # type: ignore[no-any-return]


@pytest.fixture
def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN}"}
