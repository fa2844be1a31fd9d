"""test_conformance.py's scenarios (follow-ups to unknown and terminal tasks, a mismatched context, cancel, history,
listing, versions, content types, card caching, a v0.3 client) through `mma2a serve --workers 2` and a 2-gateway
cluster behind round-robin balancers, on JSON-RPC, HTTP+JSON and gRPC: a client observes what it observes through one
gateway (the sample agent's own answers but for test_conformance.py's `DIFFERENCES`). Each request on a new
connection: on either worker, on the next gateway (test_tck_scaled.py has the fronts)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from mma2a.cluster.server import NatsServer
from tests.cluster.conftest import nats_server  # noqa: F401 (the fixture)
from tests.conformance.sut import Way, sample_agent
from tests.conformance.test_conformance import SCENARIOS, check_direct, through_gateway
from tests.conformance.test_tck_scaled import FRESH, SCALED, alternating, fronts

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ways(nats_server: NatsServer, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
               ) -> AsyncIterator[tuple[dict[str, Way], Any]]:
    async with sample_agent("sut", grpc=True) as sut, \
            fronts({"agents": [{"name": "sut", "url": sut.url}]}, nats_server, tmp_path_factory.mktemp("sut")) as f:
        yield {"direct": Way("direct", sut.url + "/", sut.url, sut.url, sut.grpc or ""), **f.ways("sut")}, f


@pytest.mark.parametrize("binding", ["jsonrpc", "rest", "grpc"])
@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_the_scenarios_hold_through_workers_and_a_cluster(ways: tuple[dict[str, Way], Any], name: str,
                                                                binding: str) -> None:
    surfaces, f = ways
    async with httpx.AsyncClient(timeout=30, limits=FRESH) as c:
        direct = await SCENARIOS[name](c, surfaces["direct"], binding)
        check_direct(name, binding, direct)
        for way in SCALED:
            async with alternating(f, way, "grpc" if binding == "grpc" else "http"):
                got = await SCENARIOS[name](c, surfaces[way], binding)
            assert got == through_gateway(name, binding, surfaces[way].kind, direct), f"{way} differs from one gateway"
