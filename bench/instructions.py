"""bench/instructions: user-space instructions a routed request costs one `mma2a serve`, beside the stock proxy.

Each arm runs under valgrind's callgrind (Debian's `valgrind`) with instrumentation off until wrk (16 connections, the
fast agent behind, as bench/gateway.py drives it) has warmed it up for 10 s; then callgrind counts the process's
instructions over one `--seconds` run and the count is divided by the requests answered. What it measures is the
process's own Python and C work: a count, not a time, so it holds on a loaded machine where req/s does not (±3k a
request run to run at load 2-6; at load past ~10 the per-second work of an idle loop, ~0.5M instructions a second,
weighs on fewer requests). It does not count the kernel's side of the sockets, cache misses, or other processes (the
history writer): for those, bench/gateway.py. With `--cache`, callgrind also simulates the caches and the branch
predictor (`--cache-sim=yes --branch-sim=yes`, the host's cache sizes as valgrind reads them): misses a request in the
first-level instruction and data caches (I1mr, D1mr, D1mw) and the last level (ILmr, DLmr, DLmw), mispredicted
conditional and indirect branches (Bcm, Bim), and KCachegrind's estimate of cycles, Ir + 10 x (first-level misses +
mispredictions) + 100 x last-level misses: a model, not this CPU's counters (this VM exposes none), to say whether a
larger working set or branchier code explains a larger CPU time at about equal instructions. The last level simulated
is each core's second level (its size from /sys: 2 MiB on this host), not valgrind's default, the shared third
(480 MiB here), which holds every process whole: an L2 miss is what a working set too large for a core costs.

Arms: a source tree holding mma2a/ (`--src NAME=DIR`, any number: a change beside the tree before it), and `proxy`
(bench/bare_proxy.py on stock uvicorn, issue 36's baseline), in the order given, `--rounds` times.

    PYTHONPATH=src .venv/bin/python bench/instructions.py --src new=src --src old=/tmp/before/src --proxy --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common import free_port, run_wrk, send_message_lua, stop, wait_ready

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
EXPECT = '{"text":"ok"}'  # the fast agent's answer part, in every good answer (bench/gateway.py's FAST_EXPECT)


def counted(cmd: list[str], env: dict[str, str], url: str, tmp: Path, script: Path, seconds: int,
            cache: bool = False) -> dict[str, int]:
    """`cmd` (a server listening at `url`) under callgrind: its instructions (and with `cache` its simulated cache
    misses) over one wrk run, and the requests."""
    out = tmp / "callgrind.out"
    sim = ["--cache-sim=yes", "--branch-sim=yes", f"--LL={second_level()}"] if cache else []
    server = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", *sim, f"--callgrind-out-file={out}",
                               *cmd], env=env, stderr=subprocess.DEVNULL)
    try:
        wait_ready(url, timeout=300)
        run_wrk(url + "/", 10, 16, str(script), EXPECT, "/", threads=1)  # warm: pools, caches, the allocator
        subprocess.run(["callgrind_control", "-i", "on", str(server.pid)], check=True, capture_output=True)
        text = subprocess.run(["wrk", "-t1", "-c16", f"-d{seconds}s", "--timeout", "60s", "-s", str(script), url + "/",
                               "--", EXPECT, "/"], capture_output=True, text=True, check=True).stdout
        subprocess.run(["callgrind_control", "-d", str(server.pid)], check=True, capture_output=True)
        subprocess.run(["callgrind_control", "-i", "off", str(server.pid)], check=True, capture_output=True)
        events: dict[str, int] = {}
        for dump in tmp.glob("callgrind.out.*"):  # the dump asked for (read before the exit writes one of its own)
            names: list[str] = []
            for line in dump.read_text(errors="replace").splitlines():
                if line.startswith("events:"):
                    names = line.split()[1:]
                elif line.startswith(("totals:", "summary:")):
                    counts = dict(zip(names, (int(v) for v in line.split()[1:])))
                    if counts.get("Ir", 0) > events.get("Ir", 0):
                        events = counts
    finally:
        stop([server])
        for dump in tmp.glob("callgrind.out*"):
            dump.unlink()
    found = re.search(r"^WRK_RESULT (\{.*\})$", text, re.M)
    if found is None:
        raise SystemExit(f"wrk said no result:\n{text}")
    result = json.loads(found.group(1))
    errors = sum(result[k] for k in ("bad", "connect", "read", "write", "timeout"))
    return {"requests": int(result["requests"]), "errors": int(errors), "instructions": events.get("Ir", 0),
            **({k: v for k, v in events.items() if k != "Ir"} if cache else {})}


def second_level() -> str:
    """The first CPU's second-level cache as valgrind's `--LL` takes it: size,associativity,line size."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        if (index / "level").read_text().strip() == "2":
            size = (index / "size").read_text().strip()
            n = int(size.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
            ways = (index / "ways_of_associativity").read_text().strip()
            line = (index / "coherency_line_size").read_text().strip()
            return f"{n},{ways},{line}"
    raise SystemExit("no second-level cache described in /sys/devices/system/cpu/cpu0/cache")


def cycles(run: dict[str, int]) -> int:
    """KCachegrind's estimate of cycles: Ir + 10 x (first-level misses + mispredicted branches) + 100 x last-level
    misses."""
    first = run.get("I1mr", 0) + run.get("D1mr", 0) + run.get("D1mw", 0) + run.get("Bcm", 0) + run.get("Bim", 0)
    last = run.get("ILmr", 0) + run.get("DLmr", 0) + run.get("DLmw", 0)
    return run["instructions"] + 10 * first + 100 * last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", action="append", default=[], help="NAME=DIR: a source tree holding mma2a/")
    ap.add_argument("--proxy", action="store_true", help="also the Starlette + aiohttp proxy on stock uvicorn")
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cache", action="store_true", help="also simulate the caches: misses a request, estimated cycles")
    args = ap.parse_args()
    if shutil.which("valgrind") is None or shutil.which("wrk") is None:
        raise SystemExit("needs valgrind and wrk (apt-get install valgrind wrk)")
    trees = dict(s.split("=", 1) for s in args.src)
    arms = [*trees, *(["proxy"] if args.proxy else [])]
    if not arms:
        raise SystemExit("give --src NAME=DIR and/or --proxy")
    tmp = Path(tempfile.mkdtemp())
    script = tmp / "send.lua"
    script.write_text(send_message_lua())
    fast_port = free_port()
    fast = subprocess.Popen([PY, str(ROOT / "bench" / "fast_agent.py"), "--port", str(fast_port)])
    fast_url = f"http://127.0.0.1:{fast_port}"
    results: dict[str, list[dict[str, int]]] = {arm: [] for arm in arms}
    try:
        wait_ready(fast_url, timeout=60)
        for _ in range(args.rounds):
            for arm in arms:
                port = free_port()
                if arm == "proxy":
                    cmd = [PY, str(ROOT / "bench" / "bare_proxy.py"), "--port", str(port), "--backend", fast_url,
                           "--server", "stock"]
                    env = dict(os.environ)
                else:
                    cfg = tmp / f"{arm}.yaml"
                    cfg.write_text(json.dumps({"listen": f"127.0.0.1:{port}", "log_decisions": False, "features": False,
                                               "data_dir": str(tmp / f"{arm}-data"),
                                               "agents": [{"name": "fast", "url": fast_url}]}))
                    cmd = [PY, "-m", "mma2a.cli", "serve", "--config", str(cfg), "--log-level", "warning"]
                    env = {**os.environ, "PYTHONPATH": str(Path(trees[arm]).resolve())}
                run = counted(cmd, env, f"http://127.0.0.1:{port}", tmp, script, args.seconds, args.cache)
                results[arm].append(run)
                n = max(1, run["requests"])
                each = {k: round(v / n, 1) for k, v in run.items() if k not in ("requests", "errors")}
                if args.cache:
                    each["cycles_estimate"] = round(cycles(run) / n)
                print(json.dumps({"arm": arm, "requests": run["requests"], "errors": run["errors"], "per_request": each}),
                      flush=True)
    finally:
        stop([fast])
        shutil.rmtree(tmp, ignore_errors=True)
    print("instructions a request, each round:")
    for arm, runs in results.items():
        print(f"  {arm}: " + ", ".join(f"{r['instructions'] / max(1, r['requests']) / 1000:.1f}k" for r in runs)
              + f"  (errors {sum(r['errors'] for r in runs)})")
    if args.cache:
        print("simulated misses a request (I1mr D1mr D1mw / ILmr DLmr DLmw / Bcm Bim) and estimated cycles, each round:")
        for arm, runs in results.items():
            print(f"  {arm}: " + "; ".join(
                " ".join(f"{r.get(k, 0) / max(1, r['requests']):.0f}" for k in ("I1mr", "D1mr", "D1mw")) + " / "
                + " ".join(f"{r.get(k, 0) / max(1, r['requests']):.0f}" for k in ("ILmr", "DLmr", "DLmw")) + " / "
                + " ".join(f"{r.get(k, 0) / max(1, r['requests']):.0f}" for k in ("Bcm", "Bim"))
                + f" = {cycles(r) / max(1, r['requests']) / 1000:.0f}k" for r in runs))


if __name__ == "__main__":
    main()
