"""What charging a blob its footprint costs (`payload.quota.footprint`, session 15) against counting its content
bytes (the charge before), side by side in one run, rounds alternated: the time to store blobs of 8 bytes, 64 KiB
and 4 MiB through the local store (`LocalBlobStore`, in 16 KiB chunks as a request body comes) and through the
cluster's Object Store (`ObjectBlobStore`, on a nats-server of its own), quotas on, each blob deleted after; and the
quota writes (`charge` calls, each a compare-and-set of the client's count and the total in the cluster) a blob
makes; the same for beginning an upload (now charged its block, before nothing). "content" runs the same code with the charge set back to the content's bytes (the names the stores import,
swapped for the run). An ordinary message stores no blob and pays nothing either way.
Reruns with: python bench/blob_charge_cost.py [ROUNDS]."""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import mma2a.cluster.blob_quota as blob_quota
import mma2a.cluster.objects as objects
import mma2a.payload.store as local
from mma2a.cluster.blob_quota import SharedByteQuota
from mma2a.cluster.objects import open_object_store
from mma2a.cluster.server import NatsServer
from mma2a.gateway.cluster_config import ClusterConfig
from mma2a.payload.quota import footprint, growth
from mma2a.payload.store import LocalBlobStore

SIZES = ((8, 200), (64 * 1024, 40), (4 << 20, 3))  # bytes a blob, blobs a round
ORDERS = (("content", "footprint"), ("footprint", "content"))  # which runs first, alternated by round


@contextlib.contextmanager
def charge(kind: str) -> Iterator[None]:
    """`footprint` (this tree) or `content` (the charge before: a blob's bytes)."""
    if kind == "footprint":
        yield
        return
    names = [(local, "footprint"), (local, "growth"), (objects, "footprint"), (objects, "growth"),
             (blob_quota, "growth")]
    saved = [getattr(m, n) for m, n in names]
    content = {"footprint": lambda size: size, "growth": lambda at, size: size}
    for m, n in names:
        setattr(m, n, content[n])
    try:
        yield
    finally:
        for (m, n), f in zip(names, saved):
            setattr(m, n, f)


async def pieces(data: bytes, size: int = 16 * 1024) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


async def store_some(store: Any, size: int, n: int) -> float:
    """Seconds per blob for `n` distinct blobs of `size` bytes, each deleted after."""
    took = 0.0
    for _ in range(n):
        data = os.urandom(size)
        t0 = time.perf_counter()
        info = await store.put_stream(pieces(data), owner="alice")
        took += time.perf_counter() - t0
        await store.delete(info.key)
    return took / n


async def begin_some(store: Any, n: int) -> float:
    """Seconds per upload begun, for `n` uploads, each aborted after."""
    took = 0.0
    for _ in range(n):
        t0 = time.perf_counter()
        upload_id = await store.begin_upload(owner="alice")
        took += time.perf_counter() - t0
        await store.abort_upload(upload_id)
    return took / n


async def main(rounds: int) -> None:
    calls = {"n": 0}
    real_charge = SharedByteQuota.charge

    async def counted_charge(self: SharedByteQuota, owner: str | None, n: int) -> None:
        calls["n"] += 1
        await real_charge(self, owner, n)

    SharedByteQuota.charge = counted_charge  # type: ignore[method-assign]
    print(f"footprint(8) = {footprint(8)}, footprint(65536) = {footprint(65536)}, footprint(4 MiB) = "
          f"{footprint(4 << 20)}, growth(None, 16384) = {growth(None, 16384)}")
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp) / "nats")
        server.start()
        try:
            cluster, link = await open_object_store(ClusterConfig(nats=server.url, name="charge"),
                                                    max_bytes=1 << 40, max_bytes_per_client=1 << 40)
            disk = LocalBlobStore(Path(tmp) / "blobs", max_bytes=1 << 40, max_bytes_per_client=1 << 40)
            for where, store in (("local store", disk), ("object store", cluster)):
                for size, n in SIZES:
                    times: dict[str, list[float]] = {"content": [], "footprint": []}
                    writes: dict[str, int] = {}
                    for r in range(rounds):
                        for kind in ORDERS[r % 2]:
                            with charge(kind):
                                calls["n"] = 0
                                times[kind].append(await store_some(store, size, n))
                                writes[kind] = calls["n"]
                    a, b = statistics.median(times["content"]), statistics.median(times["footprint"])
                    extra = (f"; quota charges a blob: {writes['content'] / n:g} and {writes['footprint'] / n:g}"
                             if where == "object store" else "")
                    print(f"{where}, blob of {size} bytes: {a * 1e6:.0f} us charged its content, {b * 1e6:.0f} us "
                          f"charged its footprint ({b / a:.2f}x; medians of {rounds} rounds of {n}){extra}")
            for where, store in (("local store", disk), ("object store", cluster)):
                times = {"content": [], "footprint": []}
                for r in range(rounds):
                    for kind in ORDERS[r % 2]:
                        with charge(kind):
                            calls["n"] = 0
                            times[kind].append(await begin_some(store, 100))
                            writes[kind] = calls["n"]
                a, b = statistics.median(times["content"]), statistics.median(times["footprint"])
                extra = (f"; quota charges an upload begun: {writes['content'] / 100:g} and "
                         f"{writes['footprint'] / 100:g}" if where == "object store" else "")
                print(f"{where}, an upload begun: {a * 1e6:.0f} us charged nothing, {b * 1e6:.0f} us charged its "
                      f"block ({b / a:.2f}x; medians of {rounds} rounds of 100){extra}")
            t0 = time.perf_counter()
            for i in range(100_000):
                growth(i * 16384, 16384)
            print(f"growth() itself: {(time.perf_counter() - t0) / 100_000 * 1e9:.0f} ns a chunk")
            await link.close()
        finally:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
