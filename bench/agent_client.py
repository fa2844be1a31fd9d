"""bench/agent_client: CPU per JSON-RPC call of the gateway's two downstream HTTP clients, side by side.

The same `SendMessage` body posted to bench/fast_agent.py (its own process) by
- `aiohttp`: one `ClientSession` used as `Transport` used it for every call before `gateway.http1`
  (keep-alive pool, a total timeout, `ssl=True`, the same headers), and
- `http1`: the gateway's lean pool (`mma2a.gateway.downstream.http1.HttpPool`), what `Transport.call` uses for http:// agents,
each answer read whole and parsed with orjson, `--concurrency` calls in flight; rounds interleaved.
The figure is this process's CPU time (user + system, all threads) per call: the client's own
work, with the agent's in another process.

    .venv/bin/python bench/agent_client.py [--calls 20000] [--concurrency 16] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import orjson
import uvloop
from common import free_port, wait_ready

from mma2a.gateway.downstream.http1 import HttpPool

BODY = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
    "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}})
HEADERS = {"Content-Type": "application/json", "A2A-Version": "1.0"}


async def with_aiohttp(url: str, calls: int, concurrency: int) -> None:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256, limit_per_host=256, keepalive_timeout=30))
    timeout = aiohttp.ClientTimeout(total=30)

    async def worker(n: int) -> None:
        for _ in range(n):
            async with session.post(url, data=BODY, headers=HEADERS, timeout=timeout, ssl=True) as resp:
                assert "result" in orjson.loads(await resp.read())

    await asyncio.gather(*(worker(calls // concurrency) for _ in range(concurrency)))
    await session.close()


async def with_http1(url: str, calls: int, concurrency: int) -> None:
    pool = HttpPool()

    async def worker(n: int) -> None:
        for _ in range(n):
            resp = await pool.request("POST", url, BODY, HEADERS, timeout_s=30)
            assert "result" in orjson.loads(resp.body)

    await asyncio.gather(*(worker(calls // concurrency) for _ in range(concurrency)))
    await pool.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    port = free_port()
    agent = subprocess.Popen([sys.executable, str(Path(__file__).with_name("fast_agent.py")), "--port", str(port)])
    url = f"http://127.0.0.1:{port}/"
    clients: dict[str, Callable[[str, int, int], Awaitable[None]]] = {"aiohttp": with_aiohttp, "http1": with_http1}
    per_round: dict[str, list[float]] = {name: [] for name in clients}
    try:
        wait_ready(url.rstrip("/"))
        for name, run in clients.items():  # warm up
            uvloop.run(run(url, 2000, args.concurrency))
        for _ in range(args.rounds):
            for name, run in clients.items():
                t0 = time.process_time()
                uvloop.run(run(url, args.calls, args.concurrency))
                per_round[name].append(round(1e6 * (time.process_time() - t0) / args.calls, 1))
    finally:
        agent.terminate()
        agent.wait(10)
    medians = {name: statistics.median(v) for name, v in per_round.items()}
    ratio = round(medians["aiohttp"] / medians["http1"], 1)
    if args.json:
        print(json.dumps({"cpu_us_per_call": medians, "per_round": per_round, "aiohttp_over_http1": ratio}))
        return
    for name in clients:
        print(f"{name:8s} {medians[name]:7.1f} us CPU per call  rounds {per_round[name]}")
    print(f"aiohttp / http1: {ratio}x")


if __name__ == "__main__":
    main()
