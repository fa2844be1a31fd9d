"""The kit's checks that keep a client's state, with authentication on, through a federation hop as deployed: gateway A
(clients alice and bob) signs who each client is (`federation.private_key_env`), gateway B knows A as its client `gwa`
and trusts A's key (`federation.trusted_gateways`), so at B alice is `alice via gwa` (docs/operations.md, "Who the
client is, across a hop"). Alice observes through A what she observes through one gateway of the same auth config
(test_tck_scaled_auth.py's `AUTHED`), and bob is told her tasks do not exist through A, as through one gateway."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from mma2a.signing import new_private_key, private_key_text, public_key_text
from tests.cluster.test_security import TOKENS
from tests.conformance.sut import Way
from tests.conformance.tck_agent import tck_agent
from tests.conformance.test_tck import CHECKS, V1, Stack, message, mid
from tests.conformance.test_tck_scaled_auth import ONE, PER_CLIENT, strangers_view, who
from tests.gateway.conftest import gateway
from tests.webhooks import webhook_receiver

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

HOPS = ("hop root", "hop agent-path")
GWA = "gwa-token-0123456789"


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def secured() -> AsyncIterator[Stack]:
    key = new_private_key()
    with environment(FED_A_KEY=private_key_text(key), FED_A_PUB=public_key_text(key), MMA2A_AGENT_GWA_TOKEN=GWA):
        async with webhook_receiver() as hook, tck_agent("tck", push=True) as agent, contextlib.AsyncExitStack() as stack:
            urls = {"allow_hosts": [hook.url.removeprefix("http://")]}
            clients = {"auth": {"clients": [{"name": n, "token": t} for n, t in TOKENS.items()]}}
            _, one = await stack.enter_async_context(gateway({"agents": [{"name": "tck", "url": agent.url}], "urls": urls,
                                                              **clients}))
            _, url_b = await stack.enter_async_context(gateway({
                "name": "gw-b", "agents": [{"name": "tck", "url": agent.url}], "urls": urls,
                "auth": {"clients": [{"name": "gwa", "token": GWA}]},
                "federation": {"trusted_gateways": {"gwa": {"public_key_env": "FED_A_PUB"}}}}))
            _, url_a = await stack.enter_async_context(gateway({
                "name": "gw-a", "agents": [{"name": "tck", "url": url_b, "token_env": "MMA2A_AGENT_GWA_TOKEN"}],
                "urls": urls, **clients, "federation": {"private_key_env": "FED_A_KEY"}}))
            o, a = one.rstrip("/"), url_a.rstrip("/")
            yield Stack(agent, hook=hook, ways={
                "direct": Way("direct", agent.url + "/", agent.rest, agent.url, agent.grpc),
                "one root": Way("root", o + "/", o, o), "one agent-path": Way("agent-path", *[f"{o}/agents/tck"] * 3),
                "hop root": Way("root", a + "/", a, a), "hop agent-path": Way("agent-path", *[f"{a}/agents/tck"] * 3)})


# JSON-RPC only: gw-a reaches gw-b over JSON-RPC whatever binding the client uses, and what the client's binding
# renders at gw-a is one gateway's (test_tck_federated.py runs every check on both bindings through the hop)
@pytest.mark.parametrize("binding", ["jsonrpc"])
@pytest.mark.parametrize("name", PER_CLIENT)
async def test_a_clients_checks_hold_through_a_federation_hop(secured: Stack, name: str, binding: str) -> None:
    async with httpx.AsyncClient(timeout=30, headers=who("alice")) as c:
        one = {secured.ways[w].kind: await CHECKS[name](c, secured.ways[w], binding, secured) for w in ONE}
        for way in HOPS:
            got = await CHECKS[name](c, secured.ways[way], binding, secured)
            assert got == one[secured.ways[way].kind], f"{way} differs from one gateway"


async def test_another_client_of_a_is_told_her_tasks_do_not_exist_through_the_hop(secured: Stack) -> None:
    s = secured
    seen: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=30) as c:
        for way in (*ONE, *HOPS):
            r = await c.post(s.ways[way].rpc, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "message": message("tck-input-required")}}, headers={**V1, **who("alice")})
            task = r.json()["result"]["task"]
            async with httpx.AsyncClient(timeout=30, headers={**V1, **who("bob")}) as b:
                seen[way] = await strangers_view(b, s.ways[way], task["id"], task["contextId"])
    for way in HOPS:
        assert seen[way] == seen[f"one {s.ways[way].kind}"], way


async def test_a_peers_rate_limit_reaches_the_client_through_the_hop_as_one_gateways() -> None:
    """Alice past her rate at B (B's `gwa` client: rate 0.01 a second, burst 2, per client of A), through A, against
    alice past the same rate at one gateway: 429 with `Retry-After` (JSON-RPC -32600, REST 429 RESOURCE_EXHAUSTED,
    gRPC RESOURCE_EXHAUSTED with `retry-after`), the ErrorInfo's reason RESOURCE_EXHAUSTED and its `retryAfter`, on
    every binding through both. Before, A passed B's refusal on as an agent's error: JSON-RPC in HTTP 200 without
    `Retry-After`, REST 400 INVALID_ARGUMENT with the reason INVALID_REQUEST (a client's "do not retry"). B names no
    client of a peer's (`rate limit of this client exceeded`)."""
    import grpc
    import grpc.aio
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    key = new_private_key()
    with environment(FED_A_KEY=private_key_text(key), FED_A_PUB=public_key_text(key), MMA2A_AGENT_GWA_TOKEN=GWA):
        async with tck_agent("tck") as agent, contextlib.AsyncExitStack() as stack:
            slow = {"rate": 0.01, "burst": 2}
            one, url_one = await stack.enter_async_context(gateway({
                "agents": [{"name": "tck", "url": agent.url}], "rate_limit": {"enabled": True}, "grpc_listen": "127.0.0.1:0",
                "auth": {"clients": [{"name": n, "token": t, **slow} for n, t in TOKENS.items()]}}))
            _, url_b = await stack.enter_async_context(gateway({
                "name": "gw-b", "agents": [{"name": "tck", "url": agent.url}], "rate_limit": {"enabled": True},
                "auth": {"clients": [{"name": "gwa", "token": GWA, **slow}]},
                "federation": {"trusted_gateways": {"gwa": {"public_key_env": "FED_A_PUB"}}}}))
            a, url_a = await stack.enter_async_context(gateway({
                "name": "gw-a", "agents": [{"name": "tck", "url": url_b, "token_env": "MMA2A_AGENT_GWA_TOKEN"}],
                "auth": {"clients": [{"name": n, "token": t} for n, t in TOKENS.items()]}, "grpc_listen": "127.0.0.1:0",
                "federation": {"private_key_env": "FED_A_KEY"}}))
            seen: dict[str, Any] = {}
            async with httpx.AsyncClient(timeout=30, headers={**V1, **who("alice")}) as c:
                for label, url, gw in (("one", url_one.rstrip("/"), one), ("hop", url_a.rstrip("/"), a)):
                    for binding in ("jsonrpc", "rest"):
                        for _ in range(3):  # past the burst from the third on
                            r = await (c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                                "message": message("tck-complete-task")}}) if binding == "jsonrpc" else
                                c.post(url + "/message:send", json={"message": message("tck-complete-task")}))
                        err = r.json()["error"]
                        info = (err.get("data") or err.get("details"))[0]
                        seen[f"{label} {binding}"] = (r.status_code, "retry-after" in r.headers, err["code"],
                                                      err.get("status"), info["reason"], "retryAfter" in info["metadata"])
                    async with grpc.aio.insecure_channel(gw.grpc_url) as channel:
                        with pytest.raises(grpc.aio.AioRpcError) as refused:
                            await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(  # type: ignore[no-untyped-call]
                                a2a_pb2.SendMessageRequest(message=a2a_pb2.Message(
                                    message_id=mid("tck-complete-task"), role=a2a_pb2.ROLE_USER,
                                    parts=[a2a_pb2.Part(text="from the kit")])),
                                metadata=[("a2a-version", "1.0"), ("authorization", who("alice")["Authorization"])])
                    seen[f"{label} grpc"] = (refused.value.code().name,
                                             "retry-after" in dict(refused.value.trailing_metadata() or ()))
    assert seen["one jsonrpc"] == (429, True, -32600, None, "RESOURCE_EXHAUSTED", True)
    assert seen["one rest"] == (429, True, 429, "RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED", True)
    assert seen["one grpc"] == ("RESOURCE_EXHAUSTED", True)
    for binding in ("jsonrpc", "rest", "grpc"):
        assert seen[f"hop {binding}"] == seen[f"one {binding}"], binding
