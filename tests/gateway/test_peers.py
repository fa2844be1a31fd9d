"""Caller addresses on the gRPC door read as uvicorn reads them on the HTTP door (its proxy-headers middleware
is the reference: same trusted proxies, same `X-Forwarded-For` walk)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from mma2a.gateway.access.peers import DEFAULT_TRUSTED, TrustedProxies, peer_host


def test_grpc_peer_strings_give_the_address_without_its_port() -> None:
    assert peer_host("ipv4:127.0.0.1:5555") == "127.0.0.1"
    assert peer_host("ipv6:%5B::1%5D:41234") == "::1"  # as grpcio 1.6x+ writes it
    assert peer_host("ipv6:[2001:db8::7]:80") == "2001:db8::7"
    assert peer_host("ipv6:%5Bfe80::1%25eth0%5D:80") == "fe80::1"
    assert peer_host("unix:/run/mma2a.sock") == "?"  # as the HTTP gate names a caller with no address
    assert peer_host("ipv6:::1") == "?" and peer_host("") == "?"


HOSTS = st.sampled_from(["127.0.0.1", "::1", "10.0.0.5", "10.1.2.3", "203.0.113.9", "198.51.100.4", "2001:db8::1",
                         "proxy.internal", "unix:", ""])
ENTRIES = st.one_of(HOSTS, HOSTS.map(lambda h: f"{h}:8080"), HOSTS.map(lambda h: f"[{h}]:443"),
                    HOSTS.map(lambda h: f"[{h}"), st.text(alphabet="0123456789abcdef:.[] ", max_size=12))
SPECS = st.sampled_from([DEFAULT_TRUSTED, "*", "10.0.0.0/8", "10.0.0.0/8, ::1", "proxy.internal,127.0.0.1",
                         "203.0.113.9", "unix:"])


async def _uvicorn_client(spec: str, peer: str, forwarded: list[str]) -> str:
    """The client host uvicorn's middleware gives a request from `peer` with these X-Forwarded-For headers."""
    seen: list[str] = []

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        seen.append(scope["client"][0])  # type: ignore[index]

    scope = {"type": "http", "client": (peer, 1234),
             "headers": [(b"x-forwarded-for", v.encode("latin-1")) for v in forwarded]}
    await ProxyHeadersMiddleware(app, trusted_hosts=spec)(scope, None, None)  # type: ignore[arg-type]
    return seen[0]


@settings(max_examples=300, deadline=None)
@given(spec=SPECS, peer=HOSTS.filter(bool), forwarded=st.lists(st.lists(ENTRIES, min_size=1, max_size=4).map(", ".join),
                                                              max_size=2))
async def test_the_forwarded_client_is_the_one_uvicorn_reads(spec: str, peer: str, forwarded: list[str]) -> None:
    assert TrustedProxies(spec).client_address(peer, forwarded) == await _uvicorn_client(spec, peer, forwarded)


def test_the_trusted_proxies_come_from_the_setting_uvicorn_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    assert TrustedProxies().client_address("::1", ["203.0.113.9"]) == "203.0.113.9"
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "10.0.0.0/8")
    assert TrustedProxies().client_address("::1", ["203.0.113.9"]) == "::1"
    assert TrustedProxies().client_address("10.3.4.5", ["203.0.113.9, 10.0.0.2"]) == "203.0.113.9"
