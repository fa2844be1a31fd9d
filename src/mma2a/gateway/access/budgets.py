"""Per-client budgets held across a cluster's gateways (and the workers of `serve --workers N`): what each gateway
used of every client's budgets, told to the others, and what the others told it.

A client's entitlements — its request rate (`rate_limit`, `auth.clients[].rate`), its ratings
(`limits.feedback_per_s`), its response streams open at once (`limits.max_response_streams_per_client`, and the
fan-outs it left running), its tasks followed for push (`push.max_follows_per_client`) — hold for the client across
every gateway it reaches, not once per gateway. A shared counter per request (a NATS KV write, a lock on a shared
file) would put a round trip or a system call on every request; instead each gateway keeps its own counts, as a lone
gateway does, and tells the others what changed every `report_s` (or at once when a client has taken a quarter of
a burst, or a count changed): for a rate budget the tokens each client took since (a peer charges them to its own
bucket of that client), for a count budget what each client holds now (a peer adds it to its own count). So a
gateway admits against the budget minus what the others used, and the steady rate of a client flooding every
gateway is its budget; before a report arrives each other gateway may admit what its own bucket holds (the
tolerance, docs/security.md).

Pure bookkeeping, no I/O: `mma2a.cluster.budgets` sends `report()` and feeds `heard()`. Without a cluster nothing is
shared (`ClusterHooks.share_budgets` says no): the buckets count nothing for others, the counts read no one else's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

RATE_BUDGETS = ("requests", "ratings", "failures")
"""Token buckets: the tokens each client took since the last report are told (`failures`: an address's failed
credential checks, `auth.failed_credentials`, keyed `ip:ADDRESS`)."""
COUNT_BUDGETS = ("streams", "detached", "follows")
"""Counts held at once: what each client holds now is told."""
KNOWN_SETS = ("served",)
"""Facts learned once and remembered (`served`: the (address, client) pairs served, which an address over its budget of
failed credentials still serves, `failures.CredentialFailures`): each new one is told once."""

Wake = Callable[[], None]


def _never() -> None:
    return None


class ClientCounts:
    """How many of something each client holds on this gateway (streams open, tasks followed), and how many the
    cluster's other gateways said it holds there (`elsewhere`): a client's limit is on the sum."""

    __slots__ = ("_by", "_wake", "elsewhere")

    def __init__(self) -> None:
        self._by: dict[str, int] = {}
        self.elsewhere: Mapping[str, int] = {}  # a cluster's: `SharedBudgets` keeps it (empty on a lone gateway)
        self._wake: Wake | None = None

    def here(self, key: str) -> int:
        return self._by.get(key, 0)

    def there(self, key: str) -> int:
        """What the other gateways said `key` holds (0 on a lone gateway)."""
        return self.elsewhere.get(key, 0) if self.elsewhere else 0

    def claim(self, key: str, limit: int) -> tuple[int, int] | None:
        """One more for `key`, unless what it holds here and elsewhere together is `limit` already: None when taken,
        else (held here, held elsewhere)."""
        by = self._by
        mine = by.get(key, 0)
        there = self.elsewhere.get(key, 0) if self.elsewhere else 0
        if mine + there >= limit:
            return mine, there
        by[key] = mine + 1
        if self._wake is not None:
            self._wake()
        return None

    def add(self, key: str) -> None:
        self._by[key] = self._by.get(key, 0) + 1
        if self._wake is not None:
            self._wake()

    def remove(self, key: str) -> None:
        left = self._by.pop(key, 0) - 1
        if left > 0:
            self._by[key] = left
        if self._wake is not None:
            self._wake()

    def holds(self) -> dict[str, int]:
        """What each client holds here now (a copy, for a report)."""
        return dict(self._by)

    def any(self) -> bool:
        """Some client holds one here."""
        return bool(self._by)

    def share(self, elsewhere: Mapping[str, int], wake: Wake) -> None:
        """Count what the other gateways hold (`elsewhere`, kept up to date by the caller) and call `wake` on every
        change here, so they hear of it."""
        self.elsewhere = elsewhere
        self._wake = wake


class Buckets(Protocol):
    """A rate budget's token buckets (`clients.RateLimiter`), as the cluster shares them."""

    def share(self, wake: Wake, arm: Wake | None = None) -> None:
        """Start counting the tokens taken per key for `unreported`; `wake` when a key took a quarter of a burst, `arm`
        at the first take since the last report."""

    def pending(self) -> bool:
        """Tokens were taken since the last `unreported`."""

    def unreported(self) -> dict[str, tuple[int, float, float]]:
        """Per key, the tokens taken since the last call, and its bucket's rate and burst."""

    def charge(self, key: str, tokens: float, now: float, rate: float | None = None, burst: float | None = None) -> None:
        """Tokens another gateway let `key` take (whose bucket there has this rate and burst): out of its bucket here."""


class Known(Protocol):
    """A remembered set whose new entries the cluster's gateways tell each other (`failures.CredentialFailures`)."""

    def share(self, arm: Wake) -> None:
        """Start keeping the new entries for `unreported`; `arm` at the first since the last report."""

    def pending(self) -> bool:
        """Entries were added since the last `unreported`."""

    def unreported(self) -> list[list[str]]:
        """The entries added since the last call."""

    def learn(self, entries: list[Any]) -> None:
        """Entries another gateway added: remembered here too (never told on)."""


class SharedBudgets:
    """This gateway's use of the clients' budgets as the others are told it, and theirs as this one hears it.

    Each report is `{"t": {budget: {client: [tokens taken, rate, burst]}}, "h": {budget: {client: held}},
    "k": {set: [entry, ...]}}` (a peer that never saw the client makes its bucket with that rate and burst; `k`: the
    entries of remembered sets new since the last report); a peer's holds are
    forgotten `expire_s` after its last report (a gateway that died holds nothing), so a gateway with holds
    reports at least every `keep_s`."""

    def __init__(self, *, keep_s: float = 1.0, expire_s: float = 10.0,
                 on_heard: Callable[[str, float], None] | None = None,
                 on_elsewhere: Callable[[str, int], None] | None = None) -> None:
        """`on_heard(budget, units)`: each report's use, as heard; `on_elsewhere(budget, held)`: what every client
        holds on the other gateways together, when it changes (both for metrics)."""
        self.keep_s, self.expire_s = keep_s, expire_s
        self.on_heard = on_heard or (lambda budget, units: None)
        self.on_elsewhere = on_elsewhere or (lambda budget, held: None)
        self._rates: dict[str, Buckets] = {}
        self._counts: dict[str, ClientCounts] = {}
        self._known: dict[str, Known] = {}
        self.elsewhere: dict[str, dict[str, int]] = {b: {} for b in COUNT_BUDGETS}  # budget -> client -> held elsewhere
        self._peers: dict[str, tuple[float, dict[str, dict[str, int]]]] = {}  # peer -> (heard at, budget -> holds)
        self._told: dict[str, dict[str, int]] = {}  # the holds last reported
        self._told_at = 0.0
        self._report_soon: Wake = _never  # the exchange's (`wake_with`)
        self._report_due: Wake = _never

    def wake_with(self, report_soon: Wake, report_due: Wake = _never) -> None:
        """Call `report_soon` whenever a client's use should be told before the next regular report, and `report_due`
        when there is something to tell (or holds to forget) after a time with nothing (`idle`)."""
        self._report_soon = report_soon
        self._report_due = report_due

    def _wake(self) -> None:
        self._report_soon()

    def _arm(self) -> None:
        self._report_due()

    def idle(self) -> bool:
        """Nothing to tell and nothing to forget: no token taken since the last report, no hold here (to keep alive)
        or told (to clear), none of another gateway's (to forget when it stops reporting)."""
        return (not any(b.pending() for b in self._rates.values())
                and not any(k.pending() for k in self._known.values())
                and not any(c.any() for c in self._counts.values())
                and not self._told
                and not any(any(h.values()) for _, h in self._peers.values()))

    def rate(self, budget: str, buckets: Buckets) -> None:
        """Share a rate budget (one of `RATE_BUDGETS`)."""
        self._rates[budget] = buckets
        buckets.share(self._wake, self._arm)

    def count(self, budget: str, counts: ClientCounts) -> None:
        """Share a count budget (one of `COUNT_BUDGETS`)."""
        self._counts[budget] = counts
        counts.share(self.elsewhere.setdefault(budget, {}), self._wake)

    def known(self, name: str, known: Known) -> None:
        """Share a remembered set (one of `KNOWN_SETS`)."""
        self._known[name] = known
        known.share(self._arm)

    # --- telling --------------------------------------------------------------------------------------

    def report(self, now: float) -> dict[str, Any] | None:
        """What to tell the others now (None: nothing new, and no holds to keep alive)."""
        taken = {budget: t for budget, b in self._rates.items() if (t := b.unreported())}
        learned = {name: k.unreported() for name, k in self._known.items() if k.pending()}
        held = {budget: c.holds() for budget, c in self._counts.items() if c.any()}  # a budget not named: none held
        changed = held != self._told
        if not taken and not learned and not changed and not (held and now - self._told_at >= self.keep_s):
            return None
        out: dict[str, Any] = {}
        if taken:
            out["t"] = taken
        if learned:
            out["k"] = learned
        if changed or held:
            out["h"] = held
            self._told, self._told_at = held, now
        return out or None

    # --- hearing --------------------------------------------------------------------------------------

    def heard(self, peer: str, report: Mapping[str, Any], now: float) -> None:
        """A report of another gateway: its takes charged to the buckets here, its holds counted."""
        for budget, taken in (report.get("t") or {}).items():
            buckets = self._rates.get(budget)
            if buckets is None or not isinstance(taken, dict):
                continue
            total = 0.0
            for key, use in taken.items():
                if not (isinstance(key, str) and isinstance(use, list) and len(use) == 3
                        and all(isinstance(x, (int, float)) and x > 0 for x in use)):
                    continue
                n, rate, burst = use
                buckets.charge(key, float(n), now, float(rate), float(burst))
                total += n
            self.on_heard(budget, total)
        for name, entries in (report.get("k") or {}).items():
            known = self._known.get(name)
            if known is not None and isinstance(entries, list):
                known.learn(entries)
                self.on_heard(name, float(len(entries)))
        held = report.get("h")
        if isinstance(held, dict):
            clean = {b: {k: int(n) for k, n in h.items() if isinstance(k, str) and isinstance(n, int) and n > 0}
                     for b, h in held.items() if b in self.elsewhere and isinstance(h, dict)}
            self._replace(peer, clean)
            self._peers[peer] = (now, clean)
            if any(clean.values()):
                self._arm()  # to forget them if that gateway stops reporting
            for budget, h in clean.items():
                self.on_heard(budget, float(sum(h.values())))
        elif peer in self._peers:
            self._peers[peer] = (now, self._peers[peer][1])

    def expire(self, now: float) -> None:
        """Forget the holds of gateways not heard for `expire_s` (stopped, or cut off)."""
        for peer, (at, _) in list(self._peers.items()):
            if now - at > self.expire_s:
                self._replace(peer, {})
                del self._peers[peer]

    def _replace(self, peer: str, holds: dict[str, dict[str, int]]) -> None:
        """`peer`'s holds are now `holds`: the sums over the others follow."""
        before = self._peers.get(peer, (0.0, {}))[1]
        for budget, sums in self.elsewhere.items():
            old, new = before.get(budget, {}), holds.get(budget, {})
            if not old and not new:
                continue
            for key in old.keys() | new.keys():
                n = sums.get(key, 0) + new.get(key, 0) - old.get(key, 0)
                if n > 0:
                    sums[key] = n
                else:
                    sums.pop(key, None)
            self.on_elsewhere(budget, sum(sums.values()))

    def held_elsewhere(self, budget: str) -> int:
        """What every client holds on the other gateways, together (metrics, tests)."""
        return sum(self.elsewhere.get(budget, {}).values())
