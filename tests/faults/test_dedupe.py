"""A client that resends the same messageId (retry after a timeout, a lost connection) gets one delivery."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from mma2a.errors import DispatchError
from mma2a.gateway.faults import Deduper
from tests.gateway.conftest import agent, agents, gateway, rpc


def _msg(mid: str, text: str = "hello") -> dict:
    return {"message": {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}]}}


async def test_same_message_id_is_delivered_once_and_answered_alike() -> None:
    specs = {"text": agent("text", ["text/plain"])}
    async with agents(specs) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}], "faults": {"dedupe_ttl_s": 60}}
        async with gateway(cfg) as (gw, url):
            first, second = await asyncio.gather(rpc(url, "SendMessage", _msg("d-1")), rpc(url, "SendMessage", _msg("d-1")))
            later = await rpc(url, "SendMessage", _msg("d-1"))
            other = await rpc(url, "SendMessage", _msg("d-2"))
    assert first == second == later
    assert first["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [r.message.message_id for r in specs["text"][1].received] == ["d-1", "d-2"]
    assert other["result"]["task"]["id"] != first["result"]["task"]["id"]


async def test_dedupe_is_off_by_default() -> None:
    specs = {"text": agent("text", ["text/plain"])}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": "text", "url": urls["text"]}]}) as (gw, url):
            await rpc(url, "SendMessage", _msg("d-1"))
            await rpc(url, "SendMessage", _msg("d-1"))
    assert len(specs["text"][1].received) == 2


async def test_a_failed_first_attempt_is_not_remembered() -> None:
    d = Deduper(ttl_s=60)
    calls = []

    async def failing() -> str:
        calls.append("x")
        raise DispatchError("agent a unreachable: refused")

    async def working() -> str:
        calls.append("y")
        return "answer"

    with pytest.raises(DispatchError):
        await d.run("alice", "m", failing)
    assert await d.run("alice", "m", working) == "answer"
    assert await d.run("alice", "m", failing) == "answer"  # remembered now
    assert await d.run("bob", "m", working) == "answer" and calls == ["x", "y", "y"]  # per sender


async def test_dedupe_memory_is_bounded() -> None:
    now = [0.0]
    d = Deduper(ttl_s=10, capacity=100, clock=lambda: now[0])

    async def ok() -> int:
        return 1

    for i in range(1000):
        now[0] = i * 0.001
        await d.run(None, f"m{i}", ok)
    assert len(d._seen) <= 100


async def test_one_clients_answers_push_out_only_its_own_and_anothers_retry_is_still_answered_once() -> None:
    """Session 15 (probe6, S15-14): the answers kept for retries were one set for every client, bounded in entries and
    bytes, so a client whose messages come back large (an agent that echoes) pushed every other client's out with a
    handful of messages (17 at the default 64 MiB; here 1 MiB, and 30 echoes of 20 KB): alice's retry of her message
    then reached the agent a second time. Now one client's answers are at most a quarter of either bound, its own
    oldest going first."""
    specs = {"text": agent("text", ["text/plain"], echo=True)}
    async with agents(specs) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}], "faults": {"dedupe_ttl_s": 600, "dedupe_max_bytes": 1 << 20},
               "auth": {"clients": [{"name": "alice", "token": "alice-t"}, {"name": "mallory", "token": "mallory-t"}]}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            async def send(token: str, mid: str, text: str = "hello") -> dict[str, Any]:
                r = await c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": _msg(mid, text)},
                                 headers={"A2A-Version": "1.0", "Authorization": f"Bearer {token}"})
                return r.json()  # type: ignore[no-any-return]

            first = await send("alice-t", "a-1", "pay the invoice")
            for i in range(30):
                await send("mallory-t", f"m-{i}", "x" * 20_000)
            retry = await send("alice-t", "a-1", "pay the invoice")
            mallory_last = await send("mallory-t", "m-29", "x" * 20_000)
            mallory_first = await send("mallory-t", "m-0", "x" * 20_000)
    received = [r.message.message_id for r in specs["text"][1].received]
    assert received.count("a-1") == 1 and retry == first  # before: delivered twice, a second task
    assert received.count("m-29") == 1 and mallory_last["result"]["task"]["id"]  # her newest still kept
    assert received.count("m-0") == 2 and mallory_first["result"]["task"]["id"]  # her oldest went first
