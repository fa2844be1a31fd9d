"""ListTasks through the gateway: a merged, paginated list at the root over the agents the caller may use,
and on /agents/{name} that agent's; an identified caller sees only the tasks it created (docs/security.md,
round 3: an agent cannot tell the gateway's clients apart, so the gateway filters)."""

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

ALICE, CAROL = "tok-alice-list-1", "tok-carol-list-2"  # carol may only use agent "b"
CLIENTS = [{"name": "alice", "token": ALICE}, {"name": "carol", "token": CAROL, "agents": ["b"]}]


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}


async def rpc(c: httpx.AsyncClient, url: str, method: str, params: dict[str, Any], token: str = ALICE) -> dict[str, Any]:
    r = await c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=headers(token))
    return r.json()  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def two_agents(gateway_box: list[Any] | None = None) -> AsyncIterator[tuple[str, dict[str, list[str]]]]:
    """Agents a (3 tasks of alice's) and b (2 of alice's, 1 of carol's) behind an authenticating gateway; yields
    (url, alice's task ids by agent, and carol's under "carol")."""
    async with sample_agent("a") as agent_a, sample_agent("b") as agent_b:
        url_a, url_b = agent_a.url, agent_b.url
        cfg = {"agents": [{"name": "a", "url": url_a}, {"name": "b", "url": url_b}], "auth": {"clients": CLIENTS},
               "grpc_listen": "127.0.0.1:0"}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            if gateway_box is not None:
                gateway_box.append(gw)
            ids: dict[str, list[str]] = {"a": [], "b": [], "carol": []}
            for name, count, token, key in (("a", 3, ALICE, "a"), ("b", 2, ALICE, "b"), ("b", 1, CAROL, "carol")):
                for i in range(count):
                    doc = await rpc(c, f"{url}/agents/{name}", "SendMessage",
                                    {"message": {"messageId": f"{key}{i}", "role": "ROLE_USER", "parts": [{"text": "x"}]}},
                                    token=token)
                    ids[key].append(doc["result"]["task"]["id"])
            yield url, ids


async def test_root_list_merges_every_agent_and_pages_through_them():
    async with two_agents() as (url, ids), httpx.AsyncClient(timeout=30) as c:
        seen: list[str] = []
        pages = []
        token = ""
        while True:
            params: dict[str, Any] = {"pageSize": 2, **({"pageToken": token} if token else {})}
            page = (await rpc(c, url + "/", "ListTasks", params))["result"]
            pages.append(len(page["tasks"]))
            assert page["totalSize"] == 5 and page["pageSize"] == 2
            seen += [t["id"] for t in page["tasks"]]
            token = page.get("nextPageToken", "")
            if not token:
                break
        one_agent = (await rpc(c, url + "/agents/b", "ListTasks", {}))["result"]
        bad = await rpc(c, url + "/", "ListTasks", {"pageToken": "not-ours"})
    assert sorted(seen) == sorted(ids["a"] + ids["b"]) and len(seen) == 5
    assert pages == [2, 2, 1]
    assert sorted(t["id"] for t in one_agent["tasks"]) == sorted(ids["b"]) and one_agent["totalSize"] == 2
    assert bad["error"]["code"] == -32602
    assert bad["error"]["message"] == "params.pageToken: not a page token this gateway issued"


async def test_root_list_covers_only_the_agents_the_client_may_use():
    async with two_agents() as (url, ids), httpx.AsyncClient(timeout=30) as c:
        page = (await rpc(c, url + "/", "ListTasks", {}, token=CAROL))["result"]
        on_b = (await rpc(c, url + "/agents/b", "ListTasks", {}, token=CAROL))["result"]
        refused = await c.get(url + "/agents/a/tasks", headers=headers(CAROL))
    # her own task on b: neither alice's tasks on b nor anything on a
    assert [t["id"] for t in page["tasks"]] == ids["carol"] and page["totalSize"] == 1
    assert [t["id"] for t in on_b["tasks"]] == ids["carol"] and on_b["totalSize"] == 1
    assert refused.status_code == 403


async def test_grpc_binding_checks_credentials_and_the_agents_a_client_may_use():
    box: list[Any] = []
    async with two_agents(box) as (url, ids):
        async with grpc.aio.insecure_channel(box[0].grpc_url) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)

            async def list_(token: str | None, tenant: str = "") -> Any:
                md = [("a2a-version", "1.0")] + ([("authorization", f"Bearer {token}")] if token else [])
                return await stub.ListTasks(a2a_pb2.ListTasksRequest(tenant=tenant), metadata=md)

            with pytest.raises(grpc.aio.AioRpcError) as anonymous:
                await list_(None)
            with pytest.raises(grpc.aio.AioRpcError) as wrong:
                await list_("tok-nobody")
            with pytest.raises(grpc.aio.AioRpcError) as not_hers:
                await list_(CAROL, tenant="a")
            carols = await list_(CAROL)
            alices_b = await list_(ALICE, tenant="b")
    assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert anonymous.value.details() == "missing credentials: send Authorization: Bearer <token> or an API key header"
    assert wrong.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert not_hers.value.code() == grpc.StatusCode.PERMISSION_DENIED  # as HTTP's 403 on /agents/a
    assert not_hers.value.details() == "client carol may not call agent a"
    assert [t.id for t in carols.tasks] == ids["carol"]
    assert sorted(t.id for t in alices_b.tasks) == sorted(ids["b"])


async def test_grpc_binding_refuses_new_work_while_draining():
    box: list[Any] = []
    async with two_agents(box) as (url, ids):
        box[0].drain.begin()
        async with grpc.aio.insecure_channel(box[0].grpc_url) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await a2a_pb2_grpc.A2AServiceStub(channel).ListTasks(
                    a2a_pb2.ListTasksRequest(), metadata=[("authorization", f"Bearer {ALICE}")])
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert refused.value.details().startswith("the gateway is shutting down")


async def test_a_json_rpc_tenant_names_the_agent_as_on_grpc_and_rest():
    """A2A 1.0's `tenant` in JSON-RPC params names the target agent, as `tenant` does on gRPC and `/{tenant}/…`
    on REST (it was ignored: the request was routed automatically); the agents a client may use bound it, and
    one naming no agent is InvalidParams, as `/agents/{name}/` answers it. On `/agents/{name}/` the path wins."""
    async with two_agents() as (url, ids), httpx.AsyncClient(timeout=30) as c:
        listed = (await rpc(c, url + "/", "ListTasks", {"tenant": "b"}))["result"]
        sent = (await rpc(c, url + "/", "SendMessage", {"tenant": "a", "message": {
            "messageId": "tenant-a", "role": "ROLE_USER", "parts": [{"text": "x"}]}}))["result"]["task"]
        read = (await rpc(c, url + "/", "GetTask", {"tenant": "a", "id": sent["id"]}))["result"]
        on_a = (await rpc(c, url + "/agents/a", "ListTasks", {}))["result"]
        path_wins = (await rpc(c, url + "/agents/a", "ListTasks", {"tenant": "b"}))["result"]
        not_hers = await rpc(c, url + "/", "SendMessage", {"tenant": "a", "message": {
            "messageId": "tenant-c", "role": "ROLE_USER", "parts": [{"text": "x"}]}}, token=CAROL)
        not_hers_list = await rpc(c, url + "/", "ListTasks", {"tenant": "a"}, token=CAROL)
        msg = {"messageId": "tenant-n", "role": "ROLE_USER", "parts": [{"text": "x"}]}
        nobody = [await rpc(c, url + "/", "SendMessage", {"tenant": "nobody", "message": msg}),
                  await rpc(c, url + "/", "GetTask", {"tenant": "nobody", "id": sent["id"]})]
        by_path = [await rpc(c, url + "/agents/nobody/", "SendMessage", {"message": msg}),
                   await rpc(c, url + "/agents/nobody/", "GetTask", {"id": sent["id"]})]
    assert sorted(t["id"] for t in listed["tasks"]) == sorted(ids["b"])
    assert read["id"] == sent["id"] and sent["id"] in [t["id"] for t in on_a["tasks"]]
    assert sorted(t["id"] for t in path_wins["tasks"]) == sorted(t["id"] for t in on_a["tasks"])
    for refused in (not_hers, not_hers_list):
        assert refused["error"]["message"] == "client carol may not call agent a", refused
        assert refused["error"]["data"][0]["reason"] == "PERMISSION_DENIED"
    assert nobody[0]["error"]["code"] == -32602 and nobody[0]["error"]["message"] == "agent 'nobody' is not registered"
    assert [n["error"]["code"] for n in nobody] == [p["error"]["code"] for p in by_path], (nobody, by_path)
