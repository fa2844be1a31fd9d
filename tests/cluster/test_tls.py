"""TLS to NATS: a real nats-server requiring TLS and client certificates made by the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from mma2a.gateway.cluster_config import ClusterConfig
from mma2a.cluster.server import NatsServer
from mma2a.cluster.link import connect
from mma2a.errors import ClusterError
from mma2a.gateway import parse_config
from mma2a.tls import ClientTLS
from tests.certs import CA


async def test_cluster_connects_to_nats_over_mutual_tls(tmp_path: Path) -> None:
    ca, other = CA(tmp_path / "ca"), CA(tmp_path / "other", name="other-ca")
    server, client = ca.issue("nats"), ca.issue("gateway-1", server=False)
    args = ["--tls", "--tlscert", server.cert_file, "--tlskey", server.key_file, "--tlsverify", "--tlscacert", ca.cert_file]
    with NatsServer(tmp_path / "store", args=args) as nats:
        good = ClusterConfig(nats=nats.url, connect_timeout_s=2,
                             tls=ClientTLS(ca_file=ca.cert_file, cert_file=client.cert_file, key_file=client.key_file))
        nc = await connect(good)
        try:
            sub = await nc.subscribe("tls.check")
            await nc.publish("tls.check", b"over tls")
            msg = await sub.next_msg(timeout=10)
            assert msg.data == b"over tls"
        finally:
            await nc.close()
        for tls in (None,  # plain to a TLS-only server
                    ClientTLS(ca_file=ca.cert_file),  # no client certificate
                    ClientTLS(ca_file=other.cert_file, cert_file=client.cert_file, key_file=client.key_file)):  # wrong CA
            with pytest.raises(ClusterError, match=rf"^cluster.nats: cannot connect to {nats.url}: "):
                await connect(ClusterConfig(nats=nats.url, connect_timeout_s=0.5, tls=tls))


def test_cluster_tls_paths_are_relative_to_the_config_file(tmp_path: Path) -> None:
    cfg = parse_config({"cluster": {"nats": "nats://127.0.0.1:4222", "tls": {"ca_file": "certs/ca.pem"}}},
                       base_dir=str(tmp_path))
    assert cfg.cluster is not None and cfg.cluster.tls is not None
    assert cfg.cluster.tls.ca_file == str(tmp_path / "certs/ca.pem")
