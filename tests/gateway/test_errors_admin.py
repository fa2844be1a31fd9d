"""Error paths users hit, admin API, agent cards, and every ingress binding."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json

import httpx
import pytest
from a2a.helpers.proto_helpers import new_task_from_user_message

from mma2a.errors import RuleError, error_info
from mma2a.ext import EXTENSION_URI
from mma2a.gateway import Gateway, parse_config
from tests.agents import RecordingExecutor, run_agent
from tests.gateway.conftest import ADMIN, agent, agents, gateway, rpc
from tests.media import png_bytes

PNG = base64.b64encode(png_bytes()).decode()
IMG_MSG = {"messageId": "e1", "role": "ROLE_USER", "parts": [{"raw": PNG, "mediaType": "image/png"}]}
AUTH = {"Authorization": f"Bearer {ADMIN}"}


class SlowExecutor(RecordingExecutor):
    async def execute(self, context, event_queue):
        await event_queue.enqueue_event(new_task_from_user_message(context.message))
        await asyncio.sleep(5)


async def test_target_down_gives_failed_task_with_reason():
    card, ex = agent("vision", ["image/*"])
    async with contextlib.AsyncExitStack() as stack:
        url_a = (await stack.enter_async_context(run_agent(card, ex))).rstrip("/")
        async with gateway({"agents": [{"name": "vision", "url": url_a}], "retries": 0}) as (gw, url):
            await stack.aclose()  # the agent goes away after registration
            doc = await rpc(url, "SendMessage", {"message": IMG_MSG})
    task = doc["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    # the agent named, never its address (docs/security.md, "Agents named, not located")
    assert task["status"]["message"]["parts"][0]["text"] == "agent vision unreachable: cannot connect (Connection refused)"


async def test_target_timeout_gives_failed_task_never_a_hang():
    card, _ = agent("slow", ["image/*"])
    async with run_agent(card, SlowExecutor()) as a_url:
        async with gateway({"agents": [{"name": "slow", "url": a_url.rstrip("/"), "timeout_s": 0.5}]}) as (gw, url):
            doc = await asyncio.wait_for(rpc(url, "SendMessage", {"message": IMG_MSG}), 10)
    status = doc["result"]["task"]["status"]
    assert status["state"] == "TASK_STATE_FAILED"
    assert status["message"]["parts"][0]["text"] == "agent slow timed out after 0.5 s"


async def test_unknown_agent_path_is_an_error_naming_it():
    async with agents({"vision": agent("vision", ["image/*"])}) as urls:
        async with gateway({"agents": [{"name": "vision", "url": urls["vision"]}]}) as (gw, url):
            doc = await rpc(url, "SendMessage", {"message": IMG_MSG}, path="/agents/nope/")
            async with httpx.AsyncClient(base_url=url, headers={"A2A-Version": "1.0"}) as c:
                card = await c.get("/agents/nope/.well-known/agent-card.json")
                rest = [await c.post("/agents/nope/message:send", json={"message": IMG_MSG}),
                        await c.get("/agents/nope/tasks/t-1"), await c.get("/agents/nope/tasks"),
                        await c.post("/nope/message:send", json={"message": IMG_MSG}),  # the tenant form
                        await c.get("/nope/tasks/t-1")]
    assert doc["error"] == {"code": -32602, "message": "agent 'nope' is not registered", "data": [error_info(-32602, {"field": "agent"})]}
    assert card.status_code == 404
    for r in rest:  # REST: 404 NOT_FOUND, as for an unknown task (the SDK's InvalidParams would be 400)
        assert r.status_code == 404, r.text
        assert r.json() == {"error": {"code": 404, "status": "NOT_FOUND", "message": "agent 'nope' is not registered",
                                      "details": [error_info(-32602, {"field": "agent"})]}}


async def test_explicit_agent_path_routes_there():
    specs = {"a": agent("a", ["image/*"]), "b": agent("b", ["image/*"])}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": n, "url": u} for n, u in urls.items()]}) as (gw, url):
            doc = await rpc(url, "SendMessage", {"message": IMG_MSG}, path="/agents/b/")
    assert doc["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]["targets"] == ["b"]
    assert specs["b"][1].received and not specs["a"][1].received


async def test_bad_requests_get_the_right_json_rpc_errors():
    async with agents({"a": agent("a", ["image/*"])}) as urls:
        async with gateway({"agents": [{"name": "a", "url": urls["a"]}], "max_body_bytes": 4096}) as (gw, url):
            async with httpx.AsyncClient() as c:
                h = {"A2A-Version": "1.0"}
                parse = (await c.post(url + "/", content=b"{not json", headers=h)).json()
                env = (await c.post(url + "/", json={"id": 3, "method": "SendMessage"}, headers=h)).json()
                big = await c.post(url + "/", content=b"x" * 5000, headers=h)
            no_parts = await rpc(url, "SendMessage", {"message": {"messageId": "x", "role": "ROLE_USER", "parts": []}})
            two_kinds = await rpc(url, "SendMessage", {"message": {"messageId": "x", "role": "ROLE_USER",
                                                                   "parts": [{"text": "a", "url": "http://x"}]}})
            bad_mime = await rpc(url, "SendMessage", {"message": {"messageId": "x", "role": "ROLE_USER",
                                                                  "parts": [{"raw": PNG, "mediaType": "image"}]}})
            bad_ver = await rpc(url, "SendMessage", {"message": {**IMG_MSG, "metadata": {EXTENSION_URI: {"protocol": "a2a-multimodal/2.0"}}}})
            unknown = await rpc(url, "NoSuchMethod", {})
            no_task = await rpc(url, "GetTask", {"id": "missing"})
    assert parse["error"]["code"] == -32700 and "not valid JSON" in parse["error"]["message"]
    assert env["error"]["code"] == -32600 and env["id"] == 3
    assert big.status_code == 413 and big.json()["error"]["message"].startswith("request body exceeds 4096 bytes")
    assert no_parts["error"] == {"code": -32602, "message": "params.message.parts: required, must be a non-empty list",
                                 "data": [error_info(-32602, {"field": "params.message.parts"})]}
    assert two_kinds["error"]["message"] == "params.message.parts[0]: must carry exactly one of text, raw, url, data (got ['text', 'url'])"
    assert bad_mime["error"]["code"] == -32602 and "message.parts[0].mediaType" in bad_mime["error"]["message"]
    assert bad_ver["error"]["code"] == -32009 and "a2a-multimodal/2.0" in bad_ver["error"]["message"]
    assert unknown["error"]["code"] == -32601
    assert no_task["error"] == {"code": -32001, "message": "task 'missing' not found", "data": [error_info(-32001, {"field": "id"})]}


async def test_admin_rules_put_validates_and_swaps_atomically():
    specs = {"a": agent("a", ["image/*"]), "b": agent("b", ["image/*"])}
    good = "version: 1\nrules:\n  - name: to-b\n    match: {modality: image/*}\n    action: {route_to: b}\n"
    bad = "version: 1\nrules:\n  - name: broken\n    match: {modality: image/*}\n    action: {route_to: nobody}\n"
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": n, "url": u} for n, u in urls.items()]}) as (gw, url):
            async with httpx.AsyncClient() as c:
                assert (await c.put(url + "/admin/rules", content=good)).status_code == 401
                assert (await c.put(url + "/admin/rules", content=good, headers={"Authorization": "Bearer wrong"})).status_code == 403
                ok = await c.put(url + "/admin/rules", content=good, headers=AUTH)
                rejected = await c.put(url + "/admin/rules", content=bad, headers=AUTH)
                current = (await c.get(url + "/admin/rules", headers=AUTH)).json()
                explained = (await c.post(url + "/admin/explain", json={"message": IMG_MSG}, headers=AUTH)).json()
            doc = await rpc(url, "SendMessage", {"message": IMG_MSG})
    assert ok.status_code == 200
    assert rejected.status_code == 400
    assert "broken" in rejected.json()["error"]["message"] and "nobody" in rejected.json()["error"]["message"]
    assert [r["name"] for r in current["rules"]["rules"]] == ["to-b"]
    assert doc["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]["targets"] == ["b"]
    assert explained["parts"][0]["targets"] == ["b"] and explained["parts"][0]["routes"][0]["agent"] == "b"
    assert explained["explanation"]


async def test_admin_agents_register_drain_delete():
    specs = {"a": agent("a", ["image/*"]), "b": agent("b", ["audio/*"])}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": "a", "url": urls["a"]}]}) as (gw, url):
            async with httpx.AsyncClient() as c:
                added = await c.post(url + "/admin/agents", json={"name": "b", "url": urls["b"]}, headers=AUTH)
                bad = await c.post(url + "/admin/agents", json={"name": "c", "url": "ftp://x"}, headers=AUTH)
                listed = (await c.get(url + "/admin/agents", headers=AUTH)).json()
                card = (await c.get(url + "/.well-known/agent-card.json")).json()
                b_card = (await c.get(url + "/agents/b/.well-known/agent-card.json")).json()
                deleted = await c.delete(url + "/admin/agents/b", headers=AUTH)
                gone = await c.delete(url + "/admin/agents/b", headers=AUTH)
    assert added.status_code == 201 and added.json()["inputModes"] == ["audio/*"]
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("url: Value error, must be an http")
    assert sorted(a["name"] for a in listed["agents"]) == ["a", "b"]
    assert set(card["defaultInputModes"]) == {"image/*", "audio/*"}
    assert any(e["uri"] == EXTENSION_URI for e in card["capabilities"]["extensions"])
    assert b_card["supportedInterfaces"][0]["url"] == url + "/agents/b"
    assert deleted.status_code == 204 and gone.status_code == 404


async def test_rest_binding_streaming_and_v03_compat_go_through_the_pipeline():
    specs = {"a": agent("a", ["image/*", "text/plain"])}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": "a", "url": urls["a"]}]}) as (gw, url):
            async with httpx.AsyncClient(timeout=30) as c:
                rest = await c.post(url + "/message:send", json={"message": IMG_MSG}, headers={"A2A-Version": "1.0"})
                tid = rest.json()["task"]["id"]
                got = await c.get(url + f"/tasks/{tid}", headers={"A2A-Version": "1.0"})
                v03 = await c.post(url + "/", json={"jsonrpc": "2.0", "id": 9, "method": "message/send", "params": {"message": {
                    "messageId": "old", "role": "user", "kind": "message", "parts": [{"kind": "text", "text": "hello"}]}}})
                async with c.stream("POST", url + "/", json={"jsonrpc": "2.0", "id": 5, "method": "SendStreamingMessage",
                                                          "params": {"message": {**IMG_MSG, "messageId": "s1"}}},
                                    headers={"A2A-Version": "1.0", "Accept": "text/event-stream"}) as sse:
                    lines = [ln async for ln in sse.aiter_lines() if ln.startswith("data:")]
            rpc_get = await rpc(url, "GetTask", {"id": tid})
    assert rest.status_code == 200 and rest.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert got.status_code == 200 and got.json()["id"] == tid
    assert rpc_get["result"]["id"] == tid
    assert v03.json()["result"]["status"]["state"] == "completed"
    assert lines and '"TASK_STATE_COMPLETED"' in lines[-1]
    assert len(specs["a"][1].received) == 3


async def test_a_card_cannot_steer_the_gateway_to_another_host():
    from a2a.types import AgentInterface

    from tests.gateway.conftest import agent as make_agent

    card, ex = make_agent("liar", ["image/*"])
    card.supported_interfaces.append(AgentInterface(url="http://169.254.169.254/", protocol_binding="JSONRPC",
                                                    protocol_version="1.0"))
    async with run_agent(card, ex) as a_url:
        async with gateway({"agents": [{"name": "liar", "url": a_url.rstrip("/")}]}) as (gw, url):
            doc = await rpc(url, "SendMessage", {"message": IMG_MSG})
            rpc_url = gw.directory.get("liar").rpc_url
    assert rpc_url == a_url.rstrip("/") + "/"
    assert doc["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED" and len(ex.received) == 1


async def test_a_stream_to_a_dead_pool_member_fails_over_before_anything_was_sent():
    specs = {}
    for n in ("s1", "s2"):
        card, ex = agent(n, ["image/*"])
        card.capabilities.streaming = True
        specs[n] = (card, ex)
    rules = {"version": 1, "rules": [{"name": "lb", "match": {"modality": "image/*"},
                                      "action": {"load_balance": "pool", "strategy": "round_robin"}}]}
    async with contextlib.AsyncExitStack() as stack:
        urls = {n: (await stack.enter_async_context(run_agent(c, e))).rstrip("/") for n, (c, e) in specs.items()}
        async with contextlib.AsyncExitStack() as doomed:
            u2 = (await doomed.enter_async_context(run_agent(*specs["s2"]))).rstrip("/")
            cfg = {"rules": rules, "retries": 0, "agents": [{"name": "s1", "url": urls["s1"], "groups": ["pool"]},
                                                            {"name": "s2", "url": u2, "groups": ["pool"]}]}
            async with gateway(cfg) as (gw, url):
                await doomed.aclose()  # s2 dies after registration
                states = []
                async with httpx.AsyncClient(timeout=30) as c:
                    for i in range(4):
                        async with c.stream("POST", url + "/", json={"jsonrpc": "2.0", "id": i, "method": "SendStreamingMessage",
                                                                  "params": {"message": {**IMG_MSG, "messageId": f"st{i}"}}},
                                            headers={"A2A-Version": "1.0"}) as sse:
                            lines = [ln async for ln in sse.aiter_lines() if ln.startswith("data:")]
                        last = json.loads(lines[-1][5:])["result"]
                        states.append((last.get("task") or {}).get("status", {}).get("state")
                                      or last.get("statusUpdate", {}).get("status", {}).get("state"))
    assert states == ["TASK_STATE_COMPLETED"] * 4
    assert len(specs["s1"][1].received) == 4


async def test_a_bad_rule_in_the_rules_file_is_reported_with_the_file_name(tmp_path):
    (tmp_path / "rules.yaml").write_text("rules:\n  - name: r\n    match: {}\n    action: {route_to: a, drop: b}\n")
    gw = Gateway(parse_config({"rules": "rules.yaml", "features": {"enabled": False}}, base_dir=str(tmp_path)))
    try:
        with pytest.raises(RuleError) as info:
            await gw.start()
    finally:
        await gw.stop()
    assert info.value.message.startswith(f"{tmp_path / 'rules.yaml'}:4: rule 'r': action: ")
