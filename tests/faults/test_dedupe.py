"""A client that resends the same messageId (retry after a timeout, a lost connection) gets one delivery."""

from __future__ import annotations

import asyncio

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
