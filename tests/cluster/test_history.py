"""Cluster mode's decision history: one JetStream stream, every gateway's file indexes all of it, restarts resume."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from mma2a.cluster.server import NatsServer
from tests.agents import RecordingExecutor, make_card, run_agent

from .conftest import admin, cluster_name, gateways, send, task_state, text_message

pytestmark = pytest.mark.timeout(300)  # gateway processes and nats-server: minutes on a loaded 2-core box


async def history_ids(client: httpx.AsyncClient, url: str) -> list[str]:
    r = await client.get(url + "/admin/history", params={"limit": 1000}, headers=admin())
    assert r.status_code == 200, r.text
    return [d["messageId"] for d in r.json()["decisions"]]


async def eventually_ids(client: httpx.AsyncClient, url: str, want: set[str], deadline_s: float = 30.0) -> list[str]:
    """The history of `url` once it holds every id in `want` (the stream is followed asynchronously)."""
    t0 = time.monotonic()
    while True:
        ids = await history_ids(client, url)
        if want <= set(ids) or time.monotonic() - t0 > deadline_s:
            return ids
        await asyncio.sleep(0.1)


async def test_every_gateway_answers_for_the_whole_cluster_and_resumes_after_a_restart(
        nats_server: NatsServer, tmp_path: Path) -> None:
    ex = RecordingExecutor(reply="ok")
    async with run_agent(make_card("a1"), ex) as u1:
        base: dict[str, Any] = {"cluster": {"nats": nats_server.url, "name": cluster_name(), "heartbeat_s": 0.5,
                                            "member_ttl_s": 3}}
        async with gateways([{**base, "agents": [{"name": "a1", "url": u1}]}, {**base}], tmp_path) as (g0, g1):
            async with httpx.AsyncClient(timeout=10) as c:
                for i in range(3):
                    assert task_state(await send(c, g0.url, text_message("x", message_id=f"g0-{i}"))) == "TASK_STATE_COMPLETED"
                for i in range(2):
                    assert task_state(await send(c, g1.url, text_message("x", message_id=f"g1-{i}"))) == "TASK_STATE_COMPLETED"
                first = {"g0-0", "g0-1", "g0-2", "g1-0", "g1-1"}
                on_g1 = await eventually_ids(c, g1.url, first)
                on_g0 = await eventually_ids(c, g0.url, first)
                await asyncio.to_thread(g1.stop)  # while it is down, g0 keeps recording into the stream
                for i in range(3, 5):
                    await send(c, g0.url, text_message("x", message_id=f"g0-{i}"))
                g1.start()
                await g1.ready()
                everything = first | {"g0-3", "g0-4"}
                after = await eventually_ids(c, g1.url, everything)
                page = (await c.get(g1.url + "/admin/history", params={"agent": "a1", "sender": "nobody"},
                                    headers=admin())).json()
    assert sorted(on_g1) == sorted(first) and sorted(on_g0) == sorted(first)
    assert sorted(after) == sorted(everything)  # resumed from its saved position: nothing missing, nothing twice
    assert page == {"decisions": [], "cursor": None}
