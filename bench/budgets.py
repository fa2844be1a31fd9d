"""bench/budgets: what per-client budgets cost a lone gateway, and what a flooding client gets across two workers,
beside another source tree, side by side.

A lone gateway (no cluster) shares no budget: its rate limiter takes a token and its stream slots count a stream as
before per-client budgets were shared across gateways (gateway/access/budgets.py). This times, in fresh processes
alternating between the trees (`--before OTHER/src` and this tree's `src`), `RateLimiter.take` for one sender (every
request when `rate_limit` is on) and a response stream's `StreamSlots.take` + `give`, plus, for this tree, a shared
limiter (a cluster's: the take counted for the others) — medians of `--repeat` timings of `--number` calls each.

`--flood`: `mma2a serve --workers 2` from each tree in turn (`rate_limit` on: `--rate` a second, burst `--burst`,
authentication off, so every request of the bench is one caller, `ip:127.0.0.1`) in front of bench/fast_agent.py,
flooded for `--seconds` over `--connections` connections (the kernel spreads them over both workers): the answers
admitted against the budget, rate x seconds + burst (before budgets were shared, each worker admitted its own).

    PYTHONPATH=src .venv/bin/python bench/budgets.py --before /tmp/before/src [--rounds 3]
    PYTHONPATH=src .venv/bin/python bench/budgets.py --before /tmp/before/src --flood [--seconds 10] [--rate 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent

PROBE = r"""
import json, statistics, sys, timeit
from mma2a.gateway.access.clients import RateLimiter, StreamSlots
number, repeat = int(sys.argv[1]), int(sys.argv[2])
lone = RateLimiter(1e9, 10**9)
slots = StreamSlots(64, 1024)
def take():
    lone.take("ip:127.0.0.1", 1.0)
def stream():
    slots.take("alice")
    slots.give("alice")
out = {"take_ns": take, "stream_ns": stream}
shared = RateLimiter(1e9, 10**9)
if hasattr(shared, "share"):
    shared.share(lambda: None)
    out["shared_take_ns"] = lambda: shared.take("ip:127.0.0.1", 1.0)
print(json.dumps({k: statistics.median(timeit.repeat(f, number=number, repeat=repeat)) / number * 1e9
                  for k, f in out.items()}))
"""


def probe(src: str, number: int, repeat: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run([sys.executable, "-c", PROBE, str(number), str(repeat)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)  # type: ignore[no-any-return]


async def _flood(url: str, seconds: float, connections: int) -> dict[str, int]:
    """`connections` clients of one connection each, sending SendMessage back to back until `seconds` pass."""
    counts: dict[str, int] = {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}}
    deadline = time.monotonic() + seconds

    async def one(n: int) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(timeout=30, limits=limits) as c:
            i = 0
            while time.monotonic() < deadline:
                body["params"]["message"]["messageId"] = f"flood-{n}-{i}"  # type: ignore[index]
                i += 1
                r = await c.post(url + "/", json=body, headers={"A2A-Version": "1.0"})
                key = str(r.status_code)
                counts[key] = counts.get(key, 0) + 1

    await asyncio.gather(*(one(n) for n in range(connections)))
    return counts


def flood(src: str, args: argparse.Namespace) -> dict[str, Any]:
    """`serve --workers 2` run from `src`, rate-limited, flooded: what it admitted against the budget."""
    sys.path.insert(0, str(ROOT / "bench"))
    from common import free_port, stop, wait_ready

    env = {**os.environ, "PYTHONPATH": src, "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryDirectory(prefix="mma2a-budgets-") as tmp:
        agent_port, port = free_port(), free_port()
        procs = [subprocess.Popen([sys.executable, str(ROOT / "bench" / "fast_agent.py"), "--port", str(agent_port)],
                                  env=env)]
        try:
            agent = f"http://127.0.0.1:{agent_port}"
            wait_ready(agent, timeout=60)
            cfg = Path(tmp) / "gateway.yaml"
            cfg.write_text(json.dumps({"listen": f"127.0.0.1:{port}", "log_decisions": False, "features": False,
                                       "data_dir": str(Path(tmp) / "data"), "agents": [{"name": "fast", "url": agent}],
                                       "rate_limit": {"enabled": True, "rate": args.rate, "burst": args.burst}}))
            log = Path(tmp) / "serve.log"
            with log.open("wb") as out:
                procs.append(subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--workers", "2", "--config",
                                               str(cfg), "--log-level", "warning"], env=env, stdout=out,
                                              stderr=subprocess.STDOUT))
            deadline = time.monotonic() + 60
            while log.read_text(errors="replace").count("mma2a gateway on ") < 2:  # both workers listen
                if time.monotonic() > deadline:
                    raise RuntimeError(log.read_text()[-2000:])
                time.sleep(0.1)
            url = f"http://127.0.0.1:{port}"
            time.sleep(args.burst / args.rate + 0.5)  # the readiness checks' tokens given back: a full burst to start
            counts = asyncio.run(_flood(url, args.seconds, args.connections))
        finally:
            stop(procs)
    budget = args.rate * args.seconds + args.burst
    admitted = counts.get("200", 0)
    return {"answers": counts, "admitted": admitted, "budget": budget,
            "admitted_over_budget": round(admitted / budget, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the other source tree (another commit's src/)")
    ap.add_argument("--rounds", type=int, default=3, help="processes per tree, alternating")
    ap.add_argument("--number", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--flood", action="store_true", help="flood `serve --workers 2` from each tree (see above)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--burst", type=int, default=100)
    ap.add_argument("--connections", type=int, default=16)
    args = ap.parse_args()
    trees = {"before": str(Path(args.before).resolve()), "now": str(ROOT / "src")}
    load = [round(x, 2) for x in os.getloadavg()]
    if args.flood:
        floods: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, src in trees.items():
                floods[name].append(flood(src, args))
        print(json.dumps({"load_average": [load, [round(x, 2) for x in os.getloadavg()]], "rate": args.rate,
                          "burst": args.burst, "seconds": args.seconds, "runs": floods}, indent=2))
        return
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, src in trees.items():
            runs[name].append(probe(src, args.number, args.repeat))
    table = {name: {k: round(statistics.median(r[k] for r in rs), 1) for k in rs[0]} for name, rs in runs.items()}
    ratios = {f"{k}_now_over_before": round(table["now"][k] / table["before"][k], 3)
              for k in table["before"] if k in table["now"]}
    print(json.dumps({"load_average": [load, [round(x, 2) for x in os.getloadavg()]], "ns_per_call": table,
                      "ratios": ratios}, indent=2))


if __name__ == "__main__":
    main()
