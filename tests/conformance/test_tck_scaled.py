"""The conformance kit's checks (test_tck.py's own, reused) through gateways that share their state: `mma2a serve
--workers 2` (every request on a new connection, so the kernel gives each to either worker) and the two gateways of a
cluster on a real nats-server behind a round-robin TCP balancer (each request of a check on the next gateway). What a
client observes must be what it observes through one gateway (test_tck.py: the agent's own answers but for its
`DIFFERENCES`), except what `ACROSS` lists with its reason (docs/operations.md, "Transparency").

One agent, one webhook receiver, one `serve --workers 2` and one cluster serve the whole module.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from mma2a.cluster.server import NatsServer
from mma2a.serving import free_port
from tests.cluster.conftest import cluster_name, gateways, nats_server, task_sharing  # noqa: F401 (the fixture)
from tests.cluster.test_cross_worker import RoundRobin
from tests.cluster.test_workers import serving_workers
from tests.conformance.sut import Way
from tests.conformance.tck_agent import tck_agent
from tests.conformance.test_tck import (CARD, CHECKS, Stack, check_direct, check_grpc_direct, check_grpc_push_direct,
                                        grpc_checks, grpc_push_checks, through_gateway)
from tests.webhooks import webhook_receiver

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

FRESH = httpx.Limits(max_keepalive_connections=0)  # every request on a new connection: any worker, the next gateway
SCALED = ("workers root", "workers agent-path", "cluster root", "cluster agent-path")

# (check, binding, way) -> the fields where a way of SCALED answers otherwise than one gateway, and why
ACROSS: dict[tuple[str, str, str], tuple[dict[str, Any], str]] = {}


@dataclass(frozen=True)
class Scaled:
    stack: Stack  # "direct" and the ways of SCALED
    balancers: dict[str, RoundRobin]  # "http", "grpc": in front of the cluster's two gateways


@contextlib.asynccontextmanager
async def scaled_stack(nats: NatsServer, workdir: Path) -> AsyncIterator[Scaled]:
    """The kit's agent (push on) and webhook receiver, `serve --workers 2` and a 2-gateway cluster in front of it, each
    configured as test_tck.py's one gateway."""
    async with webhook_receiver() as hook, tck_agent("tck", push=True) as agent, contextlib.AsyncExitStack() as stack:
        config: dict[str, Any] = {"agents": [{"name": "tck", "url": agent.url}], "health_interval_s": 3600,
                                  "urls": {"allow_hosts": [hook.url.removeprefix("http://")]}}
        grpc_port = free_port()  # the workers' gRPC binding: one port, both listen on it (grpc's SO_REUSEPORT)
        served = await stack.enter_async_context(serving_workers(workdir / "workers", {
            **config, "grpc_listen": f"127.0.0.1:{grpc_port}"}))
        cluster = {**config, "grpc_listen": "127.0.0.1:0",
                   "cluster": {"nats": nats.url, "name": cluster_name(), "heartbeat_s": 0.5, "member_ttl_s": 2}}
        gws = await stack.enter_async_context(gateways([cluster, cluster], workdir / "cluster"))
        async with httpx.AsyncClient(timeout=30) as c:
            cards = [(await c.get(gw.url + CARD)).json() for gw in gws]
        grpc_ports = [int(next(i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC")
                          .rsplit(":", 1)[1]) for card in cards]
        http_lb = await stack.enter_async_context(RoundRobin([("127.0.0.1", gw.port) for gw in gws]))
        grpc_lb = await stack.enter_async_context(RoundRobin([("127.0.0.1", p) for p in grpc_ports]))
        w, lb, wg, lg = served.url, f"http://127.0.0.1:{http_lb.port}", f"127.0.0.1:{grpc_port}", f"127.0.0.1:{grpc_lb.port}"
        yield Scaled(Stack(agent, hook=hook, ways={
            "direct": Way("direct", agent.url + "/", agent.rest, agent.url, agent.grpc),
            "workers root": Way("root", w + "/", w, w, wg),
            "workers agent-path": Way("agent-path", f"{w}/agents/tck", f"{w}/agents/tck", f"{w}/agents/tck", wg, "tck"),
            "cluster root": Way("root", lb + "/", lb, lb, lg),
            "cluster agent-path": Way("agent-path", f"{lb}/agents/tck", f"{lb}/agents/tck", f"{lb}/agents/tck", lg, "tck"),
        }), {"http": http_lb, "grpc": grpc_lb})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scaled(nats_server: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Scaled]:  # noqa: F811
    workdir = tmp_path_factory.mktemp("scaled")
    (workdir / "workers").mkdir()
    (workdir / "cluster").mkdir()
    async with scaled_stack(nats_server, workdir) as s:
        yield s


def across(name: str, binding: str, way: str, kind: str, direct: Any) -> Any:
    """What a client must observe through `way` (of SCALED): what one gateway's client does, but for `ACROSS`."""
    want = through_gateway(name, binding, kind, direct)
    override, _why = ACROSS.get((name, binding, way), ({}, ""))
    return {**want, **override} if override else want


@contextlib.asynccontextmanager
async def alternating(scaled: Scaled, way: str, balancer: str) -> AsyncIterator[None]:
    """Through the cluster, the requests made inside went to both gateways in turn (when there were two or more)."""
    lb = scaled.balancers[balancer]
    before = len(lb.served)
    yield
    made = lb.served[before:]
    if way.startswith("cluster") and len(made) >= 2:
        assert set(made) == {0, 1}, made


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
@pytest.mark.parametrize("name", list(CHECKS))
async def test_the_kits_checks_hold_through_workers_and_a_cluster(scaled: Scaled, name: str, binding: str) -> None:
    s = scaled.stack
    async with httpx.AsyncClient(timeout=30, limits=FRESH) as c:
        direct = await CHECKS[name](c, s.ways["direct"], binding, s)
        check_direct(name, binding, direct)
        for way in SCALED:
            async with alternating(scaled, way, "http"):
                got = await CHECKS[name](c, s.ways[way], binding, s)
            assert got == across(name, binding, way, s.ways[way].kind, direct), f"{way} differs from one gateway"


async def test_the_kits_grpc_checks_hold_through_workers_and_a_cluster(scaled: Scaled) -> None:
    s = scaled.stack
    direct = await grpc_checks(s.ways["direct"])
    check_grpc_direct(direct)
    for way in SCALED:
        async with alternating(scaled, way, "grpc"):
            got = await grpc_checks(s.ways[way])
        assert got == direct, f"{way} differs from the agent's own gRPC answers"


async def test_the_kits_push_checks_on_grpc_hold_through_workers_and_a_cluster(scaled: Scaled) -> None:
    s = scaled.stack
    direct = await grpc_push_checks(s.ways["direct"], s.hook)
    check_grpc_push_direct(direct)
    for way in SCALED:
        async with alternating(scaled, way, "grpc"):
            got = await grpc_push_checks(s.ways[way], s.hook)
        assert got == direct, f"{way} differs from the agent's own gRPC answers"


async def test_both_workers_made_tasks_for_the_checks_and_read_each_others(scaled: Scaled) -> None:
    """The checks above reached both workers of `serve --workers 2` with their follow-ups: each worker's `/metrics`
    (read on fresh connections, so from either) counts task records it made and records it took from the other's task
    files (read for a follow-up to a task it did not make, a context it did not know, a listing). Pytest runs a module's tests in order; run alone, this has nothing to see."""
    url = scaled.stack.ways["workers root"].rest
    async with httpx.AsyncClient(timeout=30, limits=FRESH) as c:
        seen = [task_sharing((await c.get(url + "/metrics")).text) for _ in range(8)]
    if all(not s.get("records") for s in seen):
        pytest.skip("no check ran before this test in this session")
    assert all(s["via"] == "files" and s["records"] > 0 and s["adopted"] > 0 for s in seen), seen
