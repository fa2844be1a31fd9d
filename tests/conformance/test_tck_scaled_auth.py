"""The kit's checks that keep a client's state (its tasks, their history and pages, follow-ups, cancel, subscriptions,
push configs) with authentication on, as one client (alice's token on every request): through `serve --workers 2` and
the 2-gateway cluster behind round-robin balancers she observes what she observes through one gateway of the same
config (where `/agents/{name}` lists her own tasks only, with the gateway's page tokens; what one gateway answers her is
test_tck.py's observation but for `AUTHED`), and another client (bob) is told her tasks do not exist through every
way, as through one gateway (test_tck_scaled.py has the fronts)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio

from mma2a.cluster.server import NatsServer
from tests.cluster.conftest import nats_server  # noqa: F401 (the fixture)
from tests.cluster.test_security import TOKENS
from tests.conformance.sut import Way
from tests.conformance.tck_agent import tck_agent
from tests.conformance.test_tck import CHECKS, V1, Stack, message, push_call, rpc, through_gateway
from tests.conformance.test_tck_scaled import FRESH, SCALED, Fronts, alternating, fronts
from tests.gateway.conftest import gateway
from tests.webhooks import webhook_receiver

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

PER_CLIENT = ("context_ids", "history_content", "subscribe", "get_and_history", "list", "list_filters", "cancel",
              "push_crud", "push_delivery")
ONE = ("one root", "one agent-path")
_TOTALS = ("an identified caller's totalSize counts its tasks the gateway remembers on the agent, before the contextId and "
           "status filters (gateway/bindings/listing.py; docs/operations.md, Transparency)")
# (check, binding, way kind) -> the fields one gateway with auth on answers otherwise than test_tck.py's (auth off), and why
AUTHED: dict[tuple[str, str, str], tuple[tuple[str, ...], str]] = {
    **{("list", b, k): (("total",), _TOTALS) for b in ("jsonrpc", "rest") for k in ("root", "agent-path")},
    **{("list_filters", b, k): (("waiting total",), _TOTALS) for b in ("jsonrpc", "rest") for k in ("root", "agent-path")},
}


def who(client: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[client]}"}


@dataclass(frozen=True)
class Secured:
    stack: Stack  # "direct", "one root", "one agent-path" (one gateway) and the ways of SCALED, all with auth on
    fronts: Fronts


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def secured(nats_server: NatsServer, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
                  ) -> AsyncIterator[Secured]:
    async with webhook_receiver() as hook, tck_agent("tck", push=True) as agent, contextlib.AsyncExitStack() as stack:
        config = {"agents": [{"name": "tck", "url": agent.url}], "urls": {"allow_hosts": [hook.url.removeprefix("http://")]},
                  "auth": {"clients": [{"name": n, "token": t} for n, t in TOKENS.items()]}}
        _, url = await stack.enter_async_context(gateway(config))
        f = await stack.enter_async_context(fronts(config, nats_server, tmp_path_factory.mktemp("secured")))
        gw = url.rstrip("/")
        one = {"one root": Way("root", gw + "/", gw, gw),
               "one agent-path": Way("agent-path", f"{gw}/agents/tck", f"{gw}/agents/tck", f"{gw}/agents/tck")}
        direct = Way("direct", agent.url + "/", agent.rest, agent.url, agent.grpc)
        yield Secured(Stack(agent, hook=hook, ways={"direct": direct, **one, **f.ways("tck")}), f)


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
@pytest.mark.parametrize("name", PER_CLIENT)
async def test_a_clients_checks_hold_through_workers_and_a_cluster(secured: Secured, name: str, binding: str) -> None:
    s = secured.stack
    async with httpx.AsyncClient(timeout=30, limits=FRESH, headers=who("alice")) as c:
        direct = await CHECKS[name](c, s.ways["direct"], binding, s)
        one = {s.ways[w].kind: await CHECKS[name](c, s.ways[w], binding, s) for w in ONE}
        for kind, got in one.items():  # with auth on, one client sees what every client sees with it off, but AUTHED
            fields, _why = AUTHED.get((name, binding, kind), ((), ""))
            want = through_gateway(name, binding, kind, direct)
            if fields:
                got, want = ({k: v for k, v in d.items() if k not in fields} for d in (got, want))
            assert got == want, f"one gateway's {kind}"
        for way in SCALED:
            async with alternating(secured.fronts, way, "http"):
                got = await CHECKS[name](c, s.ways[way], binding, s)
            assert got == one[s.ways[way].kind], f"{way} differs from one gateway"


async def strangers_view(c: httpx.AsyncClient, way: Way, tid: str, ctx: str) -> dict[str, Any]:
    """What bob is told of alice's task `tid` (context `ctx`) through `way`: each call on a new connection."""
    bob = {**V1, **who("bob")}
    follow = {"message": message("tck-complete-task", taskId=tid)}
    listed = await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}, headers=bob)
    return {"get": await rpc(c, way, "GetTask", {"id": tid}, headers=bob),
            "cancel": await rpc(c, way, "CancelTask", {"id": tid}, headers=bob),
            "follow-up": await rpc(c, way, "SendMessage", follow, headers=bob),
            "in her context": await rpc(c, way, "SendMessage", {"message": message("tck-complete-task", contextId=ctx)},
                                        headers=bob),
            "listed": tid in {t["id"] for t in listed.json().get("result", {}).get("tasks", [])},
            "push config": await push_call(c, way, "jsonrpc", "ListTaskPushNotificationConfigs", tid)}


async def test_another_client_is_told_her_tasks_do_not_exist_through_every_way(secured: Secured) -> None:
    """Alice's waiting task, made through each way, and bob asking about it through the same way (each call on a new
    connection, so through the other worker or gateway too): as through one gateway."""
    s = secured.stack
    seen: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=30, limits=FRESH) as c:
        for way in (*ONE, *SCALED):
            r = await c.post(s.ways[way].rpc, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "message": message("tck-input-required")}}, headers={**V1, **who("alice")})
            task = r.json()["result"]["task"]
            bob = {**V1, **who("bob")}
            async with httpx.AsyncClient(timeout=30, limits=FRESH, headers=bob) as b:
                seen[way] = await strangers_view(b, s.ways[way], task["id"], task["contextId"])
    not_found = {"http": 200, "id": 1, "code": -32001, "reasons": ["TASK_NOT_FOUND"]}
    for way in ONE:
        assert seen[way] == {"get": not_found, "cancel": not_found, "follow-up": not_found,
                             "in her context": {"http": 200, "id": 1, "code": -32602, "reasons": ["INVALID_PARAMS"]},
                             "listed": False, "push config": {"ok": False, "code": -32001, "reasons": ["TASK_NOT_FOUND"]}}, way
    for way in SCALED:
        assert seen[way] == seen[f"one {s.ways[way].kind}"], way
