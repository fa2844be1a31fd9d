"""Cluster mode: a large rule set applied through one gateway, and how its peers answer meanwhile.

Starts a `nats-server -js`, the echo agent (bench/echo_agent.py) and three clustered gateway
processes sharing 18 agents (the synthetic rule sets' agents, bench/routing.py's shape), then
`PUT /admin/rules` with N synthetic rules on gateway 1 while a poller asks each peer's
`/healthz` every 20 ms (one request at a time per peer), until both peers report the new
rule set. Reported per arm and round: the peers' `/healthz` latencies during the change (max,
p99, median, how many over 500 ms) beside the same figures for a quiet window of polls just
before it (the box's own noise), and how long the peers took to apply it. `--before PATH` adds an arm whose gateways run the
sources of another checkout (e.g. a worktree of the commit before the watch was moved off the
event loop); arms alternate round by round, each on a fresh NATS and fresh gateways.

    .venv/bin/python bench/cluster_apply.py [--rules 7000] [--rounds 2] [--before /tmp/mma2a-before] [--json]
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
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "src"))
from common import free_port, stop, wait_ready  # noqa: E402  (bench/common.py)

from mma2a.cluster.server import NatsServer  # noqa: E402
from mma2a.routing.synthetic import AGENTS, synthetic_rules  # noqa: E402

ADMIN = "bench-admin-token"


def agents_yaml(agent_url: str) -> str:
    lines = [f"  - {{name: {a}, url: {agent_url}, groups: [{'pool-a' if i % 2 else 'pool-b'}]}}"
             for i, a in enumerate(AGENTS)]
    lines.append(f"  - {{name: text-agent, url: {agent_url}}}")
    lines.append(f"  - {{name: to-text, url: {agent_url}, transformer: true}}")
    return "\n".join(lines)


def gateway(tmp: Path, port: int, nats: str, agent_url: str, src: Path, *, seed: bool) -> subprocess.Popen[bytes]:
    cfg = tmp / f"gateway-{port}.yaml"
    cfg.write_text(
        f"listen: 127.0.0.1:{port}\nlog_decisions: false\nfeatures: false\nhealth_interval_s: 3600\n"
        f"admin: {{token: {ADMIN}}}\ndata_dir: {tmp / f'data-{port}'}\n"
        + (f"agents:\n{agents_yaml(agent_url)}\n" if seed else "")
        + f"cluster: {{nats: '{nats}', name: apply}}\n")
    env = {**os.environ, "MMA2A_URL_SECRET": "bench-cluster-secret-0123456789", "PYTHONPATH": str(src / "src")}
    return subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--config", str(cfg), "--log-level", "warning"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def poll(url: str, done: threading.Event, latencies: list[float], versions: list[int]) -> None:
    """`/healthz` one request at a time until `done`; each request's latency, the last rules version seen."""
    with httpx.Client(timeout=300) as c:
        while not done.is_set():
            t0 = time.perf_counter()
            r = c.get(url + "/healthz")
            latencies.append(time.perf_counter() - t0)
            versions.append(int(r.json()["rulesVersion"]))
            time.sleep(0.02)


def one_round(src: Path, rules_text: str, quiet_s: float) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="mma2a-bench-apply-"))
    procs: list[subprocess.Popen[bytes]] = []
    (tmp / "nats.conf").write_text("max_payload: 8MB\n")  # 7,000 rules are ~1.3 MB: past NATS's 1 MB default
    nats = NatsServer(tmp / "nats", args=["-c", str(tmp / "nats.conf")]).start()
    try:
        agent_port = free_port()
        procs.append(subprocess.Popen([sys.executable, str(ROOT / "bench" / "echo_agent.py"), "--port", str(agent_port)]))
        agent_url = f"http://127.0.0.1:{agent_port}"
        wait_ready(agent_url)
        ports = [free_port() for _ in range(3)]
        procs.append(gateway(tmp, ports[0], nats.url, agent_url, src, seed=True))
        wait_ready(f"http://127.0.0.1:{ports[0]}", timeout=60)  # the first seeds the agents
        procs += [gateway(tmp, p, nats.url, agent_url, src, seed=False) for p in ports[1:]]
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        for u in urls[1:]:
            wait_ready(u, timeout=60)
        with httpx.Client(timeout=30) as c:
            while any(c.get(u + "/healthz").json()["agents"] < len(AGENTS) + 2 for u in urls[1:]):
                time.sleep(0.1)  # the peers have adopted every agent
            before = [c.get(u + "/healthz").json()["rulesVersion"] for u in urls[1:]]
        done = threading.Event()
        lat: list[list[float]] = [[], []]
        seen: list[list[int]] = [[], []]
        pollers = [threading.Thread(target=poll, args=(u, done, lat[i], seen[i])) for i, u in enumerate(urls[1:])]
        for t in pollers:
            t.start()
        time.sleep(quiet_s)  # the quiet window: the same polls with no change, for the box's own noise
        quiet = [len(lat[0]), len(lat[1])]
        t0 = time.perf_counter()
        with httpx.Client(timeout=600, headers={"Authorization": f"Bearer {ADMIN}"}) as c:
            r = c.put(urls[0] + "/admin/rules", content=rules_text)
        put_s = time.perf_counter() - t0
        if r.status_code != 200:
            raise SystemExit(f"PUT /admin/rules: {r.status_code} {r.text[:500]}")
        deadline = time.monotonic() + 600
        while not all(s and s[-1] > b for s, b in zip(seen, before)) and time.monotonic() < deadline:
            time.sleep(0.02)
        applied_s = time.perf_counter() - t0
        time.sleep(0.5)  # a few polls after
        done.set()
        for t in pollers:
            t.join()
    finally:
        stop(procs)
        nats.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    during = lat[0][quiet[0]:] + lat[1][quiet[1]:]
    calm = lat[0][:quiet[0]] + lat[1][:quiet[1]]

    def summary(xs: list[float]) -> dict[str, float]:
        xs = sorted(xs)
        return {"max_ms": round(xs[-1] * 1000, 1), "p99_ms": round(xs[int(0.99 * (len(xs) - 1))] * 1000, 1),
                "p50_ms": round(statistics.median(xs) * 1000, 2), "over_500ms": sum(x > 0.5 for x in xs),
                "polls": len(xs)}

    return {"during": summary(during), "quiet": summary(calm), "put_s": round(put_s, 2),
            "applied_on_peers_s": round(applied_s, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rules", type=int, default=7000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--before", type=Path, help="a checkout whose src/ the 'before' arm's gateways run")
    ap.add_argument("--quiet-s", type=float, default=15.0, help="polls with no change first (the box's own noise)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rules_text = json.dumps(synthetic_rules(args.rules))
    arms = {"after": ROOT} | ({"before": args.before} if args.before else {})
    rows: dict[str, list[dict[str, object]]] = {k: [] for k in arms}
    for _ in range(args.rounds):
        for name, src in arms.items():
            rows[name].append(one_round(src, rules_text, args.quiet_s))
    out: dict[str, object] = dict(rows)
    out["setup"] = {"rules": args.rules, "rule_set_bytes": len(rules_text), "rounds": args.rounds,
                    "quiet_s": args.quiet_s, "peers": 2, "cpus": os.cpu_count(), "load_avg": os.getloadavg()}
    print(json.dumps(out, indent=None if not args.json else 2))


if __name__ == "__main__":
    main()
