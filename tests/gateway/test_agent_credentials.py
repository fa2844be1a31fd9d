"""Agents that require credentials (agents[].auth): OAuth2 client credentials from a real token endpoint (authlib's
server on loopback), fetched once per token lifetime and again on a 401; API keys; a card scheme the config does not
meet reported at registration, in /healthz, /admin/agents and `mma2a agents`."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from a2a.types import AgentCard

from mma2a.gateway.config import ConfigError, parse_config
from tests.agents import RecordingExecutor, make_card, run_agent
from tests.gateway.conftest import ADMIN, gateway, rpc
from tests.gateway.test_agents_cli import run_cli
from tests.oauth2 import TokenEndpoint, guarded, token_endpoint
from tests.oidc import Clock

REST_MSG = {"message": {"messageId": "r-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}


def _message(n: int) -> dict[str, Any]:
    return {"message": {"messageId": f"oc-{n}", "role": "ROLE_USER", "parts": [{"text": f"hello {n}"}]}}


def oauth_card(name: str, token_url: str) -> AgentCard:
    card = make_card(name)
    flow = card.security_schemes["oauth"].oauth2_security_scheme.flows.client_credentials
    flow.token_url = token_url
    flow.scopes["agents.call"] = "call the agent"
    card.security_requirements.add().schemes["oauth"].list.append("agents.call")
    return card


async def test_an_oauth2_agent_gets_one_token_per_lifetime_and_a_new_one_after_a_401(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMA2A_AGENT_CLIENT_ID", "mma2a-gateway")
    monkeypatch.setenv("MMA2A_AGENT_CLIENT_SECRET", "s3cret-of-the-gateway")
    idp = TokenEndpoint(expires_in=600)
    idp.add_client("mma2a-gateway", "s3cret-of-the-gateway")
    seen: list[dict[bytes, bytes]] = []
    refused: list[int] = []
    executor = RecordingExecutor(reply="secured ok")

    def accept(headers: dict[bytes, bytes]) -> bool:
        scheme, _, token = headers.get(b"authorization", b"").decode().partition(" ")
        return scheme == "Bearer" and idp.valid(token)

    async with token_endpoint(idp) as url_token:
        async with run_agent(oauth_card("secured", url_token), executor, wrap=guarded(accept, seen, refused)) as agent_url:
            clock = Clock()
            cfg = {"agents": [{"name": "secured", "url": agent_url.rstrip("/"), "auth": {"oauth2_client_credentials": {
                "token_url": url_token, "client_id_env": "MMA2A_AGENT_CLIENT_ID", "client_secret_env": "MMA2A_AGENT_CLIENT_SECRET",
                "scopes": ["agents.call"]}}}]}
            async with gateway(cfg, clock=clock) as (gw, url):
                answers = [await rpc(url, "SendMessage", _message(n)) for n in range(4)]
                async with httpx.AsyncClient(timeout=30) as c:
                    rest = await c.post(url + "/agents/secured/message:send", json=REST_MSG, headers={"A2A-Version": "1.0"})
                    health = (await c.get(url + "/healthz")).json()
                fetched_once = len(idp.issued)
                clock.now += 600 - 29  # within refresh_before_s (30 s) of the token's expiry: fetched anew first
                late = await rpc(url, "SendMessage", _message(10))
                fetched_at_expiry = len(idp.issued)
                idp.revoked.add(idp.issued[-1])  # the authorization server revokes the token: the agent says 401
                after_revoke = await rpc(url, "SendMessage", _message(11))
                fetched_after_401 = len(idp.issued)
    for answer in [*answers, late, after_revoke]:
        assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
    assert rest.status_code == 200 and rest.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert fetched_once == 1  # five calls, one token
    assert fetched_at_expiry == 2
    assert fetched_after_401 == 3
    assert len(executor.received) == 7  # the refused call reached the agent's auth, not the agent
    assert refused == [len(seen) - 2]  # one 401: the call after the revocation, then its retry went through
    assert seen[-2][b"authorization"] != seen[-1][b"authorization"]
    assert health["status"] == "ok" and "agentProblems" not in health  # the card's oauth2 scheme is met
    assert idp.scopes[idp.issued[0]] == "agents.call"


async def test_a_token_endpoint_refusal_fails_the_call_naming_the_agent_not_the_endpoint_or_the_secret(
        monkeypatch: pytest.MonkeyPatch, admin_headers: dict[str, str]) -> None:
    """The client is told which agent and why; the token endpoint's address (the network behind the gateway) only
    the operator, in the admin API's `lastError`."""
    monkeypatch.setenv("MMA2A_AGENT_CLIENT_ID", "mma2a-gateway")
    monkeypatch.setenv("MMA2A_AGENT_CLIENT_SECRET", "not-the-secret-4821")
    idp = TokenEndpoint()
    idp.add_client("mma2a-gateway", "the-real-secret")
    executor = RecordingExecutor()
    async with token_endpoint(idp) as url_token, run_agent(make_card("secured"), executor) as agent_url:
        cfg = {"agents": [{"name": "secured", "url": agent_url.rstrip("/"), "auth": {"oauth2_client_credentials": {
            "token_url": url_token, "client_id_env": "MMA2A_AGENT_CLIENT_ID", "client_secret_env": "MMA2A_AGENT_CLIENT_SECRET"}}}]}
        async with gateway(cfg) as (gw, url):
            failed = await rpc(url, "SendMessage", _message(1), path="/agents/secured/")
            async with httpx.AsyncClient(timeout=30) as c:
                listed = (await c.get(url + "/admin/agents", headers=admin_headers)).json()
    text = failed["result"]["task"]["status"]["message"]["parts"][0]["text"]
    assert text == "agent secured: OAuth2 token (agents[].auth.oauth2_client_credentials): HTTP 401 (invalid_client)"
    assert "not-the-secret-4821" not in str(failed) and executor.received == []
    assert url_token not in str(failed) and "127.0.0.1" not in str(failed)
    last = next(a for a in listed["agents"] if a["name"] == "secured")["lastError"]
    assert last == f"agent secured: OAuth2 token from {url_token}: HTTP 401 (invalid_client)"
    assert "not-the-secret-4821" not in str(listed)


async def test_a_card_scheme_the_config_does_not_meet_is_reported_and_an_api_key_is_sent(
        monkeypatch: pytest.MonkeyPatch, admin_headers: dict[str, str]) -> None:
    monkeypatch.setenv("MMA2A_AGENT_KEYED_KEY", "key-for-keyed-77")
    monkeypatch.setenv("MMA2A_AGENT_OTHER_TOKEN", "a-bearer-token")
    keyed = make_card("keyed")
    keyed.security_schemes["key"].api_key_security_scheme.location = "header"
    keyed.security_schemes["key"].api_key_security_scheme.name = "X-Agent-Key"
    keyed.security_requirements.add().schemes["key"].list[:] = []
    wrong = AgentCard()
    wrong.CopyFrom(keyed)
    wrong.name = "wrong"
    seen: list[dict[bytes, bytes]] = []
    async with run_agent(keyed, RecordingExecutor(), wrap=guarded(
            lambda h: h.get(b"x-agent-key") == b"key-for-keyed-77", seen)) as keyed_url, \
            run_agent(wrong, RecordingExecutor()) as wrong_url:
        cfg = {"agents": [
            {"name": "keyed", "url": keyed_url.rstrip("/"), "auth": {"api_key": {"header": "X-Agent-Key", "env": "MMA2A_AGENT_KEYED_KEY"}}},
            {"name": "wrong", "url": wrong_url.rstrip("/"), "auth": {"bearer_env": "MMA2A_AGENT_OTHER_TOKEN"}}]}
        async with gateway(cfg) as (gw, url):
            ok = await rpc(url, "SendMessage", _message(1), path="/agents/keyed/")
            async with httpx.AsyncClient() as c:
                health = (await c.get(url + "/healthz")).json()
                listed = (await c.get(url + "/admin/agents", headers=admin_headers)).json()
            code, table, _ = await run_cli("agents", "--gateway", url, env={"MMA2A_ADMIN_TOKEN": ADMIN, "COLUMNS": "400"})
    problem = ("credentials: the card asks for key (API key in header X-Agent-Key); the config gives a bearer token "
               "(MMA2A_AGENT_OTHER_TOKEN) (agents[].auth)")
    assert ok["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert seen[0][b"x-agent-key"] == b"key-for-keyed-77" and b"authorization" not in seen[0]
    assert health["status"] == "degraded" and health["agentProblems"] == {"wrong": [problem]}
    rows = {row["name"]: row for row in (listed["agents"] if isinstance(listed, dict) else listed)}
    assert rows["wrong"]["problems"] == [problem] and rows["keyed"]["problems"] == []
    assert code == 0
    assert f"unhealthy" not in table and problem in table


def test_agent_auth_config_errors_name_the_field() -> None:
    cases = {
        "give exactly one of bearer_env, api_key, oauth2_client_credentials (got bearer_env, api_key)":
            {"bearer_env": "A", "api_key": {"env": "B"}},
        "give exactly one of bearer_env, api_key, oauth2_client_credentials": {},
    }
    for message, auth in cases.items():
        with pytest.raises(ConfigError) as info:
            parse_config({"agents": [{"name": "a", "url": "http://127.0.0.1:1", "auth": auth}]})
        assert info.value.message == f"agents.0.auth: Value error, {message}"
    with pytest.raises(ConfigError) as info:
        parse_config({"agents": [{"name": "a", "url": "http://127.0.0.1:1", "token_env": "T", "auth": {"bearer_env": "A"}}]})
    assert info.value.message.startswith("agents.0: Value error, give token_env or auth, not both")
    with pytest.raises(ConfigError) as info:
        parse_config({"agents": [{"name": "a", "url": "http://127.0.0.1:1", "auth": {"oauth2_client_credentials": {
            "token_url": "ftp://x", "client_id_env": "I", "client_secret_env": "S"}}}]})
    assert info.value.message == "agents.0.auth.oauth2_client_credentials.token_url: Value error, must be an http:// or https:// URL"


def test_every_agent_credential_variable_is_held_to_the_secrets_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMA2A_ADMIN_TOKEN", "the-admin-token")
    cases = {
        "agents.0.auth.bearer_env: HOME is not under secrets.env_prefix (MMA2A_AGENT_)": {"bearer_env": "HOME"},
        "agents.0.auth.api_key.env: MMA2A_ADMIN_TOKEN holds the admin token (admin.token_env)":
            {"api_key": {"header": "X-Key", "env": "MMA2A_ADMIN_TOKEN"}},
        "agents.0.auth.oauth2_client_credentials.client_secret_env: DB_PASSWORD is not under secrets.env_prefix":
            {"oauth2_client_credentials": {"token_url": "https://idp/token", "client_id_env": "MMA2A_AGENT_ID",
                                           "client_secret_env": "DB_PASSWORD"}},
    }
    for message, auth in cases.items():
        with pytest.raises(ConfigError) as info:
            parse_config({"agents": [{"name": "a", "url": "http://127.0.0.1:1", "auth": auth}]}).check_configured_agents()
        assert info.value.message.startswith(message), info.value.message


def test_a_grpc_agent_refusing_the_credentials_is_told_apart_like_an_http_one() -> None:
    import grpc
    import grpc.aio

    from mma2a.errors import DispatchError
    from mma2a.gateway.downstream.grpc_transport import _agent_error

    for code, status in ((grpc.StatusCode.UNAUTHENTICATED, 401), (grpc.StatusCode.PERMISSION_DENIED, 403)):
        refused = grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details="bad token")
        err = _agent_error("claims", "grpc://127.0.0.1:50051", refused, 30.0, None)
        assert isinstance(err, DispatchError) and err.data == {"agent": "claims", "status": status}  # 401: fetched again
        assert err.message == (f"agent claims refused the gateway's credentials (gRPC {code.name}); "
                               "check its agents[].auth (or token_env)")
