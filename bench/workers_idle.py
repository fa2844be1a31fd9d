"""bench/workers_idle: what an idle `mma2a serve --workers 2` costs a second (its workers, its nats-server), beside
one idle worker (`mma2a serve`) and, with `--before SRC`, beside the same from another source tree: the cluster's
background work (heartbeats, watches, the dispatcher's pull requests, the push takeover, budget reports), paid
whether requests come or not, and spread over the requests when they do.

The arms are bench/gateway.py's (`gateway`, `gateway_workers2`, `gateway_workers2_before`), started together and
measured in the same windows: each window `--seconds` long after `--settle` seconds, CPU of every process of the arm
from /proc (ns, all threads), `--windows` times.

    .venv/bin/python bench/workers_idle.py [--before /tmp/old/src] [--seconds 20] [--windows 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway import Arms, comm, cpu_seconds, tree  # noqa: E402

from common import stop  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", help="another source tree (a src/ holding mma2a/): the arm gateway_workers2_before")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--settle", type=float, default=10.0)
    args = ap.parse_args()
    names = ["gateway", "gateway_workers2"] + (["gateway_workers2_before"] if args.before else [])
    tmp = Path(tempfile.mkdtemp(prefix="mma2a-idle-"))
    arms = Arms(tmp, names, before=str(Path(args.before).resolve()) if args.before else None)
    per: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    try:
        time.sleep(args.settle)
        for _ in range(args.windows):
            pids = {n: tree(arms.pid[n]) for n in names}
            t0 = time.monotonic()
            c0 = {n: {p: cpu_seconds(p) for p in ps} for n, ps in pids.items()}
            time.sleep(args.seconds)
            dt = time.monotonic() - t0
            for n, ps in pids.items():
                by: dict[str, float] = {}
                for p in ps:
                    kind = "nats-server" if comm(p) == "nats-server" else ("supervisor" if p == arms.pid[n] and n != "gateway"
                                                                             else "workers")
                    by[kind] = by.get(kind, 0.0) + (cpu_seconds(p) - c0[n][p]) * 1e3 / dt
                by["total"] = sum(by.values())
                per[n].append(by)
    finally:
        stop(arms.procs)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"ms of CPU a second, idle (median of {args.windows} windows of {args.seconds:g} s)")
    print("| arm | total | workers (or the one gateway) | nats-server | supervisor |")
    print("|---|---|---|---|---|")
    for n, rows in per.items():
        med = {k: statistics.median(r.get(k, 0.0) for r in rows) for k in ("total", "workers", "nats-server", "supervisor")}
        print(f"| {n} | {med['total']:.2f} | {med['workers']:.2f} | {med['nats-server']:.2f} | {med['supervisor']:.2f} |")


if __name__ == "__main__":
    main()
