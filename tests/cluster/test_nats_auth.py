"""`cluster.auth`: the gateway's NATS credentials (token, NKey seed, user and password), each from a variable or a
file, against a real nats-server that requires them; and the errors a bad `cluster.auth` gives."""

from __future__ import annotations

import os
from pathlib import Path

import nkeys
import pytest

from mma2a.cluster.link import ClusterLink
from mma2a.cluster.server import NatsServer
from mma2a.errors import ClusterError
from mma2a.gateway.config import ConfigError, parse_config


def cluster_config(url: str, auth: dict[str, str], base_dir: Path) -> object:
    config = parse_config({"cluster": {"nats": url, "name": "auth", "auth": auth}}, base_dir=str(base_dir)).cluster
    assert config is not None
    return config


async def connects(config: object) -> bool:
    try:
        link = await ClusterLink(config).connect()  # type: ignore[arg-type]
    except ClusterError as exc:
        assert exc.message.startswith("cluster.auth: NATS at ") and "refused the gateway's credentials (nats: "
        "'Authorization Violation'); check cluster.auth" in exc.message, exc.message
        return False
    await link.js.account_info()  # JetStream answers: the connection is authenticated
    await link.close()
    return True


async def test_token_and_nkey_seed_from_a_variable_or_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode()
    public = nkeys.from_seed(bytearray(seed.encode())).public_key.decode()
    (tmp_path / "seed.nk").write_text(seed + "\n")
    (tmp_path / "token").write_text("tok-0123456789\n")
    monkeypatch.setenv("MMA2A_TEST_NATS_TOKEN", "tok-0123456789")
    monkeypatch.setenv("MMA2A_TEST_NATS_SEED", seed)
    results = {}
    for kind, server_auth, good, bad in (
        ("token", 'authorization { token: "tok-0123456789" }',
         [{"token_env": "MMA2A_TEST_NATS_TOKEN"}, {"token_file": "token"}], {"token_file": "seed.nk"}),
        ("nkey", f'authorization {{ users: [{{nkey: "{public}"}}] }}',
         [{"nkey_seed_env": "MMA2A_TEST_NATS_SEED"}, {"nkey_seed_file": "seed.nk"}], {}),
    ):
        conf = tmp_path / f"{kind}.conf"
        conf.write_text(server_auth + "\n")
        with NatsServer(tmp_path / f"{kind}-store", args=["-c", str(conf)]) as server:
            results[kind] = [await connects(cluster_config(server.url, a, tmp_path)) for a in good]
            results[kind].append(await connects(cluster_config(server.url, bad, tmp_path)))
    assert results == {"token": [True, True, False], "nkey": [True, True, False]}


def test_bad_auth_sections_name_the_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refusal(auth: dict[str, str]) -> str:
        with pytest.raises(ConfigError) as exc:
            parse_config({"cluster": {"nats": "nats://127.0.0.1:4222", "auth": auth}})
        return exc.value.message

    assert refusal({"token_env": "A", "token_file": "b"}) == "cluster.auth: Value error, token_env and token_file: give one"
    assert refusal({"token_env": "A", "nkey_seed_file": "b"}) == (
        "cluster.auth: Value error, token and nkey_seed: give one way to authenticate")
    assert refusal({"password_env": "A"}) == (
        "cluster.auth: Value error, user and password go together (user with password_env or password_file)")
    assert refusal({"password": "inline"}).startswith("cluster.auth.password: unknown field; did you mean")
    monkeypatch.delenv("MMA2A_TEST_UNSET", raising=False)
    for auth, error in (({"token_env": "MMA2A_TEST_UNSET"}, "cluster.auth.token_env: $MMA2A_TEST_UNSET is not set"),
                        ({"creds_file": "none.creds"}, f"cluster.auth.creds_file: cannot read {tmp_path / 'none.creds'}: "
                                                       "No such file or directory")):
        config = cluster_config("nats://127.0.0.1:1", auth, tmp_path)
        with pytest.raises(ClusterError) as exc:
            import asyncio

            asyncio.run(ClusterLink(config).connect())  # type: ignore[arg-type]
        assert exc.value.message == error


def test_the_documented_account_is_the_one_the_gateways_are_tested_with() -> None:
    from mma2a.cluster.account import nats_account

    documented = Path(__file__).parents[2] / "docs" / "examples" / "nats-gateways.conf"
    assert documented.read_text() == nats_account("mma2a")
