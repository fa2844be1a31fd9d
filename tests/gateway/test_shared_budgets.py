"""The bookkeeping of per-client budgets shared by a cluster's gateways (gateway/access/budgets.py), with the
reports passed by hand as the cluster passes them (JSON), on a clock the test sets: what a client gets across two
gateways, what the tolerance is, and that a lone gateway's limiter counts nothing for anyone."""

from __future__ import annotations

from typing import Any

import orjson

from mma2a.gateway.access.budgets import SharedBudgets
from mma2a.gateway.access.clients import RateLimiter, StreamSlots


def wire(report: dict[str, Any] | None) -> dict[str, Any]:
    assert report is not None
    return orjson.loads(orjson.dumps(report))  # type: ignore[no-any-return]


def pair(rate: float, burst: int) -> tuple[list[RateLimiter], list[SharedBudgets]]:
    limiters = [RateLimiter(rate, burst), RateLimiter(rate, burst)]
    ledgers = [SharedBudgets(), SharedBudgets()]
    for limiter, ledger in zip(limiters, ledgers, strict=True):
        ledger.rate("requests", limiter)
    return limiters, ledgers


def exchange(ledgers: list[SharedBudgets], now: float) -> None:
    reports = [ledger.report(now) for ledger in ledgers]
    for i, report in enumerate(reports):
        if report is not None:
            for j, other in enumerate(ledgers):
                if j != i:
                    other.heard(f"g{i}", wire(report), now)


def test_a_lone_gateways_limiter_counts_nothing_for_others() -> None:
    limiter = RateLimiter(1.0, 3)
    assert [limiter.take("mallory", 0.0) for _ in range(3)] == [None] * 3
    assert limiter.take("mallory", 0.0) == 1.0
    assert limiter.unreported() == {}


def test_what_one_gateway_let_a_client_take_is_out_of_its_bucket_on_the_other() -> None:
    (a, b), ledgers = pair(rate=0.001, burst=100)
    # mallory has her own rate and burst (auth.clients[].rate/burst): gateway b has never seen her
    assert [a.take("mallory", 0.0, rate=0.001, burst=8) for _ in range(8)] == [None] * 8
    assert a.take("mallory", 0.0, rate=0.001, burst=8) is not None
    exchange(ledgers, 0.0)
    wait = b.take("mallory", 0.0, rate=0.001, burst=8)
    assert wait is not None and wait > 900  # her bucket there is empty too, made with her burst (not b's 100)
    assert b.take("alice", 0.0) is None  # another client's bucket is its own
    assert b.unreported() == {"alice": (1, 0.001, 100)}


def test_flooding_both_gateways_gets_a_client_its_rate_plus_a_bounded_tolerance() -> None:
    """Both gateways flooded (a request every ms on each) for 20 s, reports every 0.1 s: the client gets its rate,
    plus at most one more burst (the other gateway's, before it heard) and one report interval of the rate; each
    gateway on its own would have let it take twice that."""
    rate, burst, every, seconds = 10.0, 20, 0.1, 20.0
    (a, b), ledgers = pair(rate, burst)
    lone = [RateLimiter(rate, burst), RateLimiter(rate, burst)]
    admitted = unshared = 0
    for ms in range(int(seconds * 1000)):
        now = ms / 1000
        admitted += sum(limiter.take("mallory", now) is None for limiter in (a, b))
        unshared += sum(limiter.take("mallory", now) is None for limiter in lone)
        if ms % int(every * 1000) == 0:
            exchange(ledgers, now)
    budget = rate * seconds + burst
    assert budget <= admitted <= budget + burst + rate * every + 1, (admitted, budget)
    assert unshared >= 2 * budget - 2


def test_holds_elsewhere_count_until_their_gateway_stops_reporting() -> None:
    here, there = StreamSlots(2, 100), StreamSlots(2, 100)
    ledgers = [SharedBudgets(keep_s=1.0, expire_s=3.0), SharedBudgets(keep_s=1.0, expire_s=3.0)]
    ledgers[0].count("streams", here)
    ledgers[1].count("streams", there)
    assert here.take("mallory") is None and here.take("mallory") is None
    exchange(ledgers, 0.0)
    assert there.take("mallory") == ("mallory has 2 streams open already (2 of them on other gateways of the cluster) "
                                     "(limits.max_response_streams_per_client: 2); close one first")
    assert there.take("alice") is None
    assert ledgers[1].held_elsewhere("streams") == 2
    assert ledgers[0].report(0.5) is None  # nothing changed, and the last report is recent
    exchange(ledgers, 1.0)  # kept alive while held
    ledgers[1].expire(3.5)
    assert ledgers[1].held_elsewhere("streams") == 2
    ledgers[1].expire(4.5)  # not heard for 3.5 s: that gateway is gone, and its holds with it
    assert ledgers[1].held_elsewhere("streams") == 0 and there.take("mallory") is None
    here.give("mallory")
    here.give("mallory")
    exchange(ledgers, 5.0)  # an empty snapshot is told once
    assert ledgers[1].held_elsewhere("streams") == 0 and ledgers[0].report(5.1) is None


def test_a_report_it_cannot_read_changes_nothing() -> None:
    (_, b), (_, ledger) = pair(rate=1.0, burst=4)
    ledger.heard("g0", {"t": {"requests": {"mallory": [-5, 1, 4], "bob": "x", "eve": [1e9, 0, 4]},
                              "nope": {"mallory": [1, 1, 4]}}, "h": {"streams": {"mallory": -3}, "x": []}}, 0.0)
    assert b.take("mallory", 0.0) is None and b.take("eve", 0.0) is None and ledger.held_elsewhere("streams") == 0


def test_a_flood_starting_on_both_gateways_at_once_gets_about_one_burst_when_reports_are_prompt() -> None:
    """A client idle until now floods both gateways (a request every ms on each). A gateway reports as soon as the
    client took a quarter of its burst there (the exchange sends 5 ms after the wake, delivered 5 ms later): in the
    first 200 ms it gets one burst, the rate, and at most a quarter burst more — not a burst per gateway."""
    rate, burst = 100.0, 100
    (a, b), ledgers = pair(rate, burst)
    woke: list[int | None] = [None, None]
    for i, ledger in enumerate(ledgers):
        ledger.wake_with(lambda i=i: woke.__setitem__(i, woke[i] if woke[i] is not None else -1))
    in_flight: list[tuple[int, int, dict[str, Any]]] = []
    admitted = 0
    for ms in range(200):
        now = ms / 1000
        for due, sender, report in [m for m in in_flight if m[0] <= ms]:
            ledgers[1 - sender].heard(f"g{sender}", report, now)
        in_flight = [m for m in in_flight if m[0] > ms]
        admitted += sum(limiter.take("mallory", now) is None for limiter in (a, b))
        for i, ledger in enumerate(ledgers):
            if woke[i] == -1:
                woke[i] = ms
            if ms % 100 == 0 or (woke[i] is not None and ms - woke[i] >= 5):
                woke[i] = None
                if (report := ledger.report(now)) is not None:
                    in_flight.append((ms + 5, i, wire(report)))
    assert burst + rate * 0.2 <= admitted <= burst + rate * 0.2 + burst / 4, admitted


def test_a_ledger_with_nothing_to_tell_is_idle_and_the_first_use_arms_a_report() -> None:
    """With nothing to tell and nothing to forget the exchange sets no timer (an idle gateway is not woken ten times a
    second); the first take after a report, a hold here, or another gateway's holds end that."""
    (a, _), (ledger, other) = pair(rate=100.0, burst=100)
    armed: list[str] = []
    ledger.wake_with(lambda: armed.append("soon"), lambda: armed.append("due"))
    slots = StreamSlots(4, 100)
    ledger.count("streams", slots)
    assert ledger.idle() and ledger.report(0.0) is None
    assert a.take("alice", 0.0) is None and a.take("alice", 0.0) is None
    assert armed == ["due"] and not ledger.idle()  # once, at the first take
    other.heard("g0", wire(ledger.report(0.1)), 0.1)
    assert ledger.idle()
    assert slots.take("alice") is None and armed == ["due", "soon"] and not ledger.idle()
    other.heard("g0", wire(ledger.report(0.2)), 0.2)
    assert not other.idle() and other.held_elsewhere("streams") == 1  # to forget if g0 stops reporting
    slots.give("alice")
    other.heard("g0", wire(ledger.report(0.3)), 0.3)
    assert ledger.idle() and other.idle()
