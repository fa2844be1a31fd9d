"""Cluster mode: what a gateway's listing of the push buckets costs (its configs loaded at start, the deliveries a
takeover round reads), before and after it was streamed, side by side in one run on one nats-server.

N push config records of the form `PushJournalKV.put_config` writes (~400 bytes: a config, its owner, its gateway)
are published into a `push_configs` bucket, then listed by each arm, each in a fresh child process (so each has its
own peak RSS), alternating for `--rounds`:
- `before`: as `PushJournalKV._entries` listed them until session 19: the keys from `STREAM.INFO` pages
  (`kv_keys.held_keys`), then one `get` each, 32 at a time (`kv_keys.current`), every entry held in a list, then each
  record parsed;
- `after`: `kv_keys.streamed_entries`, what it runs now: one consumer of the listing's own, the last message of each
  key, pulled 256 at a time, each record parsed as it comes.
For each: wall time, the child's CPU, the nats-server's CPU during it (/proc/<pid>/stat), and the growth of the
child's peak RSS over what it held once connected (`ru_maxrss`).

    .venv/bin/python bench/push_listing.py [--keys 50000] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import nats  # noqa: E402
import orjson  # noqa: E402
from nats.js import api  # noqa: E402

from mma2a.cluster.kv_keys import current, held_keys, streamed_entries  # noqa: E402
from mma2a.cluster.server import NatsServer  # noqa: E402

BUCKET = "bench_push_configs"


def record(i: int) -> bytes:
    config = {"id": f"cfg-{i}", "taskId": f"task-{i:08d}-0000-4000-8000-000000000000",
              "url": f"https://hooks.example.com/client-{i % 1000}/notify", "token": "t" * 32,
              "authentication": {"scheme": "Bearer", "credentials": "c" * 48}}
    return orjson.dumps({"owner": f"client-{i % 1000}", "config": config, "at": time.time(), "gateway": "gw-a"})


async def fill(url: str, keys: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30.0)
    await js.create_key_value(config=api.KeyValueConfig(bucket=BUCKET))
    window = []
    for i in range(keys):
        window.append(await js.publish_async(f"$KV.{BUCKET}.c{i}", record(i)))
        if len(window) >= 512:
            await asyncio.gather(*window)
            window.clear()
    await asyncio.gather(*window)
    await nc.close()


async def child(url: str, arm: str) -> dict[str, Any]:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30.0)
    kv = await js.key_value(BUCKET)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    wall, cpu = time.perf_counter(), time.process_time()
    n = 0
    if arm == "before":
        for entry in await current(kv, await held_keys(js, BUCKET)):
            n += bool(orjson.loads(entry.value or b"{}"))
    else:
        async for streamed in streamed_entries(js, BUCKET):
            n += bool(orjson.loads(streamed.value or b"{}"))
    out = {"arm": arm, "found": n, "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
           "rss_growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024}
    await nc.close()
    return out


def server_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("URL", "ARM"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(*args.child))))
        return
    rows = []
    load = [os.getloadavg()[0]]
    with NatsServer(tempfile.mkdtemp(prefix="push-listing-")) as server:
        assert server.proc is not None
        asyncio.run(fill(server.url, args.keys))
        for _ in range(args.rounds):
            for arm in ("before", "after"):
                at = server_cpu_s(server.proc.pid)
                done = subprocess.run([sys.executable, __file__, "--child", server.url, arm], check=True,
                                      capture_output=True, text=True)
                row = json.loads(done.stdout)
                row["server_cpu_s"] = server_cpu_s(server.proc.pid) - at
                rows.append(row)
                load.append(os.getloadavg()[0])
    summary = []
    for arm in ("before", "after"):
        mine = [r for r in rows if r["arm"] == arm]
        summary.append({"arm": arm, "found": mine[-1]["found"],
                        **{k: statistics.median(r[k] for r in mine)
                           for k in ("wall_s", "cpu_s", "server_cpu_s", "rss_growth_mb")}})
    result = {"keys": args.keys, "rounds": args.rounds, "load": [min(load), max(load)], "arms": summary}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.keys} push config records, median of {args.rounds} rounds, load {min(load):.1f}-{max(load):.1f}")
    for s in summary:
        print(f"  {s['arm']:7s} {s['wall_s']:6.2f} s wall  {s['cpu_s']:6.2f} s CPU  nats-server {s['server_cpu_s']:5.2f} s"
              f" CPU  peak RSS +{s['rss_growth_mb']:6.1f} MB  found {s['found']}")


if __name__ == "__main__":
    main()
