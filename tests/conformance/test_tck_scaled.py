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
from tests.conformance.test_tck import (AGENT_SAYS, CHECKS, UNKNOWN_TASK_INFO, Stack, check_direct, check_grpc_direct,
                                        check_grpc_push_direct, check_tenant_answers, error_infos, grpc_checks,
                                        grpc_push_checks, message, tenant_answers, through_gateway)
from tests.webhooks import webhook_receiver

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

FRESH = httpx.Limits(max_keepalive_connections=0)  # every request on a new connection: any worker, the next gateway
SCALED = ("workers root", "workers agent-path", "cluster root", "cluster agent-path")

# (check, binding, way) -> the fields where a way of SCALED answers otherwise than one gateway, and why
ACROSS: dict[tuple[str, str, str], tuple[dict[str, Any], str]] = {}


@dataclass(frozen=True)
class Fronts:
    """`serve --workers 2` and the two gateways of a cluster behind round-robin balancers, configured alike."""

    workers: str  # the workers' URL
    workers_grpc: str  # HOST:PORT of their gRPC binding
    cluster: str  # the HTTP balancer's URL
    cluster_grpc: str  # HOST:PORT of the gRPC balancer
    balancers: dict[str, RoundRobin]  # "http", "grpc"

    def ways(self, agent: str) -> dict[str, Way]:
        """The ways of SCALED to `agent`: each front's root and `/agents/{agent}` (on gRPC: `tenant`)."""
        out = {}
        for front, url, grpc_ in (("workers", self.workers, self.workers_grpc), ("cluster", self.cluster, self.cluster_grpc)):
            path = f"{url}/agents/{agent}"
            out[f"{front} root"] = Way("root", url + "/", url, url, grpc_)
            out[f"{front} agent-path"] = Way("agent-path", path, path, path, grpc_, agent)
        return out


@contextlib.asynccontextmanager
async def fronts(config: dict[str, Any], nats: NatsServer, workdir: Path) -> AsyncIterator[Fronts]:
    """`serve --workers 2` and a 2-gateway cluster (on `nats`) behind round-robin balancers, each with `config` (as one
    gateway's) and a gRPC binding; the cluster's gateways advertise the balancers on their cards (`public_url`,
    `public_grpc`), as deployed behind them."""
    async with contextlib.AsyncExitStack() as stack:
        (workdir / "workers").mkdir()
        (workdir / "cluster").mkdir()
        grpc_port = free_port()  # the workers' gRPC binding: one port, both listen on it (grpc's SO_REUSEPORT)
        served = await stack.enter_async_context(serving_workers(workdir / "workers", {
            "health_interval_s": 3600, **config, "grpc_listen": f"127.0.0.1:{grpc_port}"}))
        lb_port, grpc_lb_port, grpc_ports = free_port(), free_port(), [free_port(), free_port()]
        cluster = {"health_interval_s": 3600, **config, "public_url": f"http://127.0.0.1:{lb_port}",
                   "public_grpc": f"127.0.0.1:{grpc_lb_port}",
                   "cluster": {"nats": nats.url, "name": cluster_name(), "heartbeat_s": 0.5, "member_ttl_s": 2}}
        gws = await stack.enter_async_context(gateways([{**cluster, "grpc_listen": f"127.0.0.1:{p}"} for p in grpc_ports],
                                                       workdir / "cluster"))
        http_lb = await stack.enter_async_context(RoundRobin([("127.0.0.1", gw.port) for gw in gws], lb_port))
        grpc_lb = await stack.enter_async_context(RoundRobin([("127.0.0.1", p) for p in grpc_ports], grpc_lb_port))
        yield Fronts(served.url, f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{lb_port}", f"127.0.0.1:{grpc_lb_port}",
                     {"http": http_lb, "grpc": grpc_lb})


@dataclass(frozen=True)
class Scaled:
    stack: Stack  # "direct" and the ways of SCALED
    fronts: Fronts


@contextlib.asynccontextmanager
async def scaled_stack(nats: NatsServer, workdir: Path) -> AsyncIterator[Scaled]:
    """The kit's agent (push on) and webhook receiver, and the fronts, each configured as test_tck.py's one gateway."""
    async with webhook_receiver() as hook, tck_agent("tck", push=True) as agent:
        config = {"agents": [{"name": "tck", "url": agent.url}], "urls": {"allow_hosts": [hook.url.removeprefix("http://")]}}
        async with fronts(config, nats, workdir) as f:
            direct = Way("direct", agent.url + "/", agent.rest, agent.url, agent.grpc)
            yield Scaled(Stack(agent, hook=hook, ways={"direct": direct, **f.ways("tck")}), f)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scaled(nats_server: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Scaled]:  # noqa: F811
    async with scaled_stack(nats_server, tmp_path_factory.mktemp("scaled")) as s:
        yield s


def across(name: str, binding: str, way: str, kind: str, direct: Any) -> Any:
    """What a client must observe through `way` (of SCALED): what one gateway's client does, but for `ACROSS`."""
    want = through_gateway(name, binding, kind, direct)
    override, _why = ACROSS.get((name, binding, way), ({}, ""))
    return {**want, **override} if override else want


@contextlib.asynccontextmanager
async def alternating(fronts: Fronts, way: str, balancer: str) -> AsyncIterator[None]:
    """Through the cluster, the requests made inside went to both gateways in turn (when there were two or more)."""
    lb = fronts.balancers[balancer]
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
            async with alternating(scaled.fronts, way, "http"):
                got = await CHECKS[name](c, s.ways[way], binding, s)
            assert got == across(name, binding, way, s.ways[way].kind, direct), f"{way} differs from one gateway"


async def test_the_kits_grpc_checks_hold_through_workers_and_a_cluster(scaled: Scaled) -> None:
    s = scaled.stack
    direct = await grpc_checks(s.ways["direct"])
    check_grpc_direct(direct)
    for way in SCALED:
        async with alternating(scaled.fronts, way, "grpc"):
            got = await grpc_checks(s.ways[way])
        assert got == direct, f"{way} differs from the agent's own gRPC answers"


async def test_the_kits_push_checks_on_grpc_hold_through_workers_and_a_cluster(scaled: Scaled) -> None:
    s = scaled.stack
    direct = await grpc_push_checks(s.ways["direct"], s.hook)
    check_grpc_push_direct(direct)
    for way in SCALED:
        async with alternating(scaled.fronts, way, "grpc"):
            got = await grpc_push_checks(s.ways[way], s.hook)
        assert got == direct, f"{way} differs from the agent's own gRPC answers"


async def test_tenants_and_error_infos_hold_through_workers_and_a_cluster(scaled: Scaled) -> None:
    """test_tck.py's tenant and ErrorInfo checks: a tenant naming no agent is NOT_FOUND (gRPC, REST's tenant path), the
    root's own TaskNotFound and an agent's error carry the same ErrorInfo on every binding, through each way."""
    ways = scaled.stack.ways
    for way in SCALED:
        if ways[way].kind == "root":
            check_tenant_answers(await tenant_answers(ways[way]))
            unknown = await error_infos(ways[way], "GetTask", {"id": "tck-no-such-task"})
            assert unknown == dict.fromkeys(("jsonrpc", "rest", "grpc"), UNKNOWN_TASK_INFO), way
        agents = await error_infos(ways[way], "SendMessage", {"message": message("tck-error-metadata")})
        assert agents == dict.fromkeys(("jsonrpc", "rest", "grpc"), AGENT_SAYS), way


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
