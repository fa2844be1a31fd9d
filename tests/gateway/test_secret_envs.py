"""An agent's `token_env` is sent to the agent: it may name only variables under `secrets.env_prefix`, never one
holding the gateway's own secrets (URL secret, admin token, a client's credential, the NATS credentials)."""

from __future__ import annotations

import pytest

from mma2a.gateway import Gateway
from mma2a.gateway.config import AgentConfig, ConfigError, parse_config

AGENT = {"name": "vision", "url": "http://127.0.0.1:9"}
OWN = "an agent's token is sent to the agent, so it may never name one of the gateway's own secrets"


def refusal(config: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(config)
    return exc.value.message


def test_the_gateways_own_secrets_are_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    clients = {"auth": {"clients": [{"name": "alice", "token_env": "MMA2A_AGENT_ALICE"},
                                    {"name": "bob", "api_key_env": "BOB_KEY"}]},
               "cluster": {"nats": "nats://127.0.0.1:4222", "auth": {"token_env": "MMA2A_AGENT_NATS"}},
               "federation": {"private_key_env": "MMA2A_FEDERATION_KEY"}}
    cases = {
        "MMA2A_URL_SECRET": "holds the payload URL secret (url_secret_env)",
        "MMA2A_ADMIN_TOKEN": "holds the admin token (admin.token_env)",
        "MMA2A_AGENT_ALICE": "holds client alice's token (auth.clients[].token_env)",
        "BOB_KEY": "holds client bob's api key (auth.clients[].api_key_env)",
        "MMA2A_AGENT_NATS": "holds the NATS credentials (cluster.auth.token_env)",
        "MMA2A_FEDERATION_KEY": "holds the federation signing key (federation.private_key_env)",
    }
    for env, what in cases.items():
        config = {**clients, "secrets": {"env_prefix": ""}, "agents": [{**AGENT, "token_env": env}]}
        assert refusal(config) == f"agents.0.token_env: {env} {what}; {OWN}"


def test_the_prefix_and_the_value_of_an_own_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    assert refusal({"agents": [{**AGENT, "token_env": "HOME"}]}) == (
        "agents.0.token_env: HOME is not under secrets.env_prefix (MMA2A_AGENT_): an agent's token is sent to the agent, "
        "so it may name only variables kept for agent credentials (rename it, e.g. MMA2A_AGENT_HOME, or change "
        "secrets.env_prefix)")
    monkeypatch.setenv("MMA2A_AGENT_COPY", "alice-token")  # another name, the same value as a client's token
    config = {"auth": {"clients": [{"name": "alice", "token": "alice-token"}]},
              "agents": [{**AGENT, "token_env": "MMA2A_AGENT_COPY"}]}
    assert refusal(config) == (
        "agents.0.token_env: MMA2A_AGENT_COPY holds the same value as one of the gateway's own secrets (URL secret, "
        "admin token, a client's credential); give the agent a token of its own")
    monkeypatch.setenv("MMA2A_AGENT_VISION", "vision-only")
    ok = parse_config({"agents": [{**AGENT, "token_env": "MMA2A_AGENT_VISION"}]})
    assert ok.agents[0].token_env == "MMA2A_AGENT_VISION"
    with pytest.raises(ConfigError, match="secrets.env_prefix"):  # a config built in code is held to it too
        Gateway(ok.model_copy(update={"agents": [AgentConfig(**AGENT, token_env="PATH")]}))
