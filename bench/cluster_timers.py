"""bench/cluster_timers: the timers an idle clustered gateway schedules, by where (a gateway in this process, on
asyncio's own event loop so `call_at` can be counted, on a nats-server the bench starts): each is a wake-up of the
event loop, paid whether requests come or not (bench/workers_idle.py measures what they cost together).

    .venv/bin/python bench/cluster_timers.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import tempfile
import traceback
from typing import Any

COUNTS: collections.Counter[str] = collections.Counter()
COUNTING = False
_call_at = asyncio.BaseEventLoop.call_at


def _counted(self: asyncio.BaseEventLoop, when: float, callback: Any, *args: Any, context: Any = None) -> Any:
    if COUNTING:
        stack = traceback.extract_stack(limit=6)[:-2]  # less this function and call_later
        COUNTS[" <- ".join(f"{os.path.basename(f.filename)}:{f.name}" for f in reversed(stack[-3:]))] += 1
    return _call_at(self, when, callback, *args, context=context)


async def run(seconds: float) -> None:
    global COUNTING
    from mma2a.cluster import cluster_state
    from mma2a.cluster.server import NatsServer
    from mma2a.gateway import Gateway, parse_config
    from mma2a.modality import ModalityRegistry

    store = tempfile.mkdtemp(prefix="mma2a-timers-")
    server = NatsServer(store).start()
    os.environ.setdefault("MMA2A_URL_SECRET", "bench-cluster-timers-secret-0123456789")
    config = parse_config({"cluster": {"nats": server.url, "name": "timers"}, "features": False,
                           "data_dir": os.path.join(store, "gw")})
    gw = Gateway(config, registry=ModalityRegistry(), cluster=cluster_state(config))
    try:
        await gw.start()
        await asyncio.sleep(3)  # settled
        COUNTING = True
        await asyncio.sleep(seconds)
        COUNTING = False
    finally:
        await gw.stop()
        server.stop()
        shutil.rmtree(store, ignore_errors=True)
    print(f"timers scheduled by an idle clustered gateway in {seconds:g} s, by where:")
    for where, n in COUNTS.most_common():
        print(f"{n / seconds:7.1f}/s  {where}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    asyncio.BaseEventLoop.call_at = _counted  # type: ignore[method-assign]
    asyncio.run(run(args.seconds))


if __name__ == "__main__":
    main()
