"""What holding each client's session pins to its share of the cluster's `sessions` bucket adds to a pin's write
(`cluster/pins.py`, docs/security.md S16-5), in process: the key (the client's digest and the session's, was the
session's alone), the count of the client's keys once the write is acknowledged (`PinShares.wrote`: a client within its
share, and one past it, whose oldest key leaves the count with each write), and the memory a counted key holds, side by side in one run with what the pin
itself costs: its write to the bucket on a nats-server of its own (`KeyValue.put`, one acknowledged JetStream publish).
Only messages of a session a `pin_session` rule pins pay any of it; a message of a pinned session pays nothing more.
Reruns with: python bench/pin_share_cost.py [N]."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import nats
from nats.js import api

from mma2a.cluster.pins import PinShares, session_key, stored_bytes
from mma2a.cluster.server import NatsServer


def per_call_us(fn: object, n: int) -> float:
    f = fn  # type: ignore[assignment]
    t0 = time.perf_counter()
    for i in range(n):
        f(i)  # type: ignore[operator]
    return (time.perf_counter() - t0) / n * 1e6


def main(n: int) -> None:
    sids = [f"alice\x1f{i:08d}-" + "s" * 240 for i in range(n)]
    keys = [session_key(s) for s in sids]
    subject = "$KV.mma2a_sessions."
    old_key = per_call_us(lambda i: hashlib.sha256(sids[i].encode()).hexdigest()[:40], n)
    new_key = per_call_us(lambda i: session_key(sids[i]), n)
    within = PinShares(share=1 << 40, ttl_s=3600, max_keys=10 * n)
    now = time.monotonic()
    under = per_call_us(lambda i: within.wrote(keys[i], i + 1, stored_bytes(subject + keys[i], 420), True, now), n)
    past = PinShares(share=64 * 560, ttl_s=3600, max_keys=10 * n)  # 64 pins: each write past it purges one
    over = per_call_us(lambda i: past.wrote(keys[i], i + 1, stored_bytes(subject + keys[i], 420), True, now), n)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    held = PinShares(share=1 << 40, ttl_s=3600, max_keys=10 * n)
    for i in range(n):
        held.wrote(session_key(sids[i]), i + 1, 600, False, now)  # keys made here (the count kept their strings, <S17)
    per_key = (tracemalloc.get_traced_memory()[0] - before) / n
    tracemalloc.stop()
    put = asyncio.run(put_us(min(n, 2000)))
    load = os.getloadavg()[0]
    print(f"load average {load:.1f}; {n} pins of 256-character session ids")
    print(f"key: the session's digest        {old_key:6.2f} us")
    print(f"key: client's digest + session's {new_key:6.2f} us  (+{new_key - old_key:.2f} us)")
    print(f"count, client within its share   {under:6.2f} us")
    print(f"count, client past its share     {over:6.2f} us  (and one purge sent, off the request path)")
    print(f"the pin's write to the bucket    {put:6.1f} us  (KeyValue.put on a local nats-server, acknowledged)")
    print(f"memory a counted key holds       {per_key:6.0f} B  (every gateway counts every client's keys in the bucket)")
    print(f"added a pin: {new_key - old_key + under:.2f} us within the share, {new_key - old_key + over:.2f} us past it "
          f"= {(new_key - old_key + over) / put:.1%} of the write")


async def put_us(n: int) -> float:
    with tempfile.TemporaryDirectory() as store:
        server = NatsServer(Path(store))
        server.start()
        try:
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            kv = await js.create_key_value(config=api.KeyValueConfig(bucket="bench_sessions", history=1))
            value = b"x" * 420
            t0 = time.perf_counter()
            for i in range(n):
                await kv.put(f"k{i}", value)
            took = (time.perf_counter() - t0) / n * 1e6
            await nc.close()
            return took
        finally:
            server.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
