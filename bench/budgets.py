"""bench/budgets: what per-client budgets cost a lone gateway, beside another source tree, in-process and side by side.

A lone gateway (no cluster) shares no budget: its rate limiter takes a token and its stream slots count a stream as
before per-client budgets were shared across gateways (gateway/access/budgets.py). This times, in fresh processes
alternating between the trees (`--before OTHER/src` and this tree's `src`), `RateLimiter.take` for one sender (every
request when `rate_limit` is on) and a response stream's `StreamSlots.take` + `give`, plus, for this tree, a shared
limiter (a cluster's: the take counted for the others) — medians of `--repeat` timings of `--number` calls each.

    PYTHONPATH=src .venv/bin/python bench/budgets.py --before /tmp/before/src [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the other source tree (another commit's src/)")
    ap.add_argument("--rounds", type=int, default=3, help="processes per tree, alternating")
    ap.add_argument("--number", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    trees = {"before": str(Path(args.before).resolve()), "now": str(ROOT / "src")}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    load = [round(x, 2) for x in os.getloadavg()]
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
