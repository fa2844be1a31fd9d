"""The gateway's own loop lag (gateway/downstream/loop_lag.py) told apart from queueing at the agent by the adaptive
limit (gateway/downstream/agent_limit.py): the lag is injected (a fake loop, samples given to the limit), never
measured on the clock, so nothing here depends on how busy the machine is."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from mma2a.errors import Overloaded
from mma2a.gateway.downstream.agent_limit import LAG_BUSY_S, AdaptiveLimit, ConcurrencyLimit
from mma2a.gateway.downstream.loop_lag import IDLE_TICKS, LAG_WEIGHT, MIN_TICKS, PROBE_S, LoopLag
from mma2a.gateway.downstream.overload import UNJUDGED_QUEUE_FACTOR, AgentSlots, AgentSlotTable


class Timer:
    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """What the probe uses of a loop: its clock (moved by the test) and `call_at` (recorded, run by the test)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.timers: list[tuple[float, Any]] = []

    def time(self) -> float:
        return self.now

    def is_running(self) -> bool:
        return True  # the loop the probe runs on (the test drives it; `read` takes it without asking asyncio)

    def call_at(self, when: float, fn: Any, *args: Any) -> Timer:
        timer = Timer()
        self.timers.append((when, lambda: None if timer.cancelled else fn(*args)))
        return timer

    def run_next(self, late: float) -> None:
        """The next timer runs `late` seconds after it was due."""
        when, fn = self.timers.pop(0)
        self.now = when + late
        fn()


def test_the_lag_is_the_decayed_mean_of_the_probes_lateness_and_unknown_until_it_ticked() -> None:
    probe = LoopLag()
    assert probe.read() == math.inf  # outside a running loop: not started, nothing measured
    for _ in range(MIN_TICKS - 1):
        probe.note(0.010)
    assert probe.lag == math.inf  # too few ticks to tell
    probe.note(0.010)
    assert probe.lag == pytest.approx(0.010)
    probe.note(0.060)
    assert probe.lag == pytest.approx(0.010 + LAG_WEIGHT * 0.050)
    probe.note(-0.001)  # a timer run a hair early is not late
    assert probe.lag >= 0.0


def test_the_probe_ticks_while_read_and_stops_when_nobody_reads_it() -> None:
    loop = FakeLoop()
    probe = LoopLag()
    probe._loop = loop  # type: ignore[assignment]  # (as `read` does on a running loop)
    probe._schedule(loop, loop.now)  # type: ignore[arg-type]
    assert loop.timers and loop.timers[0][0] == pytest.approx(100.0 + PROBE_S)
    for _ in range(MIN_TICKS):
        loop.run_next(late=0.030)  # a loop 30 ms behind
    assert probe.read() == pytest.approx(0.030)  # (a read: the probe keeps running IDLE_TICKS more)
    for _ in range(IDLE_TICKS):
        loop.run_next(late=0.0)
    assert len(loop.timers) == 1  # still ticking: the last read was IDLE_TICKS ago
    loop.run_next(late=0.0)
    assert loop.timers == [] and probe._loop is None  # stopped: an idle gateway is not woken for it
    assert probe.ticks == 0 and probe.lag == math.inf  # (measured afresh when read again)


async def test_read_on_a_running_loop_starts_the_probe_once() -> None:
    probe = LoopLag()
    assert probe.read() == math.inf
    first = probe._handle
    assert first is not None and probe._loop is asyncio.get_running_loop()
    probe.read()
    assert probe._handle is first  # one probe, not one per read
    probe.stop()
    assert probe._handle is None


def _window(limit: AdaptiveLimit, rtt: float, in_flight: int, lag: float, *, windows: int = 1) -> None:
    for _ in range(windows * max(8, limit.value)):
        limit.sample(rtt, in_flight, saturated=True, lag=lag)


def _fast_agent(initial: int) -> AdaptiveLimit:
    limit = AdaptiveLimit(initial=initial)
    limit.sample(0.001, 1, saturated=False, lag=0.0)  # min_rtt 1 ms: an agent far faster than the gateway
    return limit


def test_a_gateway_slower_than_the_agent_never_cuts_its_limit() -> None:
    """The measurement that found it: a 0.02 ms backend behind a CPU-starved gateway at 128 connections answered in
    56-157 ms on average against a min_rtt of 1 ms, and the limit fell from 56 to 1-3 and shed most requests."""
    limit = _fast_agent(56)
    for rtt, lag in ((0.060, 0.005), (0.157, 0.012), (0.230, 0.030), (0.090, LAG_BUSY_S)):
        _window(limit, rtt, limit.value, lag=lag, windows=3)  # rises far past what the lag explains
        assert limit.value >= 56
    assert limit.slow_start and limit.value > 100  # never cut; grown x1.5 while reached (the gateway is the bottleneck)
    calm = _fast_agent(56)  # the same answers with the gateway's loop on time are queueing at the agent: cut
    _window(calm, 0.157, 56, lag=0.0)
    assert calm.value < 56 and not calm.slow_start


def test_a_slow_agent_that_queues_is_cut_whatever_the_gateways_lag() -> None:
    limit = AdaptiveLimit(initial=8)
    limit.sample(0.2, 1, saturated=False, lag=0.0)  # min_rtt 0.2 s (bench/overload.py's agent: 4 at a time)
    _window(limit, 0.4, 8, lag=0.013)  # 8 legs at an agent of 4: 4 wait inside it; the loop 13 ms late (the most
    # measured in bench/overload.py at load 17): an answer's share of it is far below the agent's min_rtt
    assert limit.value < 8 and not limit.slow_start
    stalled = AdaptiveLimit(initial=8)
    stalled.sample(0.2, 1, saturated=False, lag=0.0)
    _window(stalled, 0.4, 8, lag=0.060)  # a loop 60 ms late: 4 x 60 ms is longer than the agent's answer itself
    assert stalled.value > 8 and stalled.slow_start


def test_a_window_whose_loop_lag_is_not_measured_yet_is_not_judged() -> None:
    limit = _fast_agent(4)
    _window(limit, 0.2, 4, lag=math.inf)  # a first burst meets an idle gateway: its probe has not ticked
    assert limit.value == 4 and limit.slow_start
    _window(limit, 0.2, 4, lag=0.0, windows=2)  # measured: the same rise is queueing
    assert limit.value < 4 and not limit.slow_start


async def test_the_table_gives_every_adaptive_limit_the_one_probe_and_a_fast_agent_sheds_nothing() -> None:
    table = AgentSlotTable(adaptive=True, initial=4)
    s = table.of("fast", None)
    assert s is not None and s.lag is not None and table.of("other", None).lag == s.lag  # type: ignore[union-attr]
    table.loop_lag.stop()
    now = [1000.0]
    s = AgentSlots("fast", AdaptiveLimit(initial=4), max_queue=256, queue_timeout_s=5.0, clock=lambda: now[0],
                   lag=lambda: 0.020)  # a gateway 20 ms behind, as measured at 128 connections on a busy host
    s.limit.sample(0.001, 1, saturated=False)
    shed: list[str] = []
    waiting: list[asyncio.Future[None]] = []
    for i in range(4000):  # 128 clients sending back to back; each answer takes 100 ms, all of it the gateway's
        try:
            got = s.acquire(5)
        except Overloaded as exc:
            shed.append(exc.why)
            continue
        if got is not None:
            waiting.append(asyncio.ensure_future(got))
        if s.inflight + s.queued >= 128:
            now[0] += 0.100 / max(1, s.inflight)
            s.release(0.100)
            await asyncio.sleep(0)
    assert shed == [] and s.limit.slow_start  # never cut, nothing shed
    assert s.limit.value > 4  # it grew with the connections
    for f in waiting:
        f.cancel()
    await asyncio.sleep(0)



class Clients:
    """Closed-loop clients at `slots` (each sends its next leg when answered or shed), every answer taking `rtt` of
    the gateway's time; the legs that wait are held here, never awaited (the clock and the releases are the test's)."""

    def __init__(self, slots: AgentSlots, now: list[float]) -> None:
        self.s, self.now = slots, now
        self.waiting: list[Any] = []

    def run(self, clients: int, legs: int, rtt: float) -> list[str]:
        """`legs` legs from `clients` clients; the reasons of those shed."""
        shed: list[str] = []
        for _ in range(legs):
            was_shed = False
            try:
                got = self.s.acquire(5)
                if got is not None:
                    self.waiting.append(got)
            except Overloaded as exc:
                shed.append(exc.why)
                was_shed = True
            if was_shed or self.s.inflight + self.s.queued >= clients:
                self.now[0] += rtt / max(1, self.s.inflight)
                self.s.release(rtt)
        return shed

    def close(self) -> None:
        for got in self.waiting:
            got.close()

def _offer(slots: AgentSlots, legs: int) -> list[str]:
    """Offer `legs` legs of priority 5, each taking a slot or a place in the queue (the coroutine of a leg that waits
    is closed, not awaited: it stays queued); the reasons of those shed."""
    shed: list[str] = []
    for _ in range(legs):
        try:
            got = slots.acquire(5)
        except Overloaded as exc:
            shed.append(exc.why)
            continue
        if got is not None:
            got.close()  # type: ignore[attr-defined]
    return shed


async def test_a_first_burst_of_more_legs_than_the_queue_holds_waits_while_the_limit_grows() -> None:
    """1,024 connections at a fresh gateway: their legs arrive before any answer, at a limit of 4 and a queue of 256.
    The queue was cut at 256 and 764 legs were shed 503 by a gateway whose agent answers in 0.02 ms."""
    now = [1000.0]
    s = AgentSlots("fast", AdaptiveLimit(initial=4), max_queue=256, queue_timeout_s=5.0, clock=lambda: now[0],
                   lag=lambda: math.inf)  # a first burst: the loop's lag not measured yet
    shed = _offer(s, 1024)
    assert shed == [] and s.queued == 1020 and not s.limit.settled
    for _ in range(50):  # answers come, 100 ms late for the gateway: the rate through a limit still growing is
        now[0] += 0.100 / s.inflight  # no measure of the agent's, and ~1,000 legs ahead would "wait" past 5 s
        s.release(0.100)
    assert not s.limit.settled and s.rate() < 1024 / 5.0
    shed += _offer(s, 500)
    assert shed == [] and s.queued > 1024  # every leg waits, each at most its deadline (its timer: `expired`)
    fixed = AgentSlots("slow", ConcurrencyLimit(4), max_queue=256, queue_timeout_s=5.0, clock=lambda: now[0])
    # a fixed limit says what the agent takes: its queue is cut at max_queue as before
    assert _offer(fixed, 4 + 256) == []
    with pytest.raises(Overloaded) as refused:
        fixed.acquire(5)
    assert refused.value.why == "queue_full"


async def test_a_queue_not_yet_judged_is_still_bounded_in_legs() -> None:
    """While the limit is found (slow start: a slow agent answers rarely), the full-queue rule waits, but the queue
    still holds at most UNJUDGED_QUEUE_FACTOR x max_queue legs: one client cannot queue without end until the
    deadlines run out."""
    now = [1000.0]
    s = AgentSlots("slow", AdaptiveLimit(initial=4), max_queue=4, queue_timeout_s=5.0, clock=lambda: now[0],
                   lag=lambda: math.inf)
    assert _offer(s, 4 + 4 * UNJUDGED_QUEUE_FACTOR) == []
    assert s.queued == 4 * UNJUDGED_QUEUE_FACTOR and not s.limit.settled
    with pytest.raises(Overloaded) as refused:
        s.acquire(5)
    assert refused.value.why == "queue_full" and f"({4 * UNJUDGED_QUEUE_FACTOR} legs" in str(refused.value)


async def test_a_settled_limit_sheds_nothing_while_the_gateway_is_slower_than_its_agent() -> None:
    """Once cut (out of slow start), a limit at a fast agent still sheds nothing when the gateway itself is the
    bottleneck: neither the routine leg's standing-queue rule nor the full queue (1,024 closed-loop clients, a queue
    of 256, the limit at its maximum of 256, every answer 100 ms late for the gateway's loop)."""
    now = [1000.0]
    lag = [0.0]
    s = AgentSlots("fast", AdaptiveLimit(initial=64, maximum=256), max_queue=256, queue_timeout_s=5.0,
                   clock=lambda: now[0], lag=lambda: lag[0])
    s.limit.sample(0.001, 1, saturated=False)  # min_rtt 1 ms
    for _ in range(64):  # a calm moment: answers 30 ms late with the loop not lagging read as queueing: cut
        s.limit.sample(0.030, 64, saturated=True, lag=0.0)
    assert s.limit.settled and not s.limit.gateway_bound
    lag[0] = 0.030  # then the gateway falls behind: its loop 30 ms late, first with 128 clients, then 1,024
    clients = Clients(s, now)
    shed = clients.run(128, 2_000, rtt=0.100)
    assert shed == [] and s.limit.gateway_bound
    shed = clients.run(1024, 20_000, rtt=0.100)
    assert shed == []
    assert s.limit.gateway_bound and s.limit.value == 256  # grew to its maximum; the rest waited in the queue
    assert s.queued > 256  # more than max_queue_per_agent, bounded by the clients (and each leg's deadline)
    lag[0] = 0.0  # the gateway keeps up again: the same answers now say the agent queues, and the rules apply
    shed = clients.run(1024, 4_000, rtt=0.100)
    assert not s.limit.gateway_bound and shed and set(shed) <= {"deadline", "queue_full"}
    clients.close()
