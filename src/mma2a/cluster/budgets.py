"""The clients' budget use, exchanged between a cluster's gateways over a NATS core subject (`<name>.budgets`).

Each gateway publishes what its `SharedBudgets` reports (the tokens each client took since the last report, what
each client holds now) every `cluster.budget_report_s`, or sooner when the ledger wakes it (a client took a quarter
of a burst, a count changed; wakes within `COALESCE_S` go out as one report), and feeds every other gateway's
report to its ledger. With nothing to tell and nothing to forget the loop sets no timer: the first take (or another
gateway's holds) starts a period. Core NATS, not JetStream: a report is worth only its freshness — one lost is made good by the
next (takes are then under-counted once; holds are snapshots), nothing is stored, and a publish costs the gateway
a buffer append, never a round trip on a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import orjson

from ..gateway.access.budgets import SharedBudgets
from ..serving import cancel_tasks
from .link import Member

log = logging.getLogger("mma2a.cluster")

COALESCE_S = 0.005  # wakes this close together make one report
MAX_ENTRIES = 4096  # clients per message (a report past it goes out in several: NATS' default max payload is 1 MiB)


def subject(cluster: str) -> str:
    return f"{cluster}.budgets"


class BudgetExchange:
    """Publishes this gateway's budget reports and takes in the others'."""

    def __init__(self, member: Member, budgets: SharedBudgets) -> None:
        self.member = member
        self.budgets = budgets
        self.every_s = member.config.budget_report_s
        self._wanted = asyncio.Event()
        self._soon = False  # a wake asked for a report now, not at the period's end
        self._idle = False  # the loop waits with no timer (nothing to tell, nothing to forget)
        self._sub: Any = None
        self._tasks: list[asyncio.Task[Any]] = []
        self.sent = 0
        self.failed = 0

    def wake(self) -> None:
        """Report soon (called from the request path: one flag)."""
        self._soon = True
        self._wanted.set()

    def arm(self) -> None:
        """There is something to report within the period: start one if the loop waits with nothing to do."""
        if self._idle:
            self._wanted.set()

    async def start(self) -> None:
        self._sub = await self.member.nc.subscribe(subject(self.member.names.cluster), cb=self._heard)
        self.budgets.wake_with(self.wake, self.arm)
        self._tasks.append(asyncio.create_task(self._run(), name="budget reports"))

    async def stop(self) -> None:
        await cancel_tasks(self._tasks)
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self.budgets.idle():  # no timer while there is nothing to tell: an idle gateway is not woken
                self._idle = True
                await self._wanted.wait()
                self._idle = False
                if not self._soon:  # armed (a first take, another gateway's holds): the period starts now
                    self._wanted.clear()
            if self._wanted.is_set():  # a wake asked for a report now: wakes close together make one report
                await asyncio.sleep(COALESCE_S)
            else:
                timer = loop.call_later(self.every_s, self._wanted.set)
                await self._wanted.wait()
                timer.cancel()
                if loop.time() < timer.when():  # woken before the period: wakes close together make one report
                    # (the period's own turn has nothing to gather: its sleep was one more timer and wake-up)
                    await asyncio.sleep(COALESCE_S)
            self._wanted.clear()
            self._soon = False
            now = time.monotonic()
            self.budgets.expire(now)
            report = self.budgets.report(now)
            if report is not None:
                await self._publish(report)

    async def _publish(self, report: dict[str, Any]) -> None:
        me = self.member.id
        nc = self.member.nc
        for part in split(report):
            try:
                await nc.publish(subject(self.member.names.cluster), orjson.dumps({"g": me, **part}))
                self.sent += 1
            except Exception as exc:  # NATS away: the takes of this report are not told (the holds are next time)
                self.failed += 1
                log.debug("cluster: budget report not published: %r", exc)

    async def _heard(self, msg: Any) -> None:
        try:
            report = orjson.loads(msg.data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(report, dict) or report.get("g") == self.member.id or not isinstance(report.get("g"), str):
            return
        self.budgets.heard(report["g"], report, time.monotonic())


def split(report: dict[str, Any]) -> list[dict[str, Any]]:
    """`report` as messages of at most `MAX_ENTRIES` clients each; the holds whole in the first (a count budget is
    bounded by the gateway's own total, e.g. `limits.max_response_streams`), the takes spread over the rest."""
    taken: dict[str, dict[str, Any]] = report.get("t", {})
    if sum(len(t) for t in taken.values()) <= MAX_ENTRIES:
        return [report]
    first: dict[str, Any] = {k: v for k, v in report.items() if k != "t"}
    parts = [first] if first else []
    chunk: dict[str, dict[str, Any]] = {}
    n = 0
    for budget, per_key in taken.items():
        for key, tokens in per_key.items():
            chunk.setdefault(budget, {})[key] = tokens
            n += 1
            if n == MAX_ENTRIES:
                parts.append({"t": chunk})
                chunk, n = {}, 0
    if chunk:
        parts.append({"t": chunk})
    return parts
