"""bench/gateway_tail: where the gateway's latency tail comes from, at 1 connection (or more).

Gateways in front of bench/fast_agent.py, each started through bench/gc_probe.py (every garbage
collection recorded with its generation and length), driven by wrk with the checking script
of bench/gateway.py, arms interleaved in rounds. Per arm: p50, p99, p99.9 and max, CPU per
request, and the collections that fell inside the measured windows: how many of each
generation, the longest, and how many took 0.5 ms or more (each such pause delays the request
in flight by as much). Arms: `gateway` (defaults: history on), `gateway_nohistory`.

    .venv/bin/python bench/gateway_tail.py [--arms gateway,gateway_nohistory] [--rounds 3] [--seconds 10]
                                           [--connections 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import free_port, run_wrk, send_message_lua, stop, wait_ready
from gateway import FAST_EXPECT, cpu_seconds

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
EXTRA: dict[str, dict[str, Any]] = {"gateway": {}, "gateway_nohistory": {"history": {"enabled": False}}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", default="gateway,gateway_nohistory")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    names = args.arms.split(",")
    for name in names:
        if name not in EXTRA:
            sys.exit(f"--arms: unknown arm {name!r}; use {', '.join(EXTRA)}")
    tmp = Path(tempfile.mkdtemp(prefix="mma2a-bench-tail-"))
    script = tmp / "send.lua"
    script.write_text(send_message_lua())
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs: list[subprocess.Popen[bytes]] = []
    url: dict[str, str] = {}
    pid: dict[str, int] = {}
    windows: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    load = [os.getloadavg()[0]]
    try:
        fast_port = free_port()
        procs.append(subprocess.Popen([PY, str(ROOT / "bench" / "fast_agent.py"), "--port", str(fast_port)], env=env))
        fast_url = f"http://127.0.0.1:{fast_port}"
        wait_ready(fast_url, timeout=60)
        for name in names:
            port = free_port()
            cfg = tmp / f"{name}.yaml"
            cfg.write_text(json.dumps({"listen": f"127.0.0.1:{port}", "log_decisions": False, "features": False,
                                       "data_dir": str(tmp / f"{name}-data"),
                                       "agents": [{"name": "fast", "url": fast_url}], **EXTRA[name]}))
            p = subprocess.Popen([PY, str(ROOT / "bench" / "gc_probe.py"), str(tmp / f"{name}-gc.jsonl"), "serve",
                                  "--config", str(cfg), "--log-level", "warning"], env=env)
            procs.append(p)
            url[name], pid[name] = f"http://127.0.0.1:{port}", p.pid
        for name in names:
            wait_ready(url[name], timeout=60)
            run_wrk(url[name] + "/", 3, args.connections, str(script), FAST_EXPECT, "/", threads=1)  # warm up
        for r in range(args.rounds):
            for name in (names if r % 2 == 0 else names[::-1]):
                cpu0, t0 = cpu_seconds(pid[name]), time.time()
                res = run_wrk(url[name] + "/", args.seconds, args.connections, str(script), FAST_EXPECT, "/", threads=1)
                windows[name].append((t0, time.time()))
                res["cpu_us_per_req"] = 1e6 * (cpu_seconds(pid[name]) - cpu0) / max(1, res["requests"])
                runs[name].append(res)
        load.append(os.getloadavg()[0])
    finally:
        stop(procs)
    result: dict[str, Any] = {"connections": args.connections, "rounds": args.rounds, "seconds": args.seconds,
                              "load_average": load, "arms": {}}
    for name in names:
        gc_file = tmp / f"{name}-gc.jsonl"
        events = [json.loads(line) for line in gc_file.read_text().splitlines()] if gc_file.exists() else []
        inside = [e for e in events if any(a <= e[3] <= b for a, b in windows[name])]
        requests = sum(r["requests"] for r in runs[name])
        result["arms"][name] = {
            **{k: round(statistics.median(r[k] for r in runs[name]), 3)
               for k in ("rps", "p50_ms", "p99_ms", "p999_ms", "max_ms", "cpu_us_per_req")},
            "requests": requests, "errors": sum(r["errors"] for r in runs[name]),
            "collections": {str(g): sum(1 for e in inside if e[0] == g) for g in (0, 1, 2)},
            "gc_max_ms": round(1e3 * max((e[1] for e in inside), default=0.0), 3),
            "gc_ms_per_1000_requests": round(1e6 * sum(e[1] for e in inside) / max(1, requests), 3),
            "gc_pauses_over_0_5_ms": sum(1 for e in inside if e[1] >= 0.0005),
            "gc_threshold": events[-1][4] if events else None, "frozen": events[-1][5] if events else None,
            "collections_in_all": len(events)}
    shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.connections} connection(s), {args.rounds} rounds of {args.seconds} s, load average {load}")
    for name, a in result["arms"].items():
        print(f"{name:18s} {a['rps']:7.0f} req/s  p50 {a['p50_ms']:.2f}  p99 {a['p99_ms']:.2f}  p99.9 {a['p999_ms']:.2f}  "
              f"max {a['max_ms']:.1f} ms  CPU {a['cpu_us_per_req']:.0f} µs/req  collections {a['collections']}  "
              f"longest {a['gc_max_ms']} ms, {a['gc_pauses_over_0_5_ms']} >= 0.5 ms, "
              f"{a['gc_ms_per_1000_requests']} ms per 1,000 requests")


if __name__ == "__main__":
    main()
