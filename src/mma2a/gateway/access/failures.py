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

A request through a trusted peer gateway (one carrying the peer's assertion of its client, verified:
`federation.Federation.asserted`) is judged against that client's budget at the peer — `CLIENT via PEER`, the
`origin_share` of the peer's budget — and the peer's own total, `peer:PEER` (one address's budget), never against the
peer's address: a guesser behind the peer (a client whose tokens the peer accepts and this gateway refuses, e.g. a
forwarded JWT) spends its own share and, with others, the peer's, but locks out no other client of the peer before
the peer's total is spent, and never a client of another peer or a direct client sharing the peer's address.

In a cluster (and `serve --workers N`) the buckets are a shared budget (`budgets.SharedBudgets`, budget
`failures`): a guesser spreading over N gateways has the budget once, not N times; and each pair served for the first
time is told to the others (set `served`), so a neighbour served by one gateway is served by all.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ...errors import RateLimited
from .clients import FailedCredentialsConfig, RateLimiter
from .federation import Asserted
from .peers import address_key

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


def neighbourhood(address: str) -> str:
    """Where a served client is remembered from: its address's bucket (`peers.address_key`, without `ip:`), so a
    client served from one address of a /64 (a host's temporary IPv6 addresses change daily, RFC 8981) is known from
    every address of it, as the budget it shares is; an IPv4 address is itself (no work on the request path)."""
    return address if ":" not in address else address_key(address)[3:]


def origin_key(via: Asserted) -> str:
    """The bucket of a trusted peer's client: its principal here, `CLIENT via PEER` (no address has a space)."""
    return f"{via.client} via {via.peer}"


def peer_key(via: Asserted) -> str:
    """The bucket of everything a trusted peer's clients fail together: `peer:PEER` (one address's budget)."""
    return f"peer:{via.peer}"


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
        self.origin_share = config.origin_share
        self.buckets = RateLimiter(config.per_s, config.burst, capacity=config.max_addresses)
        self.max_remembered = config.max_remembered
        self._remembered: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._warned: OrderedDict[str, float] = OrderedDict()
        self.count = count or (lambda result: None)
        self._fresh: list[tuple[str, str]] | None = None  # a cluster's: pairs to tell the other gateways
        self._arm: Callable[[], None] | None = None

    def over(self, address: str, now: float, via: Asserted | None = None) -> float | None:
        """The seconds until `address` (or, `via` a trusted peer, that peer's client) may fail a check again; None while
        it may (its budget is not spent)."""
        buckets = self.buckets
        if not buckets.has_any():
            return None
        if via is None:
            return buckets.due(address_key(address), now)
        mine, theirs = buckets.due(origin_key(via), now), buckets.due(peer_key(via), now)
        return theirs if mine is None else mine if theirs is None else max(mine, theirs)

    def locked(self, address: str, wait: float, field: str, via: Asserted | None = None) -> CredentialsLocked:
        """The refusal of a credential from `address` (or `via` a trusted peer), over its budget for `wait` more
        seconds (right or wrong). Through a peer it names neither the peer nor its client."""
        self.count("refused")
        if via is None:
            return CredentialsLocked(
                f"too many failed credentials from {address} (auth.failed_credentials: {self.burst} at once, "
                f"{self.per_s:g} a second): only clients served from this address recently are served for "
                f"{wait:.1f} s; retry then", retry_after=round(wait, 3), field=field)
        return CredentialsLocked(
            f"too many failed credentials from this client through its gateway (auth.failed_credentials: "
            f"{self.origin_burst:g} at once a client, {self.burst} for all of its gateway's clients, {self.per_s:g} a "
            f"second): only clients served through that gateway recently are served for {wait:.1f} s; retry then",
            retry_after=round(wait, 3), field=field)

    @property
    def origin_burst(self) -> float:
        """The failures one client of a trusted peer may make at once (`origin_share` of the peer's `burst`)."""
        return max(1.0, self.burst * self.origin_share)

    def failed(self, address: str, now: float, via: Asserted | None = None) -> None:
        """A credential presented from `address` (`via` a trusted peer: for that peer's client) did not verify: one
        of its failures taken (through a peer: of the client's share and of the peer's total)."""
        self.count("failed")
        if via is None:
            key = address_key(address)
            self.buckets.take(key, now)
        else:
            key = origin_key(via)
            self.buckets.take(key, now, rate=self.per_s * self.origin_share, burst=self.origin_burst)
            self.buckets.take(peer_key(via), now)
        if self.over(address, now, via) is not None:
            warned = self._warned.get(key)
            if warned is None or now - warned >= WARN_EVERY_S:
                self._warned[key] = now
                self._warned.move_to_end(key)
                while len(self._warned) > 1024:
                    self._warned.popitem(last=False)
                log.warning("%s is over its budget of failed credentials (auth.failed_credentials: %g at once, %g a "
                            "second%s): only clients served from it recently are served", key,
                            self.burst if via is None else self.origin_burst, self.per_s if via is None else
                            self.per_s * self.origin_share, "" if via is None else f"; its gateway {self.burst} in all")

    def known(self, address: str, client: str, via: Asserted | None = None) -> bool:
        """`client` verified from `address` (from its /64, an IPv6 one; `via` a trusted peer: for that peer's client)
        recently."""
        return (neighbourhood(address) if via is None else origin_key(via), client) in self._remembered

    def verified(self, address: str, client: str, via: Asserted | None = None) -> None:
        """`client` verified from `address` (or `via` a trusted peer): remembered (the least recently verified pair
        forgotten past the cap)."""
        remembered = self._remembered
        pair = (neighbourhood(address) if via is None else origin_key(via), client)
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
