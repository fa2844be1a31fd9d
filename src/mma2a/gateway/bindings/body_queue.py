"""The JSON body worker's queue: each caller's jobs held apart, served in turn across callers, bounded per caller.

The worker (`body_parser`) reads large bodies and converts answers of many values, each a job of up to seconds (a REST
GetTask of 300,000 values: ~1.3 s). Taken first come first served, one client's many jobs queued everyone's behind
them (docs/security.md LN1). Here a caller (its client's key; an anonymous caller's address, as every other
anonymous budget is keyed: `access.peers.address_key`) waits its turn behind at most one job of each other caller
that has one waiting: the next job goes to the caller waiting longest that has none running (`ready`, in the order
they became so), then to callers with one running (`resting`: they use a lane no caller without one waits for).
A caller's own jobs keep their order. A caller holds at most `max_jobs` jobs and `max_bytes` bytes (waiting and
running); past them its own next job is refused (`why_not`), never another caller's; its first job always fits.
Pure bookkeeping, no I/O: the body parser takes, runs and finishes the jobs.
"""

from __future__ import annotations

from collections import deque
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
    """Jobs (`T`) of callers, taken round-robin across callers (`take`); `put` refuses a caller past its own bounds."""

    def __init__(self, max_jobs: int, max_bytes: int) -> None:
        self.max_jobs = max_jobs
        self.max_bytes = max_bytes
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
        """Queue `item` (`size` bytes) behind `caller`'s others; None, or why not (nothing queued then)."""
        why = self.why_not(caller, size)
        if why is not None:
            return why
        share = self._shares.get(caller)
        if share is None:
            share = self._shares[caller] = _Share()
        share.waiting.append((item, size))
        share.jobs += 1
        share.bytes += size
        if caller not in self._ready and caller not in self._resting:
            (self._resting if share.running else self._ready)[caller] = None
        return None

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
