"""Authentication on every path: JSON-RPC, REST, SSE, v0.3, /metrics, /admin, /blobs, /streams; bypass attempts."""

from __future__ import annotations

import logging

import httpx
import pytest

from mma2a.errors import error_info
from mma2a.ext import EXTENSION_URI
from tests.gateway.conftest import ADMIN
from tests.security.conftest import API_KEY, CAROL, PNG_1PX, SECRETS, TOKEN, bearer, post, secured, send_body

REST_MSG = {"message": {"messageId": "r-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}


@pytest.fixture(autouse=True)
def _bob_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)


async def test_json_rpc_needs_a_credential_and_answers_in_json_rpc_shape() -> None:
    async with secured() as (gw, url, _):
        none = await post(url, "/", send_body(), {"A2A-Version": "1.0"})
        wrong = await post(url, "/", send_body(), bearer("tok-not-a-client"))
        basic = await post(url, "/", send_body(), {"Authorization": "Basic YWxpY2U6cHc=", "A2A-Version": "1.0"})
        empty = await post(url, "/", send_body(), {"Authorization": "Bearer", "A2A-Version": "1.0"})
        bad_key = await post(url, "/", send_body(), {"X-API-Key": "nope", "A2A-Version": "1.0"})
        ok = await post(url, "/", send_body(), bearer(TOKEN))
        by_key = await post(url, "/", send_body("m-2"), {"X-API-Key": API_KEY, "A2A-Version": "1.0"})
        v03 = await post(url, "/", {"jsonrpc": "2.0", "id": 9, "method": "message/send", "params": {"message": {
            "messageId": "old", "role": "user", "kind": "message", "parts": [{"kind": "text", "text": "hi"}]}}})
    assert none.status_code == 401 and none.headers["www-authenticate"] == 'Bearer realm="mma2a"'
    assert none.json() == {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600, "message": "missing credentials: send Authorization: Bearer <token> or an API key header",
        "data": [error_info(-32600, {"field": "Authorization"}, reason="UNAUTHENTICATED")]}}
    assert wrong.status_code == 401 and wrong.json()["error"]["message"] == "Authorization: invalid bearer token"
    assert basic.status_code == 401 and basic.json()["error"]["message"] == "Authorization: only the Bearer scheme is accepted"
    assert empty.status_code == 401 and empty.json()["error"]["message"] == "Authorization: only the Bearer scheme is accepted"
    assert bad_key.status_code == 401 and bad_key.json()["error"]["message"] == "x-api-key: invalid API key"
    assert ok.status_code == 200 and ok.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert by_key.status_code == 200 and "result" in by_key.json()
    assert v03.status_code == 401


async def test_rest_and_sse_need_a_credential_and_answer_in_rest_shape() -> None:
    async with secured() as (gw, url, _):
        send = await post(url, "/message:send", REST_MSG, {"A2A-Version": "1.0"})
        stream = await post(url, "/message:stream", REST_MSG, {"A2A-Version": "1.0"})
        v1 = await post(url, "/v1/message:send", REST_MSG)
        agent_rest = await post(url, "/agents/text/message:send", REST_MSG, {"A2A-Version": "1.0"})
        async with httpx.AsyncClient() as c:
            task = await c.get(url + "/tasks/some-task", headers={"A2A-Version": "1.0"})
            tenant = await c.post(url + "/acme/message:send", json=REST_MSG)
            ext_card = await c.get(url + "/extendedAgentCard")
        ok = await post(url, "/message:send", REST_MSG, bearer(TOKEN))
    for r in (send, stream, v1, agent_rest, task, tenant, ext_card):
        assert r.status_code == 401, r.request.url
        assert r.json()["error"]["status"] == "UNAUTHENTICATED"
    assert send.json() == {"error": {
        "code": 401, "status": "UNAUTHENTICATED",
        "message": "missing credentials: send Authorization: Bearer <token> or an API key header",
        "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "UNAUTHENTICATED",
                     "domain": "a2a-protocol.org", "metadata": {"field": "Authorization"}}]}}
    assert ok.status_code == 200 and ok.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_public_paths_stay_public() -> None:
    async with secured() as (gw, url, _):
        async with httpx.AsyncClient() as c:
            card = await c.get(url + "/.well-known/agent-card.json")
            agent_card = await c.get(url + "/agents/vision/.well-known/agent-card.json")
            health = await c.get(url + "/healthz")
    assert card.status_code == agent_card.status_code == health.status_code == 200


async def test_metrics_need_a_client_or_the_admin_token() -> None:
    async with secured() as (gw, url, _):
        async with httpx.AsyncClient() as c:
            anon = await c.get(url + "/metrics")
            admin = await c.get(url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"})
            client = await c.get(url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert anon.status_code == 401
    assert admin.status_code == 200 and client.status_code == 200 and b"mma2a_requests" in admin.content


async def test_admin_keeps_its_own_token() -> None:
    async with secured() as (gw, url, _):
        async with httpx.AsyncClient() as c:
            anon = await c.get(url + "/admin/agents")
            client = await c.get(url + "/admin/agents", headers={"Authorization": f"Bearer {TOKEN}"})
            key = await c.get(url + "/admin/agents", headers={"X-API-Key": API_KEY})
            put = await c.put(url + "/admin/rules", content="version: 1\nrules: []\n", headers={"Authorization": f"Bearer {TOKEN}"})
            encoded = await c.get(url + "/%61dmin/agents")
            dotted = await c.send(c.build_request("GET", url + "/agents/../admin/agents"))
            admin = await c.get(url + "/admin/agents", headers={"Authorization": f"Bearer {ADMIN}"})
    assert anon.status_code == 401 and anon.json()["error"]["message"] == "admin API: missing bearer token"
    assert client.status_code == 403 and client.json()["error"]["message"] == "admin API: invalid token"
    assert key.status_code == 401 and put.status_code == 403
    assert encoded.status_code in (401, 404) and dotted.status_code in (401, 404)
    assert admin.status_code == 200 and {a["name"] for a in admin.json()["agents"]} == {"vision", "text"}


async def test_blobs_and_streams_need_a_credential_or_a_url_signature() -> None:
    async with secured() as (gw, url, _):
        async with httpx.AsyncClient() as c:
            anon_put = await c.post(url + "/blobs", content=b"x" * 100, headers={"Content-Type": "image/png"})
            anon_upload = await c.post(url + "/blobs/uploads")
            anon_stream = await c.post(url + "/streams", json={"modality": "audio/wav"})
            put = await c.post(url + "/blobs", content=b"x" * 100, headers={"Content-Type": "image/png", **bearer(TOKEN)})
            info = put.json()
            signed = await c.get(info["url"])  # the URL's own signature is the credential (agents fetch by URL)
            unsigned = await c.get(info["url"].split("?")[0])
            forged = await c.get(info["url"].replace("sig=", "sig=AA"))
            wrong_method = await c.delete(info["url"])
    assert anon_put.status_code == anon_upload.status_code == anon_stream.status_code == 401
    assert anon_put.json() == {"error": {"code": -32600, "reason": "unauthorized", "message":
                               "missing credentials: send Authorization: Bearer <token> or an API key header",
                               "data": {"field": "Authorization"}}}
    assert put.status_code == 201 and signed.status_code == 200 and signed.content == b"x" * 100
    # a blob read is a signed route: no signature is a 403 from the route's own check, credential or not
    assert unsigned.status_code == 403 and "URL is not signed" in unsigned.json()["error"]["message"]
    assert forged.status_code == 403 and wrong_method.status_code == 403


async def test_a_client_limited_to_some_agents_gets_403_elsewhere() -> None:
    async with secured() as (gw, url, _):
        own = await post(url, "/agents/vision/", send_body(parts=[{"raw": "iVBORw0KGgo=", "mediaType": "image/png"}]),
                         bearer(CAROL))
        other = await post(url, "/agents/text/", send_body(), bearer(CAROL))
        other_rest = await post(url, "/agents/text/message:send", REST_MSG, bearer(CAROL))
    assert own.status_code == 200 and "result" in own.json()
    assert other.status_code == 403 and other.json()["error"]["message"] == "client carol may not call agent text"
    assert other_rest.status_code == 403 and other_rest.json()["error"]["status"] == "PERMISSION_DENIED"


async def test_a_client_limited_to_some_agents_is_not_told_the_other_agents_names() -> None:
    """A routing refusal's hint names the gateway's agents (every name for an unknown receiver; the unavailable ones
    that would accept a part, tests/routing/test_capability.py): alice, who may use any agent, gets it; carol, limited to `vision`, gets the refusal
    without it."""
    unknown = send_body("m-r")
    unknown["params"]["message"]["extensions"] = [EXTENSION_URI]
    unknown["params"]["message"]["metadata"] = {EXTENSION_URI: {"protocol": "a2a-multimodal/1.0", "intent": "explicit",
                                                                "receivers": ["visoin"]}}
    async with secured() as (gw, url, _):
        alice = (await post(url, "/", unknown, bearer(TOKEN))).json()["error"]
        carol = (await post(url, "/", unknown, bearer(CAROL))).json()["error"]
    assert alice["message"] == "receivers: unknown agent 'visoin' (agents: text, vision; did you mean 'vision'?)"
    assert carol["code"] == alice["code"] == -32602 and carol["message"] == "receivers: unknown agent 'visoin'"


async def test_secrets_never_reach_logs_metrics_or_answers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with secured({"rate_limit": {"enabled": True, "rate": 0.01, "burst": 1}}) as (gw, url, _):  # no refill mid-test
        bodies = []
        for headers in (bearer(TOKEN), bearer(TOKEN), bearer(TOKEN + "x"), {"X-API-Key": API_KEY}, bearer(CAROL),
                        {"Authorization": f"Bearer {ADMIN}"}):
            r = await post(url, "/", send_body(), headers)
            bodies.append(r.text)
        async with httpx.AsyncClient() as c:
            metrics = (await c.get(url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"})).text
            admin = (await c.get(url + "/admin/agents", headers={"Authorization": f"Bearer {ADMIN}"})).text
            bodies.append((await c.get(url + "/admin/agents", headers={"Authorization": f"Bearer {TOKEN}"})).text)
    text = caplog.text + metrics + admin + "".join(bodies) + repr(gw.config.model_dump(exclude={"auth", "admin"}))
    assert "rate limit of alice exceeded" in "".join(bodies)  # the run did exercise refusals
    for secret in SECRETS:
        assert secret not in text
        assert secret not in repr(gw.pipeline.guard.__dict__)


async def test_metrics_show_a_restricted_client_only_its_agents_series() -> None:
    """Security round 4, Low: `/metrics` showed carol, limited to `vision`, every agent's series (threat 4 hides other
    agents' names from her). Now she sees `vision`'s and the gateway-wide ones, no per-rule series; alice (no limit)
    and the admin see everything."""
    rules = {"version": 1, "rules": [{"name": "texts-to-text", "match": {"modality": "text/plain"},
                                      "action": {"route_to": "text"}}]}
    async with secured({"rules": rules}) as (gw, url, _):
        await post(url, "/", send_body("m-text", parts=[{"text": "hello"}]), bearer(TOKEN))
        await post(url, "/agents/vision", send_body("m-img", parts=[{"raw": PNG_1PX, "mediaType": "image/png"}]), bearer(TOKEN))
        async with httpx.AsyncClient() as c:
            carol = (await c.get(url + "/metrics", headers=bearer(CAROL))).text
            alice = (await c.get(url + "/metrics", headers=bearer(TOKEN))).text
            admin = (await c.get(url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"})).text
    for full in (alice, admin):
        assert 'agent="text"' in full and 'agent="vision"' in full and 'rule="texts-to-text"' in full
    assert 'agent="vision"' in carol and "mma2a_requests_total" in carol  # hers, and the gateway-wide counts
    assert 'agent="text"' not in carol and "texts-to-text" not in carol
