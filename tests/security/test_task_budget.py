"""Security round 4 #6: one client evicted every other client's tasks. Records shared one 16 MiB task map, and a
fan-out aggregate stored the whole request: five large fan-out messages of carol made alice's own task `not found`.
Now each client has a byte budget inside the map's (`limits.task_bytes_per_client`) and aggregates are stored
without the request's parts."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import httpx

from mma2a.ext import EXTENSION_URI
from tests.gateway.conftest import agent, agents, gateway


def fan_out(mid: str, text: str) -> dict[str, Any]:
    return {"message": {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}], "extensions": [EXTENSION_URI],
                        "metadata": {EXTENSION_URI: {"intent": "explicit", "receivers": ["left", "right"]}}}}


async def rpc(c: httpx.AsyncClient, url: str, token: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    r = await c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                     headers={"A2A-Version": "1.0", "Authorization": f"Bearer {token}"})
    return r.json()  # type: ignore[no-any-return]


async def test_one_clients_large_fan_outs_no_longer_evict_another_clients_task() -> None:
    specs = {"left": agent("left", ["text/plain"], echo=True), "right": agent("right", ["text/plain"], echo=True)}
    big = "carol " * 300_000  # 1.8 MB, echoed by both agents: 5.4 MB an aggregate as it was stored before
    async with agents(specs) as urls:
        cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()],
               "auth": {"clients": [{"name": "alice", "token": "alice-t"}, {"name": "carol", "token": "carol-t"}]}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=60) as c:
            def call(token: str, method: str, params: dict[str, Any]) -> Awaitable[dict[str, Any]]:
                return rpc(c, url, token, method, params)

            mine = await call("alice-t", "SendMessage", fan_out("a-1", "alice's question"))
            alice_task = mine["result"]["task"]["id"]
            carol = [(await call("carol-t", "SendMessage", fan_out(f"c-{i}", big)))["result"]["task"] for i in range(5)]
            assert all(t["status"]["state"] == "TASK_STATE_COMPLETED" for t in carol)
            got = await call("alice-t", "GetTask", {"id": alice_task})
            assert got.get("result", {}).get("id") == alice_task, got  # before: -32001 task 'alice's id' not found
            tasks = gw.pipeline.tasks
            assert tasks.held_by("carol") <= 4 * 1024 * 1024 < tasks.max_bytes
            newest = await call("carol-t", "GetTask", {"id": carol[-1]["id"]})
            oldest = await call("carol-t", "GetTask", {"id": carol[0]["id"]})
    assert [m.get("parts") for m in got["result"]["history"]] == [[]]  # the request's ids, not its parts
    assert newest["result"]["id"] == carol[-1]["id"]
    # carol's own oldest went to make room for her newest
    assert oldest["error"] == {"code": -32001, "message": f"task {carol[0]['id']!r} not found",
                               "data": oldest["error"]["data"]}


async def test_a_clients_long_context_ids_count_in_its_task_budget() -> None:
    """Session 15 (probe6): a context id is the client's to choose, of any length up to the body cap, and each task
    record keeps it; its characters were not counted, so mallory's 40 messages with a distinct 100 KB context each
    were all remembered (4 MB held, counted ~30 KB), and her budget (here 256 KiB; 4 MiB by default: some 6,500
    records, so as many context ids of up to 64 MiB each) bounded nothing of them. Now a record counts its context id:
    her own oldest go, alice's task stays."""
    specs = {"echo": agent("echo", ["text/plain"], echo=True)}
    budget = 256 * 1024
    async with agents(specs) as urls:
        cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()],
               "limits": {"task_bytes_per_client": budget},
               "auth": {"clients": [{"name": "alice", "token": "alice-t"}, {"name": "mallory", "token": "mallory-t"}]}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=60) as c:
            def call(token: str, method: str, params: dict[str, Any]) -> Awaitable[dict[str, Any]]:
                return rpc(c, url, token, method, params)

            def message(mid: str, context: str | None = None) -> dict[str, Any]:
                m = {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": "hi"}]}
                return {"message": m if context is None else {**m, "contextId": context}}

            alice = (await call("alice-t", "SendMessage", message("a-1")))["result"]["task"]
            sent = [(await call("mallory-t", "SendMessage", message(f"m-{i}", f"{i:03d}" + "c" * 100_000)))["result"]["task"]
                    for i in range(40)]
            assert all(len(t["contextId"]) == 100_003 for t in sent)
            tasks = gw.pipeline.tasks
            held = [t for t in sent if tasks.find(t["id"]) is not None]
            assert len(held) * 100_003 <= tasks.held_by("mallory") <= budget  # before: all 40 held, counted ~30 KB
            oldest = await call("mallory-t", "GetTask", {"id": sent[0]["id"]})
            assert oldest["error"]["message"] == f"task {sent[0]['id']!r} not found"
            assert (await call("mallory-t", "GetTask", {"id": sent[-1]["id"]}))["result"]["id"] == sent[-1]["id"]
            assert (await call("alice-t", "GetTask", {"id": alice["id"]}))["result"]["id"] == alice["id"]
