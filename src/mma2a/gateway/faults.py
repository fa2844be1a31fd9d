"""Fault tolerance: graceful drain, duplicate sends, failover within a pool.

- `Drain`: counts in-flight requests; on SIGTERM the gateway refuses new work (503 with
  `Retry-After`, from `security.AccessControl`), waits for what it accepted to finish, then
  lets uvicorn close (`DrainingServer`).
- `Deduper`: a client that retries a `SendMessage` with the same `messageId` (after a
  timeout, a lost connection) gets the first attempt's answer, never a second delivery.
  Keyed by (sender, messageId), bounded, with a time to live.
- `failover_parts`: which parts of a failed leg may go to another member of their pool
  (the route came from `load_balance` or capability routing, never a broadcast, which
  already reached every member).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import uvicorn
from pydantic import BaseModel, ConfigDict, Field

from ..errors import DispatchError, MMA2AError
from ..routing import RouteDecision
from ..serving import Server
from ..tls import ServerTLS

if TYPE_CHECKING:
    from .aggregate import LegResult
    from .dispatch import Dispatcher
    from .legs import Leg

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
                 on_started: Callable[[], None] | None = None, tls: ServerTLS | None = None) -> None:
        super().__init__(config, on_started=on_started, tls=tls)
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
    """The answer to a (sender, messageId) already seen, or the pending first attempt to wait for."""

    def __init__(self, ttl_s: float = 600.0, capacity: int = 20_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.capacity = capacity
        self.clock = clock
        self._seen: OrderedDict[tuple[str | None, str], tuple[float, asyncio.Future[Any]]] = OrderedDict()

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
        return result

    def _expire(self, now: float) -> None:
        while self._seen:
            key, (t, fut) = next(iter(self._seen.items()))
            if (now - t <= self.ttl_s and len(self._seen) < self.capacity) or not fut.done():
                break
            self._seen.popitem(last=False)


def is_unreachable(exc: DispatchError) -> bool:
    """A failure that says the agent is gone (refused, reset, disconnected mid-request), not slow or wrong."""
    return " unreachable: " in exc.message or "ClientOSError" in exc.message or "Connection reset" in exc.message


def failover_parts(decision: Any, agent: str) -> list[int] | None:
    """Indexes of the parts sent to `agent` when every one of them may go to another pool member, else None."""
    indexes = []
    for pr in decision.parts:
        if agent not in pr.agents():
            continue
        if not any(a.startswith(("load_balance:", "capability")) for a in pr.actions) or len(pr.targets) != 1:
            return None
        if pr.targets[0].via:
            return None
        indexes.append(pr.index)
    return indexes or None


class FaultsConfig(BaseModel):
    """The `faults` section: duplicate suppression, failover, drain."""

    model_config = ConfigDict(extra="forbid")

    dedupe_ttl_s: float = Field(default=0.0, ge=0)  # 0: off (clients that reuse messageIds keep working)
    failover: bool = True
    drain_timeout_s: float = Field(default=30.0, gt=0)


async def fail_over(
    dispatcher: Dispatcher, leg: Leg, message: dict[str, Any], configuration: Mapping[str, Any] | None,
    decision: RouteDecision, exc: DispatchError,
) -> LegResult | None:
    """Send a gone agent's leg to another member of its pool; None when that is not possible.

    The agent is ejected at once (the health check re-admits it when its card answers
    again), the message is routed afresh without it, and the leg's parts go to the one
    agent the new decision names. Repeats while members remain.
    """
    from .legs import Leg  # config → faults (FaultsConfig): the request path is not imported at load

    if not is_unreachable(exc):
        return None
    indexes = failover_parts(decision, leg.agent)
    if indexes is None:
        return None
    dispatcher.directory.mark(leg.agent, ok=False, error=exc.message, eject=True)
    try:
        new = dispatcher.reroute(message, configuration)
    except MMA2AError:
        return None
    by_index = {pr.index: pr for pr in new.parts}
    agents = {t.agent for i in indexes if i in by_index for t in by_index[i].targets}
    if len(agents) != 1 or leg.agent in agents:
        return None
    other = agents.pop()
    log.warning("failover: %s is unreachable (%s); parts %s go to %s", leg.agent, exc.message, indexes, other)
    dispatcher.metrics.agent_errors.labels(leg.agent).inc()
    return await dispatcher.dispatch(Leg(other, leg.parts), message, configuration, new)
