"""The CLI's errors as a newcomer meets them (issue 40): one line saying what is wrong and what to do, never a traceback
or an HTTP library's wording. A real gateway (in this process, on a loopback port) and real a2a-sdk agents; the
commands run through typer's runner in a thread while the gateway serves on the loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from mma2a.cli.serve import credential_warnings
from mma2a.gateway.config import ConfigError
from mma2a.gateway import parse_config
from mma2a.serving import free_port
from tests.certs import CA
from tests.gateway.conftest import ADMIN, agent, agents, gateway
from tests.test_first_hour import cli


async def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    return await asyncio.to_thread(cli, *args, env=env)


# --- the admin token ------------------------------------------------------------------------------------------------


def test_history_without_a_token_names_the_variable_as_agents_does() -> None:
    for command in (["history"], ["agents", "--gateway", "http://127.0.0.1:1"]):
        code, _, err = cli(*command, env={"MMA2A_ADMIN_TOKEN": ""})
        assert code == 2
        assert err == ("error: the admin API needs the gateway's admin token (the variable named by admin.token_env in "
                       "its config): set MMA2A_ADMIN_TOKEN, or name another variable with --token-env NAME\n")


def test_a_token_pasted_with_its_placeholder_is_refused_before_anything_is_sent() -> None:
    for command in (["history"], ["agents", "--gateway", "http://127.0.0.1:1"]):
        code, _, err = cli(*command, env={"MMA2A_ADMIN_TOKEN": "MMA2A_ADMIN_TOKEN=…"})
        assert code == 2
        assert err == ("error: the token in MMA2A_ADMIN_TOKEN is not usable: it holds characters an HTTP header cannot "
                       "carry ('…'); set MMA2A_ADMIN_TOKEN to the token itself (export MMA2A_ADMIN_TOKEN=THE-TOKEN)\n")
        assert "Traceback" not in err
    code, _, err = cli("send", "--text", "hi", "--gateway", "http://127.0.0.1:1", env={"MMA2A_TOKEN": "two words"})
    assert code == 2 and "the token in MMA2A_TOKEN is not usable: it holds characters an HTTP header cannot carry (' ')" in err


async def test_admin_commands_on_a_gateway_without_an_admin_section_say_how_to_add_one() -> None:
    card, executor = agent("text", ["text/plain"])
    async with agents({"text": (card, executor)}) as urls:
        async with gateway({"agents": [{"name": "text", "url": urls["text"]}], "admin": {"token_env": None}}) as (gw, url):
            env = {"MMA2A_ADMIN_TOKEN": "some-token"}
            for command in (["history", "--gateway", url], ["agents", "--gateway", url]):
                code, _, err = await run(*command, env=env)
                assert code == 1
                assert err == (f"error: {url} has no admin API: add `admin: {{token_env: MMA2A_ADMIN_TOKEN}}` to its "
                               "config, set MMA2A_ADMIN_TOKEN for `mma2a serve` too, and restart it (docs/operations.md)\n")


async def test_a_refused_part_lists_which_agent_takes_what_without_the_admin_token(tmp_path: Path) -> None:
    card, executor = agent("text", ["text/plain"])
    photo = tmp_path / "x.bin"
    photo.write_bytes(b"\x00\x01not media")
    async with agents({"text": (card, executor)}) as urls:
        async with gateway({"agents": [{"name": "text", "url": urls["text"]}]}) as (gw, url):
            code, _, err = await run("send", str(photo), "--gateway", url, "--wait", "0", "--no-extract",
                                     env={"MMA2A_ADMIN_TOKEN": ""})
    assert code == 1
    assert "hint: text accepts text/plain\n" in err
    assert "mma2a agents" not in err  # it needed the admin token the README's gateway does not have


async def test_agents_a_configured_agent_that_is_down_is_named_as_such() -> None:
    card, executor = agent("text", ["text/plain"])
    async with agents({"text": (card, executor)}) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}, {"name": "ghost", "url": f"http://127.0.0.1:{free_port()}"}]}
        async with gateway(cfg) as (gw, url):
            code, _, err = await run("send", "--text", "hi", "--to", "ghost", "--gateway", url, "--wait", "0")
    assert code == 1
    assert "unknown agent 'ghost'" in err
    assert ("hint: 'ghost' is in the gateway's config but has not registered: is it running at its configured url? "
            "The gateway keeps trying it (`GET /healthz` lists missingAgents)") in err


# --- TLS --------------------------------------------------------------------------------------------------------------


async def test_send_to_a_gateway_with_a_private_ca_fails_at_once_naming_cacert_and_works_with_it(tmp_path: Path) -> None:
    ca = CA(tmp_path / "pki")
    pair = ca.issue("gateway")
    card, executor = agent("text", ["text/plain"])
    async with agents({"text": (card, executor)}) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}],
               "tls": {"cert_file": pair.cert_file, "key_file": pair.key_file}}
        async with gateway(cfg) as (gw, url):
            assert url.startswith("https://")
            # a long --wait: a certificate that is not trusted ends it at once (the test would time out otherwise)
            code, _, err = await run("send", "--text", "hi", "--gateway", url, "--wait", "600", env={"MMA2A_CA_FILE": ""})
            assert code == 1
            assert "its TLS certificate is not trusted here" in err and "--cacert FILE" in err
            code, out, err = await run("send", "--text", "hi", "--gateway", url, "--cacert", ca.cert_file)
            assert code == 0, err
            assert "part 0 (text/plain) → text" in out
            code, out, err = await run("send", "--text", "hi", "--gateway", url, env={"MMA2A_CA_FILE": ca.cert_file})
            assert code == 0, err
            code, out, err = await run("agents", "--gateway", url, "--cacert", ca.cert_file, "--json",
                                       env={"MMA2A_ADMIN_TOKEN": ADMIN})
            assert code == 0, err
            assert '"name": "text"' in out
    code, _, err = cli("send", "--text", "hi", "--cacert", str(tmp_path / "nope.pem"))
    assert (code, err) == (2, f"error: --cacert: no such file: {tmp_path / 'nope.pem'}\n")


def test_the_banner_says_https_when_the_gateway_serves_tls(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from mma2a.cli.serve import banner

    pair = CA(tmp_path).issue("gw")
    for tls, scheme in ((None, "http"), ({"cert_file": pair.cert_file, "key_file": pair.key_file}, "https")):
        config = parse_config({"listen": "127.0.0.1:8800", **({"tls": tls} if tls else {})})
        fake = SimpleNamespace(config=config, directory=SimpleNamespace(entries=list),
                               state=SimpleNamespace(rules_version=0, mode="native"))
        assert banner(fake).startswith(f"mma2a gateway on {scheme}://127.0.0.1:8800 ")  # type: ignore[arg-type]


# --- configuration --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "message"), [
    ({"agents": [{"name": "a", "ulr": "http://127.0.0.1:9"}]}, "agents.0.ulr: unknown field; did you mean 'url'?"),
    ({"listn": "127.0.0.1:1"}, "listn: unknown field; did you mean 'listen'?"),
    ({"auth": {"clients": [{"name": "a", "tokn_env": "X"}]}}, "auth.clients.0.tokn_env: unknown field; did you mean 'token_env'?"),
    ({"agents": [{"name": "a", "url": "http://127.0.0.1:9", "tls": {"ca_fil": "x"}}]},
     "agents.0.tls.ca_fil: unknown field; did you mean 'ca_file'?"),
])
def test_a_misspelt_config_field_is_named_with_the_right_spelling(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert info.value.message == message


def test_serve_warns_once_about_a_client_whose_token_variable_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLI_ERRORS_UNSET", raising=False)
    monkeypatch.setenv("CLI_ERRORS_SET", "a-token")
    cfg = parse_config({"auth": {"clients": [{"name": "alice", "token_env": "CLI_ERRORS_SET"},
                                             {"name": "bob", "token_env": "CLI_ERRORS_UNSET"}]}})
    assert credential_warnings(cfg) == [
        "warning: auth.clients[1] (bob): token_env CLI_ERRORS_UNSET is not set in this environment, so bob cannot "
        "authenticate with it; export CLI_ERRORS_UNSET=... before `mma2a serve`"]
