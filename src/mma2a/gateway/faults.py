"""Fault tolerance: graceful drain and duplicate sends.

- `Drain`: counts in-flight requests; on SIGTERM the gateway refuses new work (503 with
  `Retry-After`, from `security.AccessControl`), waits for what it accepted to finish, then
  lets uvicorn close (`DrainingServer`).
- `Deduper`: a client that retries a `SendMessage` with the same `messageId` (after a
  timeout, a lost connection) gets the first attempt's answer, never a second delivery.
  Keyed by (sender, messageId), bounded in entries and in the bytes of the answers it keeps,
  with a time to live.

Failover within a pool is part of dispatch (`gateway/stages/dispatch.py`).

May import: nothing in the gateway.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
import uvicorn
from pydantic import BaseModel, ConfigDict, Field

from ..balance import Balance
from ..serving import Server
from ..tls import ServerTLS

log = logging.getLogger("mma2a.gateway.faults")
_T = TypeVar("_T")


class Drain:
    """In-flight request count and the draining flag."""

    def __init__(self) -> None:
        self.draining = False
        self.inflight = 0

    def enter(self) -> None:
        self.inflight += 1

    def leave(self) -> None:
        self.inflight = max(0, self.inflight - 1)

    def begin(self) -> None:
        if not self.draining:
            log.warning("draining: new work is refused, %d requests in flight", self.inflight)
        self.draining = True



class DrainingServer(Server):
    """uvicorn that, on the first SIGTERM/SIGINT, drains before closing (a second signal closes at once).

    Draining: new work is refused with 503 (`security.AccessControl`) for at least `grace_s`,
    until no accepted request is in flight (or `timeout_s` passed); then uvicorn's own
    graceful shutdown runs.
    """

    def __init__(self, config: uvicorn.Config, drain: Drain, *, grace_s: float = 0.5, timeout_s: float = 30.0,
                 on_started: Callable[[], None] | None = None, tls: ServerTLS | None = None,
                 balance: Balance | None = None) -> None:
        super().__init__(config, on_started=on_started, tls=tls, balance=balance)
        self.drain = drain
        self.grace_s = grace_s
        self.drain_timeout_s = timeout_s
        self._pending: tuple[int, Any, float] | None = None

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self._pending is not None:
            super().handle_exit(sig, frame)
            return
        self.drain.begin()
        self._pending = (sig, frame, time.monotonic())
        self.wake()

    def tick_interval(self) -> float:
        return 0.1 if self._pending is not None else super().tick_interval()

    async def on_tick(self, counter: int) -> bool:
        if self._pending is not None and not self.should_exit:
            sig, frame, t0 = self._pending
            waited = time.monotonic() - t0
            if (waited >= self.grace_s and self.drain.inflight == 0) or waited >= self.drain_timeout_s:
                if self.drain.inflight:
                    log.warning("drain timed out with %d requests in flight", self.drain.inflight)
                super().handle_exit(sig, frame)
        return await super().on_tick(counter)


class Deduper:
    """The answer to a (sender, messageId) already seen, or the pending first attempt to wait for.

    Answers are kept up to `max_bytes` together (their JSON size; the oldest go first) and one answer
    larger than a sixteenth of it is not kept: without a byte bound, 20,000 kept answers of agents that
    echo a large message back could hold gigabytes for the whole time to live. One sender's answers are at most a
    quarter of the entries and of the bytes, its own oldest going first: shared, seventeen large answers of one client
    pushed every other client's out, and their retries were delivered again (docs/security.md S15-14). A sender of
    None (a gateway without authentication) is held to the whole."""

    def __init__(self, ttl_s: float = 600.0, capacity: int = 20_000, clock: Callable[[], float] = time.monotonic,
                 max_bytes: int = 64 * 1024 * 1024) -> None:
        self.ttl_s = ttl_s
        self.capacity = capacity
        self.clock = clock
        self.max_bytes = max_bytes
        self.bytes = 0
        self._seen: OrderedDict[tuple[str | None, str], tuple[float, asyncio.Future[Any]]] = OrderedDict()
        self._sizes: dict[tuple[str | None, str], int] = {}
        self._kept: dict[str, OrderedDict[str, int]] = {}  # sender -> its kept answers' message ids (and sizes), oldest
        self._kept_bytes: dict[str, int] = {}  # first, and their bytes

    async def run(self, sender: str | None, message_id: str, attempt: Callable[[], Awaitable[_T]]) -> _T:
        """`attempt()` once per (sender, messageId) within the TTL; later calls share its outcome.

        A first attempt that raised is forgotten, so a retry after a refusal is tried afresh.
        """
        key = (sender, message_id)
        now = self.clock()
        self._expire(now)
        hit = self._seen.get(key)
        if hit is not None:
            shared: _T = await asyncio.shield(hit[1])  # the first attempt's outcome, of the same call
            return shared
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._seen[key] = (now, fut)
        try:
            result = await attempt()
        except BaseException as exc:
            self._seen.pop(key, None)
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # retrieved: no "never retrieved" warning when nobody waits
            raise
        fut.set_result(result)
        size = _json_size(result)
        if size > self.max_bytes // 16:  # too large to keep: waiters already sharing it get it, later retries redo it
            self._seen.pop(key, None)
        else:
            self._sizes[key] = size
            self.bytes += size
            if sender is not None:
                self._keep(sender, message_id, size)
            self._expire(self.clock())
        return result

    def _keep(self, sender: str, message_id: str, size: int) -> None:
        """Count a kept answer for `sender`; past its share, its own oldest kept answers go."""
        mine = self._kept.setdefault(sender, OrderedDict())
        mine[message_id] = size
        held = self._kept_bytes[sender] = self._kept_bytes.get(sender, 0) + size
        while mine and (len(mine) > max(1, self.capacity // 4) or held > self.max_bytes // 4):
            oldest, n = mine.popitem(last=False)
            held -= n
            self._seen.pop((sender, oldest), None)
            self.bytes -= self._sizes.pop((sender, oldest), 0)
        self._kept_bytes[sender] = held

    def _forget(self, key: tuple[str | None, str]) -> None:
        """A kept answer gone from `_seen`: off its sender's count."""
        sender, message_id = key
        mine = self._kept.get(sender) if sender is not None else None
        if sender is None or mine is None:
            return
        n = mine.pop(message_id, None)
        if n is None:
            return
        self._kept_bytes[sender] -= n
        if not mine:
            del self._kept[sender], self._kept_bytes[sender]

    def _expire(self, now: float) -> None:
        while self._seen:
            key, (t, fut) = next(iter(self._seen.items()))
            over = len(self._seen) >= self.capacity or self.bytes > self.max_bytes
            if (now - t <= self.ttl_s and not over) or not fut.done():
                break
            self._seen.popitem(last=False)
            self.bytes -= self._sizes.pop(key, 0)
            self._forget(key)


def _json_size(value: Any) -> int:
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):
        return 0


class FaultsConfig(BaseModel):
    """The `faults` section: duplicate suppression, failover, drain."""

    model_config = ConfigDict(extra="forbid")

    dedupe_ttl_s: float = Field(default=0.0, ge=0)  # 0: off (clients that reuse messageIds keep working)
    dedupe_max_bytes: int = Field(default=64 * 1024 * 1024, gt=0)  # answers kept, together (JSON bytes)
    failover: bool = True
    drain_timeout_s: float = Field(default=30.0, gt=0)
