"""bench/body_queue_total: what the JSON body worker's queue costs a job (`FairQueue.put`, `take`, `done`), with its
total across callers (`limits.body_worker_bytes_total`, docs/security.md ED4) where the tree has one, so that
`bench/ab.py` compares a tree before it with one after:

    .venv/bin/python bench/ab.py --a /tmp/base/src --b src --rounds 7 --key us_per_job -- bench/body_queue_total.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import time

from mma2a.gateway.bindings.body_queue import FairQueue


def per_job(n: int, rounds: int) -> tuple[float, bool]:
    """The best time a job of `rounds` runs of `n` (two callers taking turns, each job within the total), and
    whether the queue had a total."""
    try:
        make = lambda: FairQueue(8, 1 << 30, 512 << 20)  # noqa: E731
        make()
        total = True
    except TypeError:  # a tree from before the total
        make = lambda: FairQueue(8, 1 << 30)  # noqa: E731
        total = False
    best = float("inf")
    for _ in range(rounds):
        q = make()
        t0 = time.perf_counter()
        for i in range(n):
            q.put("alice" if i & 1 else "mallory", i, 100)
            taken = q.take()
            assert taken is not None
            q.done(taken[0], 100)
        best = min(best, (time.perf_counter() - t0) / n)
    return best, total


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    best, total = per_job(args.jobs, args.rounds)
    if args.json:
        print(json.dumps({"us_per_job": best * 1e6, "total": total, "load": os.getloadavg()[0]}))
    else:
        print(f"load average {os.getloadavg()[0]:.2f}; the queue's bookkeeping {'with' if total else 'without'} a "
              f"total: {best * 1e6:.2f} us a job, best of {args.rounds} x {args.jobs:,}")
