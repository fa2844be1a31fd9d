"""The conformance kit's checks (test_tck.py's own, reused) through a federation hop: client → gateway A → gateway B →
the kit's agent, A having B as its agent (docs/operations.md, "Federation"). A registers B as federation is documented,
at B's root (`gw-a`: its agent `tck` is B's root, B's aggregate card); `gw-a2` registers B's `/agents/tck` instead.
What a client observes through A (at its root and at `/agents/tck`, on gRPC `tenant`) must be what it observes through
one gateway (test_tck.py: the agent's own answers but for its `DIFFERENCES`), except what `HOP` lists with its reason
(docs/operations.md, "Through a hop").

One agent, one webhook receiver and one chain (B; A and A2 in front of it) serve the whole module.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.conformance.sut import Way
from tests.conformance.tck_agent import tck_agent
from tests.conformance.test_tck import (AGENT_SAYS, CARD, CHECKS, REQUIRED_EXT, UNKNOWN_TASK_INFO, V1, Stack,
                                        check_direct, check_grpc_direct, check_grpc_push_direct, check_tenant_answers,
                                        error_infos, extension_view, grpc_checks, grpc_push_checks, message, mid,
                                        tenant_answers, through_gateway)
from tests.gateway.conftest import gateway
from tests.webhooks import webhook_receiver

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

HOPS = ("hop root", "hop agent-path")

# (check, binding, way) -> the fields where a way of HOPS answers otherwise than one gateway, and why (none: the kit's
# views hold through the hop; what differs is below the views, in the tests after the first three)
HOP: dict[tuple[str, str, str], tuple[dict[str, Any], str]] = {}
_ROOT_ANSWERS = ("A's agent is B's root, which answers an id it never saw itself (its own TaskNotFound: the field at "
                 "fault in the ErrorInfo, `task '…' not found`), where B's /agents/tck passes it to the agent")


def ways_of(url: str, grpc_url: str | None, agent: str) -> dict[str, Way]:
    """A gateway's root and `/agents/{agent}` (on gRPC: `tenant`)."""
    u, g = url.rstrip("/"), grpc_url or ""
    return {"root": Way("root", u + "/", u, u, g), "agent-path": Way("agent-path", *[f"{u}/agents/{agent}"] * 3, g, agent)}


@dataclass(frozen=True)
class Chain:
    stack: Stack  # "direct" and the ways of HOPS (through gw-a)
    b: dict[str, Way]  # gw-b's own "root" and "agent-path": one gateway in front of the agent
    a2: dict[str, Way]  # gw-a2's (gw-b's /agents/tck registered as its agent)
    gw_a: Any  # gw-a itself (its push follows and deliveries)


@contextlib.asynccontextmanager
async def chain(agent_url: str, name: str, urls: dict[str, Any]) -> AsyncIterator[tuple[Any, Any, Any]]:
    """Gateway B in front of the agent, gateway A with B's root as its agent `name` and gateway A2 with B's
    `/agents/{name}`, gRPC on each; yields (B, A, A2) as (gateway, URL) pairs."""
    grpc_: dict[str, Any] = {"grpc_listen": "127.0.0.1:0", "urls": urls}
    async with gateway({"name": "gw-b", "agents": [{"name": name, "url": agent_url}], **grpc_}) as b, \
            gateway({"name": "gw-a", "agents": [{"name": name, "url": b[1]}], **grpc_}) as a, \
            gateway({"name": "gw-a2", "agents": [{"name": name, "url": f"{b[1].rstrip('/')}/agents/{name}"}], **grpc_}) as a2:
        for gw, _ in (b, a, a2):
            assert gw.startup_errors == []
        yield b, a, a2


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def hop() -> AsyncIterator[Chain]:
    async with webhook_receiver() as hook, tck_agent("tck", push=True) as agent:
        async with chain(agent.url, "tck", {"allow_hosts": [hook.url.removeprefix("http://")]}) as (b, a, a2):
            through_a = ways_of(a[1], a[0].grpc_url, "tck")
            direct = Way("direct", agent.url + "/", agent.rest, agent.url, agent.grpc)
            yield Chain(Stack(agent, hook=hook, ways={"direct": direct, **{f"hop {k}": w for k, w in through_a.items()}}),
                        ways_of(b[1], b[0].grpc_url, "tck"), ways_of(a2[1], a2[0].grpc_url, "tck"), a[0])


def across(name: str, binding: str, way: str, kind: str, direct: Any) -> Any:
    """What a client must observe through `way` (of HOPS): what one gateway's client does, but for `HOP`."""
    want = through_gateway(name, binding, kind, direct)
    override, _why = HOP.get((name, binding, way), ({}, ""))
    return {**want, **override} if override else want


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
@pytest.mark.parametrize("name", list(CHECKS))
async def test_the_kits_checks_hold_through_a_federation_hop(hop: Chain, name: str, binding: str) -> None:
    s = hop.stack
    async with httpx.AsyncClient(timeout=30) as c:
        direct = await CHECKS[name](c, s.ways["direct"], binding, s)
        check_direct(name, binding, direct)
        for way in HOPS:
            got = await CHECKS[name](c, s.ways[way], binding, s)
            assert got == across(name, binding, way, s.ways[way].kind, direct), f"{way} differs from one gateway"


async def test_the_kits_grpc_checks_hold_through_a_federation_hop(hop: Chain) -> None:
    direct = await grpc_checks(hop.stack.ways["direct"])
    check_grpc_direct(direct)
    for way in HOPS:
        assert await grpc_checks(hop.stack.ways[way]) == direct, f"{way} differs from the agent's own gRPC answers"


async def test_the_kits_push_checks_on_grpc_hold_through_a_federation_hop(hop: Chain) -> None:
    s = hop.stack
    direct = await grpc_push_checks(s.ways["direct"], s.hook)
    check_grpc_push_direct(direct)
    for way in HOPS:
        assert await grpc_push_checks(s.ways[way], s.hook) == direct, f"{way} differs from the agent's own gRPC answers"


async def test_tenants_and_error_infos_through_a_hop_are_one_gateways_but_an_unknown_id_on_the_agents_path(
        hop: Chain) -> None:
    """test_tck.py's tenant and ErrorInfo checks through A: as through one gateway (B), but a task id nobody saw, asked
    on A's `/agents/tck` (gRPC: `tenant`), which is B's root's own TaskNotFound (`_ROOT_ANSWERS`); through A2 (B's
    `/agents/tck` registered) the agent's, as through one gateway."""
    ways = hop.stack.ways
    seen = await tenant_answers(ways["hop root"])
    assert seen["named"] == ("NOT_FOUND",) + UNKNOWN_TASK_INFO  # the difference: B's root answered
    check_tenant_answers({**seen, "named": ("NOT_FOUND", "TASK_NOT_FOUND", "a2a-protocol.org", {})})
    check_tenant_answers(await tenant_answers(hop.a2["root"]))  # A2: the agent's answer, as through one gateway
    unknown = {"id": "tck-no-such-task"}
    for way in (ways["hop root"], ways["hop agent-path"], hop.a2["root"]):
        assert await error_infos(way, "GetTask", unknown) == dict.fromkeys(("jsonrpc", "rest", "grpc"), UNKNOWN_TASK_INFO)
    assert await error_infos(hop.a2["agent-path"], "GetTask", unknown) == await error_infos(hop.b["agent-path"], "GetTask",
                                                                                            unknown)
    for way in (ways["hop root"], ways["hop agent-path"], *hop.a2.values()):
        agents = await error_infos(way, "SendMessage", {"message": message("tck-error-metadata")})
        assert agents == dict.fromkeys(("jsonrpc", "rest", "grpc"), AGENT_SAYS), way


def content(card: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in card.items() if k != "supportedInterfaces"}


async def test_a_peer_registered_at_its_root_is_its_root_card_at_its_agents_path_at_the_agents() -> None:
    """The cards through a hop (their content; the interfaces name each gateway's own URLs). A's `/agents/tck` is B's
    root card (B's name, description and skills, `tck/tck`), A2's is the agent's card as one gateway publishes it
    (B's `/agents/tck`: the extensions the agent requires declared, so a client learns it must activate one); each
    root card is a gateway's own over its agents, each skill tagged `agent:tck` once (through A it was twice). A
    client's `A2A-Extensions` reach the agent, and its answering header the client, through both as through one
    gateway; only A's `/agents/needs` card does not declare the extension the agent requires (B's root card does not)."""
    async with tck_agent("needs", required_extension=REQUIRED_EXT) as agent, chain(agent.url, "needs", {}) as (b, a, a2), \
            httpx.AsyncClient(timeout=30) as c:
        one, via_root, via_path = (ways_of(u, gw.grpc_url, "needs") for gw, u in (b, a, a2))
        cards = {f"{label} {k}": content((await c.get(w.card + CARD)).json())
                 for label, ws in (("one", one), ("a", via_root), ("a2", via_path)) for k, w in ws.items()}
        views = {f"{label} {k}": await extension_view(c, w)
                 for label, ws in (("one", one), ("a", via_root), ("a2", via_path)) for k, w in ws.items()}
    assert cards["a agent-path"] == cards["one root"]  # B's root card, as A publishes it
    assert cards["a2 agent-path"] == cards["one agent-path"]  # the agent's card, as one gateway publishes it
    assert cards["one agent-path"]["name"] == "needs" and cards["a agent-path"]["name"] == "mma2a gateway"
    assert [s["id"] for s in cards["a root"]["skills"]] == ["needs/needs/tck"]
    for label in ("one root", "a root", "a2 root", "a agent-path"):
        assert [s["tags"] for s in cards[label]["skills"]] == [["tck", "agent:needs"]], label
    assert views["one agent-path"]["declared"] == [(REQUIRED_EXT, True)]
    assert views["a agent-path"] == {**views["one agent-path"], "declared": []}
    assert views["a2 agent-path"] == views["one agent-path"]
    assert views["a root"] == views["a2 root"] == views["one root"]


async def test_an_id_nobody_saw_on_the_agents_path_is_the_peer_roots_own_answer_and_the_agents_through_its_path(
        hop: Chain) -> None:
    """GetTask, CancelTask and SubscribeToTask of an id nobody saw, on `/agents/tck` (JSON-RPC, auth off): through A
    gw-b's root answers (`_ROOT_ANSWERS`), through A2 the agent, as through one gateway (B's own `/agents/tck`); the
    code and the reason are the same everywhere."""
    async def answers(way: Way) -> list[Any]:
        async with httpx.AsyncClient(timeout=30) as c:
            docs = [(await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": m, "params": {"id": "tck-nobody"}},
                                  headers={"A2A-Version": "1.0"})).json()["error"]
                    for m in ("GetTask", "CancelTask", "SubscribeToTask")]
        return [(e["code"], e["message"], e["data"][0]["reason"], e["data"][0]["metadata"]) for e in docs]

    one = await answers(hop.b["agent-path"])
    assert one == [(-32001, "Task not found", "TASK_NOT_FOUND", {})] * 3  # the agent's own
    assert await answers(hop.a2["agent-path"]) == one
    assert await answers(hop.stack.ways["hop agent-path"]) == [
        (-32001, "task 'tck-nobody' not found", "TASK_NOT_FOUND", {"field": "id"})] * 3  # gw-b's root's own


async def test_an_agent_that_does_not_stream_is_streamed_for_through_a_peer_registered_at_its_root() -> None:
    """An agent whose card declares no streaming refuses SubscribeToTask and SendStreamingMessage (-32004), and so does
    one gateway's `/agents/quiet` (test_conformance.py). Through A, whose `/agents/quiet` card is gw-b's root card
    (streaming: true), a new message is streamed for the agent as gw-b's root streams it (one event: the task), as
    that card promises; a task's subscription is refused as through one gateway. Through A2 (gw-b's `/agents/quiet`
    registered) nothing differs."""
    from tests.conformance.sut import sample_agent
    from tests.conformance.test_conformance import sent_task
    from tests.conformance.test_tck import stream_view

    async with sample_agent("quiet", streaming=False) as agent, chain(agent.url, "quiet", {}) as (b, a, a2), \
            httpx.AsyncClient(timeout=30) as c:
        seen = {}
        for label, (_, url) in (("one", b), ("a", a), ("a2", a2)):
            for kind, way in ways_of(url, None, "quiet").items():
                live, done = await sent_task(c, way, "jsonrpc", "wait"), await sent_task(c, way, "jsonrpc")
                seen[f"{label} {kind}"] = {
                    "live": await stream_view(c, way, "jsonrpc", "SubscribeToTask", {"id": live["id"]}),
                    "terminal": await stream_view(c, way, "jsonrpc", "SubscribeToTask", {"id": done["id"]}),
                    "stream": await stream_view(c, way, "jsonrpc", "SendStreamingMessage", {"message": message("s")})}
    refused = {"http": 200, "id": 5, "code": -32004, "reasons": ["UNSUPPORTED_OPERATION"]}
    streamed = {"http": 200, "type": "text/event-stream", "events": [("task", "TASK_STATE_COMPLETED", [["text"]], 1)]}
    assert seen["one agent-path"] == dict.fromkeys(("live", "terminal", "stream"), refused)
    assert seen["one root"] == {"live": refused, "terminal": refused, "stream": streamed}
    assert seen["a agent-path"] == seen["a root"] == seen["a2 root"] == seen["one root"]  # as gw-b's root card says
    assert seen["a2 agent-path"] == seen["one agent-path"]


async def test_a_webhook_never_hears_a_task_go_back_through_a_hop(hop: Chain) -> None:
    """A task made with a push config through A (input required) and completed by a follow-up: A's follow of it
    (its webhook registered at B, one read of the task) began before the follow-up's answer came back, and that read,
    two gateways long, brought the task as it was before (input required): the client's webhook heard INPUT_REQUIRED
    after COMPLETED (4 of 4 runs). Now nothing but the terminal state after it (the outbox coalesces, so how many came
    before varies)."""
    from tests.gateway.conftest import until

    s, push = hop.stack, hop.gw_a.pipeline.push
    way, path = s.ways["hop agent-path"], f"/went-back/{mid('hop')}"
    send = {"message": message("tck-input-required"), "configuration": {"taskPushNotificationConfig": {
        "id": mid("tck-push"), "url": s.hook.url + path, "token": "tck-token"}}}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": send}, headers=V1)
        tid = r.json()["result"]["task"]["id"]
        await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {
            "message": message("tck-complete-task", taskId=tid)}}, headers=V1)
    await s.hook.wait_until(lambda h: h.path == path and h.body["task"]["status"]["state"] == "TASK_STATE_COMPLETED")
    await until(lambda: not push.follower.following(tid) and push.outbox.pending(None) == 0, "A's follow and deliveries end")
    states = [h.body["task"]["status"]["state"] for h in s.hook.hits if h.path == path]
    ended = states.index("TASK_STATE_COMPLETED")
    assert states[ended:] == ["TASK_STATE_COMPLETED"] * (len(states) - ended), states  # before: [..., COMPLETED, INPUT_REQUIRED, COMPLETED]
    assert set(states[:ended]) <= {"TASK_STATE_INPUT_REQUIRED"}, states
