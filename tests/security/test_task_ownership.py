"""A task belongs to the client that created it (issue 18, round 3): another client cannot read, cancel,
subscribe to, continue, list or even probe it, on any binding; and `auth.clients[].agents` holds at the
root as it does on `/agents/{name}`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from tests.conformance.sut import sample_agent
from tests.gateway.conftest import gateway

ALICE, BOB, CAROL = "tok-alice-own-1", "tok-bob-own-2", "tok-carol-own-3"  # carol may use agent b only
CLIENTS = [{"name": "alice", "token": ALICE}, {"name": "bob", "token": BOB}, {"name": "carol", "token": CAROL, "agents": ["b"]}]
RULES = {"rules": [{"name": "text-to-a", "match": {"modality": "text/*"}, "action": {"route_to": "a"}}]}


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}


def message(mid: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"message": {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}], **extra}}


@contextlib.asynccontextmanager
async def two_agents() -> AsyncIterator[tuple[Any, str, httpx.AsyncClient]]:
    async with sample_agent("a") as a, sample_agent("b") as b:
        cfg = {"agents": [{"name": "a", "url": a.url}, {"name": "b", "url": b.url}], "auth": {"clients": CLIENTS},
               "rules": RULES, "grpc_listen": "127.0.0.1:0"}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            yield gw, url, c


async def rpc(c: httpx.AsyncClient, url: str, method: str, params: dict[str, Any], token: str) -> dict[str, Any]:
    r = await c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=headers(token))
    return r.json()  # type: ignore[no-any-return]


async def test_another_clients_task_is_answered_as_an_unknown_one_on_every_binding_and_method():
    async with two_agents() as (gw, url, c):
        mine = (await rpc(c, url, "SendMessage", message("m-alice", "wait"), ALICE))["result"]["task"]
        tid, ctx = mine["id"], mine["contextId"]
        assert mine["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"  # live: cancelable, continuable

        async def as_bob(task_id: str) -> dict[str, Any]:
            """Everything bob can try on a task id; what each answered (error code or status)."""
            out: dict[str, Any] = {}
            for path in ("/", "/agents/a"):
                for method, params in (("GetTask", {"id": task_id}), ("CancelTask", {"id": task_id}),
                                       ("SendMessage", message("m-bob", "hijack", taskId=task_id))):
                    doc = await rpc(c, url + path, method, params, BOB)
                    out[f"{path} {method}"] = (doc["error"]["code"], doc["error"]["message"])
                rest = await c.get(url + path.rstrip("/") + f"/tasks/{task_id}", headers=headers(BOB))
                out[f"{path} REST get"] = (rest.status_code, rest.json()["error"]["message"])
                cancel = await c.post(url + path.rstrip("/") + f"/tasks/{task_id}:cancel", headers=headers(BOB))
                out[f"{path} REST cancel"] = (cancel.status_code, cancel.json()["error"]["message"])
                sub = await c.post(url + path, headers=headers(BOB), json={
                    "jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}})
                out[f"{path} subscribe"] = (sub.status_code, sub.text.count(task_id), "-32001" in sub.text)
            async with grpc.aio.insecure_channel(gw.grpc_url) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await a2a_pb2_grpc.A2AServiceStub(channel).GetTask(
                        a2a_pb2.GetTaskRequest(id=task_id), metadata=[("authorization", f"Bearer {BOB}"), ("a2a-version", "1.0")])
            out["grpc get"] = (err.value.code(), err.value.details())
            return out

        on_alices = await as_bob(tid)
        on_unknown = await as_bob("f0e1d2c3-0000-4000-8000-000000000000")
        foreign_context = await rpc(c, url, "SendMessage", message("m-bob-ctx", "hello", contextId=ctx), BOB)
        bobs_lists = [await rpc(c, url + p, "ListTasks", {}, BOB) for p in ("/", "/agents/a")]
        bobs_rest_list = await c.get(url + "/tasks", headers=headers(BOB))
        still = (await rpc(c, url, "GetTask", {"id": tid}, ALICE))["result"]
        alices_list = (await rpc(c, url, "ListTasks", {}, ALICE))["result"]

    # bob learns nothing: alice's id is answered exactly as an id nobody ever saw (names the id, nothing else)
    assert {k: (v[0], v[1].replace(tid, "ID")) if isinstance(v[1], str) else v for k, v in on_alices.items()} == \
        {k: (v[0], v[1].replace("f0e1d2c3-0000-4000-8000-000000000000", "ID")) if isinstance(v[1], str) else v
         for k, v in on_unknown.items()}
    assert on_alices["/ GetTask"] == (-32001, f"task '{tid}' not found")
    assert on_alices["/agents/a SendMessage"] == (-32001, f"task '{tid}' not found")
    assert on_alices["/agents/a REST get"][0] == 404 and on_alices["/ REST cancel"][0] == 404
    assert on_alices["/ subscribe"][2] and on_alices["/agents/a subscribe"][2]
    assert on_alices["grpc get"][0] == grpc.StatusCode.NOT_FOUND
    assert foreign_context["error"]["code"] == -32602
    assert foreign_context["error"]["message"] == f"params.message.contextId: context '{ctx}' belongs to another client"
    assert [doc["result"]["tasks"] for doc in bobs_lists] == [[], []]
    assert bobs_lists[0]["result"]["totalSize"] == 0 and bobs_rest_list.json()["tasks"] == []
    # alice's task was neither canceled nor continued by bob, and she still lists it
    assert still["status"]["state"] == "TASK_STATE_INPUT_REQUIRED" and len(still.get("history") or []) <= 2
    assert [t["id"] for t in alices_list["tasks"]] == [tid] and alices_list["totalSize"] == 1


async def test_a_client_limited_to_some_agents_cannot_reach_others_through_the_root():
    async with two_agents() as (gw, url, c):
        refused = await rpc(c, url, "SendMessage", message("m-carol", "hello"), CAROL)
        streamed = await c.post(url, headers=headers(CAROL), json={
            "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": message("m-carol-s", "hello")})
        rest = await c.post(url + "/message:send", headers=headers(CAROL), json=message("m-carol-r", "hello"))
        direct = await rpc(c, url + "/agents/b", "SendMessage", message("m-carol-b", "hello"), CAROL)
        tenant_a = await c.post(url + "/a/message:send", headers=headers(CAROL), json=message("m-carol-t", "hello"))
        tenant_b = await c.post(url + "/b/message:send", headers=headers(CAROL), json=message("m-carol-tb", "hello"))
        alices = await rpc(c, url, "SendMessage", message("m-alice", "hello"), ALICE)
        a_tasks = await rpc(c, url + "/agents/a", "ListTasks", {}, ALICE)
    expected = "params.message.parts[0]: routed to agent a, which client carol may not use (auth.clients: b)"
    assert refused["error"]["message"] == expected and refused["error"]["code"] == -32600
    assert expected in streamed.text
    assert rest.status_code == 403 and rest.json()["error"]["message"] == expected  # REST: as the modality lists
    assert direct["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"  # her own agent still answers
    # the REST tenant form names the agent, and is held to the client's agents as /agents/{name} is
    assert tenant_a.status_code == 403 and tenant_a.json()["error"]["message"] == "client carol may not call agent a"
    assert tenant_b.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert alices["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(a_tasks["result"]["tasks"]) == 1  # agent a only ever saw alice's message


async def test_capability_routing_chooses_among_the_clients_own_agents():
    """Without a rule, carol's text goes to b, the agent she may use, though a ranks first for everyone else (a tie
    on score goes to the first name); her route names no runner-up she may not use."""
    async with sample_agent("a") as a, sample_agent("b") as b:
        cfg = {"agents": [{"name": "a", "url": a.url}, {"name": "b", "url": b.url}], "auth": {"clients": CLIENTS}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            carols = await rpc(c, url, "SendMessage", message("m-carol-cap", "hello"), CAROL)
            alices = await rpc(c, url, "SendMessage", message("m-alice-cap", "hello"), ALICE)
    from mma2a.ext import EXTENSION_URI

    def routed(doc: dict[str, Any]) -> list[str]:
        return doc["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]["targets"]  # type: ignore[no-any-return]

    assert routed(carols) == ["b"] and carols["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "runnerUp" not in carols["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]  # a is not hers to see
    assert routed(alices) == ["a"]
    assert alices["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]["runnerUp"] == \
        "runner-up b (1.10) lost to a (1.10): equal score: fewer requests in flight, then name"


def session_chunk(mid: str, sid: str, seq: int = 0, final: bool = False) -> dict[str, Any]:
    """A one-image message, chunk `seq` of session `sid` (the pinning tests' message)."""
    from mma2a.ext import EXTENSION_URI
    from tests.security.conftest import PNG_1PX

    return {"message": {"messageId": mid, "role": "ROLE_USER", "parts": [{"raw": PNG_1PX, "mediaType": "image/png"}],
                        "extensions": [EXTENSION_URI], "metadata": {EXTENSION_URI: {
                            "protocol": "a2a-multimodal/1.0", "session": {"id": sid, "seq": seq, "final": final}}}}}


PINNING_RULES = {"rules": [{"name": "lb", "match": {"modality": "image/*"},
                            "action": {"load_balance": "pool", "strategy": "round_robin", "pin_session": True}}]}


async def test_another_client_naming_the_same_session_neither_takes_nor_releases_its_pin():
    from mma2a.ext import EXTENSION_URI
    from tests.gateway.conftest import agent, agents

    def chunk(mid: str, seq: int, final: bool = False) -> dict[str, Any]:
        return session_chunk(mid, "cam-1", seq, final)

    async with agents({n: agent(n, ["image/*"]) for n in ("w1", "w2")}) as urls:
        cfg = {"agents": [{"name": n, "url": u, "groups": ["pool"]} for n, u in urls.items()],
               "auth": {"clients": CLIENTS}, "rules": PINNING_RULES, "features": False}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            async def send(token: str, body: dict[str, Any]) -> str:
                doc = await rpc(c, url, "SendMessage", body, token)
                return str(doc["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]["targets"][0])

            alice_first = await send(ALICE, chunk("a0", 0))
            bob = [await send(BOB, chunk("b0", 0)), await send(BOB, chunk("b1", 1, final=True))]
            alice_rest = [await send(ALICE, chunk(f"a{i}", i)) for i in (1, 2, 3)]
    assert alice_rest == [alice_first] * 3  # bob's final chunk did not release alice's pin
    assert bob[0] != alice_first  # bob's "cam-1" is his own session, routed afresh (round robin: the other one)


async def test_a_session_id_is_bounded_so_pins_are() -> None:
    """Session 15 (probe6, S15-7): a session id is the client's to choose and was bounded by the body cap alone; a rule
    with `pin_session` keeps one pin per session id (100,000 at most, with no byte bound): bob's 1 MB session id was
    taken and pinned, so at 100 messages a second a client could make a gateway hold ~100 MB more a second, to ~100
    GB. Now a session id is at most `ext.MAX_SESSION_ID` (256) characters: a longer one is refused naming its field
    before anything is routed or pinned."""
    from mma2a.ext import EXTENSION_URI, MAX_SESSION_ID
    from tests.gateway.conftest import agent, agents

    async with agents({n: agent(n, ["image/*"]) for n in ("w1", "w2")}) as urls:
        cfg = {"agents": [{"name": n, "url": u, "groups": ["pool"]} for n, u in urls.items()],
               "auth": {"clients": CLIENTS}, "rules": PINNING_RULES, "features": False}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            longest = await rpc(c, url, "SendMessage", session_chunk("b-0", "s" * MAX_SESSION_ID), BOB)
            refused = [await rpc(c, url, "SendMessage", session_chunk(f"b-{n}", "s" * n), BOB)
                       for n in (MAX_SESSION_ID + 1, 1 << 20)]
            pinned = len(gw.pipeline.admission.pins)
    assert longest["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    field = f"message.metadata[{EXTENSION_URI}].session.id"
    for doc, n in zip(refused, (MAX_SESSION_ID + 1, 1 << 20)):
        assert doc["error"]["code"] == -32602, doc  # before: taken and pinned
        assert doc["error"]["message"] == f"{field}: at most {MAX_SESSION_ID} characters, got {n}", doc
    assert pinned == 1
