"""bench/body_lanes: the JSON body worker's queue per caller, in process (docs/security.md LN1).

1. What the queue costs a job: its bookkeeping alone (`FairQueue.put`, `take`, `done`), best of `--rounds` of 100,000;
   and a tiny job's round trip to a worker process (a 2-byte body's `CHECK`) through the parser's queue against the
   way before (the lane's thread handed the job by `run_in_executor`, first come first served), interleaved, best of
   `--rounds` of 2,000 each.
2. Mallory's `--jobs` answers of `--values` empty objects each (a REST GetTask's conversion, `ANSWER`), then alice's one
   body of 20,000 values (its REST send's read, `SEND`), handed in right after: how long alice waits for her answer,
   how many of mallory's ran before hers, and the longest a 1 ms ticker on the loop waited, for one line for everyone
   (before: FIFO), the queue per caller with one lane (now, the default), and with two lanes (`limits.body_worker_lanes`).

    PYTHONPATH=src .venv/bin/python bench/body_lanes.py [--values 300000] [--jobs 4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from mma2a.gateway.bindings.body_parser import JSONBodyParser, WorkerLane
from mma2a.gateway.bindings.body_queue import FairQueue
from mma2a.json_worker import ANSWER, CHECK, SEND
from mma2a.sdk_answers import DICT, TASK, job_body, many_values


def task(values: int) -> dict[str, Any]:
    return {"id": "0f6e4c1a-4d1c-4c57-9f56-6a1f5d2b8c11", "contextId": "7d3b2a10-98f4-4d6e-b0b2-3c7e1f9a2d44",
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-05T19:00:00.123456Z"},
            "history": [{"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello there"}],
                         "metadata": {"a": [{} for _ in range(values)]}}]}


def bookkeeping(rounds: int) -> None:
    n = 100_000
    best = float("inf")
    for _ in range(rounds):
        q: FairQueue[int] = FairQueue(8, 1 << 30)
        t0 = time.perf_counter()
        for i in range(n):
            q.put("alice" if i & 1 else "mallory", i, 100)
            taken = q.take()
            assert taken is not None
            q.done(taken[0], 100)
        best = min(best, (time.perf_counter() - t0) / n)
    print(f"the queue's bookkeeping (put, take, done): {best * 1e6:.2f} us a job, best of {rounds} x {n:,}")


async def round_trip(rounds: int) -> None:
    n = 2_000
    body = b"[]"
    parser = JSONBodyParser(64)
    lane = WorkerLane(64)
    before = ThreadPoolExecutor(1)
    loop = asyncio.get_running_loop()

    async def old() -> None:  # as before: the lane's one thread, handed each job first come first served
        for _ in range(n):
            await loop.run_in_executor(before, lane._exchange, body, CHECK)

    async def new() -> None:
        for _ in range(n):
            await parser._answer(body, CHECK, "alice")

    try:
        await old()
        await new()  # (both workers started and warm)
        best = {"before (run_in_executor)": float("inf"), "now (FairQueue, the lane's thread)": float("inf")}
        arms = {"before (run_in_executor)": old, "now (FairQueue, the lane's thread)": new}
        for r in range(rounds):
            for name, arm in (list(arms.items()) if r % 2 == 0 else list(arms.items())[::-1]):
                t0 = time.perf_counter()
                await arm()
                best[name] = min(best[name], (time.perf_counter() - t0) / n)
    finally:
        await parser.close()
        await loop.run_in_executor(before, lane._close_worker)
        before.shutdown()
    print(f"a tiny job's round trip to the worker, best of {rounds} interleaved x {n:,}:")
    for name, t in best.items():
        print(f"  {name}: {t * 1e6:.1f} us")


async def fairness(values: int, jobs: int, rounds: int) -> None:
    data = many_values(task(values))
    assert data is not None
    answer = job_body(TASK, DICT, True, data)
    alice_body = orjson.dumps({"message": {"messageId": "m-alice", "role": "ROLE_USER", "parts": [{"text": "hi"}],
                                           "metadata": {"a": [{} for _ in range(20_000)]}}})
    arms = {"one line for everyone (before)": (1, True), "per caller, 1 lane (now)": (1, False),
            "per caller, 2 lanes": (2, False)}
    best: dict[str, tuple[float, int, float, float]] = {}
    for r in range(rounds):
        for name, (lanes, one_line) in (list(arms.items()) if r % 2 == 0 else list(arms.items())[::-1]):
            parser = JSONBodyParser(64, lanes=lanes, jobs_per_caller=jobs + 1)
            try:
                for _ in range(lanes):  # every worker started and warm (its SDK types loaded)
                    await asyncio.gather(*(parser._answer(answer, ANSWER, f"w{i}") for i in range(lanes)))
                await parser._answer(alice_body, SEND, "alice")
                order: list[str] = []
                gaps: list[float] = []
                done = False

                async def ticker() -> None:
                    last = time.perf_counter()
                    while not done:
                        await asyncio.sleep(0.001)
                        now = time.perf_counter()
                        gaps.append(now - last)
                        last = now

                async def job(body: bytes, kind: int, caller: str, who: str) -> float:
                    t0 = time.perf_counter()
                    await parser._answer(body, kind, caller)
                    order.append(who)
                    return time.perf_counter() - t0

                tick = asyncio.create_task(ticker())
                t0 = time.perf_counter()
                mallory = [asyncio.create_task(job(answer, ANSWER, "mallory", "m")) for _ in range(jobs)]
                await asyncio.sleep(0.05)  # (mallory's first jobs have begun)
                alice = await job(alice_body, SEND, "mallory" if one_line else "alice", "a")
                await asyncio.gather(*mallory)
                total = time.perf_counter() - t0
                done = True
                await tick
            finally:
                await parser.close()
            ahead = order.index("a")
            got = best.get(name)
            if got is None or alice < got[0]:
                best[name] = (alice, ahead, max(gaps), total)
    print(f"mallory's {jobs} answers of {values:,} values, then alice's body of 20,000 values; best of {rounds} "
          f"interleaved (os.cpu_count() {os.cpu_count()}, load {os.getloadavg()[0]:.2f}):")
    for name, (alice, ahead, gap, total) in best.items():
        print(f"  {name}: alice answered in {alice * 1e3:,.0f} ms after {ahead} of mallory's; all {jobs + 1} in "
              f"{total * 1e3:,.0f} ms; the loop waited at most {gap * 1e3:.0f} ms")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--values", type=int, default=300_000)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    bookkeeping(max(args.rounds, 3))
    asyncio.run(round_trip(max(args.rounds, 3)))
    asyncio.run(fairness(args.values, args.jobs, args.rounds))
