"""The JSON body worker's queue: each caller's jobs held apart, served in turn across callers, bounded per caller.

The worker (`body_parser`) reads large bodies and converts answers of many values, each a job of up to seconds (a REST
GetTask of 300,000 values: ~1.3 s). Taken first come first served, one client's many jobs queued everyone's behind
them (docs/security.md LN1). Here a caller (its client's key; an anonymous caller's address, as every other
anonymous budget is keyed: `access.peers.address_key`) waits its turn behind at most one job of each other caller
that has one waiting: the next job goes to the caller waiting longest that has none running (`ready`, in the order
they became so), then to callers with one running (`resting`: they use a lane no caller without one waits for).
A caller's own jobs keep their order. A caller holds at most `max_jobs` jobs and `max_bytes` bytes (waiting and
running); past them its own next job is refused (`why_not`), never another caller's; its first job always fits.

All callers together hold at most `max_total` bytes: many callers each within its own bounds held any total before.
Past it, a caller holding more than its even share (`max_total` over the callers holding jobs, itself counted) is
refused; one within it gets room from the waiting jobs of the callers holding most past their even shares (each such
caller's newest first, while it is past its share: `displaced` answers them), and is refused only when their jobs
are running (nothing waits to make room of). So the bound is never passed, and one or two callers filling it cannot
keep every other caller out (as a plain "refuse past the total" would let them). One job always fits in an empty queue,
as a caller's first job fits its own bounds: an answer's job counts what its document holds while it waits, and one
task's may be larger than the total (it would never be read else).
Pure bookkeeping, no I/O: the body parser takes, runs and finishes the jobs.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class _Share(Generic[T]):
    """One caller's jobs: waiting (in order, with their sizes), and the count and bytes of all it holds."""

    __slots__ = ("bytes", "jobs", "running", "waiting")

    def __init__(self) -> None:
        self.waiting: deque[tuple[T, int]] = deque()
        self.running = 0
        self.jobs = 0  # waiting and running
        self.bytes = 0


class FairQueue(Generic[T]):
    """Jobs (`T`) of callers, taken round-robin across callers (`take`); `put` refuses a caller past its own bounds
    or, past `max_total` in all, past its even share; `displaced(caller, job, why)` is told of each waiting job taken
    out to make room within `max_total` for another caller's (None: no total)."""

    def __init__(self, max_jobs: int, max_bytes: int, max_total: int | None = None,
                 displaced: Callable[[str, T, str], None] | None = None) -> None:
        self.max_jobs = max_jobs
        self.max_bytes = max_bytes
        self.max_total = max_total
        self.total = 0  # bytes held, every caller's (waiting and running)
        self._displaced = displaced
        self._shares: dict[str, _Share[T]] = {}
        self._ready: dict[str, None] = {}  # callers with a job waiting and none running, longest waiting first
        self._resting: dict[str, None] = {}  # callers with a job waiting and one running (or more, with lanes)

    def why_not(self, caller: str, size: int) -> str | None:
        """Why a job of `size` bytes of `caller` is refused now (it holds its bounds' worth already); None: it fits."""
        share = self._shares.get(caller)
        if share is None or share.jobs == 0:
            return None
        if share.jobs >= self.max_jobs:
            return (f"this caller has {share.jobs} large bodies and answers in the gateway's JSON body worker already "
                    f"(at most {self.max_jobs} a caller: limits.body_worker_jobs_per_client)")
        if share.bytes + size > self.max_bytes:
            return (f"this caller has {share.bytes} bytes of large bodies and answers in the gateway's JSON body "
                    f"worker already, and this one is {size} (at most {self.max_bytes} a caller: "
                    "limits.body_worker_bytes_per_client)")
        return None

    def put(self, caller: str, item: T, size: int) -> str | None:
        """Queue `item` (`size` bytes) behind `caller`'s others; None, or why not (nothing queued then). Past
        `max_total`, waiting jobs of callers past their even shares may be taken out first (`displaced`)."""
        why = self.why_not(caller, size)
        if why is not None:
            return why
        if self.max_total is not None and self.total and self.total + size > self.max_total:
            room = self._room(caller, size, self.max_total)
            if isinstance(room, str):
                return room
            for victim, job, why in room:
                self.drop(victim, job)
                if self._displaced is not None:
                    self._displaced(victim, job, why)
        self.total += size
        share = self._shares.get(caller)
        if share is None:
            share = self._shares[caller] = _Share()
        share.waiting.append((item, size))
        share.jobs += 1
        share.bytes += size
        if caller not in self._ready and caller not in self._resting:
            (self._resting if share.running else self._ready)[caller] = None
        return None

    def _room(self, caller: str, size: int, max_total: int) -> str | list[tuple[str, T, str]]:
        """Room within `max_total` for `caller`'s job of `size` bytes: the waiting jobs to take out (of callers past
        their even shares, those holding most first, each one's newest first), or why there is none."""
        held = self.held(caller)[1]
        callers = len(self._shares) + (caller not in self._shares)
        even = max_total // callers
        said = (f"the gateway's JSON body worker holds {self.total} bytes of large bodies and answers already, and "
                f"this one is {size} (at most {max_total} in all: limits.body_worker_bytes_total)")
        if held + size > even:
            return f"{said}; this caller holds {held} of them, past its even share of {even} ({callers} callers)"
        need = self.total + size - max_total
        heavy = [(-s.bytes, c) for c, s in self._shares.items() if c != caller and s.bytes > even and s.waiting]
        heapq.heapify(heavy)
        taken: dict[str, int] = {}  # caller -> its newest waiting jobs taken so far
        out: list[tuple[str, T, str]] = []
        while need > 0 and heavy:
            minus, victim = heapq.heappop(heavy)
            share = self._shares[victim]
            job, job_size = share.waiting[-1 - taken.get(victim, 0)]
            taken[victim] = taken.get(victim, 0) + 1
            out.append((victim, job, f"the gateway's JSON body worker holds {max_total} bytes of large bodies and "
                                     "answers at most in all (limits.body_worker_bytes_total); this caller held "
                                     f"{-minus}, past its even share of {even} ({callers} callers), and its newest "
                                     "waiting job made room for another caller's"))
            need -= job_size
            left = -minus - job_size
            if left > even and taken[victim] < len(share.waiting):
                heapq.heappush(heavy, (-left, victim))
        if need > 0:  # the jobs past their shares are running: none to take out
            return f"{said}; what is past the callers' even shares is running, none of it waiting"
        return out

    def take(self) -> tuple[str, T, int] | None:
        """The next job to run: its caller, the job and its size (its caller counts it running until `done`); None
        when none waits."""
        if self._ready:
            caller = next(iter(self._ready))
            del self._ready[caller]
        elif self._resting:
            caller = next(iter(self._resting))
            del self._resting[caller]
        else:
            return None
        share = self._shares[caller]
        item, size = share.waiting.popleft()
        share.running += 1
        if share.waiting:
            self._resting[caller] = None  # its next waits behind every caller without one running
        return caller, item, size

    def done(self, caller: str, size: int) -> None:
        """A job `take` gave (of `size` bytes) has ended."""
        share = self._shares[caller]
        share.running -= 1
        share.jobs -= 1
        share.bytes -= size
        self.total -= size
        if share.running == 0 and caller in self._resting:  # back in line, behind those who waited meanwhile
            del self._resting[caller]
            self._ready[caller] = None
        if share.jobs == 0:
            del self._shares[caller]

    def drop(self, caller: str, item: T) -> bool:
        """Take a waiting `item` of `caller` out (its request went); False if it is not waiting (running, or gone)."""
        share = self._shares.get(caller)
        if share is None:
            return False
        for i, (waiting, size) in enumerate(share.waiting):
            if waiting is item:
                del share.waiting[i]
                share.jobs -= 1
                share.bytes -= size
                self.total -= size
                if not share.waiting:
                    self._ready.pop(caller, None)
                    self._resting.pop(caller, None)
                if share.jobs == 0:
                    del self._shares[caller]
                return True
        return False

    def held(self, caller: str) -> tuple[int, int]:
        """The jobs and bytes `caller` holds (waiting and running)."""
        share = self._shares.get(caller)
        return (share.jobs, share.bytes) if share is not None else (0, 0)

    @property
    def waiting(self) -> int:
        """Jobs waiting, every caller's."""
        return sum(len(s.waiting) for s in self._shares.values())
