"""bench/client_link_cost: what looking at the client's link costs a leg on the slots' fast path (a free slot,
nobody queued): `AgentSlots.acquire` + `release` as this tree has them, against the same `acquire` without the look
(a subclass: the code before), interleaved in one process, a `ClientLink` set as the HTTP server sets one for each
request. Prints the best of each over `--rounds` rounds of `--n` calls, and the difference.

    PYTHONPATH=src .venv/bin/python bench/client_link_cost.py [--rounds 15] [--n 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import timeit
from collections.abc import Awaitable

from mma2a import client_link
from mma2a.client_link import ClientLink
from mma2a.gateway.downstream.agent_limit import ConcurrencyLimit
from mma2a.gateway.downstream.overload import AgentSlots


class WithoutTheLook(AgentSlots):
    """`acquire` as it was before a leg at a free slot looked at its client's link."""

    def acquire(self, priority: int, deadline: float | None = None) -> Awaitable[None] | None:
        if self.inflight < self.limit.value and not self.queued and priority >= self.floor:
            self.arrivals.count(priority)
            self.inflight += 1
            return None
        return self._enqueue(priority, self._now(), deadline)


async def main(rounds: int, n: int) -> None:
    client_link.current.set(ClientLink())
    best = {"without": float("inf"), "with": float("inf")}
    for _ in range(rounds):
        for name, cls in (("without", WithoutTheLook), ("with", AgentSlots)):
            slots = cls("a", ConcurrencyLimit(64), max_queue=8, queue_timeout_s=5.0)

            def once(slots: AgentSlots = slots) -> None:
                slots.acquire(5, None)
                slots.release(None)

            best[name] = min(best[name], timeit.timeit(once, number=n) / n * 1e9)
    print(f"acquire+release at a free slot: without the look {best['without']:.1f} ns, with it {best['with']:.1f} ns "
          f"(+{best['with'] - best['without']:.1f} ns, {best['with'] / best['without']:.3f}x), best of {rounds} "
          f"interleaved rounds of {n}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--n", type=int, default=100_000)
    args = ap.parse_args()
    asyncio.run(main(args.rounds, args.n))
