"""The agent pool's size (`limits.max_connections_per_agent`): a gateway configured for N connections to an agent never
opens more than N to it, whatever the legs in flight. The agent is a real HTTP/1.1 server on loopback that counts the
connections it accepts and holds every request until the test lets them go; no timing: each step waits for a count."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from mma2a.errors import ConfigError
from mma2a.gateway import Gateway
from mma2a.gateway.config import parse_config
from tests.gateway.conftest import until

POOL, EXTRA = 3, 4  # the pool configured, and the legs sent past it


@dataclass
class CountingAgent:
    """Accepts connections (counted), reads keep-alive HTTP/1.1 requests and answers each once `go` lets it: a JSON-RPC
    result, or (SendStreamingMessage) one SSE event."""

    accepted: int = 0
    waiting: int = 0  # requests read and held
    go: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(0))

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                request = orjson.loads(await reader.readexactly(length))
                self.waiting += 1
                await self.go.acquire()
                self.waiting -= 1
                answer = orjson.dumps({"jsonrpc": "2.0", "id": request["id"],
                                       "result": {"message": {"messageId": "r", "role": "ROLE_AGENT",
                                                              "parts": [{"text": "ok"}]}}})
                if request["method"] == "SendStreamingMessage":
                    body, kind = b"data: " + answer + b"\n\n", b"text/event-stream"
                else:
                    body, kind = answer, b"application/json"
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
                             % (kind, len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def pooled(tmp_path: Path, size: int) -> AsyncIterator[tuple[Gateway, CountingAgent, str]]:
    agent = CountingAgent()
    server = await asyncio.start_server(agent.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    gw = Gateway(parse_config({"agents": [], "data_dir": str(tmp_path), "limits": {"max_connections_per_agent": size}}))
    try:
        yield gw, agent, f"http://127.0.0.1:{port}"
    finally:
        await gw.transport.close()
        server.close()
        await server.wait_closed()



async def _held(agent: CountingAgent, legs: list[asyncio.Task[Any]]) -> None:
    """The pool's connections all taken, the rest of the legs waiting in the gateway: the agent has accepted exactly
    the pool, and holds one request on each."""
    await until(lambda: agent.waiting == POOL, "the pool's connections all carry a request")
    for _ in range(50):  # the legs past the pool had every chance to open a connection of their own
        await asyncio.sleep(0)
    assert agent.accepted == POOL and agent.waiting == POOL
    assert not any(t.done() for t in legs)


async def test_the_pool_opens_at_most_its_size_to_an_agent_for_calls(tmp_path: Path) -> None:
    async with pooled(tmp_path, POOL) as (gw, agent, url):
        assert gw.config.limits.max_connections_per_agent == POOL
        params = {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
        legs = [asyncio.create_task(gw.transport.call("counted", url + "/", "SendMessage", params, timeout_s=60))
                for _ in range(POOL + EXTRA)]
        await _held(agent, legs)
        for _ in range(POOL + EXTRA):
            agent.go.release()
        answers = await asyncio.gather(*legs)
        assert all(a["message"]["parts"] == [{"text": "ok"}] for a in answers)
        assert agent.accepted == POOL  # the legs past the pool were carried by the connections handed over


async def test_the_pool_opens_at_most_its_size_to_an_agent_for_streams(tmp_path: Path) -> None:
    async with pooled(tmp_path, POOL) as (gw, agent, url):
        params = {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}

        async def stream() -> list[Any]:
            return [e async for e in gw.transport.stream("counted", url + "/", "SendStreamingMessage", params,
                                                          timeout_s=60)]

        legs = [asyncio.create_task(stream()) for _ in range(POOL + EXTRA)]
        await _held(agent, legs)
        for _ in range(POOL + EXTRA):
            agent.go.release()
        events = await asyncio.gather(*legs)
        assert all(e == [{"message": {"messageId": "r", "role": "ROLE_AGENT", "parts": [{"text": "ok"}]}}]
                   for e in events)
        assert agent.accepted == POOL


def test_the_default_pool_is_unchanged_and_a_bad_size_names_its_field() -> None:
    assert parse_config({"agents": []}).limits.max_connections_per_agent == 256
    for bad, why in ((0, "greater than or equal to 1"), (65_537, "less than or equal to 65536"),
                     ("many", "a valid integer")):
        with pytest.raises(ConfigError) as err:
            parse_config({"agents": [], "limits": {"max_connections_per_agent": bad}})
        assert err.value.message.startswith("limits.max_connections_per_agent: ") and why in err.value.message
        assert err.value.data == {"field": "limits.max_connections_per_agent"}
