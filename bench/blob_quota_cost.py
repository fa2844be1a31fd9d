"""What the cluster's blob quotas cost (`cluster/blob_quota.py`), on a nats-server of its own: the time to store
blobs of 64 KiB and 4 MiB through `ObjectBlobStore` with the quotas on and off, side by side, in one run (rounds
alternated); the bytes one client's count takes in the `blob_quota` bucket (what `cluster.blob_quota_bucket_bytes`
holds); JetStream's bytes per 128 KiB chunk above the payload; and the recount of a missing bucket, per object.
Reruns with: python bench/blob_quota_cost.py [ROUNDS]."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from mma2a.cluster.objects import ObjectBlobStore, open_object_store
from mma2a.cluster.server import NatsServer
from mma2a.gateway.cluster_config import ClusterConfig


async def pieces(data: bytes, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


async def store_some(store: ObjectBlobStore, size: int, n: int, owner: str) -> float:
    """Seconds per blob for `n` distinct blobs of `size` bytes, each deleted after (the count stays small)."""
    took = 0.0
    for _ in range(n):
        data = os.urandom(size)
        t0 = time.perf_counter()
        info = await store.put_stream(pieces(data), owner=owner)
        took += time.perf_counter() - t0
        await store.delete(info.key)
    return took / n


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp))
        server.start()
        try:
            config = ClusterConfig(nats=server.url, name="bench")
            counted, link1 = await open_object_store(config, max_bytes=1 << 40, max_bytes_per_client=1 << 40)
            bare, link2 = await open_object_store(ClusterConfig(nats=server.url, name="benchbare"))
            for size, n in ((64 * 1024, 40), (4 << 20, 4)):
                on, off = [], []
                for _ in range(rounds):
                    off.append(await store_some(bare, size, n, "alice"))
                    on.append(await store_some(counted, size, n, "alice"))
                a, b = statistics.median(off), statistics.median(on)
                print(f"blob of {size // 1024} KiB: {a * 1e3:.2f} ms without quotas, {b * 1e3:.2f} ms with "
                      f"({b / a:.2f}x; medians of {rounds} rounds of {n})")
            quota = counted.quota
            assert quota is not None
            before = (await link1.js.stream_info("KV_bench_blob_quota")).state.bytes
            for i in range(1000):
                await quota.add(f"client-{i:05d}@example.org", 1234567)
            after = (await link1.js.stream_info("KV_bench_blob_quota")).state.bytes
            print(f"one client's count in the blob_quota bucket: {(after - before) / 1000:.0f} bytes "
                  f"(a name like client-00001@example.org): 16 MiB hold {(16 << 20) * 1000 // (after - before)} clients")
            data = os.urandom(8 << 20)
            si0 = (await link2.js.stream_info(bare.stream)).state.bytes
            await bare.put_stream(pieces(data))
            si1 = (await link2.js.stream_info(bare.stream)).state.bytes
            print(f"JetStream bytes above the payload: {(si1 - si0 - len(data)) / (len(data) / (128 * 1024)):.0f} "
                  "per 128 KiB chunk (the object's info included)")
            for i in range(1000):
                await counted.put_stream(pieces(os.urandom(1000)), owner=f"c{i % 7}")
            await link1.js.delete_key_value("bench_blob_quota")
            t0 = time.perf_counter()
            again, link3 = await open_object_store(config, max_bytes=1 << 40, max_bytes_per_client=1 << 40)
            took = time.perf_counter() - t0
            print(f"a missing bucket counted again from 1000 objects (7 clients) at open: {took * 1e3:.0f} ms "
                  f"({took / 1000 * 1e6:.0f} us an object, the opening included)")
            for link in (link1, link2, link3):
                await link.close()
        finally:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
