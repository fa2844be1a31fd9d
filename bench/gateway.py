"""bench/gateway: the same a2a-sdk echo agent, called directly and through the gateway, side by side.

wrk (Debian package `wrk`) drives both at the same concurrency, interleaved in rounds so
the machine's noise hits both alike. Reports added p50/p99 latency and the throughput ratio.
A third target, a second gateway with feature extraction on (and image feature rules in
force), measures what extraction costs text-only traffic.

    .venv/bin/python bench/gateway.py [--rounds 3] [--seconds 8] [--connections 16] [--json]
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
from pathlib import Path

from common import free_port, run_wrk, stop, wait_ready

ROOT = Path(__file__).resolve().parent.parent
BODY = ('{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER",'
        '"parts":[{"text":"hello"}]}}}')
LUA = f"""wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["A2A-Version"] = "1.0"
wrk.body = '{BODY}'
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    procs = []
    tmp = Path(tempfile.mkdtemp(prefix="mma2a-bench-"))
    try:
        agent_port, gw_port, gwf_port = free_port(), free_port(), free_port()
        procs.append(subprocess.Popen([sys.executable, str(ROOT / "bench" / "echo_agent.py"), "--port", str(agent_port)]))
        agent_url = f"http://127.0.0.1:{agent_port}"
        wait_ready(agent_url)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        rules = ("rules:\n  version: 1\n  rules:\n    - name: qr-labels\n      match: {modality: image/*, features: {qr: {contains: SN-1}}}\n"
                 "      action: {route_to: echo}\n")
        for port, features in ((gw_port, "false"), (gwf_port, "true")):
            cfg = tmp / f"gateway-{port}.yaml"
            cfg.write_text(f"listen: 127.0.0.1:{port}\nlog_decisions: false\nfeatures: {features}\n"
                           f"agents:\n  - {{name: echo, url: {agent_url}}}\n" + (rules if features == "true" else ""))
            procs.append(subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--config", str(cfg),
                                           "--log-level", "warning"], env=env))
        gw_url, gwf_url = f"http://127.0.0.1:{gw_port}", f"http://127.0.0.1:{gwf_port}"
        wait_ready(gw_url)
        wait_ready(gwf_url, timeout=60)
        script = tmp / "post.lua"
        script.write_text(LUA)
        for url in (agent_url, gw_url, gwf_url):  # warm up all
            run_wrk(url + "/", 2, args.connections, str(script))
        direct, through, featured = [], [], []
        for _ in range(args.rounds):
            direct.append(run_wrk(agent_url + "/", args.seconds, args.connections, str(script)))
            through.append(run_wrk(gw_url + "/", args.seconds, args.connections, str(script)))
            featured.append(run_wrk(gwf_url + "/", args.seconds, args.connections, str(script)))
    finally:
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    result = {
        "connections": args.connections, "rounds": args.rounds, "seconds": args.seconds,
        "direct": {k: med(direct, k) for k in ("rps", "p50_ms", "p99_ms")},
        "gateway": {k: med(through, k) for k in ("rps", "p50_ms", "p99_ms")},
        "gateway_features_on": {k: med(featured, k) for k in ("rps", "p50_ms", "p99_ms")},
        "requests": {"direct": sum(r["requests"] for r in direct), "gateway": sum(r["requests"] for r in through),
                     "gateway_features_on": sum(r["requests"] for r in featured)},
        "errors": {"direct": sum(r["errors"] for r in direct), "gateway": sum(r["errors"] for r in through),
                   "gateway_features_on": sum(r["errors"] for r in featured)},
        "per_round": [{"direct": d, "gateway": g, "gateway_features_on": f} for d, g, f in zip(direct, through, featured)],
    }
    result["features_on_off_ratio"] = round(result["gateway_features_on"]["rps"] / result["gateway"]["rps"], 3)
    result["added_p50_ms"] = round(result["gateway"]["p50_ms"] - result["direct"]["p50_ms"], 3)
    result["added_p99_ms"] = round(result["gateway"]["p99_ms"] - result["direct"]["p99_ms"], 3)
    result["throughput_ratio"] = round(result["gateway"]["rps"] / result["direct"]["rps"], 3)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        d, g = result["direct"], result["gateway"]
        print(f"direct : {d['rps']:.0f} req/s  p50 {d['p50_ms']:.2f} ms  p99 {d['p99_ms']:.2f} ms")
        print(f"gateway: {g['rps']:.0f} req/s  p50 {g['p50_ms']:.2f} ms  p99 {g['p99_ms']:.2f} ms")
        f = result["gateway_features_on"]
        print(f"gateway, features on: {f['rps']:.0f} req/s  p50 {f['p50_ms']:.2f} ms  (on/off ratio {result['features_on_off_ratio']})")
        print(f"added p50 {result['added_p50_ms']} ms, added p99 {result['added_p99_ms']} ms, "
              f"throughput ratio {result['throughput_ratio']}  (requests {result['requests']}, errors {result['errors']})")


if __name__ == "__main__":
    main()
