"""What a push config method waits for in a cluster (`cluster/push.py`: `written`, `caught_up`), on a nats-server of its
own with two gateways in this process: a config put through the first and read through the second, as the
conformance kit does through a round-robin balancer. Per round: the milliseconds a create takes to be written (its
answer's wait), a read's catch-up when the gateway is current (one `stream_info`), and a read's catch-up right after
the other gateway's write (`stream_info` and the watch's delivery); beside them a bare `stream_info`, in one run.
Nothing of this runs for a SendMessage without a push config. Reruns with: python bench/push_config_sync.py [ROUNDS]."""

from __future__ import annotations

import asyncio
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from common import free_port

from mma2a.cluster import cluster_state
from mma2a.cluster.push import PushJournalKV
from mma2a.cluster.server import NatsServer
from mma2a.gateway import Gateway, parse_config
from mma2a.serving import running


async def ms(step: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await step()
    return (time.perf_counter() - t0) * 1e3


async def main(rounds: int) -> None:
    os.environ.setdefault("MMA2A_URL_SECRET", secrets.token_urlsafe(32))  # one for both gateways, as a cluster needs
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp))
        server.start()
        try:
            gws = []
            for i in range(2):
                port = free_port()
                config = parse_config({"listen": f"127.0.0.1:{port}", "agents": [], "features": False,
                                       "health_interval_s": 3600, "data_dir": f"{tmp}/gw{i}",
                                       "cluster": {"nats": server.url, "name": "bench"}})
                gws.append((Gateway(config, cluster=cluster_state(config)), port))
            async with running(gws[0][0].app, "127.0.0.1", gws[0][1]), running(gws[1][0].app, "127.0.0.1", gws[1][1]):
                one, two = (gw.pipeline.push.journal for gw, _ in gws)
                assert isinstance(one, PushJournalKV) and isinstance(two, PushJournalKV)
                stream = f"KV_{two.member.names.bucket('push_configs')}"
                seen: dict[str, list[float]] = {"written": [], "current": [], "after a write": [], "stream_info": []}
                for i in range(rounds):
                    record = {"owner": None, "config": {"id": f"c{i}", "taskId": f"t{i}", "url": "https://example.com/h"},
                              "at": time.time()}
                    one.put_config(f"k{i}", record)
                    seen["written"].append(await ms(one.written))
                    seen["after a write"].append(await ms(two.caught_up))
                    seen["current"].append(await ms(two.caught_up))
                    seen["stream_info"].append(await ms(lambda: two.member.js.stream_info(stream)))
                for label, values in seen.items():
                    print(f"{label:>14}: {statistics.median(values):.3f} ms median, {max(values):.3f} ms max "
                          f"({rounds} rounds)")
        finally:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
