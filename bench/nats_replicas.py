"""What a NATS cluster costs the gateways' shared writes: one nats-server (`replicas: 1`) against three clustered
nats-servers (`replicas: 3`, docs/operations.md "Sizing" and deploy/kubernetes), on this host's loopback.

The write measured is the one every task costs in cluster mode: a KV put of a task record (~600 bytes) into a
bucket like `<name>_tasks`, awaited as `ClusterTaskMap.flush` awaits it before the client gets its answer. Arms
alternate within each round (the machine is shared and noisy), so the ratios compare like with like:
- put latency, one at a time (p50, p99);
- put throughput with 64 in flight;
- each nats-server's RSS after the run.
Loopback has no network: across hosts each replicated put adds the round trips to the other nodes.

    PYTHONPATH=src .venv/bin/python bench/nats_replicas.py --puts 2000 --rounds 3 [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats
from nats.js.api import KeyValueConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.footprint import rss_mb  # noqa: E402
from mma2a.cluster.server import NatsServer  # noqa: E402
from mma2a.serving import free_port  # noqa: E402

VALUE = json.dumps({"id": "t" * 36, "legs": ["agent", "x" * 36], "route": [{"part": 0, "agent": "agent"}] * 4,
                    "owner": "client-a", "context": "c" * 36, "origin": "gw-1", "pad": "p" * 300}).encode()


def three_node_cluster(root: Path) -> list[NatsServer]:
    routes = [free_port() for _ in range(3)]
    servers = []
    for i in range(3):
        args = ["--name", f"n{i}", "--cluster_name", "bench", "--cluster", f"nats://127.0.0.1:{routes[i]}",
                "--routes", ",".join(f"nats://127.0.0.1:{p}" for j, p in enumerate(routes) if j != i)]
        servers.append(NatsServer(root / f"n{i}", args=args))
    for s in servers:
        s.start()
    return servers


async def open_bucket(urls: list[str], replicas: int) -> tuple[Any, Any]:
    nc = await nats.connect(servers=urls)
    js = nc.jetstream()
    deadline = time.monotonic() + 30
    while True:  # a fresh cluster elects its meta leader first
        try:
            kv = await js.create_key_value(KeyValueConfig(bucket=f"tasks_r{replicas}", history=1, ttl=3600,
                                                          replicas=replicas))
            return nc, kv
        except Exception:  # noqa: BLE001 - not ready yet
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def sequential(kv: Any, n: int, tag: str) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        await kv.put(f"{tag}-{i}", VALUE)
        out.append(time.perf_counter() - t0)
    return out


async def concurrent(kv: Any, n: int, tag: str, in_flight: int = 64) -> float:
    sem = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with sem:
            await kv.put(f"{tag}-c{i}", VALUE)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return n / (time.perf_counter() - t0)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--puts", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nats-bench-") as tmp:
        root = Path(tmp)
        single = NatsServer(root / "single").start()
        cluster = three_node_cluster(root)
        try:
            arms = {"replicas 1 (one server)": await open_bucket([single.url], 1),
                    "replicas 3 (3-node cluster)": await open_bucket([s.url for s in cluster], 3)}
            seq: dict[str, list[float]] = {k: [] for k in arms}
            thr: dict[str, list[float]] = {k: [] for k in arms}
            for r in range(a.rounds):
                for name, (_, kv) in arms.items():
                    seq[name] += await sequential(kv, a.puts, f"r{r}")
                    thr[name].append(await concurrent(kv, a.puts, f"r{r}"))
            rss = {"replicas 1 (one server)": [rss_mb(single.proc.pid)] if single.proc else [],
                   "replicas 3 (3-node cluster)": [rss_mb(s.proc.pid) for s in cluster if s.proc]}
            for nc, _ in arms.values():
                await nc.close()
        finally:
            single.stop()
            for s in cluster:
                s.stop()
    rows = {name: {"put_p50_ms": round(pct(seq[name], 0.5), 3), "put_p99_ms": round(pct(seq[name], 0.99), 3),
                   "puts_per_s_64_in_flight": round(statistics.median(thr[name])),
                   "rss_mb_per_server": [round(x, 1) for x in rss[name]]} for name in arms}
    one, three = rows["replicas 1 (one server)"], rows["replicas 3 (3-node cluster)"]
    ratios = {"put_p50": round(three["put_p50_ms"] / one["put_p50_ms"], 2),
              "put_p99": round(three["put_p99_ms"] / one["put_p99_ms"], 2),
              "puts_per_s": round(three["puts_per_s_64_in_flight"] / one["puts_per_s_64_in_flight"], 2)}
    load = os.getloadavg()[0]
    if a.json:
        print(json.dumps({"rows": rows, "ratios_3_over_1": ratios, "load": load, "puts": a.puts, "rounds": a.rounds}))
        return
    print(f"load average {load:.1f}; {a.rounds} rounds x {a.puts} puts of {len(VALUE)} B per arm")
    print(f"{'':30} {'put p50 ms':>11} {'put p99 ms':>11} {'puts/s @64':>11}  RSS MB per server")
    for name, row in rows.items():
        print(f"{name:30} {row['put_p50_ms']:>11} {row['put_p99_ms']:>11} {row['puts_per_s_64_in_flight']:>11}  "
              f"{row['rss_mb_per_server']}")
    print(f"{'3-node / one':30} {ratios['put_p50']:>10}x {ratios['put_p99']:>10}x {ratios['puts_per_s']:>10}x")


if __name__ == "__main__":
    asyncio.run(main())
