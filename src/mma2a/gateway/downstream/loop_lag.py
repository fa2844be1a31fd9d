"""How late the gateway's own event loop runs: a cheap periodic timer's lateness.

An answer's time as the gateway measures it includes the gateway's own delay: the answer's bytes wait in the
kernel until the loop polls again, and the awaiting coroutine waits for its turn among every other ready one. On
a saturated gateway (or a host where it waits for a CPU) that delay is tens of ms, against an agent that answers
in microseconds; an adaptive limit that read it as legs queued inside the agent cut the agent's limit and shed
requests, which cannot help when the bottleneck is the gateway itself (`agent_limit`: while the loop is late
enough to explain the answers' rise, `LAG_BUSY_S` and `LAG_RTTS`, the limit is not cut).

The probe is a timer every `PROBE_S`; the lag is the decayed mean of how late it ran (`LAG_WEIGHT` per tick). It
runs only while read: it starts on the first `read` in a running loop and stops after `IDLE_TICKS` ticks in a row
without one (an idle gateway is not woken for it); for its first `MIN_TICKS` ticks after a start the lag is not
known (`read` says inf), so a burst that meets an idle gateway is not judged by a lag never measured.
"""

from __future__ import annotations

import asyncio
import math

PROBE_S = 0.01  # the timer's period
LAG_WEIGHT = 0.2  # each tick's lateness counts this much into the decayed mean (~5 ticks: ~50 ms)
IDLE_TICKS = 100  # ticks without a read after which the probe stops (1 s)
MIN_TICKS = 3  # ticks after a start before the lag is known (until then `read` says inf: not measured)


class LoopLag:
    """The event loop's recent lateness, in seconds (`read`). Runs on the event loop only."""

    __slots__ = ("value", "ticks", "_loop", "_handle", "_due", "_idle")

    def __init__(self) -> None:
        self.value = 0.0
        self.ticks = 0  # since the probe (re)started
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the probe runs on (None: stopped)
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._idle = 0

    def read(self) -> float:
        """The loop's recent lag in seconds (inf: not measured yet); starts the probe when it is not running (outside a
        running loop it is not started)."""
        self._idle = 0
        kept = self._loop
        if kept is None or not kept.is_running():  # (asyncio's look-up is a system call on 3.11: `loops`)
            loop = asyncio._get_running_loop()  # (None outside one: no exception to raise and catch per answer)
            if loop is not kept and loop is not None:  # not running, or on a loop of before (a test's, closed):
                self.stop()  # afresh on this one
                self._loop, self.value, self.ticks = loop, 0.0, 0
                self._schedule(loop, loop.time())
        return self.value if self.ticks >= MIN_TICKS else math.inf  # (`lag`)

    @property
    def lag(self) -> float:
        return self.value if self.ticks >= MIN_TICKS else math.inf

    def note(self, late: float) -> None:
        """One tick ran `late` seconds after it was due."""
        late = max(0.0, late)
        self.value = late if self.ticks == 0 else self.value + LAG_WEIGHT * (late - self.value)
        self.ticks += 1

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop = None

    def _schedule(self, loop: asyncio.AbstractEventLoop, now: float) -> None:
        self._due = now + PROBE_S
        self._handle = loop.call_at(self._due, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        self.note(now - self._due)
        self._idle += 1
        if self._idle > IDLE_TICKS:  # nobody read it for a while: stop (the next read starts it afresh)
            self._handle = self._loop = None
            self.value, self.ticks = 0.0, 0
            return
        self._schedule(loop, now)
