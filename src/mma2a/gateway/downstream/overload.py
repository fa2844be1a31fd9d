"""Under overload, urgent legs first: each agent's concurrency slots and the bounded priority queue in front of them.

Every leg sent to an agent (a message's dispatch, each step of a transform chain, a stream, each leg of a fan-out)
takes one of the agent's slots for as long as the agent works on it; the agent's limit is fixed or adaptive
(`agent_limit`). Past the limit a leg waits in the agent's queue, ordered by priority (the message's, capped per
client), then by age, each with a deadline: `limits.queue_timeout_s`, or for a routine leg (priority up to
`ROUTINE_MAX`) `limits.routine_queue_timeout_s` when the operator sets it (off by default; 50 ms in
bench/overload.py), or the client's own when sooner (with it, a routine leg is answered within that: it reaches the
agent, or it is shed; a shed answer that comes after a longer wait is of little use to its client, which could have
retried, and a routine backlog only adds latency). A leg is
shed — answered at once with `Overloaded` (HTTP 503 + `Retry-After`, gRPC UNAVAILABLE + RetryInfo), never left
to hang — when:

- `outranked`: legs of higher priority arrive at 90% or more of the agent's rate (the rate it delivers while kept
  busy, measured from the gaps between its answers): this one could only be served by taking their slots, so it is
  shed on arrival, even when a slot is free for a moment (else routine legs taking free slots would leave urgent ones
  a standing backlog); or — a routine leg — privileged legs are waiting for a slot now (queued behind them it could
  only be served by capacity they need, or be shed later, after a wait). For a routine priority the arrivals above it
  are read over the last quarter second as well as the last second (`ArrivalRates`: an overload that starts is seen
  within a quarter second);
- `deadline`: it would wait past its deadline, or — a routine leg (priority up to `ROUTINE_MAX`, the clients'
  default ceiling) — more than `QUEUE_RTTS` of the agent's mean answer times once its limit is settled (a standing
  queue only adds latency: better an answer now; a privileged leg waits to its deadline). The wait is estimated when it arrives (and again for
  the lowest queued legs whenever the queue moves) from the legs ahead of it and the agent's rate left to its
  priority: `(ahead + 1) / (agent's rate - arrivals per second of higher priorities)`;
- `queue_full`: the queue holds `limits.max_queue_per_agent` legs and none is less urgent (else that one,
  the youngest of the lowest priority, is shed in its place: `displaced`). It and `deadline`'s estimates are
  judged only once the agent is what legs wait for (a fixed limit; an adaptive one out of slow start and not
  `gateway_bound`): a first burst, or a gateway slower than its agent, waits up to its deadline (`expired`);
- `expired`: its deadline passed while it waited (for a routine leg: it waited `routine_queue_timeout_s`);
- `client_gone`: its client left while it waited (the server marks the request's `client_link.ClientLink` gone: an
  HTTP connection lost, a gRPC call cancelled), or had left by the time its leg would take a slot, free or not (while
  its message was read, routed or transformed): it leaves the queue, or is never sent (the agent does no work nobody
  reads, while it is what others wait for). A leg already sent is not called back:
  the agent's task goes on, and its client may come back for it (GetTask, SubscribeToTask).

When no limit binds (slots free, nobody queued) a leg costs a comparison, a look at its client's link and two counts.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import math
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ... import client_link
from ...client_link import ClientLink
from ...errors import MMA2AError, Overloaded
from ...loops import running_loop
from .agent_limit import EPOCH, AdaptiveLimit, ConcurrencyLimit
from .loop_lag import LoopLag

PRIORITIES = 10  # the extension's priority: 0..9
RATE_WINDOW_S = 1.0  # arrivals per priority are counted over a sliding window this long ...
BUCKETS = 4  # ... in this many buckets (a rise is seen within one: `ArrivalRates`)
BUCKET_S = RATE_WINDOW_S / BUCKETS
RATE_DECAY = 0.95  # each gap between answers (the agent kept busy) counts this much less with each newer one
RTT_WEIGHT = 0.1  # weight of each answer in the mean latency the wait estimate uses
ESTIMATE_AFTER = 8  # answers before a wait is estimated (until then the deadline alone sheds)
QUEUE_RTTS = 4  # a routine leg is queued only when it is expected to reach the agent within this many answer times
UNJUDGED_QUEUE_FACTOR = 16  # while the queue is not judged (see `acquire`), it still holds at most this many times max_queue
ROUTINE_MAX = 5  # priorities up to the clients' default ceiling are routine; above it (privileged) legs wait to their deadline
WIDTH_SLACK = 0.5  # legs: rate x min_rtt, rounded to the nearest, is the legs an agent works on at once (it over-counts
# by the share of min_rtt spent on the way there and back: 4.06 for an agent of 4 at 0.2 s; rounded up, one more leg
# waited inside it, ~50 ms on every answer)
EARLY_S = 0.001  # a deadline's timer may fire this much before the clock says it passed (the loop's resolution)
FLOOR_MARGIN = 0.1  # a priority whose betters arrive at 90% of the agent's rate or more is shed even at a free slot

# the legs shed while the request being served ran, and an agent's refusal for now passed on (`AgentRefusal`: a peer
# gateway's 429 or 503): the SDK's bindings answer the request with its status and `Retry-After` from there
shed_note: contextvars.ContextVar[list[MMA2AError] | None] = contextvars.ContextVar("mma2a_shed", default=None)
# a leg of the request being served let go unsent because its client left, as the request's task was cancelled (an
# SSE stream's, a gRPC call's: their servers cancel them): the stage that waited records it (`gone_unsent`)
gone_leg: contextvars.ContextVar[Overloaded | None] = contextvars.ContextVar("mma2a_gone_leg", default=None)
# the client's deadline for the request being served, in loop time (gRPC's deadline; `X-Request-Timeout` on HTTP)
client_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("mma2a_deadline", default=None)


def gone_unsent() -> tuple[ClientLink, Overloaded] | None:
    """After the request's task was cancelled: its client's link and the shed of the leg its leaving let go unsent,
    if one was (the link says whether the client went: `ClientLink.if_gone`); None when none was."""
    exc, link = gone_leg.get(), client_link.current.get()
    return (link, exc) if exc is not None and link is not None else None


def note_shed(exc: MMA2AError) -> None:
    """Note a shed (or an agent's refusal for now) for the binding answering the request (nothing outside one)."""
    found = shed_note.get()
    if found is not None:
        found.append(exc)


class _Waiter:
    __slots__ = ("priority", "future", "deadline", "since", "timer", "live", "link", "on_gone")

    def __init__(self, priority: int, future: asyncio.Future[None], deadline: float, since: float) -> None:
        self.priority = priority
        self.future = future
        self.deadline = deadline
        self.since = since
        self.timer: asyncio.TimerHandle | None = None
        self.live = True
        self.link: ClientLink | None = None  # its client's (`client_link`), watched while it waits ...
        self.on_gone: Callable[[], None] | None = None  # ... with this


class ArrivalRates:
    """Legs arriving per second, per priority, counted in buckets of `BUCKET_S`. The rate of the legs above a priority
    is the larger of two sliding windows: the last `RATE_WINDOW_S` and the last bucket, so a rise is seen within a
    bucket (an overload that starts: every leg a routine one takes from an agent that urgent ones fill is their
    capacity lost for good) and a fall only after the longer window (a lull between bursts is not a fall)."""

    __slots__ = ("_buckets", "_i", "_start", "above", "steady")

    def __init__(self) -> None:
        self._buckets = [[0] * PRIORITIES for _ in range(BUCKETS + 1)]  # a ring: the current bucket and BUCKETS before
        self._i = 0
        self._start = -math.inf  # when the current bucket began
        self.above = [0.0] * PRIORITIES  # legs a second above each priority, as of the last `estimate` ...
        self.steady = [0.0] * PRIORITIES  # ... and over the longer window alone

    def count(self, priority: int) -> None:
        self._buckets[self._i][priority] += 1

    def roll(self, now: float) -> None:
        """Move the current bucket on to `now` (buckets past are kept, up to BUCKETS; a quiet spell empties them)."""
        passed = (now - self._start) / BUCKET_S
        if passed < 1.0:
            return
        steps = BUCKETS + 1 if passed > BUCKETS + 1 else int(passed)
        for _ in range(steps):
            self._i = (self._i + 1) % (BUCKETS + 1)
            self._buckets[self._i] = [0] * PRIORITIES
        self._start = now if passed > BUCKETS + 1 else self._start + steps * BUCKET_S

    def estimate(self, now: float) -> None:
        """`above` at `now` (after `roll`): the oldest bucket of each window counts for the part still inside it."""
        n = BUCKETS + 1
        keep = 1.0 - min(1.0, max(0.0, (now - self._start) / BUCKET_S))
        cur, last, oldest = self._buckets[self._i], self._buckets[(self._i - 1) % n], self._buckets[(self._i + 1) % n]
        middle = [self._buckets[(self._i - k) % n] for k in range(1, BUCKETS)]
        long_w, short_w = 0.0, 0.0
        for p in range(PRIORITIES - 1, 0, -1):  # above[p - 1]: the legs of priority p and up
            long_w += cur[p] + sum(b[p] for b in middle) + keep * oldest[p]
            short_w += cur[p] + keep * last[p]
            self.steady[p - 1] = long_w / RATE_WINDOW_S
            self.above[p - 1] = max(self.steady[p - 1], short_w / BUCKET_S)
        self.above[PRIORITIES - 1] = self.steady[PRIORITIES - 1] = 0.0


class AgentSlots:
    """One agent's slots and queue. Runs on the event loop only (no lock)."""

    def __init__(self, agent: str, limit: ConcurrencyLimit, *, max_queue: int, queue_timeout_s: float,
                 routine_timeout_s: float | None = None, clock: Callable[[], float] | None = None,
                 on_shed: Callable[[str, int, str], None] | None = None,
                 on_wait: Callable[[str, int, float], None] | None = None,
                 lag: Callable[[], float] | None = None) -> None:
        self.agent = agent
        self.lag = lag  # the gateway's own loop lag, seconds (`loop_lag.LoopLag.read`): not the agent's queueing
        self.limit = limit
        self.max_queue = max_queue
        self.queue_timeout_s = queue_timeout_s
        # a routine leg's longest wait (None: queue_timeout_s, as a privileged leg's)
        self.routine_timeout_s = queue_timeout_s if routine_timeout_s is None else min(routine_timeout_s, queue_timeout_s)
        self.clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop its legs wait on (`loops.running_loop`)
        self.on_shed = on_shed
        self.on_wait = on_wait
        self.inflight = 0
        self.queued = 0
        self._queues: list[deque[_Waiter]] = [deque() for _ in range(PRIORITIES)]
        self.counts = [0] * PRIORITIES  # live waiters per priority
        self.shed = [0] * PRIORITIES  # legs shed, per priority (the console's figures; metrics count by reason too)
        self.rtt_mean = 0.0
        self.inflight_mean = 0.0  # legs at the agent when an answer came, averaged as rtt_mean is: rate = this / that
        self.answers = 0
        self.intervals = 0  # gaps between answers while the agent was kept busy ...
        self._busy_n = 0.0  # ... and the decayed count and seconds of them (`rate`: the one over the other)
        self._busy_s = 0.0
        self._busy_answer: float | None = None  # when the last answer came, if legs were waiting then (else None)
        self.arrivals = ArrivalRates()
        self._width = 0  # the most legs the agent was measured to work on at once, this epoch and the last (`busy_floor`)
        self._prev_width = 0
        self._width_n = 0  # answers in this epoch
        self._width_due = True  # the rate or the epoch moved since the width was last worked out ...
        self._width_base: float | None = None  # ... or `min_rtt` did (the one it was worked out with)
        self.floor = 0  # the lowest priority not outranked (`_roll`); lower ones take the slow path, and are shed

    # --- taking and giving back a slot -------------------------------------------------------------------------

    def acquire(self, priority: int, deadline: float | None = None) -> Awaitable[None] | None:
        """A slot for a leg of `priority` (`deadline`: the client's, in loop time): None when granted at once, else
        the wait to await (it raises `Overloaded` when the leg is shed). Raises `Overloaded` at once when it cannot
        wait."""
        if self.inflight < self.limit.value and not self.queued and priority >= self.floor:
            link = client_link.current.get()
            if link is None or not link.gone:  # (a client gone by now: `_enqueue` sheds its leg, unsent)
                self.arrivals.count(priority)
                self.inflight += 1
                return None
        return self._enqueue(priority, self._now(), deadline)

    def release(self, rtt: float | None = None) -> None:
        """Give a slot back; `rtt`: the seconds the agent took to answer (None: no sample, as for a stream or an
        agent that could not be reached). Every answer is a sample (one function's work: it runs per request)."""
        limit = self.limit
        inflight = self.inflight  # the legs at the agent when the answer came, itself included
        busy = self.queued > 0 or inflight >= limit.value
        self.inflight = inflight - 1
        now = 0.0
        if rtt is not None:
            now = self.clock() if self.clock is not None else self._loop_now()
            self.arrivals.roll(now)  # (arrivals granted at once count into the bucket current then)
            # the time since the previous answer, when both came busy (the agent was kept busy in between), is a
            # sample of the rate the agent delivers
            if not busy:
                self._busy_answer = None
            else:
                last = self._busy_answer
                if last is not None:
                    self.intervals += 1
                    self._busy_n = self._busy_n * RATE_DECAY + 1.0
                    self._busy_s = self._busy_s * RATE_DECAY + (now - last)
                    self._width_due = True
                self._busy_answer = now
            self.answers += 1
            if self.rtt_mean == 0.0:
                self.rtt_mean, self.inflight_mean = rtt, float(inflight)
            else:
                self.rtt_mean += RTT_WEIGHT * (rtt - self.rtt_mean)
                self.inflight_mean += RTT_WEIGHT * (inflight - self.inflight_mean)
            self._measure_width()
            if limit.adaptive:
                lag = self.lag() if self.lag is not None else 0.0  # the gateway's own delay
                width = max(self._width, self._prev_width)
                limit.sample(rtt, inflight, busy, width + 1 if width else None, lag)  # (`busy_floor`)
        if self.queued:
            now = now or self._now()
            self._roll(now)
            self._grant(now)
            if self.limit.settled and not self.limit.gateway_bound:  # (as in `_enqueue`)
                self._shed_hopeless(now)

    def busy_floor(self) -> int | None:
        """The fewest legs in flight that keep the agent busy: the legs it works on at once (the rate it delivers x
        its answer time with nothing queued inside it, the most of this epoch's and the last's), plus one waiting
        inside it; None until measured."""
        width = max(self._width, self._prev_width)
        return width + 1 if width else None

    def _measure_width(self) -> None:
        """After an answer: the legs the agent works on at once, as measured now, into the epoch's most. The most,
        as `min_rtt` is the least: a loaded machine stretches the gaps between answers (the gateway's own turns
        among them), and a floor that fell with them fed the agent less, which it read as a slower agent. Worked
        out again only when what it is made of moved (the rate, after a busy answer; `min_rtt`; a new epoch)."""
        self._width_n += 1
        if self._width_n >= EPOCH:
            self._prev_width, self._width, self._width_n = self._width, 0, 0
            self._width_due = True
        base = self.limit.base_rtt
        if not self._width_due and base == self._width_base:
            return
        self._width_due, self._width_base = False, base
        if self.intervals < ESTIMATE_AFTER or self._busy_s <= 0.0 or not math.isfinite(base):
            return
        self._width = max(self._width, 1, math.ceil(self._busy_n / self._busy_s * base - WIDTH_SLACK))

    # --- the queue ---------------------------------------------------------------------------------------------

    def _enqueue(self, priority: int, now: float, deadline: float | None) -> Awaitable[None]:
        self._roll(now)
        self.arrivals.count(priority)
        timeout = self.routine_timeout_s if priority <= ROUTINE_MAX else self.queue_timeout_s
        budget = timeout if deadline is None else min(timeout, deadline - now)
        ahead = sum(self.counts[priority:])
        link = client_link.current.get()
        if link is not None and link.gone:  # its client left before its leg was sent (while its message was read,
            # routed, transformed; or its agent's slot was free): never sent, whether a slot is free or not
            raise self._shed_now(priority, "client_gone", f"its client went away before its leg was sent to agent "
                                 f"{self.agent}", self._wait(priority, ahead))
        if priority < self.floor:  # the legs above it take the agent's whole rate: even a free slot is not for it
            raise self._shed_now(priority, "outranked", f"legs of higher priority take all agent {self.agent} "
                                 "serves", self._wait(priority, ahead))
        if ahead == 0 and self.inflight < self.limit.value:  # a free slot, and nobody better waits
            self.inflight += 1
            return _granted()
        if priority <= ROUTINE_MAX and ahead > sum(self.counts[priority:ROUTINE_MAX + 1]):
            # privileged legs wait: the agent is full with what must go first, and a routine leg queued behind them
            # could only be served by the capacity they need (or be shed later, after a wait): shed it now
            raise self._shed_now(priority, "outranked", f"legs of higher priority wait for agent {self.agent}",
                                 self._wait(priority, ahead))
        if budget <= 0:
            raise self._shed_now(priority, "deadline", f"its deadline passed before agent {self.agent} had a slot",
                                 self._wait(priority, ahead))
        # the estimate's sheds (past the deadline, a standing queue, a full queue) are judged only when the agent is
        # what legs wait for: not while an adaptive limit is still finding the agent's measure (its rate, measured
        # through a limit still growing, is not the agent's: a first burst at an idle agent waits for the limit to
        # grow), nor while the gateway's own loop is slower than the agent (its legs wait for the gateway, and a
        # shed answer only brings the client's next request sooner). 1,024 connections at a fresh gateway in front
        # of a fast agent were shed 503 by the thousand ('deadline', then 'queue_full'). Each wait is still bounded
        # by its deadline: the timer below sheds it as `expired`
        agents = self.limit.settled and not self.limit.gateway_bound
        expected = self._wait(priority, ahead)
        if expected > budget and agents:
            raise self._shed_now(priority, "deadline", f"it would wait about {_secs(expected)} for agent {self.agent}, "
                                 f"past its deadline of {_secs(budget)}", expected)
        if priority <= ROUTINE_MAX and agents and expected > QUEUE_RTTS * self.rtt_mean:
            raise self._shed_now(priority, "deadline", f"it would wait about {_secs(expected)} for agent {self.agent}, "
                                 f"more than {QUEUE_RTTS} of its answer times", expected)
        # not judged, the queue is still bounded in legs (memory), not by deadlines alone: a client holding an agent
        # in slow start (a slow agent answers rarely) could otherwise queue without end until the deadlines run out
        cap = self.max_queue if agents else self.max_queue * UNJUDGED_QUEUE_FACTOR
        if self.queued >= cap:
            low = self._lowest()
            if low is None or low.priority >= priority:
                raise self._shed_now(priority, "queue_full", f"the queue of agent {self.agent} is full "
                                     f"({cap} legs, limits.max_queue_per_agent"
                                     f"{'' if agents else f' x {UNJUDGED_QUEUE_FACTOR} while its limit is found'})",
                                     expected)
            self._shed(low, "displaced", f"a more urgent leg took its place in the queue of agent {self.agent}", now)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(priority, future, now + budget, now)
        self._queues[priority].append(waiter)
        self.counts[priority] += 1
        self.queued += 1
        waiter.timer = asyncio.get_running_loop().call_later(budget, self._expire, waiter)
        if link is not None:  # its client leaving takes it out of the queue, unsent
            waiter.link, waiter.on_gone = link, functools.partial(self._client_gone, waiter)
            link.watch(waiter.on_gone)
        if agents:
            self._shed_hopeless(now)
        return self._await(waiter)

    async def _await(self, waiter: _Waiter) -> None:
        try:
            await waiter.future
        except asyncio.CancelledError:  # the caller left while it waited (or just as it was granted)
            future = waiter.future
            if waiter.live:
                self._remove(waiter)
                if waiter.link is not None:  # cancelled because its client went (a gRPC call): counted as such ...
                    waiter.link.if_gone(functools.partial(self._count, waiter.priority, "client_gone"))
                    gone_leg.set(self._overloaded(waiter.priority, "client_gone", "its client went away while it "
                                                  f"waited for agent {self.agent}", self._wait(waiter.priority, 0)))
            elif future.done() and not future.cancelled():
                exc = future.exception()
                if exc is None:
                    self.release()  # granted, then left: the slot goes to the next
                elif isinstance(exc, Overloaded) and exc.why == "client_gone":  # shed as its client left, then
                    gone_leg.set(exc)  # cancelled by its server (an SSE stream): ... and recorded as such
            raise

    def _grant(self, now: float) -> None:
        while self.queued and self.inflight < self.limit.value:
            waiter = self._best()
            if waiter is None:
                return
            self._remove(waiter)
            self.inflight += 1
            waiter.future.set_result(None)
            if self.on_wait is not None:
                self.on_wait(self.agent, waiter.priority, now - waiter.since)

    def _best(self) -> _Waiter | None:
        for p in range(PRIORITIES - 1, -1, -1):
            if self.counts[p]:
                q = self._queues[p]
                while q and not q[0].live:
                    q.popleft()
                if q:
                    return q[0]
        return None

    def _lowest(self) -> _Waiter | None:
        """The youngest waiter of the lowest priority waiting."""
        for p in range(PRIORITIES):
            if self.counts[p]:
                q = self._queues[p]
                while q and not q[-1].live:
                    q.pop()
                if q:
                    return q[-1]
        return None

    def _remove(self, waiter: _Waiter) -> None:
        waiter.live = False
        self.counts[waiter.priority] -= 1
        self.queued -= 1
        if waiter.timer is not None:
            waiter.timer.cancel()
        if waiter.link is not None and waiter.on_gone is not None:
            waiter.link.unwatch(waiter.on_gone)
        q = self._queues[waiter.priority]
        while q and not q[0].live:
            q.popleft()
        while q and not q[-1].live:
            q.pop()

    def _shed_hopeless(self, now: float) -> None:
        """Shed, lowest priority first, the waiters that would now wait past their deadline."""
        while self.queued:
            low = self._lowest()
            if low is None:
                return
            expected = self._wait(low.priority, sum(self.counts[low.priority:]) - 1)
            if expected <= low.deadline - now:
                return
            self._shed(low, "deadline", f"it would wait about {_secs(expected)} more for agent {self.agent}, past "
                       "its deadline", now)

    def _expire(self, waiter: _Waiter) -> None:
        if not waiter.live:
            return
        if waiter.deadline - self._now() > EARLY_S:  # a clock of the caller's not there yet: the queue's moves shed it
            return
        setting = "limits.routine_queue_timeout_s" if waiter.priority <= ROUTINE_MAX else "limits.queue_timeout_s"
        self._shed(waiter, "expired", f"it waited {_secs(waiter.deadline - waiter.since)} for agent {self.agent} "
                   f"({setting}, or the client's deadline)", waiter.deadline)

    def _client_gone(self, waiter: _Waiter) -> None:
        """Its client left while it waited: out of the queue, never sent (`client_gone`)."""
        if waiter.live:
            self._shed(waiter, "client_gone", f"its client went away while it waited for agent {self.agent}",
                       self._now())

    def _shed(self, waiter: _Waiter, why: str, text: str, now: float) -> None:
        self._remove(waiter)
        exc = self._shed_now(waiter.priority, why, text, self._wait(waiter.priority, 0))
        waiter.future.set_exception(exc)

    def _shed_now(self, priority: int, why: str, text: str, expected: float) -> Overloaded:
        self._count(priority, why)
        return self._overloaded(priority, why, text, expected)

    def _overloaded(self, priority: int, why: str, text: str, expected: float) -> Overloaded:
        retry = expected if math.isfinite(expected) else max(self.queue_timeout_s, self.rtt_mean)
        return shed_error(self.agent, priority, why, text, retry)

    def _count(self, priority: int, why: str) -> None:
        """A leg shed: the console's figure and the metric's."""
        self.shed[priority] += 1
        if self.on_shed is not None:
            self.on_shed(self.agent, priority, why)

    # --- the estimate ------------------------------------------------------------------------------------------

    def _roll(self, now: float) -> None:
        """Move the arrival counts on to `now`, and the floor with them."""
        self.arrivals.roll(now)
        self.arrivals.estimate(now)
        self.floor = self._floor()

    def _floor(self) -> int:
        """The lowest priority whose betters arrive at less than (1 - FLOOR_MARGIN) of the agent's rate."""
        if self.answers < ESTIMATE_AFTER or self.rtt_mean <= 0.0:
            return 0
        for p in range(PRIORITIES):
            if self.rate_above(p) < (1.0 - FLOOR_MARGIN) * self.rate_for(p):
                return p
        return PRIORITIES - 1

    def rate_above(self, priority: int) -> float:
        """Legs per second arriving with a priority above `priority` (`ArrivalRates`, as of the last move): for a
        routine priority the larger of the last second's and the last quarter second's (a routine leg let in as an
        overload starts takes capacity the privileged legs need for good), for a privileged one the last second's
        (a privileged leg is not shed for a burst of its betters)."""
        rates = self.arrivals.above if priority <= ROUTINE_MAX else self.arrivals.steady
        return rates[priority]

    def rate(self) -> float:
        """Legs a second the agent answers when busy: as measured while it was kept busy (the gaps between answers
        with legs waiting); until enough such answers, its limit (or, when more were at the agent over the recent
        answers, that many) over the mean answer time (Little's law: an upper bound, as the mean answer time lags a
        limit that just rose)."""
        if self.intervals >= ESTIMATE_AFTER and self._busy_s > 0.0:
            return self._busy_n / self._busy_s
        return max(self.limit.value, self.inflight_mean) / self.rtt_mean

    def rate_for(self, priority: int) -> float:
        """The agent's rate a leg of `priority` is judged by: a routine leg by the rate measured (`rate`), a
        privileged one by the larger of that and Little's law's (a stall of the machine stretches the gaps between
        answers for a moment: shedding an urgent leg the agent could have served is the costlier mistake). Not by the
        agent's remembered width over `min_rtt`: under a load that lasts the agent itself serves less, and urgent
        legs queued on that promise waited their whole deadline (44 of 300 at 4x, load 18)."""
        if priority <= ROUTINE_MAX or self.rtt_mean <= 0.0:
            return self.rate()
        return max(self.rate(), max(self.limit.value, self.inflight_mean) / self.rtt_mean)

    def _wait(self, priority: int, ahead: int) -> float:
        """Seconds a leg of `priority` with `ahead` legs of its priority or higher before it would wait."""
        if self.answers < ESTIMATE_AFTER or self.rtt_mean <= 0.0:  # too few answers to tell: the deadline decides
            return 0.0
        rate = self.rate_for(priority) - self.rate_above(priority)
        return (ahead + 1) / rate if rate > 0 else math.inf

    def _now(self) -> float:
        return self.clock() if self.clock is not None else self._loop_now()

    def _loop_now(self) -> float:
        loop = self._loop = running_loop(self._loop)
        return loop.time()

    def to_json(self) -> dict[str, Any]:
        return {"inflight": self.inflight, "queued": self.queued, **self.limit.to_json(),
                "queuedByPriority": {str(p): n for p, n in enumerate(self.counts) if n},
                "shedByPriority": {str(p): n for p, n in enumerate(self.shed) if n},
                "meanRttS": round(self.rtt_mean, 6)}


def shed_error(agent: str, priority: int, why: str, text: str, retry: float) -> Overloaded:
    """The `Overloaded` a shed leg is answered with (`retry`: the seconds its client may retry in, at least one)."""
    return Overloaded(f"agent {agent} is overloaded: a leg of priority {priority} was shed ({text}); "
                      f"retry in about {_secs(max(retry, 1.0))}", agent=agent, priority=priority, why=why,
                      retry_after=max(retry, 1.0))


def _secs(s: float) -> str:
    return f"{s:.2f} s" if math.isfinite(s) else "without end"


async def _granted() -> None:
    return None


class AgentSlotTable:
    """Every agent's `AgentSlots`, made on first use from the agent's config and the `limits` section."""

    def __init__(self, *, adaptive: bool = True, initial: int = 4, maximum: int = 256, max_queue: int = 256,
                 queue_timeout_s: float = 5.0, routine_timeout_s: float | None = None,
                 on_shed: Callable[[str, int, str], None] | None = None,
                 on_wait: Callable[[str, int, float], None] | None = None) -> None:
        self.adaptive = adaptive
        self.initial = initial
        self.maximum = maximum
        self.max_queue = max_queue
        self.queue_timeout_s = queue_timeout_s
        self.routine_timeout_s = routine_timeout_s
        self.on_shed = on_shed
        self.on_wait = on_wait
        self.loop_lag = LoopLag()  # one probe of the gateway's own loop for every adaptive limit
        self._slots: dict[str, tuple[int | None, AgentSlots]] = {}

    def of(self, agent: str, fixed: int | None) -> AgentSlots | None:
        """The slots of `agent` whose config says `fixed` (`max_concurrency`, None: adaptive); None when the agent
        is not limited (adaptive limits are off and it has no fixed one)."""
        known = self._slots.get(agent)
        if known is not None and known[0] == fixed:
            return known[1]
        if fixed is None and not self.adaptive:
            return None
        limit = ConcurrencyLimit(fixed) if fixed is not None else AdaptiveLimit(initial=self.initial, maximum=self.maximum)
        if known is not None:  # the config changed: the new limit, the same queue
            known[1].limit = limit
            self._slots[agent] = (fixed, known[1])
            return known[1]
        slots = AgentSlots(agent, limit, max_queue=self.max_queue, queue_timeout_s=self.queue_timeout_s,
                           routine_timeout_s=self.routine_timeout_s, on_shed=self.on_shed, on_wait=self.on_wait,
                           lag=self.loop_lag.read)
        self._slots[agent] = (fixed, slots)
        return slots

    def unlimited(self, agent: str, priority: int) -> None:
        """A leg of `priority` to `agent`, which takes no slot (not limited): `Overloaded` (`client_gone`, counted as
        a limited agent's) when its client has gone, as at a free slot (`AgentSlots.acquire`)."""
        link = client_link.current.get()
        if link is not None and link.gone:
            if self.on_shed is not None:
                self.on_shed(agent, priority, "client_gone")
            raise shed_error(agent, priority, "client_gone", f"its client went away before its leg was sent to "
                             f"agent {agent}", 1.0)

    def get(self, agent: str) -> AgentSlots | None:
        known = self._slots.get(agent)
        return known[1] if known is not None else None

    def items(self) -> list[tuple[str, AgentSlots]]:
        return [(name, s) for name, (_, s) in self._slots.items()]


class SlotsCollector(Collector):
    """Queue depth per agent and priority, slots in use and each agent's limit, read at scrape time (nothing on the
    request path)."""

    def __init__(self, table: AgentSlotTable) -> None:
        self.table = table

    def describe(self) -> Iterator[Any]:
        return iter(())

    def collect(self) -> Iterator[Any]:
        depth = GaugeMetricFamily("mma2a_agent_queue_depth", "Legs waiting for an agent's slot, by priority",
                                  labels=["agent", "priority"])
        inflight = GaugeMetricFamily("mma2a_agent_inflight", "Legs at an agent (slots taken)", labels=["agent"])
        limit = GaugeMetricFamily("mma2a_agent_concurrency_limit", "An agent's concurrency limit (fixed or adaptive)",
                                  labels=["agent"])
        for name, slots in self.table.items():
            for p in range(PRIORITIES):
                depth.add_metric([name, str(p)], slots.counts[p])
            inflight.add_metric([name], slots.inflight)
            limit.add_metric([name], slots.limit.value)
        yield depth
        yield inflight
        yield limit
