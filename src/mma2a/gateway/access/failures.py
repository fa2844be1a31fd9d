"""Failed credential checks per source address: a budget, so nobody can try tokens, API keys or admin tokens as fast
as the gateway answers (882 a second from one connection, session 12), without locking out a neighbour.

Each address (an IPv6 caller by its /64, which one host usually holds whole) has a token bucket of failed checks
(`auth.failed_credentials`: `burst` at once, `per_s` regained a second): a credential that does not verify takes one.
Only failures are counted: a client whose credential verifies never spends any, and requests without a credential
guess nothing. While an address's bucket is empty, every credential from it is answered alike — 429 + `Retry-After`
(gRPC `RESOURCE_EXHAUSTED`) naming the budget, whether the credential is wrong or right — except one naming a client
that was served from that same address recently: the gateway keeps a bounded set of (address, client) pairs that
verified (client names, never a credential), and such a client is still checked and served. So a guess learns
nothing once the budget is spent, while a neighbour behind the same NAT whose client was working keeps working (a
JWT client too, whose token is renewed meanwhile: the pair names the client, not the token).

In a cluster (and `serve --workers N`) the buckets are a shared budget (`budgets.SharedBudgets`, budget
`failures`): a guesser spreading over N gateways has the budget once, not N times; and each pair served for the first
time is told to the others (set `served`), so a neighbour served by one gateway is served by all.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ...errors import RateLimited
from .clients import FailedCredentialsConfig, RateLimiter

log = logging.getLogger("mma2a.gateway.security")

WARN_EVERY_S = 60.0  # an address over its budget is logged at most this often


class CredentialsLocked(RateLimited):
    """An address over its budget of failed credential checks presented a credential that is wrong, or names a client
    not served from that address recently: refused alike (429 + `Retry-After`; gRPC `RESOURCE_EXHAUSTED`); `field`
    names the credential's header, never the credential."""

    def __init__(self, message: str, *, retry_after: float, field: str) -> None:
        super().__init__(message, retry_after=retry_after)
        self.field = field
        self.data["field"] = field


def address_key(address: str) -> str:
    """The bucket of an address: `ip:192.0.2.1`, or an IPv6 address's /64, `ip:2001:db8::/64` (one host's usual
    share; an IPv4-mapped IPv6 address counts as its IPv4 address)."""
    if ":" not in address:
        return f"ip:{address}"
    return _ipv6_key(address)


def neighbourhood(address: str) -> str:
    """Where a served client is remembered from: its address's bucket (`address_key`, without `ip:`), so a client
    served from one address of a /64 (a host's temporary IPv6 addresses change daily, RFC 8981) is known from every
    address of it, as the budget it shares is; an IPv4 address is itself (no work on the request path)."""
    return address if ":" not in address else _ipv6_key(address)[3:]


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


class CredentialFailures:
    """The failure buckets of source addresses and the (address, client) pairs that verified from them recently.

    `over` before a credential is checked (the seconds until the address may fail again, None while it may),
    `failed` when one did not verify, `known` and `verified` when one did. Memory: at most `max_addresses` buckets
    and `max_remembered` pairs, the least recently used dropped first."""

    def __init__(self, config: FailedCredentialsConfig, *, count: Callable[[str], None] | None = None) -> None:
        """`count(result)`: each credential that did not verify (`failed`) and each refused for its address's budget
        (`refused`)."""
        self.per_s = config.per_s
        self.burst = config.burst
        self.buckets = RateLimiter(config.per_s, config.burst, capacity=config.max_addresses)
        self.max_remembered = config.max_remembered
        self._remembered: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._warned: OrderedDict[str, float] = OrderedDict()
        self.count = count or (lambda result: None)
        self._fresh: list[tuple[str, str]] | None = None  # a cluster's: pairs to tell the other gateways
        self._arm: Callable[[], None] | None = None

    def over(self, address: str, now: float) -> float | None:
        """The seconds until `address` may fail a check again; None while it may (its budget is not spent)."""
        if not self.buckets.has_any():
            return None
        return self.buckets.due(address_key(address), now)

    def locked(self, address: str, wait: float, field: str) -> CredentialsLocked:
        """The refusal of a credential from `address`, over its budget for `wait` more seconds (right or wrong)."""
        self.count("refused")
        return CredentialsLocked(
            f"too many failed credentials from {address} (auth.failed_credentials: {self.burst} at once, "
            f"{self.per_s:g} a second): only clients served from this address recently are served for {wait:.1f} s; "
            "retry then", retry_after=round(wait, 3), field=field)

    def failed(self, address: str, now: float) -> None:
        """A credential presented from `address` did not verify: one of its failures taken."""
        self.count("failed")
        key = address_key(address)
        self.buckets.take(key, now)
        if self.buckets.due(key, now) is not None:
            warned = self._warned.get(key)
            if warned is None or now - warned >= WARN_EVERY_S:
                self._warned[key] = now
                self._warned.move_to_end(key)
                while len(self._warned) > 1024:
                    self._warned.popitem(last=False)
                log.warning("%s is over its budget of failed credentials (auth.failed_credentials: %d at once, %g a "
                            "second): only clients served from it recently are served", key, self.burst, self.per_s)

    def known(self, address: str, client: str) -> bool:
        """`client` verified from `address` (from its /64, an IPv6 one) recently."""
        return (neighbourhood(address), client) in self._remembered

    def verified(self, address: str, client: str) -> None:
        """`client` verified from `address`: remembered (the least recently verified pair forgotten past the cap)."""
        remembered = self._remembered
        pair = (neighbourhood(address), client)
        if pair in remembered:
            remembered.move_to_end(pair)
            return
        self._remember(pair)
        fresh = self._fresh
        if fresh is not None and len(fresh) < self.max_remembered:
            if not fresh and self._arm is not None:
                self._arm()
            fresh.append(pair)

    def _remember(self, pair: tuple[str, str]) -> None:
        remembered = self._remembered
        remembered[pair] = None
        if len(remembered) > self.max_remembered:
            remembered.popitem(last=False)

    # --- across a cluster's gateways (`budgets.SharedBudgets.known`, set `served`) ------------------------------

    def share(self, arm: Callable[[], None]) -> None:
        """Keep each newly served pair for `unreported`; `arm` at the first since the last report."""
        self._fresh = []
        self._arm = arm

    def pending(self) -> bool:
        return bool(self._fresh)

    def unreported(self) -> list[list[str]]:
        """The pairs served here for the first time since the last call, as `[address, client]`."""
        fresh = self._fresh
        if not fresh:
            return []
        self._fresh = []
        return [list(pair) for pair in fresh]

    def learn(self, entries: list[Any]) -> None:
        """Pairs another gateway served: served here too while their address is over its budget."""
        for entry in entries[:self.max_remembered]:
            if (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], str)
                    and (address := entry[0]) and (client := entry[1])):
                pair = (neighbourhood(address), client)  # (a gateway from before told an IPv6 caller's own address)
                if pair in self._remembered:
                    self._remembered.move_to_end(pair)
                else:
                    self._remember(pair)
