"""bench/worker_placement: where the kernel runs the two workers of `serve --workers 2`, bound (`--pin-cpus`, the
default when the workers are as many as the CPUs) and left to the kernel (`--no-pin-cpus`), under wrk.

The arms are bench/gateway.py's `gateway_workers2` and `gateway_workers2_free`, in interleaved rounds. While wrk drives
an arm, every ~2 ms each worker's state and the CPU it last ran on are read from /proc (`stat`: state, `processor`);
reported per arm: the share of the samples in which both workers were runnable (state R: running or waiting for a CPU)
and of those, how many had both on one CPU — one waiting for the other while the rest of the host ran elsewhere —
beside the requests a second, CPU a request and CPU moves (`se.nr_migrations`) a request, from bench/gateway.py.

    .venv/bin/python bench/worker_placement.py [--rounds 3] [--seconds 10] [--connections 16]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway import Arms, comm, tree  # noqa: E402

from common import send_message_lua, stop  # noqa: E402

ARMS = ("gateway_workers2", "gateway_workers2_free")


def state(pid: int) -> tuple[str, int]:
    """A process's scheduler state and the CPU it last ran on (/proc/PID/stat fields 3 and 39)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0], int(fields[36])


def sample(workers: list[int], until: threading.Event, counts: Counter[str]) -> None:
    while not until.wait(0.002):
        try:
            states = [state(p) for p in workers]
        except (FileNotFoundError, ProcessLookupError):
            continue
        counts["samples"] += 1
        runnable = [cpu for st, cpu in states if st == "R"]
        if len(runnable) == 2:
            counts["both_runnable"] += 1
            counts["one_cpu" if runnable[0] == runnable[1] else "two_cpus"] += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=16)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mma2a-placement-"))
    script = tmp / "send.lua"
    script.write_text(send_message_lua())
    arms = Arms(tmp, list(ARMS), threads=True)
    rows: dict[str, list[dict[str, float]]] = {a: [] for a in ARMS}
    try:
        for arm in ARMS:
            arms.run(arm, 2, args.connections, str(script))  # warm up
        for _ in range(args.rounds):
            for arm in ARMS:
                workers = [p for p in tree(arms.pid[arm]) if comm(p) == "python" and p != arms.pid[arm]]
                assert len(workers) == 2, workers
                counts: Counter[str] = Counter()
                done = threading.Event()
                sampler = threading.Thread(target=sample, args=(workers, done, counts))
                sampler.start()
                try:
                    r = arms.run(arm, args.seconds, args.connections, str(script))
                finally:
                    done.set()
                    sampler.join()
                both = max(1, counts["both_runnable"])
                rows[arm].append({"ok_rps": r["ok_rps"], "cpu_us_per_req": r["cpu_us_per_req"],
                                  "migrations_per_1k_req": 1000 * r["threads"].get("migrations", 0.0),
                                  "both_runnable": counts["both_runnable"] / max(1, counts["samples"]),
                                  "on_one_cpu": counts["one_cpu"] / both})
    finally:
        stop(arms.procs)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{args.connections} connections, {args.rounds} rounds of {args.seconds} s (medians)")
    print("| arm | answered/s | CPU µs a request | CPU moves a 1,000 requests | both runnable | of which on one CPU |")
    print("|---|---|---|---|---|---|")
    for arm, rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"| {arm} | {med['ok_rps']:,.0f} | {med['cpu_us_per_req']:.0f} | {med['migrations_per_1k_req']:.2f} | "
              f"{100 * med['both_runnable']:.0f}% | {100 * med['on_one_cpu']:.0f}% |")
    a, b = (rows[x] for x in ARMS)
    print(f"bound over free: answered {statistics.median(x['ok_rps'] for x in a) / statistics.median(x['ok_rps'] for x in b):.3f}x,"
          f" CPU a request {statistics.median(x['cpu_us_per_req'] for x in a) / statistics.median(x['cpu_us_per_req'] for x in b):.3f}x")


if __name__ == "__main__":
    main()
