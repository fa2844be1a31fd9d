"""Cluster mode: what listing a KV bucket whole costs, the way the gateways list it (cluster/kv_keys.py: its keys from
the stream's subjects, then each key's entry) beside nats-py's `KeyValue.keys` watch they used before (racy: it missed
keys other gateways were rewriting, tests/cluster/test_kv_listings.py), side by side in one run on one nats-server.

Arms, per bucket shape: `keys` (`KeyValue.keys` alone: what `cluster status` counted), `keys+get` (and a `get` of each
key it lists, one after another, as the catch-up and the push rounds did), `subjects` (`held_keys` alone: what a
listing that needs no value costs, e.g. the uploads' ids of a recount), `entries` (`held_keys` then `current`: the
catch-up, the push rounds, `cluster status` before session 17 counting pins), `state` (`key_count`: the stream's
`num_subjects` from one `STREAM.INFO`, delete markers counted as keys: `cluster status` counting pins since). Shapes: N live keys (`cluster status` counting session pins), and N
delete markers beside two live keys (what the push deliveries bucket held after N deliveries, before a delivery's
outcome purged its record). Wall and process CPU per listing, mean of `--repeat`.

    .venv/bin/python bench/kv_listing.py [--keys 5000] [--repeat 5] [--arms entries,state] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import nats  # noqa: E402
from nats.js import api  # noqa: E402
from nats.js.errors import KeyNotFoundError, NoKeysError  # noqa: E402

from mma2a.cluster.kv_keys import current, held_keys, key_count  # noqa: E402
from mma2a.cluster.server import NatsServer  # noqa: E402


async def watch_keys(js: Any, kv: Any, bucket: str) -> int:
    try:
        return len(await kv.keys())
    except NoKeysError:
        return 0


async def watch(js: Any, kv: Any, bucket: str) -> int:
    try:
        keys = await kv.keys()
    except NoKeysError:
        return 0
    n = 0
    for key in keys:
        try:
            await kv.get(key)
            n += 1
        except KeyNotFoundError:
            pass
    return n


async def subjects(js: Any, kv: Any, bucket: str) -> int:
    return len(await held_keys(js, bucket))


async def entries(js: Any, kv: Any, bucket: str) -> int:
    return len(await current(kv, await held_keys(js, bucket)))


async def state(js: Any, kv: Any, bucket: str) -> int:
    return (await key_count(js, bucket))[0]


ARMS: dict[str, Callable[[Any, Any, str], Awaitable[int]]] = {
    "keys": watch_keys, "keys+get": watch, "subjects": subjects, "entries": entries, "state": state}


async def run(keys: int, repeat: int) -> list[dict[str, Any]]:
    rows = []
    with NatsServer(tempfile.mkdtemp(prefix="kv-listing-")) as server:
        nc = await nats.connect(server.url)
        js = nc.jetstream(timeout=30.0)
        for shape in ("live", "markers"):
            bucket = f"bench_{shape}"
            kv = await js.create_key_value(config=api.KeyValueConfig(bucket=bucket))
            for i in range(keys):
                await kv.put(f"k{i}", b"x" * 200)
            if shape == "markers":
                for i in range(keys):
                    await kv.delete(f"k{i}")
                await kv.put("live1", b"x")
                await kv.put("live2", b"x")
            for _ in range(repeat):  # arms alternate listing by listing
                for name, arm in ARMS.items():
                    wall, cpu = time.perf_counter(), time.process_time()
                    found = await arm(js, kv, bucket)
                    rows.append({"shape": shape, "arm": name, "found": found,
                                 "wall_ms": (time.perf_counter() - wall) * 1000,
                                 "cpu_ms": (time.process_time() - cpu) * 1000})
        await nc.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--arms", default=",".join(ARMS), help="the arms to run (comma-separated)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    for name in list(ARMS):
        if name not in args.arms.split(","):
            del ARMS[name]
    rows = asyncio.run(run(args.keys, args.repeat))
    summary = []
    for shape in ("live", "markers"):
        for arm in ARMS:
            mine = [r for r in rows if r["shape"] == shape and r["arm"] == arm]
            summary.append({"shape": shape, "arm": arm, "found": mine[-1]["found"],
                            "wall_ms": sum(r["wall_ms"] for r in mine) / len(mine),
                            "cpu_ms": sum(r["cpu_ms"] for r in mine) / len(mine)})
    if args.json:
        print(json.dumps({"keys": args.keys, "repeat": args.repeat, "arms": summary}, indent=2))
        return
    print(f"{args.keys} keys a bucket, mean of {args.repeat} listings (wall, this process's CPU)")
    for s in summary:
        what = f"{args.keys} live keys" if s["shape"] == "live" else f"{args.keys} markers + 2 live"
        print(f"  {what:22s} {s['arm']:9s} {s['wall_ms']:8.1f} ms wall {s['cpu_ms']:8.1f} ms CPU  found {s['found']}")


if __name__ == "__main__":
    main()
