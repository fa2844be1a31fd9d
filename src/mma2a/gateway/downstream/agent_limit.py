"""How many legs one agent is sent at once: a fixed limit (`agents[].max_concurrency`), or one that follows the
agent's measured latency (the default), so the agent is kept busy but never buried.

The adaptive rule is TCP Vegas's, as Netflix's concurrency-limits applies it to servers: the fewest seconds an
answer has taken (`min_rtt`, the agent's latency with nothing waiting inside it) against the mean of the last
window of answers tells how many legs are queued inside the agent:

    queued = in_flight x (mean_rtt - min_rtt - NOISE_S) / mean_rtt      (0 when negative)

- `queued < ALPHA` while the limit was reached: the agent could take more: +1 (x1.5 until the first cut:
  slow start — but not past the floor below, and only +1 once the limit has reached it);
- `queued > BETA`: the agent is queueing: the limit drops by what is queued past ALPHA (at least 1), never below
  the floor, and the next window is not judged (its answers are mostly of legs sent before the cut: judging them
  cut again, from 9 to 4 at a 4-wide agent in bench/overload.py, and an agent kept below its width loses
  capacity that a backlog of urgent legs never gets back);
- between: kept. With ALPHA = 0.5 and BETA = 1.5 about one leg waits inside the agent, so it never idles
  between an answer and the next leg, and the order of the rest is the gateway's priority queue's, not the
  agent's first-come order.

The floor (when the caller has measured it: `AgentSlots.busy_floor`) is the legs the agent works on at once —
the rate it delivers while kept busy x `min_rtt` — plus one waiting inside it: on a loaded machine the answers
stretch by more than NOISE_S, which the rule reads as queueing, and without the floor it kept a 4-wide agent at 4
(19/s of its 20) or below.

NOISE_S: a rise of up to 20 ms is the gateway's own loop and the network, not a queue inside the agent (an
agent answering in 100 us would otherwise look buried whenever the gateway is busy). A gateway saturated itself
(or waiting for a CPU on a busy host) delays every answer by far more: a 0.02 ms agent measured 56-157 ms on
average against a min_rtt of 1 ms at 64-128 connections, and the rule cut its limit from 56 to 1-3 and shed most
requests, which cannot help when the bottleneck is the gateway. So the gateway's own delay is told apart
(`loop_lag`: the mean lateness of a periodic timer on the gateway's loop, `lag`):

- while the gateway is slower than the agent — its loop busy (`lag >= LAG_BUSY_S`) and an answer's share of its
  delay (about `LAG_RTTS x lag`: the rest of the loop's turn before the answer's bytes are read, and the awaiting
  coroutine's turn after) at least the agent's whole `min_rtt` — the rise is the gateway's, not a queue at the
  agent: the limit is never cut, and grows x1.5 while reached (the gateway is the bottleneck: fewer legs at the
  agent would only keep the gateway's clients waiting in its queue, and shed them);
- a window whose lag is not measured yet (the timer has not run since the gateway was last idle: `lag` is inf)
  is not judged.

An agent slower than that (bench/overload.py's, 0.2 s) is judged as before: that would take a loop 50 ms late.

A window is `max(WINDOW_MIN, limit)` answers; `min_rtt` is the least of this epoch's answers and the last's (an
epoch: `EPOCH` answers), so it follows an agent that became slower. The rule assumes requests of similar cost: for
an agent whose work varies widely per request (audio of any length), set `max_concurrency`.

Pure: samples come in from the caller (no clock, no I/O), so tests drive it step by step.
"""

from __future__ import annotations

import math

ALPHA = 0.5  # legs queued inside the agent below which the limit grows
BETA = 1.5  # ... above which it shrinks
WINDOW_MIN = 8  # answers per adjustment, at least
EPOCH = 1000  # answers after which min_rtt starts afresh (the previous epoch's minimum still counts)
INITIAL = 4  # the adaptive limit's first value
NOISE_S = 0.02  # a rise of the mean latency this small is not counted as queueing
LAG_RTTS = 4.0  # an answer waits about this many of the loop's lag in the gateway itself (`loop_lag`: measured 3-5
# times the probe's mean lateness with a 0.02 ms agent at 64-128 connections, load 17)
LAG_BUSY_S = 0.002  # a loop lag from which the gateway counts as busy (an idle loop's timer runs 0-1 ms late)


class ConcurrencyLimit:
    """A fixed limit: `value` never changes (`agents[].max_concurrency`)."""

    __slots__ = ("value",)

    adaptive = False

    def __init__(self, value: int) -> None:
        self.value = value

    @property
    def settled(self) -> bool:
        """The limit says what the agent takes (an adaptive one: once it has cut, leaving slow start)."""
        return True

    @property
    def base_rtt(self) -> float:
        """The agent's answer time with nothing queued inside it, as far as the limit knows (inf: not measured)."""
        return float("inf")

    @property
    def gateway_bound(self) -> bool:
        """The last window found the gateway slower than the agent (its own loop's lag, not the agent, made the
        answers late): legs waiting for this agent wait for the gateway, not for the agent. A fixed limit: never."""
        return False

    def sample(self, rtt: float, in_flight: int, saturated: bool, floor: int | None = None, lag: float = 0.0) -> None:
        """An answer took `rtt` seconds with `in_flight` legs at the agent; a fixed limit ignores it."""

    def to_json(self) -> dict[str, object]:
        return {"kind": "fixed", "limit": self.value}


class AdaptiveLimit(ConcurrencyLimit):
    """The Vegas rule above, between `minimum` and `maximum`."""

    __slots__ = ("minimum", "maximum", "min_rtt", "_prev_min", "_epoch_n", "_n", "_sum_rtt", "_sum_inflight",
                 "_saturated", "slow_start", "last_queued", "_cooldown", "_floor", "_sum_lag", "last_lag", "_gateway_bound")

    adaptive = True

    def __init__(self, *, initial: int = INITIAL, minimum: int = 1, maximum: int = 256) -> None:
        super().__init__(max(minimum, min(initial, maximum)))
        self.minimum = minimum
        self.maximum = maximum
        self.min_rtt = float("inf")
        self._prev_min = float("inf")
        self._epoch_n = 0
        self._n = 0
        self._sum_rtt = 0.0
        self._sum_inflight = 0
        self._sum_lag = 0.0
        self._saturated = False
        self.slow_start = True
        self.last_queued = 0.0
        self.last_lag = 0.0
        self._cooldown = False  # the window after a cut is not judged (its answers are of legs sent before the cut)
        self._floor: int | None = None
        self._gateway_bound = False

    @property
    def settled(self) -> bool:
        return not self.slow_start

    @property
    def gateway_bound(self) -> bool:
        return self._gateway_bound

    @property
    def base_rtt(self) -> float:
        return min(self.min_rtt, self._prev_min)

    def sample(self, rtt: float, in_flight: int, saturated: bool, floor: int | None = None, lag: float = 0.0) -> None:
        """One answer: `rtt` seconds, `in_flight` legs at the agent when it came (itself included), `saturated`:
        legs were waiting for a slot (or every slot was taken) when it came; `floor`: the fewest legs that keep the
        agent busy, when the caller has measured it (its delivered rate x min_rtt, plus one); `lag`: the gateway's own
        event loop's recent lateness, seconds (`loop_lag.LoopLag`; inf: not measured yet)."""
        self._floor = floor
        if rtt < self.min_rtt:
            self.min_rtt = rtt
        self._epoch_n += 1
        if self._epoch_n >= EPOCH:
            self._prev_min, self.min_rtt, self._epoch_n = self.min_rtt, float("inf"), 0
        self._n += 1
        self._sum_rtt += rtt
        self._sum_inflight += in_flight
        self._sum_lag += lag
        self._saturated = self._saturated or saturated
        if self._n >= max(WINDOW_MIN, self.value):
            self._adjust()

    def _adjust(self) -> None:
        mean = self._sum_rtt / self._n
        base = min(self.min_rtt, self._prev_min)
        queued = (self._sum_inflight / self._n) * max(0.0, mean - base - NOISE_S) / mean if mean > 0 else 0.0
        lag = self._sum_lag / self._n  # the gateway's own loop lag over the window (inf: not known yet)
        self.last_queued = queued
        self.last_lag = lag
        limit, floor = self.value, self._floor or self.minimum
        self._gateway_bound = math.isfinite(lag) and lag >= LAG_BUSY_S and LAG_RTTS * lag >= base
        if self._cooldown:  # the answers of this window were mostly of legs sent before the last cut: not judged
            self._cooldown = False
        elif not math.isfinite(lag):  # the loop's lag is not measured yet: not judged
            pass
        elif self._gateway_bound:  # the gateway is slower than the agent: its own delay,
            if self._saturated:  # not a queue at the agent; the limit must not be what holds legs back: x1.5
                limit = max(limit + 1, limit * 3 // 2)
        elif queued > BETA:
            limit = max(min(floor, limit), limit - max(1, int(queued - ALPHA)))  # not below the floor
            self.slow_start = False
            self._cooldown = True
        elif queued < ALPHA and self._saturated:
            grow = self.slow_start and (self._floor is None or limit < self._floor)
            limit = (min(max(limit + 1, limit * 3 // 2), self._floor or self.maximum) if grow  # (not past the floor)
                     else limit + 1)
        self.value = max(self.minimum, min(limit, self.maximum))
        self._n = 0
        self._sum_rtt = 0.0
        self._sum_inflight = 0
        self._sum_lag = 0.0
        self._saturated = False

    def to_json(self) -> dict[str, object]:
        base = min(self.min_rtt, self._prev_min)
        return {"kind": "adaptive", "limit": self.value, "minRttS": round(base, 6) if base != float("inf") else None,
                "queuedAtAgent": round(self.last_queued, 3),
                "loopLagS": round(self.last_lag, 6) if math.isfinite(self.last_lag) else None}
