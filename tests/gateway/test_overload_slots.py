"""An agent's slots and priority queue (gateway/downstream/overload.py) and its adaptive limit (gateway/downstream/agent_limit.py), driven
step by step: a clock the test moves, legs granted and shed in the order the rules say, no timing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mma2a import client_link
from mma2a.client_link import CallLink, ClientLink
from mma2a.errors import Overloaded
from mma2a.gateway.downstream.agent_limit import ALPHA, BETA, EPOCH, AdaptiveLimit, ConcurrencyLimit
from mma2a.gateway.downstream.overload import ESTIMATE_AFTER, QUEUE_RTTS, AgentSlots, AgentSlotTable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def slots(limit: int = 1, *, max_queue: int = 8, timeout: float = 1000.0, routine: float | None = None,
          clock: Clock | None = None, shed: list[tuple[int, str]] | None = None) -> AgentSlots:
    return AgentSlots("vision", ConcurrencyLimit(limit), max_queue=max_queue, queue_timeout_s=timeout,
                      routine_timeout_s=routine, clock=clock or Clock(),
                      on_shed=lambda a, p, why: shed.append((p, why)) if shed is not None else None)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_queued_legs_are_granted_by_priority_then_age() -> None:
    s = slots(1)
    assert s.acquire(1) is None  # the free slot at once
    order: list[str] = []

    async def leg(name: str, priority: int) -> None:
        waiting = s.acquire(priority)
        assert waiting is not None
        await waiting
        order.append(name)

    tasks = [asyncio.create_task(leg(n, p)) for n, p in (("low-a", 2), ("low-b", 2), ("mid", 5), ("urgent", 8))]
    await settle()
    assert s.queued == 4 and order == []
    with pytest.raises(Overloaded) as info:  # a privileged leg waits: a routine one is not queued behind it
        s.acquire(5)
    assert info.value.why == "outranked" and s.queued == 4
    nine = s.acquire(9)  # (a privileged one is, ahead of it)
    assert nine is not None
    tasks.append(asyncio.ensure_future(nine))
    for _ in range(5):
        s.release()  # the leg in the slot answers: the best waiter takes it
        await settle()
    await asyncio.gather(*tasks)
    assert order == ["urgent", "mid", "low-a", "low-b"]
    assert s.inflight == 1 and s.queued == 0


async def test_a_full_queue_sheds_the_lowest_priority_first() -> None:
    shed: list[tuple[int, str]] = []
    s = slots(1, max_queue=2, shed=shed)
    s.acquire(5)
    w_low = s.acquire(1)
    w_mid = s.acquire(4)
    assert w_low is not None and w_mid is not None
    t_low, t_mid = asyncio.ensure_future(w_low), asyncio.ensure_future(w_mid)
    await settle()
    w_urgent = s.acquire(9)  # full: the youngest of the lowest priority leaves, answered at once
    assert w_urgent is not None
    await settle()
    assert t_low.done()
    with pytest.raises(Overloaded) as info:
        t_low.result()
    assert info.value.why == "displaced" and info.value.agent == "vision" and info.value.priority == 1
    with pytest.raises(Overloaded) as info:  # a privileged leg waits: a routine one is not queued behind it
        s.acquire(4)
    assert info.value.why == "outranked"
    assert shed == [(1, "displaced"), (4, "outranked")]
    assert s.shed[1] == 1 and s.shed[4] == 1
    t_urgent = asyncio.ensure_future(w_urgent)
    s.release()
    await settle()
    assert t_urgent.done() and not t_mid.done()  # priority 9 before the older priority 4
    s.release()
    await settle()
    assert t_mid.done()


async def test_a_full_queue_of_legs_as_urgent_sheds_the_newcomer() -> None:
    shed: list[tuple[int, str]] = []
    s = slots(1, max_queue=2, shed=shed)
    s.acquire(7)
    waiting = [s.acquire(8), s.acquire(7)]
    tasks = [asyncio.ensure_future(w) for w in waiting if w is not None]
    with pytest.raises(Overloaded) as info:  # full, and nobody less urgent than this one: it is the one shed
        s.acquire(7)
    assert info.value.why == "queue_full" and shed == [(7, "queue_full")] and s.queued == 2
    s.release()
    s.release()
    await settle()
    assert all(t.done() and t.exception() is None for t in tasks)


async def test_a_leg_whose_deadline_passed_is_shed_at_once() -> None:
    clock = Clock()
    s = slots(1, clock=clock)
    s.acquire(5)
    with pytest.raises(Overloaded) as info:
        s.acquire(5, deadline=clock.now - 0.1)  # the client's deadline is already gone
    assert info.value.why == "deadline"
    assert s.queued == 0


async def test_a_waiter_past_its_deadline_is_shed_when_the_queue_moves() -> None:
    clock = Clock()
    s = slots(1, clock=clock, timeout=10.0)
    s.acquire(5)
    waiting = s.acquire(3)
    assert waiting is not None
    task = asyncio.ensure_future(waiting)
    await settle()
    clock.now += 11.0  # past its 10 s: the next move of the queue sheds it
    other = s.acquire(9)  # (queued behind the slot: the queue moves)
    assert other is not None
    queued = asyncio.ensure_future(other)
    await settle()
    assert task.done()
    with pytest.raises(Overloaded) as info:
        task.result()
    assert info.value.why == "deadline"
    assert info.value.retry_after >= 1.0
    queued.cancel()
    await settle()


async def test_a_routine_leg_waits_at_most_its_own_timeout_a_privileged_one_its_deadline() -> None:
    clock = Clock()
    shed: list[tuple[int, str]] = []
    s = slots(1, clock=clock, timeout=10.0, routine=0.05, shed=shed)
    assert s.acquire(5) is None
    routine, privileged = s.acquire(3), s.acquire(7)  # (too few answers to estimate a wait: both queue)
    assert routine is not None and privileged is not None
    t_routine, t_privileged = asyncio.ensure_future(routine), asyncio.ensure_future(privileged)
    await settle()
    assert s.queued == 2 and not t_routine.done()  # (its timer, if it fires, finds the clock short of the deadline)
    clock.now += 0.06  # past the routine leg's 50 ms: the next move of the queue sheds it, not the privileged one
    later = s.acquire(8)
    assert later is not None and shed == [(3, "deadline")] and s.queued == 2
    await settle()
    with pytest.raises(Overloaded) as info:
        t_routine.result()
    assert info.value.why == "deadline" and info.value.priority == 3
    s.release()  # the slot frees: the privileged legs go, most urgent first
    await settle()
    t_later = asyncio.ensure_future(later)
    await settle()
    assert t_later.done() and not t_privileged.done()
    s.release()
    await settle()
    assert t_privileged.done() and t_privileged.exception() is None and shed == [(3, "deadline")]


async def test_a_routine_leg_that_would_wait_past_its_timeout_is_shed_on_arrival() -> None:
    clock = Clock()
    s = slots(1, clock=clock, routine=0.05)
    assert s.acquire(5) is None
    for _ in range(2 * ESTIMATE_AFTER):  # an answer every 0.1 s, the slot at once taken again: 10 legs a second
        clock.now += 0.1
        s.release(0.1)
        assert s.acquire(5) is None
    assert s.rate() == pytest.approx(10.0)
    with pytest.raises(Overloaded) as info:  # the next slot comes in about 0.1 s: past 50 ms, so shed now
        s.acquire(5)
    assert info.value.why == "deadline" and s.queued == 0
    assert "it would wait about 0.10 s for agent vision, past its deadline of 0.05 s" in str(info.value)
    privileged = s.acquire(6)  # a privileged leg waits up to queue_timeout_s
    assert privileged is not None and s.queued == 1
    task = asyncio.ensure_future(privileged)
    s.release(0.1)
    await settle()
    assert task.done() and task.exception() is None


async def test_a_routine_leg_past_its_timeout_is_answered_by_its_timer() -> None:
    s = AgentSlots("vision", ConcurrencyLimit(1), max_queue=8, queue_timeout_s=600.0, routine_timeout_s=0.02)
    assert s.acquire(5) is None
    routine, privileged = s.acquire(2), s.acquire(9)
    assert routine is not None and privileged is not None
    t_privileged = asyncio.ensure_future(privileged)
    with pytest.raises(Overloaded) as info:  # nothing moves the queue: the timer sheds it (awaited, not slept on)
        await routine
    assert info.value.why == "expired" and "(limits.routine_queue_timeout_s, or the client's deadline)" in str(info.value)
    assert s.queued == 1 and not t_privileged.done()
    s.release()
    await t_privileged


async def test_a_caller_that_leaves_gives_its_place_and_its_slot_back() -> None:
    s = slots(1)
    s.acquire(5)
    waiting = s.acquire(5)
    assert waiting is not None
    task = asyncio.ensure_future(waiting)
    await settle()
    task.cancel()
    await settle()
    assert s.queued == 0
    s.release()
    assert s.inflight == 0
    assert s.acquire(5) is None


async def test_a_priority_whose_betters_take_the_whole_rate_is_shed_on_arrival() -> None:
    clock = Clock()
    s = slots(2, clock=clock, max_queue=64)
    s.acquire(9)
    s.acquire(3)
    for i in range(3 * ESTIMATE_AFTER):  # an answer every 0.05 s, each slot at once taken again: 20 legs a second,
        clock.now += 0.05                # half of them priority 9
        s.release(0.1)
        assert s.acquire(9 if i % 2 else 3) is None
    assert s.rate() == pytest.approx(20.0)
    urgent, why = [], []
    for _ in range(24):  # 24 legs of priority 5 at once: the agent has 20 - 10 a second left for them
        try:
            waiting = s.acquire(5)
        except Overloaded as exc:  # past QUEUE_RTTS answer times of waiting: shed at once, not after a wait
            why.append(exc.why)
        else:
            assert waiting is not None
            urgent.append(asyncio.ensure_future(waiting))
    # priority 9 arrives at 10 a second (the last quarter second's bucket may hold one more than its share)
    assert 10.0 <= s.rate_above(5) <= 12.5
    left = s.rate() - s.rate_above(5)  # legs a second the agent has for priority 5
    assert len(urgent) == int(QUEUE_RTTS * 0.1 * left) >= 3 and set(why) == {"deadline"}  # those within 4 answer times
    with pytest.raises(Overloaded) as info:
        s.acquire(2)
    assert info.value.why == "outranked" and s.floor == 5
    privileged = s.acquire(7)  # above the routine priorities: it waits for its deadline whatever the queue
    assert privileged is not None
    urgent.insert(0, asyncio.ensure_future(privileged))
    s.release(0.1)
    await settle()
    assert urgent[0].done() and urgent[0].exception() is None
    s.release(0.1)
    s.release(0.1)  # the slots free while urgent legs still arrive: a routine leg is still outranked
    await settle()
    with pytest.raises(Overloaded):
        s.acquire(2)
    assert urgent[1].done() and urgent[1].exception() is None
    clock.now += 3.0  # the urgent ones stop coming: the next routine leg has a slot (the floor follows the rates)
    for task in urgent[3:]:
        task.cancel()
    await settle()
    for _ in range(s.inflight):
        s.release(0.1)
    waiting = s.acquire(2)  # (the floor is stale until this slow-path arrival moves the window: then granted)
    if waiting is not None:
        await waiting
    assert s.floor == 0 and s.inflight == 1
    assert s.acquire(2) is None  # and the next takes the fast path


async def test_a_first_burst_waits_while_the_adaptive_limit_finds_the_agents_measure() -> None:
    clock = Clock()
    s = AgentSlots("vision", AdaptiveLimit(initial=1), max_queue=64, queue_timeout_s=1000.0, clock=clock)
    for _ in range(ESTIMATE_AFTER):  # answers with nothing waiting: still in slow start
        assert s.acquire(5) is None
        s.release(0.1)
    assert not s.limit.settled
    while s.inflight < s.limit.value:  # every slot taken
        assert s.acquire(5) is None
    burst = []
    for _ in range(20):  # 20 routine legs would wait 2 s, more than 4 answer times: they wait all the same
        waiting = s.acquire(5)
        assert waiting is not None
        burst.append(asyncio.ensure_future(waiting))
    await settle()
    assert s.queued == 20 and not any(t.done() for t in burst)
    for t in burst:
        t.cancel()
    await settle()


def test_the_table_makes_fixed_and_adaptive_slots_and_none_when_off() -> None:
    table = AgentSlotTable(adaptive=True, initial=3)
    adaptive = table.of("a", None)
    assert adaptive is not None and isinstance(adaptive.limit, AdaptiveLimit) and adaptive.limit.value == 3
    fixed = table.of("b", 2)
    assert fixed is not None and not fixed.limit.adaptive and fixed.limit.value == 2
    again = table.of("a", 7)  # the agent's config changed: the new limit, the same queue
    assert again is adaptive and again.limit.value == 7
    off = AgentSlotTable(adaptive=False)
    assert off.of("a", None) is None
    assert off.of("b", 4) is not None


def _simulate(limit: AdaptiveLimit, capacity: int, service: float, answers: int) -> list[int]:
    """An agent serving `capacity` at a time for `service` s each, always offered more than the limit: each answer
    takes service x max(1, in_flight / capacity) (what waits inside the agent)."""
    seen = []
    for _ in range(answers):
        in_flight = limit.value
        limit.sample(service * max(1.0, in_flight / capacity), in_flight, saturated=True)
        seen.append(limit.value)
    return seen


def test_the_adaptive_limit_settles_near_the_agents_capacity() -> None:
    limit = AdaptiveLimit(initial=1)
    seen = _simulate(limit, capacity=4, service=0.2, answers=400)
    assert set(seen[-100:]) <= {4, 5}  # about one leg waits inside the agent: ALPHA..BETA
    assert ALPHA < BETA


def test_the_adaptive_limit_comes_down_from_too_many() -> None:
    limit = AdaptiveLimit(initial=40)
    _simulate(limit, capacity=4, service=0.2, answers=1)  # (min_rtt from a first answer with nothing queued)
    limit.min_rtt = 0.2
    seen = _simulate(limit, capacity=4, service=0.2, answers=200)
    assert seen[-1] in (4, 5)
    assert not limit.slow_start


def test_the_adaptive_limit_does_not_grow_when_it_is_not_reached() -> None:
    limit = AdaptiveLimit(initial=4)
    for _ in range(200):
        limit.sample(0.2, 1, saturated=False)
    assert limit.value == 4


def test_to_json_says_what_the_console_shows() -> None:
    s = slots(2)
    s.acquire(5)
    doc: dict[str, Any] = s.to_json()
    assert doc["inflight"] == 1 and doc["queued"] == 0 and doc["kind"] == "fixed" and doc["limit"] == 2


def test_the_adaptive_limit_is_not_cut_below_what_keeps_the_agent_busy() -> None:
    limit = AdaptiveLimit(initial=9)
    limit.sample(0.2, 1, saturated=False)  # min_rtt 0.2 s
    cuts = []
    for _ in range(400):  # answers far slower than min_rtt (a loaded machine), the agent measured at 5 legs + 1
        before = limit.value
        limit.sample(0.6, limit.value, saturated=True, floor=6)
        if limit.value < before:
            cuts.append(limit.value)
    assert cuts and min(cuts) == 6 and limit.value == 6


def test_the_window_after_a_cut_is_not_judged() -> None:
    limit = AdaptiveLimit(initial=20)
    limit.sample(0.2, 1, saturated=False)
    values = []
    for _ in range(200):
        limit.sample(0.6, 20, saturated=True)  # queued ~ 13: every judged window cuts
        values.append(limit.value)
    changes = [i for i in range(1, len(values)) if values[i] != values[i - 1]]
    gaps = [b - a for a, b in zip(changes, changes[1:])]
    assert changes and all(g >= 2 * 8 for g in gaps)  # a window (8 answers at least) passes unjudged between cuts


def test_slow_start_grows_by_one_once_the_agent_is_kept_busy() -> None:
    limit = AdaptiveLimit(initial=4)
    limit.sample(0.2, 1, saturated=False)
    for _ in range(8):  # no queueing, the limit reached, under the floor of 6: x1.5
        limit.sample(0.2, 4, saturated=True, floor=6)
    assert limit.value == 6 and limit.slow_start
    for _ in range(8):  # at the floor: one more, not x1.5
        limit.sample(0.2, 6, saturated=True, floor=6)
    assert limit.value == 7


def test_slow_start_stops_at_the_floor() -> None:
    limit = AdaptiveLimit(initial=4)
    limit.sample(0.2, 1, saturated=False)
    for _ in range(8):  # x1.5 would be 6: two legs waiting inside an agent that 5 keep busy
        limit.sample(0.2, 4, saturated=True, floor=5)
    assert limit.value == 5 and limit.slow_start


async def test_the_floor_counts_the_legs_the_agent_works_on_not_the_way_to_it() -> None:
    clock = Clock()
    s = AgentSlots("vision", AdaptiveLimit(initial=6, maximum=6), max_queue=64, queue_timeout_s=1000.0, clock=clock)
    for _ in range(6):
        assert s.acquire(5) is None
    for _ in range(3 * ESTIMATE_AFTER):  # 4 at once for 0.2 s each (20 a second), 3 ms more on the way there and back
        clock.now += 0.05
        s.release(0.203)
        assert s.acquire(5) is None
    assert s.rate() == pytest.approx(20.0) and s.limit.base_rtt == pytest.approx(0.203)
    assert s.busy_floor() == 4 + 1  # 20 x 0.203 = 4.06: 4 legs at work, and one waiting inside (not 5 + 1)
    for _ in range(5 * ESTIMATE_AFTER):  # a loaded machine: answers 0.1 s apart (10 a second), each taking 0.6 s
        clock.now += 0.1
        s.release(0.6)
        while s.inflight < s.limit.value:
            assert s.acquire(5) is None
    assert 10.0 < s.rate() < 11.0 and s.limit.value / s.rtt_mean < 11.0
    assert s.busy_floor() == 4 + 1  # the agent's width is remembered, as min_rtt is: not cut to 2 + 1
    assert s.rate_for(7) < 11.0  # (urgent legs are judged by what it serves now: a load that lasts slows the agent too)
    for _ in range(2 * EPOCH):  # two epochs of it: the agent did become narrower
        clock.now += 0.1
        s.release(0.203)
        while s.inflight < s.limit.value:
            assert s.acquire(5) is None
    assert s.busy_floor() == 2 + 1


async def test_the_agents_rate_is_measured_from_its_answers_while_kept_busy() -> None:
    clock = Clock()
    s = AgentSlots("vision", AdaptiveLimit(initial=4), max_queue=64, queue_timeout_s=1000.0, clock=clock)
    for _ in range(4):
        assert s.acquire(5) is None
    for _ in range(3 * ESTIMATE_AFTER):  # an answer every 0.04 s, every slot at once taken again: 25 legs a second
        clock.now += 0.04
        s.release(0.16)
        while s.inflight < s.limit.value:
            assert s.acquire(5) is None
    assert s.rate() == pytest.approx(25.0)
    assert s.busy_floor() == 4 + 1  # 25 a second x 0.16 s: 4 at once, and one more waiting inside the agent
    clock.now += 0.04
    s.release(0.16)  # (every slot was taken: a sample)
    for _ in range(s.inflight):  # answers with nothing waiting and slots free: not samples of the agent's rate
        clock.now += 1.0
        s.release(0.16)
    assert s.rate() == pytest.approx(25.0)


async def test_a_privileged_leg_is_judged_by_the_hopeful_rate_a_routine_one_by_the_measured() -> None:
    clock = Clock()
    s = slots(4, clock=clock)
    for _ in range(4):
        assert s.acquire(5) is None
    for _ in range(2 * ESTIMATE_AFTER):  # answers of 0.2 s, 4 at the agent (Little: 20 a second), but 0.1 s apart
        clock.now += 0.1
        s.release(0.2)
        assert s.acquire(5) is None
    assert s.rate() == pytest.approx(10.0)
    assert s.rate_for(5) == pytest.approx(10.0) and s.rate_for(7) == pytest.approx(20.0)


def _acquire_as(link: ClientLink | None, s: AgentSlots, priority: int) -> Any:
    """`s.acquire(priority)` for a request whose client is `link` (as the server sets it around the request)."""
    token = client_link.current.set(link)
    try:
        return s.acquire(priority)
    finally:
        client_link.current.reset(token)


async def test_a_leg_whose_client_leaves_while_it_waits_leaves_the_queue_unsent() -> None:
    shed: list[tuple[int, str]] = []
    s = slots(1, shed=shed)
    assert s.acquire(5) is None  # the slot taken
    a_link, b_link = ClientLink(), ClientLink()
    a = asyncio.ensure_future(_acquire_as(a_link, s, 5))
    b = asyncio.ensure_future(_acquire_as(b_link, s, 5))
    await settle()
    assert s.queued == 2
    a_link.leave()  # A's client went: its leg is shed at once, not when a slot frees
    assert s.queued == 1 and shed == [(5, "client_gone")]
    with pytest.raises(Overloaded) as info:
        await a
    assert info.value.why == "client_gone" and "its client went away while it waited for agent vision" in str(info.value)
    s.release()  # the slot goes to B
    await b
    assert (s.inflight, s.queued, s.shed[5]) == (1, 0, 1)
    a_link.leave()  # (once)
    assert shed == [(5, "client_gone")]
    # a leg whose client had gone before it would queue is shed as it arrives (a free slot on the fast path is not
    # looked at: its client is not asked)
    with pytest.raises(Overloaded) as info:
        _acquire_as(a_link, s, 5)
    assert info.value.why == "client_gone" and shed == [(5, "client_gone")] * 2 and s.queued == 0


async def test_a_cancelled_grpc_call_is_counted_once_its_gate_says_the_client_went() -> None:
    """grpc cancels the call's task before anything says why: the leg leaves the queue with the cancel, and counts
    as `client_gone` when the gate marks the call's link gone (not for a cancel of another cause)."""
    shed: list[tuple[int, str]] = []
    s = slots(1, shed=shed)
    assert s.acquire(5) is None
    gone_link, other_link = CallLink(), CallLink()
    gone, other = (asyncio.ensure_future(_acquire_as(link, s, 5)) for link in (gone_link, other_link))
    await settle()
    assert s.queued == 2
    for task in (gone, other):
        task.cancel()
    await settle()
    assert s.queued == 0 and shed == []
    gone_link.leave()
    assert shed == [(5, "client_gone")]
    s.release()
    assert s.inflight == 0  # nothing was granted to either
