"""Durable delivery: 1,000 messages in flight, a gateway SIGKILLed, NATS restarted — none lost, none twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from a2a.server.agent_execution import RequestContext
from a2a.server.events import EventQueue

from mma2a.cluster.server import NatsServer
from tests.agents import RecordingExecutor, make_card, run_agent

from .conftest import cluster_name, gateways, task_state, text_message

pytestmark = pytest.mark.timeout(300)  # 1,000 messages through two gateway processes: minutes on a loaded 2-core box
SEND_BUDGET_S = 180.0
"""How long every message may take to be answered COMPLETED (the tests' own wait, well inside the timeout above)."""


@dataclass
class CountingExecutor(RecordingExecutor):
    """Counts each messageId it is given (a duplicate would show as a count of 2); a little work per message."""

    seen: Counter[str] = field(default_factory=Counter)
    delay_s: float = 0.002

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        self.seen[context.message.message_id] += 1
        await asyncio.sleep(self.delay_s)
        await super().execute(context, event_queue)


def durable_config(nats_url: str, name: str, agent_url: str, *, dispatch: bool) -> dict[str, Any]:
    return {
        "agents": [{"name": "sink", "url": agent_url}], "timeout_s": 20, "retries": 0,
        "rules": json.dumps({"version": 1, "rules": [
            {"name": "sink", "match": {"modality": "*/*"}, "action": {"route_to": "sink"}}]}),
        "cluster": {"nats": nats_url, "name": name, "durable": True, "dispatch": dispatch, "ack_wait_s": 2,
                    "heartbeat_s": 0.5, "member_ttl_s": 2, "dispatch_concurrency": 32},
    }


async def deliver_all(client: aiohttp.ClientSession, ids: list[str], pick: Any, *, concurrency: int,
                      progress: list[int]) -> dict[str, int]:
    """Send every id until the gateway answers COMPLETED (a retry reuses the messageId); returns attempts per id."""
    attempts: Counter[str] = Counter()
    sem = asyncio.Semaphore(concurrency)

    async def one(mid: str) -> None:
        async with sem:
            while True:
                attempts[mid] += 1
                body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                        "params": {"message": text_message(f"m {mid}", message_id=mid)}}
                try:
                    async with client.post(pick(mid, attempts[mid]) + "/", json=body, headers={"A2A-Version": "1.0"}) as r:
                        reply = await r.json()
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    reply = {}
                if task_state(reply) == "TASK_STATE_COMPLETED":
                    progress[0] += 1
                    return
                await asyncio.sleep(0.05 + random.random() * 0.1)

    await asyncio.gather(*(one(m) for m in ids))
    return dict(attempts)


@contextlib.asynccontextmanager
async def sending_all(client: aiohttp.ClientSession, ids: list[str], pick: Any, *, concurrency: int,
                      progress: list[int]) -> AsyncIterator[asyncio.Task[dict[str, int]]]:
    """`deliver_all` as a task that is cancelled when the block ends, however it ends (left running, it would retry
    against stopped gateways for ever and keep the test's event loop busy)."""
    task = asyncio.create_task(deliver_all(client, ids, pick, concurrency=concurrency, progress=progress))
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


async def until_delivered(ex: CountingExecutor, ids: list[str], timeout_s: float = 60) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not all(ex.seen[m] for m in ids) and loop.time() < deadline:
        await asyncio.sleep(0.05)


async def test_sigkill_of_a_gateway_with_1000_messages_in_flight_loses_none_and_duplicates_none(
        nats_server: NatsServer, tmp_path: Path) -> None:
    ex = CountingExecutor(reply="ok")
    async with run_agent(make_card("sink"), ex) as agent_url:
        name = cluster_name()
        # gateway 0 only accepts (its dispatcher off), gateway 1 accepts and dispatches
        configs = [durable_config(nats_server.url, name, agent_url, dispatch=False),
                   durable_config(nats_server.url, name, agent_url, dispatch=True)]
        async with gateways(configs, tmp_path) as gws:
            urls = [g.url for g in gws]
            alive = [True, True]

            def pick(mid: str, attempt: int) -> str:
                i = int(mid.split("-")[1]) % 2 if attempt == 1 else 1
                return urls[i if alive[i] else 1]

            ids = [f"msg-{i:04d}" for i in range(1000)]
            progress = [0]
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1000),
                                             timeout=aiohttp.ClientTimeout(total=30)) as client:
                async with sending_all(client, ids, pick, concurrency=1000, progress=progress) as sending:
                    while progress[0] < 150 and not sending.done():
                        await asyncio.sleep(0.005)
                    in_flight = 1000 - progress[0]
                    gws[0].kill()  # SIGKILL: no drain, no goodbye
                    alive[0] = False
                    attempts = await asyncio.wait_for(sending, SEND_BUDGET_S)
            await until_delivered(ex, ids)
            async with httpx.AsyncClient(timeout=5) as c:
                members = (await c.get(urls[1] + "/healthz")).json()
    assert in_flight >= 700, f"only {in_flight} messages were in flight when the gateway was killed"
    assert sum(1 for a in attempts.values() if a > 1) > 0, "the kill interrupted no request: the test proved nothing"
    assert [m for m in ids if ex.seen[m] == 0] == [], "lost"
    assert {m: n for m, n in ex.seen.items() if n > 1} == {}, "delivered twice"
    assert sorted(ex.seen) == ids
    assert members["status"] == "ok"


async def test_nats_restart_mid_run_gateways_reconnect_and_nothing_accepted_is_lost(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nats").start()  # its own server: restarting it must not disturb other tests
    try:
        ex = CountingExecutor(reply="ok")
        async with run_agent(make_card("sink"), ex) as agent_url:
            name = cluster_name()
            configs = [durable_config(server.url, name, agent_url, dispatch=True) for _ in range(2)]
            async with gateways(configs, tmp_path) as gws:
                urls = [g.url for g in gws]
                ids = [f"msg-{i:04d}" for i in range(400)]
                progress = [0]
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client:

                    def pick(mid: str, attempt: int) -> str:
                        return urls[(int(mid.split("-")[1]) + attempt) % 2]

                    async with sending_all(client, ids, pick, concurrency=50, progress=progress) as sending:
                        while progress[0] < 100 and not sending.done():
                            await asyncio.sleep(0.005)
                        await asyncio.to_thread(server.restart)
                        restarted_at = progress[0]
                        attempts = await asyncio.wait_for(sending, SEND_BUDGET_S)
                    await until_delivered(ex, ids)
                    # both gateways are back in the cluster: heartbeats written after the restart
                    health = []
                    for u in urls:
                        async with client.get(u + "/healthz") as r:
                            health.append(r.status)
    finally:
        server.stop()
    assert restarted_at < 400, "NATS restarted after the run: the test proved nothing"
    assert health == [200, 200]
    assert [m for m in ids if ex.seen[m] == 0] == []
    assert {m: n for m, n in ex.seen.items() if n > 1} == {}
    assert max(attempts.values()) >= 1


async def test_a_stopping_gateway_leaves_the_nats_drain_nothing_to_wait_for(
    nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A gateway's stop ends by draining its NATS connection, which waits until each subscription's queue has been
    read to the end. nats-py's fetch takes a stale status (the reply to an expired fetch) off the dispatcher's pull
    inbox without marking it read, so that inbox must be closed once the dispatcher stops, or the drain waits for
    its timeout (30 s: the SIGTERM of a clustered gateway seemed to hang; tests sent a second signal, then SIGKILL).
    The invariant: when the drain starts, no subscription is left that only a reader could empty."""
    from mma2a.cluster import cluster_state
    from mma2a.cluster.delivery import CONSUMER
    from mma2a.gateway import Gateway, parse_config

    monkeypatch.setenv("MMA2A_URL_SECRET", "cluster-test-url-secret-0123456789")
    async with run_agent(make_card("sink", input_modes=["text/plain"]), CountingExecutor()) as agent_url:
        config = parse_config({**durable_config(nats_server.url, cluster_name(), agent_url.rstrip("/"), dispatch=True),
                               "features": False, "health_interval_s": 3600, "data_dir": str(tmp_path)})
        gw = Gateway(config, cluster=cluster_state(config))
        await gw.start()
        cluster: Any = gw.cluster
        nc, js = cluster.nc, cluster.js
        for _ in range(600):  # until the dispatcher is fetching (a pull request waits at its consumer)
            info = await js.consumer_info(cluster.names.delivery_stream, CONSUMER)
            if info.num_waiting:
                break
            await asyncio.sleep(0.05)
        fetching = info.num_waiting

        def readers() -> list[str]:  # subscriptions without a callback: only a reader empties their queues
            return [s.subject for s in nc._subs.values() if s._cb is None]

        at_drain: list[list[str]] = []
        drain = nc.drain

        async def observed_drain() -> None:
            at_drain.append(readers())
            await drain()

        monkeypatch.setattr(nc, "drain", observed_drain)
        with caplog.at_level("DEBUG", logger="mma2a.cluster"):
            await gw.stop()
    assert fetching >= 1
    assert at_drain == [[]]
    assert nc.is_closed
    assert [r.getMessage() for r in caplog.records if "drain" in r.getMessage().lower()] == []
    # a stop closes the connection: nats-py says so as a disconnection, which is not one to warn of ("reconnecting")
    assert [r.getMessage() for r in caplog.records if "disconnected" in r.getMessage()] == []
