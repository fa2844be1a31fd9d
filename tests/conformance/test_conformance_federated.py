"""test_conformance.py's scenarios the kit's checks do not make (error messages compared whole: follow-ups to unknown
and terminal tasks, a mismatched context, an unknown task, an unsupported version; proto field names, content types,
card caching, a v0.3 client) through a federation hop, on JSON-RPC, HTTP+JSON and gRPC: client → gateway A → gateway B
→ the sample agent, A with B's root as its agent (and A2 with B's `/agents/sut`: test_tck_federated.py has the
chain). A client observes what it observes through one gateway (the sample agent's own answers but for
test_conformance.py's `DIFFERENCES`), except what `HOP` lists with its reason (docs/operations.md, "Through a hop")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.conformance.sut import Way, sample_agent
from tests.conformance.test_conformance import DIFFERENCES, SCENARIOS, check_direct, through_gateway
from tests.conformance.test_tck_federated import _ROOT_ANSWERS, chain, ways_of

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

NOT_IN_THE_KIT = ("send_proto_names", "follow_up_unknown_task", "follow_up_terminal_task", "mismatched_context",
                  "get_unknown_task", "unsupported_version", "bad_content_type", "card_caching", "v03")
HOPS = ("hop root", "hop agent-path", "hop2 agent-path")  # through A (root, /agents/sut), through A2 (/agents/sut)

# (scenario, binding, way) -> what a way of HOPS answers otherwise than one gateway, and why
HOP: dict[tuple[str, str, str], tuple[dict[str, Any], str]] = {
    ("get_unknown_task", b, "hop agent-path"): (DIFFERENCES[("get_unknown_task", b, "root")][0], _ROOT_ANSWERS)
    for b in ("jsonrpc", "rest", "grpc")}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ways() -> AsyncIterator[dict[str, Way]]:
    async with sample_agent("sut", grpc=True) as sut, chain(sut.url, "sut", {}) as (_, a, a2):
        yield {"direct": Way("direct", sut.url + "/", sut.url, sut.url, sut.grpc or ""),
               **{f"hop {k}": w for k, w in ways_of(a[1], a[0].grpc_url, "sut").items()},
               "hop2 agent-path": ways_of(a2[1], a2[0].grpc_url, "sut")["agent-path"]}


@pytest.mark.parametrize("binding", ["jsonrpc", "rest", "grpc"])
@pytest.mark.parametrize("name", NOT_IN_THE_KIT)
async def test_the_scenarios_hold_through_a_federation_hop(ways: dict[str, Way], name: str, binding: str) -> None:
    async with httpx.AsyncClient(timeout=30) as c:
        direct = await SCENARIOS[name](c, ways["direct"], binding)
        check_direct(name, binding, direct)
        for way in HOPS:
            got = await SCENARIOS[name](c, ways[way], binding)
            want = through_gateway(name, binding, ways[way].kind, direct)
            assert got == {**want, **HOP.get((name, binding, way), ({}, ""))[0]}, f"{way} differs from one gateway"
