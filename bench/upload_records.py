"""Cluster mode: what a prune's listing of the uploads' records costs the gateway's event loop (docs/security.md,
S17-5), before and after the records were streamed, side by side in one run on one nats-server.

N records of the form `ObjectBlobStore.begin_upload` writes (one client's, as the finding's attack left them) are
published into the `uploads` bucket, then listed by each arm:
- `before`: as the prune and the recount listed them until session 18: the ids from `STREAM.INFO` pages
  (`kv_keys.held_keys`, parsed by nats-py on the loop), then one `get` each, every record held in a list
  (`--gets M` reads only the first M and scales the figures by N/M: the listing itself is always whole);
- `after`: `ObjectBlobStore._idle_uploads`, what the prune runs now: one consumer streaming the records (pulled 256 at
  a time), the clients' counts of open uploads read before and set right after (nothing idle: no record is aborted).
For each: wall time, this process's CPU, the longest the loop was held (a task asking for 1 ms sleeps: how late it woke,
and the loop thread's CPU time between two of its wakes, which a busy host's scheduling does not inflate) and the
growth of the process's peak RSS (`after` runs first, as the peak only grows), and the longest garbage collection
within (a pause of the whole heap's, not of the arm's own making, counted in the loop's longest hold when it is it).

    .venv/bin/python bench/upload_records.py [--records 262144] [--gets 20000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import secrets
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import orjson  # noqa: E402

from mma2a.cluster.kv_keys import held_keys  # noqa: E402
from mma2a.cluster.objects import ObjectBlobStore, open_object_store  # noqa: E402
from mma2a.cluster.server import NatsServer  # noqa: E402
from mma2a.errors import PayloadNotFound  # noqa: E402
from mma2a.gateway.cluster_config import ClusterConfig  # noqa: E402

WINDOW = 2000  # publishes in flight while filling


async def fill(store: ObjectBlobStore, n: int) -> None:
    js, bucket = store.js, store.cluster.names.bucket("uploads")
    now = time.time()
    pending: list[Any] = []
    for _ in range(n):
        record = {"mediaType": "application/octet-stream", "offset": 0, "seqs": [], "owner": "mallory", "at": now}
        pending.append(await js.publish_async(f"$KV.{bucket}.{secrets.token_hex(16)}", orjson.dumps(record)))
        if len(pending) >= WINDOW:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)


async def before(store: ObjectBlobStore, gets: int | None) -> tuple[int, float]:
    """The listing as it was: every id, then a `get` each (the first `gets`), all held; (records read, the scale)."""
    ids = await held_keys(store.js, store.cluster.names.bucket("uploads"))
    sample = ids if gets is None else ids[:gets]
    records = []
    for upload_id in sample:
        try:
            records.append((upload_id, *(await store._record(upload_id))))
        except PayloadNotFound:
            pass
    return len(records), len(ids) / max(1, len(sample))


async def after(store: ObjectBlobStore, gets: int | None) -> tuple[int, float]:
    idle = await store._idle_uploads(24 * 3600.0)
    assert idle == []
    assert store.quota is not None
    return await store.quota.open_uploads("mallory"), 1.0


async def measured(arm: Callable[[ObjectBlobStore, int | None], Awaitable[tuple[int, float]]], store: ObjectBlobStore,
                   gets: int | None) -> dict[str, Any]:
    held = held_cpu = 0.0
    going = True

    async def ticker() -> None:
        nonlocal held, held_cpu
        while going:
            t, c = time.perf_counter(), time.thread_time()
            await asyncio.sleep(0.001)
            held = max(held, time.perf_counter() - t - 0.001)
            held_cpu = max(held_cpu, time.thread_time() - c)

    longest_gc, started = 0.0, 0.0

    def collected(phase: str, info: dict[str, Any]) -> None:
        nonlocal longest_gc, started
        if phase == "start":
            started = time.thread_time()
        else:
            longest_gc = max(longest_gc, time.thread_time() - started)

    gc.callbacks.append(collected)
    tick = asyncio.create_task(ticker())
    rss, wall, cpu = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter(), time.process_time()
    found, scale = await arm(store, gets)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    going = False
    await tick
    gc.callbacks.remove(collected)
    return {"found": found, "scale": scale, "wall_s": wall, "cpu_s": cpu, "loop_held_ms": held * 1000, "loop_held_cpu_ms": held_cpu * 1000, "longest_gc_ms": longest_gc * 1000,
            "rss_growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024}


async def run(n: int, gets: int | None) -> dict[str, Any]:
    with NatsServer(tempfile.mkdtemp(prefix="upload-records-")) as server:
        store, link = await open_object_store(ClusterConfig(nats=server.url, name="bench"),
                                              max_uploads_per_client=1 << 30)  # counted, never refused here
        try:
            t = time.perf_counter()
            await fill(store, n)
            filled = time.perf_counter() - t
            out = {"records": n, "fill_s": filled, "load": os.getloadavg()[0]}
            out["after"] = await measured(after, store, gets)
            out["before"] = await measured(before, store, gets)
            out["load_end"] = os.getloadavg()[0]
        finally:
            await link.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=262_144)
    parser.add_argument("--gets", type=int, default=None, help="`before` reads only the first M records by get")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = asyncio.run(run(args.records, args.gets))
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['records']} records (filled in {out['fill_s']:.1f} s), load {out['load']:.1f} -> {out['load_end']:.1f}")
    for arm in ("before", "after"):
        r = out[arm]
        scaled = f" (read {r['found']}, figures x{r['scale']:.1f} for all)" if r["scale"] != 1.0 else ""
        print(f"  {arm:6s} wall {r['wall_s'] * r['scale']:7.1f} s  CPU {r['cpu_s'] * r['scale']:7.1f} s  "
              f"loop held up to {r['loop_held_ms']:6.1f} ms ({r['loop_held_cpu_ms']:5.1f} ms of its CPU; longest GC "
              f"{r['longest_gc_ms']:.1f} ms)  "
              f"peak RSS +{r['rss_growth_mb']:.0f} MB{scaled}")


if __name__ == "__main__":
    main()
