"""bench/send_instructions: the gateway's instructions per SendMessage, counted, not timed.

On a machine shared with other work, CPU time per request moves by a fifth or more from run to
run, more than the changes it is meant to show. This runs bench/send_cost.py (the gateway in
process, the fast agent in its own process over loopback) under valgrind's cachegrind twice —
with `--small` and with `--large` requests — and divides the difference of the two processes'
instruction counts by the difference of their requests: start-up, imports and warm-up cancel out,
what is left is the instructions the gateway's process executes per request (its Python, the
interpreter, uvloop and the system calls' user side; the agent is not traced). The count barely
moves with the machine's load, so a change of a few percent shows. It is not time: a system
call or a cache miss counts as little as an add.

    .venv/bin/python bench/send_instructions.py [--small 300] [--large 1500] [--history] [--worker] [--json]
    .venv/bin/python bench/ab.py --a /tmp/base/src --b src --rounds 2 --key instructions_per_request \\
        -- bench/send_instructions.py --json
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

ROOT = Path(__file__).resolve().parent.parent
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def requests_made(n: int) -> int:
    """Every request bench/send_cost.py sends with `--n n --repeat 1`: its warm-up, then the measured run."""
    return max(500, n // 4) + n


def count(n: int, history: bool, worker: bool = False) -> int:
    """The instructions of one bench/send_cost.py process sending `n` measured requests."""
    with tempfile.TemporaryDirectory(prefix="mma2a-instr-") as tmp:
        cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={tmp}/out",
               sys.executable, str(ROOT / "bench" / "send_cost.py"), "--json", "--n", str(n), "--repeat", "1"]
        if history:
            cmd.append("--history")
        if worker:
            cmd.append("--worker")
        out = subprocess.run(cmd, cwd=ROOT, env=os.environ, capture_output=True, text=True, check=True)
    found = _REFS.search(out.stderr)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=300, help="measured requests of the shorter run")
    ap.add_argument("--large", type=int, default=1500, help="measured requests of the longer run")
    ap.add_argument("--history", action="store_true", help="decision history on (its writer thread counts too)")
    ap.add_argument("--worker", action="store_true", help="the gateway as one worker of `serve --workers N` "
                    "(bench/send_cost.py --worker: its embedded nats-server is not traced)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed: apt-get install valgrind")
    if requests_made(args.large) <= requests_made(args.small):
        sys.exit("--large must send more requests than --small")
    small, large = count(args.small, args.history, args.worker), count(args.large, args.history, args.worker)
    per = (large - small) / (requests_made(args.large) - requests_made(args.small))
    result = {"instructions_per_request": round(per), "small": small, "large": large}
    print(json.dumps(result) if args.json else f"SendMessage {per:12,.0f} instructions/request")


if __name__ == "__main__":
    main()
