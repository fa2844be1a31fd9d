"""What a cluster reserves of JetStream's store, and a stream the store cannot take.

Each test runs its own nats-server (with a monitoring port, or a small store), since the session's server holds every
other test's clusters and declares a 1 TB store. A gateway with the defaults reserves exactly what `link.reserved`
says (nats-server's own count, `/jsz` `reserved_storage`); a history stream the store cannot take is logged once,
naming `history.max_bytes`, and the decisions that then fail to publish are counted, not logged per batch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mma2a.cluster.link import reserved
from mma2a.cluster.server import NatsServer
from mma2a.gateway.cluster_config import ClusterConfig
from mma2a.serving import free_port
from tests.agents import RecordingExecutor, make_card, run_agent

from .conftest import cluster_name, gateways, send, task_state, text_message
from .test_gateways import until

pytestmark = pytest.mark.timeout(120)
GiB = 1 << 30


@pytest.fixture
def own_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[NatsServer, int]]:
    """A nats-server of this test's own: its store declared `max_file_store` (the param), a monitoring port."""
    store = tmp_path / "nats"
    store.mkdir()
    conf = store / "jetstream.conf"
    conf.write_text(f"jetstream {{\n  max_file_store: {request.param}\n}}\n")
    monitor = free_port()
    server = NatsServer(store, args=["-c", str(conf), "-m", str(monitor)])
    server.start()
    yield server, monitor
    server.stop()


async def reserved_storage(monitor: int) -> int:
    async with httpx.AsyncClient(timeout=5) as c:
        return int((await c.get(f"http://127.0.0.1:{monitor}/jsz")).json()["reserved_storage"])


@pytest.mark.parametrize("own_server", ["1T"], indirect=True)
async def test_a_gateway_with_the_defaults_reserves_what_the_docs_say(own_server: tuple[NatsServer, int],
                                                                      tmp_path: Path) -> None:
    server, monitor = own_server
    name = cluster_name()
    want = reserved(ClusterConfig(nats=server.url, name=name), history_bytes=256 << 20)
    assert sum(b for b, _ in want.values()) == 2 * GiB + 848 * (1 << 20)  # 2.83 GiB: docs/operations.md, "Sizing"
    async with run_agent(make_card("a"), RecordingExecutor(echo=True)) as a_url:
        async with gateways([{"agents": [{"name": "a", "url": a_url}],
                              "cluster": {"nats": server.url, "name": name}}], tmp_path):
            total = sum(b for b, _ in want.values())

            async def all_reserved() -> bool:  # the push bucket is bounded once the push service has started
                return await reserved_storage(monitor) == total

            await until(all_reserved)
            assert await reserved_storage(monitor) == total


@pytest.mark.parametrize("own_server", ["3G"], indirect=True)
async def test_a_history_stream_the_store_cannot_take_is_said_once_naming_the_setting(
        own_server: tuple[NatsServer, int], tmp_path: Path) -> None:
    server, _ = own_server
    config = {"cluster": {"nats": server.url, "name": cluster_name()},
              "history": {"max_bytes": 4 * GiB, "flush_interval_s": 0.05}}  # the other bounds take 2.58 GiB of 3
    async with run_agent(make_card("a"), RecordingExecutor(echo=True)) as a_url:
        async with gateways([{**config, "agents": [{"name": "a", "url": a_url}]}], tmp_path) as (gw,):
            async with httpx.AsyncClient(timeout=10) as c:
                for i in range(3):  # three batches, one after the other: each publish fails
                    assert task_state(await send(c, gw.url, text_message(f"hello {i}"))) == "TASK_STATE_COMPLETED"

                    async def failed(i: int = i) -> bool:
                        return await dropped(c, gw.url) >= i + 1

                    await until(failed)
            log = gw.log.read_text()
    refusals = [line for line in log.splitlines() if "not created" in line]
    assert len(refusals) == 1 and "history.max_bytes" in refusals[0] and "max_file_store" in refusals[0], log
    assert "insufficient storage" in refusals[0], refusals
    failures = [line for line in log.splitlines() if "not published" in line]
    assert len(failures) == 1, log  # the first failed batch said, the others counted


async def dropped(c: httpx.AsyncClient, url: str) -> float:
    text = (await c.get(url + "/metrics")).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()  # not `_created`: a timestamp, there from
               if line.startswith("mma2a_history_decisions_total{") and 'fate="dropped"' in line)  # the start


def test_the_workers_over_their_own_server_reserve_neither_the_tasks_bucket_nor_a_history_stream() -> None:
    got = reserved(ClusterConfig(nats="nats://127.0.0.1:4222"), task_bucket=False)
    assert sorted(s for _, s in got.values()) == ["cluster.blob_quota_bucket_bytes", "cluster.delivered_bucket_bytes",
                                                 "cluster.learning_stream_bytes", "cluster.push_bucket_bytes",
                                                 "cluster.sessions_bucket_bytes"]
    assert sum(b for b, _ in got.values()) == GiB + 592 * (1 << 20)

