"""Security round 4 #7: TLS handshakes were not held to `header_timeout_s`. 100 silent TCP connections to a TLS
listener stayed open 60 s+ (asyncio's own handshake timeout) against a 10 s deadline. Now every TLS listener, HTTPS
and gRPC, closes a connection whose handshake has not finished within `header_timeout_s`.
(The memory figure — 2,000 silent connections, RSS after they close — is `bench/tls_handshakes.py`.)"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import httpx

from tests.certs import CA
from tests.gateway.conftest import agent, gateway
from tests.agents import run_agent

SILENT = 40


async def silent_connections_closed(port: int, n: int) -> list[bytes]:
    """Open `n` TCP connections that send nothing; what each read until the server closed it (within 10 s, far
    below asyncio's 60 s handshake default, far above the 0.5 s deadline)."""
    opened = [await asyncio.open_connection("127.0.0.1", port) for _ in range(n)]
    try:
        return list(await asyncio.wait_for(asyncio.gather(*(r.read() for r, _ in opened)), 10))
    finally:
        for _, w in opened:
            w.close()


async def test_silent_connections_to_tls_listeners_are_closed_at_the_header_deadline(tmp_path: Path) -> None:
    ca = CA(tmp_path)
    server = ca.issue("gw")
    card, _ = agent("notes", ["text/plain"])
    async with run_agent(card, _) as notes_url:
        cfg = {"agents": [{"name": "notes", "url": notes_url}], "grpc_listen": "127.0.0.1:0",
               "tls": {"cert_file": server.cert_file, "key_file": server.key_file},
               "server": {"header_timeout_s": 0.5}}
        async with gateway(cfg) as (gw, url):
            assert gw.grpc is not None
            https_port = int(url.rsplit(":", 1)[1])
            on_https, on_grpc = await asyncio.gather(silent_connections_closed(https_port, SILENT),
                                                     silent_connections_closed(gw.grpc.port, SILENT // 4))
            # the listener still serves real clients
            async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=ca.cert_file), timeout=30) as c:
                r = await c.get(url + "/healthz")
    assert on_https == [b""] * SILENT  # closed without a byte: the handshake never started
    assert len(on_grpc) == SILENT // 4  # closed (grpc may write its TLS alert or nothing)
    assert r.status_code == 200
