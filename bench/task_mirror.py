"""bench/task_mirror: what sharing task records over the `tasks` bucket costs two gateways and the nats-server, per
record, this source tree beside another (`--before SRC`), in fresh processes alternating between the trees.

One process holds two gateways' task maps (`ClusterTaskMap`, as `mma2a serve --cluster` builds them) on one
nats-server the bench starts: gw1 makes `--records` records, `--batch` at a time (each batch flushed: stored in the
bucket, as a request answers only once its record is), while gw2 has the bucket open. Measured: the process's CPU
(both gateways) and the nats-server's, per record, while the records are written (with the code that mirrors every
batch by watch, until gw2 has mirrored them all), then for gw2's first lookup of one of them (with the code that
reads on a miss: every record then read at once).

    .venv/bin/python bench/task_mirror.py --before /tmp/old/src [--records 4000] [--batch 4] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def nats_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_run(url: str, nats_pid: int, records: int, batch: int) -> list[float]:
    """In a fresh process of one tree: [gateways' us a record while written, nats-server's; the first miss's two]."""
    from mma2a.cluster.link import ClusterLink
    from mma2a.cluster.tasks import ClusterTaskMap
    from mma2a.gateway.cluster_config import ClusterConfig

    config = ClusterConfig(nats=url, name=f"m{os.getpid()}")
    link = await ClusterLink(config).connect()

    def member(name: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(config=config, names=link.names, js=link.js, id=name, sizing={})

    gw1 = ClusterTaskMap(member("gw1"), max_bytes=256 << 20, max_bytes_per_owner=None)
    gw2 = ClusterTaskMap(member("gw2"), max_bytes=256 << 20, max_bytes_per_owner=None)
    await gw1.open()
    await gw2.open()
    route = [{"agent": "fast", "reason": "capability"}]
    first = f"task-{0:08d}-xxxxxxxxxxxxxxxx"
    c0, n0 = time.process_time(), nats_cpu(nats_pid)
    for i in range(0, records, batch):
        ids = [f"task-{i + j:08d}-xxxxxxxxxxxxxxxx" for j in range(batch)]
        for t in ids:
            gw1.put_leg(t, "fast", f"ctx-{t}", route, None)
        for t in ids:
            await gw1.flush(t)
    while hasattr(gw2, "_watch") and gw2.adopted < records:  # a tree that mirrors by watch: until it has them all
        await asyncio.sleep(0.001)
    c1, n1 = time.process_time(), nats_cpu(nats_pid)
    await gw2.fetch(first)
    c2, n2 = time.process_time(), nats_cpu(nats_pid)
    assert gw2.find(first) is not None and gw2.adopted >= records
    await gw1.close()
    await gw2.close()
    await link.close()
    return [(c1 - c0) / records * 1e6, (n1 - n0) / records * 1e6, (c2 - c1) / records * 1e6, (n2 - n1) / records * 1e6]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", help="another source tree (a src/ holding mma2a/) to run beside this one")
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=4, help="records a batch (a request's own at 16 connections: 3-5)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)  # URL PID: one run in this process
    args = ap.parse_args()
    if args.child:
        print(*(f"{x:.2f}" for x in asyncio.run(one_run(args.child[0], int(args.child[1]), args.records, args.batch))))
        return
    if not args.before:
        ap.error("--before SRC: the other source tree")
    from mma2a.cluster.server import NatsServer

    store = tempfile.mkdtemp(prefix="mma2a-mirror-")
    Path(store, "js.conf").write_text("jetstream {\n  max_file_store: 1T\n}\n")  # reservations, not disk
    server = NatsServer(store, args=["-c", str(Path(store, "js.conf"))]).start()
    assert server.proc is not None
    trees = {"before": str(Path(args.before).resolve()), "this": str(ROOT / "src")}
    rows: dict[str, list[list[float]]] = {name: [] for name in trees}
    load = os.getloadavg()
    try:
        for _ in range(args.runs):
            for name, src in trees.items():
                out = subprocess.run([sys.executable, __file__, "--child", server.url, str(server.proc.pid),
                                      "--records", str(args.records), "--batch", str(args.batch)],
                                     env={**os.environ, "PYTHONPATH": src}, capture_output=True, text=True, check=True)
                rows[name].append([float(x) for x in out.stdout.split()])
    finally:
        server.stop()
    print(f"{args.records} records in batches of {args.batch}, {args.runs} runs, load {load[0]:.1f} -> "
          f"{os.getloadavg()[0]:.1f}; median us a record:")
    print("| tree | gateways, while written | nats-server, while written | gw2's first miss after: gateways | nats-server |")
    print("|---|---|---|---|---|")
    for name, runs in rows.items():
        med = [statistics.median(col) for col in zip(*runs, strict=True)]
        print(f"| {name} | {med[0]:.1f} | {med[1]:.1f} | {med[2]:.1f} | {med[3]:.1f} |")


if __name__ == "__main__":
    main()
