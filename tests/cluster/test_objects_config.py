"""ObjectBlobStore against a real JetStream Object Store, and the errors cluster configuration can give."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from mma2a.cluster import ClusterConfig, cluster_state
from mma2a.cluster.objects import open_object_store
from mma2a.cluster.server import NatsServer
from mma2a.errors import ClusterError, PayloadError, PayloadNotFound, PayloadTooLarge, RangeNotSatisfiable
from mma2a.gateway import Gateway
from mma2a.gateway.config import ConfigError, parse_config

from .conftest import cluster_name


async def chunks(data: bytes, size: int = 50_000) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


async def test_object_store_round_trip_ranges_dedupe_and_delete(nats_server: NatsServer) -> None:
    store, link = await open_object_store(ClusterConfig(nats=nats_server.url, name=cluster_name()))
    try:
        data = hashlib.sha256(b"seed").digest() * 20_000  # 640 000 bytes, 5 chunks of 128 KiB
        info = await store.put_stream(chunks(data), "image/png", sha256=hashlib.sha256(data).hexdigest())
        assert info.key == hashlib.sha256(data).hexdigest() and info.size == len(data)
        assert await store.stat(info.key) == info
        assert await store.read_all(info.key) == data
        got = b"".join([c async for c in store.open_range(info.key, 131_000, 262_200)])
        assert got == data[131_000:262_200]
        again = await store.put_bytes(data, "image/png")  # same bytes: stored once
        assert again.key == info.key
        si = await link.js.stream_info(store.stream)
        assert si.state.messages == 5 + 1  # the chunks and one info, not twice
        with pytest.raises(RangeNotSatisfiable) as exc:
            [c async for c in store.open_range(info.key, 10, len(data) + 1)]
        assert exc.value.message == f"range 10-{len(data) + 1} is outside blob {info.key} of {len(data)} bytes"
        await store.delete(info.key)
        with pytest.raises(PayloadNotFound) as nf:
            await store.stat(info.key)
        assert nf.value.message == f"blob {info.key} not found"
    finally:
        await link.close()


async def test_object_store_refuses_a_wrong_digest_and_an_oversized_blob(nats_server: NatsServer) -> None:
    store, link = await open_object_store(ClusterConfig(nats=nats_server.url, name=cluster_name()))
    try:
        data = b"x" * 300_000
        wrong = "0" * 64
        with pytest.raises(PayloadError) as exc:
            await store.put_stream(chunks(data), sha256=wrong)
        assert exc.value.message == f"sha256 mismatch: the body hashes to {hashlib.sha256(data).hexdigest()}, the client said {wrong}"
        with pytest.raises(PayloadTooLarge) as big:
            await store.put_stream(chunks(data), max_size=200_000)
        assert big.value.message == "blob is larger than the limit of 200000 bytes"
        si = await link.js.stream_info(store.stream)
        assert si.state.messages == 0  # refused blobs leave no chunks behind
        with pytest.raises(PayloadError) as bad:
            await store.stat("../etc/passwd")
        assert bad.value.message == "blob key '../etc/passwd' is not a SHA-256 hex digest (64 lower-case hex digits)"
    finally:
        await link.close()


def test_cluster_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config({"cluster": {"nats": "http://x:4222"}})
    assert exc.value.message == "cluster.nats: Value error, must be nats://HOST:PORT (several separated by commas)"
    with pytest.raises(ConfigError) as exc:
        parse_config({"cluster": {"nats": "nats://x:4222", "heartbeat_s": 5, "member_ttl_s": 6}})
    assert exc.value.message == "cluster: Value error, member_ttl_s (6.0) must be at least twice heartbeat_s (5.0)"
    with pytest.raises(ConfigError) as exc:
        parse_config({"cluster": {"nats": "nats://x:4222", "name": "a b"}})
    assert exc.value.message.startswith("cluster.name: String should match pattern")
    cfg = parse_config({"cluster": {"nats": "nats://a:1, nats://b:2", "durable": ["x"]}}).cluster
    assert cfg is not None and cfg.servers() == ["nats://a:1", "nats://b:2"]
    assert cfg.durable_for("x") and not cfg.durable_for("y")


def test_a_clustered_gateway_needs_the_shared_url_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MMA2A_URL_SECRET", raising=False)
    with pytest.raises(ClusterError) as exc:
        cluster_state(parse_config({"cluster": {"nats": "nats://127.0.0.1:4222"}}))
    assert exc.value.message == ("cluster: set the payload URL secret (MMA2A_URL_SECRET) to the same value on every "
                                 "gateway, so a URL signed by one is accepted by all")


async def test_a_gateway_that_cannot_reach_nats_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMA2A_URL_SECRET", "x" * 32)
    config = parse_config({"cluster": {"nats": "nats://127.0.0.1:1", "connect_timeout_s": 1}})
    gw = Gateway(config, cluster=cluster_state(config))
    with pytest.raises(ClusterError) as exc:
        await gw.start()
    await gw.stop()
    assert exc.value.message == "cluster.nats: cannot connect to nats://127.0.0.1:1: nats: no servers available for connection"


def test_a_cluster_config_without_the_cluster_side_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMA2A_URL_SECRET", "x" * 32)
    config = parse_config({"cluster": {"nats": "nats://127.0.0.1:4222"}})
    with pytest.raises(ConfigError) as exc:
        Gateway(config)
    assert exc.value.field == "cluster"
    assert exc.value.message.startswith("cluster: this config is for cluster mode; build the gateway with "
                                        "Gateway(config, cluster=mma2a.cluster.cluster_state(config))")
    assert cluster_state(parse_config({})) is None


def test_the_embedded_default_never_imports_nats() -> None:
    code = ("import sys; from mma2a.gateway import Gateway, parse_config; Gateway(parse_config({})); "
            "print('nats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
