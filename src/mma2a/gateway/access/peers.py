"""Where an anonymous caller comes from: its address, as rate limits key it (`address_key`: `ip:<address>`, an IPv6
one by its /64).

On HTTP, uvicorn's proxy-headers middleware gives each request its client address: the TCP peer,
or — when the peer is a trusted proxy (`FORWARDED_ALLOW_IPS`, default `127.0.0.1,::1`) — the
nearest untrusted host of its `X-Forwarded-For`. The gRPC binding has only the peer string of its
servicer context (`ipv4:127.0.0.1:5555`, `ipv6:%5B::1%5D:5555`, `unix:/path`); `client_address`
reads it, and the `x-forwarded-for` metadata, the same way, so both bindings key a caller alike.
"""

from __future__ import annotations

import functools
import ipaddress
import os
from contextvars import ContextVar
from urllib.parse import unquote

DEFAULT_TRUSTED = "127.0.0.1,::1"  # uvicorn's default for FORWARDED_ALLOW_IPS
UNKNOWN = "?"  # the address of a caller with none (a Unix socket): as the HTTP gate names it

current_address: ContextVar[str | None] = ContextVar("mma2a_address", default=None)
"""The address of the request being served when no client is named (auth off, the admin token), set by the doors
where they set `clients.current_client`: what keys such a caller's work queued past the request's own start (the
JSON body worker's queue). None where no client is either: the caller is unknown."""


def address_key(address: str) -> str:
    """The key an anonymous caller's budgets (request rate, failed credentials, ratings, body bytes, stream slots) are
    kept under: `ip:192.0.2.1`, or an IPv6 address's /64, `ip:2001:db8::/64` — one host's usual share: keyed by the
    address, a caller with a /64 had a fresh budget for each of its 2^64 addresses (docs/security.md S15-13); an
    IPv4-mapped IPv6 address counts as its IPv4 address."""
    if ":" not in address:
        return f"ip:{address}"
    return _ipv6_key(address)


@functools.lru_cache(maxsize=4096)
def _ipv6_key(address: str) -> str:
    """`address_key` of an address with a colon (parsed once a caller: a parse costs microseconds)."""
    try:
        ip = ipaddress.IPv6Address(address.partition("%")[0])
    except ValueError:
        return f"ip:{address}"
    if ip.ipv4_mapped is not None:
        return f"ip:{ip.ipv4_mapped}"
    return f"ip:{ipaddress.IPv6Network((int(ip) >> 64 << 64, 64))}"


def peer_host(peer: str) -> str:
    """The host of a gRPC peer string without its port: `ipv4:10.0.0.7:5555` -> `10.0.0.7`,
    `ipv6:[::1]:5555` (or percent-encoded) -> `::1`; any other form (Unix sockets) -> `?`."""
    kind, _, rest = peer.partition(":")
    rest = unquote(rest)
    if kind == "ipv4":
        host = rest.rpartition(":")[0]
    elif kind == "ipv6":
        host = rest[1:rest.find("]")] if rest.startswith("[") and "]" in rest else ""
        host = host.partition("%")[0]  # a zone index (fe80::1%eth0) is not part of the address
    else:
        return UNKNOWN
    return host or UNKNOWN


def _forwarded_host(entry: str) -> str:
    """One `X-Forwarded-For` entry without its port, as uvicorn reads it: `1.2.3.4:80` -> `1.2.3.4`,
    `[::1]:80` -> `::1`; a malformed entry is kept whole (so it matches no trusted address)."""
    if entry.startswith("["):
        end = entry.find("]")
        if end == -1:
            return entry
        rest = entry[end + 1:]
        return entry[1:end] if not rest or rest.startswith(":") else entry
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        try:
            int(port)
        except ValueError:
            return entry
        return host
    return entry


class TrustedProxies:
    """The proxies whose `X-Forwarded-For` is believed: addresses, networks (CIDR) and literals, or `*`.

    Read from the same setting as uvicorn's (`FORWARDED_ALLOW_IPS`), so the HTTP and gRPC doors agree."""

    def __init__(self, spec: str | None = None) -> None:
        if spec is None:
            spec = os.environ.get("FORWARDED_ALLOW_IPS", DEFAULT_TRUSTED)
        items = [s.strip() for s in spec.split(",") if s.strip()]
        self.everyone = "*" in items
        self.addresses: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        self.literals: set[str] = set()
        for item in items:
            try:
                if "/" in item:
                    self.networks.append(ipaddress.ip_network(item))
                else:
                    self.addresses.add(ipaddress.ip_address(item))
            except ValueError:
                self.literals.add(item)

    def trusts(self, host: str) -> bool:
        if self.everyone:
            return True
        if not host:
            return False
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return host in self.literals
        return ip in self.addresses or any(ip in net for net in self.networks)

    def client_address(self, host: str, forwarded_for: list[str]) -> str:
        """The caller's address: `host` (the peer), or, when the peer is trusted and says whom it forwards
        for (the values of its `X-Forwarded-For` headers), the nearest untrusted host of that list (all
        trusted: the first one); an empty answer keeps the peer."""
        if not forwarded_for or not self.trusts(host):
            return host
        hops = [_forwarded_host(h.strip()) for h in ", ".join(forwarded_for).split(",")]
        found = hops[0]
        if not self.everyone:
            for hop in reversed(hops):
                if not self.trusts(hop):
                    found = hop
                    break
        return found or host
