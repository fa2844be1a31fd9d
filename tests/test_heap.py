"""`serving.settle_heap` and the server's memory release: a served process freezes its start-up heap, and every
`TRIM_EVERY_S` collects in full what came since (closed connections are cycles that outlived the young generation:
security round 4 #7). Whether the heap was frozen is a flag `settle_heap` sets, not `gc.get_freeze_count()`, which
walks every frozen object (4-30 ms of the event loop every 10 s for the ~72,000 objects a started gateway freezes, at load 15-26). Run in a child process: a
frozen heap and the server's GC thresholds would outlive the test in pytest's own."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import asyncio, gc, json, sys, time, weakref
import uvicorn
from mma2a import serving

class Node:
    pass

async def released(server):
    node = Node(); node.me = node  # a cycle: only the collector frees it
    gone = weakref.ref(node)
    del node
    server._release_memory(time.monotonic())
    await server._trim
    return gone() is None

async def main():
    server = serving.Server(uvicorn.Config(app=None))
    before = await released(server)  # a process that froze nothing (a test run): no full collection
    serving.settle_heap()
    counted = []
    serving.gc.get_freeze_count = lambda: counted.append(1) or 0  # must not be asked: it walks every frozen object
    after = await released(server)
    print(json.dumps([before, after, len(counted), gc.get_threshold()[0]]))

gc.disable()  # no young collection frees the cycle by chance; the full one below runs anyway (gc.collect)
asyncio.run(main())
"""


def test_a_settled_server_collects_cycles_in_full_at_its_memory_release_without_counting_its_frozen_heap() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    before, after, asked, threshold = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert before is False and after is True  # the cycle freed by the release's full collection, once settled
    assert asked == 0 and threshold == 20_000
