"""bench/http1_cost: CPU per exchange of the gateway's HTTP/1.1 agent pool (gateway/downstream/http1.py), in-process.

`--concurrency` tasks post the wrk script's one-text-part SendMessage body to bench/fast_agent.py (its own process,
over loopback) through one `HttpPool`; every answer is checked (HTTP 200). Reports this process's CPU microseconds per
exchange (`process_time`: the pool's Python, the event loop and the system calls; the agent's CPU is its own), best
of `--repeat` runs of `--n` exchanges. Compare two source trees with bench/ab.py:

    .venv/bin/python bench/http1_cost.py [--n 4000] [--repeat 5] [--concurrency 16] [--json]
    .venv/bin/python bench/ab.py --a /tmp/base/src --b src --rounds 6 --key exchange -- bench/http1_cost.py --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from common import free_port, stop, wait_ready
from send_cost import body

from mma2a.gateway.downstream.http1 import HttpPool

ROOT = Path(__file__).resolve().parent.parent
HEADERS = {"Content-Type": "application/json", "A2A-Version": "1.0"}


async def measure(url: str, n: int, repeat: int, concurrency: int) -> float:
    pool = HttpPool()

    async def run(count: int) -> None:
        left = iter(range(count))

        async def worker() -> None:
            for _ in left:
                r = await pool.request("POST", url, body(), HEADERS)
                if r.status != 200 or b'"result"' not in r.body:
                    raise AssertionError(f"bad answer: {r.status} {r.body[:200]!r}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    try:
        await run(max(500, n // 4))  # warm: connections, the allocator
        best = float("inf")
        for _ in range(repeat):
            t0 = time.process_time()
            await run(n)
            best = min(best, (time.process_time() - t0) / n * 1e6)
    finally:
        await pool.close()
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    port = free_port()
    agent = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fast_agent.py"), "--port", str(port)])
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_ready(url.rstrip("/"), timeout=60)
        import uvloop

        best = uvloop.run(measure(url, args.n, args.repeat, args.concurrency))
    finally:
        stop([agent])
    print(json.dumps({"exchange": round(best, 2)}) if args.json else f"HTTP/1 exchange {best:8.2f} us CPU")


if __name__ == "__main__":
    main()
