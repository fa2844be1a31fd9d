"""bench/instructions: user-space instructions a routed request costs one `mma2a serve`, beside the stock proxy.

Each arm runs under valgrind's callgrind (Debian's `valgrind`) with instrumentation off until wrk (16 connections, the
fast agent behind, as bench/gateway.py drives it) has warmed it up for 10 s; then callgrind counts the process's
instructions over one `--seconds` run and the count is divided by the requests answered. What it measures is the
process's own Python and C work: a count, not a time, so it holds on a loaded machine where req/s does not (±3k a
request run to run at load 2-6; at load past ~10 the per-second work of an idle loop, ~0.5M instructions a second,
weighs on fewer requests). It does not count the kernel's side of the sockets, cache misses, or other processes (the
history writer): for those, bench/gateway.py.

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


def counted(cmd: list[str], env: dict[str, str], url: str, tmp: Path, script: Path, seconds: int) -> dict[str, int]:
    """`cmd` (a server listening at `url`) under callgrind: its instructions over one wrk run, and the requests."""
    out = tmp / "callgrind.out"
    server = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}", *cmd],
                              env=env, stderr=subprocess.DEVNULL)
    try:
        wait_ready(url, timeout=300)
        run_wrk(url + "/", 10, 16, str(script), EXPECT, "/", threads=1)  # warm: pools, caches, the allocator
        subprocess.run(["callgrind_control", "-i", "on", str(server.pid)], check=True, capture_output=True)
        text = subprocess.run(["wrk", "-t1", "-c16", f"-d{seconds}s", "--timeout", "60s", "-s", str(script), url + "/",
                               "--", EXPECT, "/"], capture_output=True, text=True, check=True).stdout
        subprocess.run(["callgrind_control", "-d", str(server.pid)], check=True, capture_output=True)
        subprocess.run(["callgrind_control", "-i", "off", str(server.pid)], check=True, capture_output=True)
        total = 0
        for dump in tmp.glob("callgrind.out.*"):  # the dump asked for (read before the exit writes one of its own)
            for line in dump.read_text(errors="replace").splitlines():
                if line.startswith(("totals:", "summary:")):
                    total = max(total, int(line.split()[1]))
    finally:
        stop([server])
        for dump in tmp.glob("callgrind.out*"):
            dump.unlink()
    found = re.search(r"^WRK_RESULT (\{.*\})$", text, re.M)
    if found is None:
        raise SystemExit(f"wrk said no result:\n{text}")
    result = json.loads(found.group(1))
    errors = sum(result[k] for k in ("bad", "connect", "read", "write", "timeout"))
    return {"requests": int(result["requests"]), "errors": int(errors), "instructions": total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", action="append", default=[], help="NAME=DIR: a source tree holding mma2a/")
    ap.add_argument("--proxy", action="store_true", help="also the Starlette + aiohttp proxy on stock uvicorn")
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2)
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
                run = counted(cmd, env, f"http://127.0.0.1:{port}", tmp, script, args.seconds)
                results[arm].append(run)
                print(json.dumps({"arm": arm, **run, "per_request": round(run["instructions"] / max(1, run["requests"]))}),
                      flush=True)
    finally:
        stop([fast])
        shutil.rmtree(tmp, ignore_errors=True)
    print("instructions a request, each round:")
    for arm, runs in results.items():
        print(f"  {arm}: " + ", ".join(f"{r['instructions'] / max(1, r['requests']) / 1000:.1f}k" for r in runs)
              + f"  (errors {sum(r['errors'] for r in runs)})")


if __name__ == "__main__":
    main()
