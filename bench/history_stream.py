"""bench/history_stream: what the cluster's decision history costs a gateway per decision, with a real nats-server.

A `JetStreamHistory` (cluster/history.py) records `--decisions` decisions at `--rate` a second (bursts every 50 ms, as
requests end), `--senders` clients interleaved (bench/history.py's mix): the request path's `record`, the publisher
(batches, encoded, published), and — since S17-6 — a message per client and the headers-only count of every message of
the stream. With `--follow`, the gateway also follows the stream into its history file (a writer process). Reported
per decision: the gateway process's CPU (every thread), the writer process's, nats-server's; the stream messages.
Compare two source trees by running it with each on PYTHONPATH.

    PYTHONPATH=src .venv/bin/python bench/history_stream.py [--senders 40] [--decisions 50000] [--rate 5000] [--follow]
    PYTHONPATH=src .venv/bin/python bench/history_stream.py --count-cost 100000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nats
from nats.js import api

from mma2a.cluster.history import JetStreamHistory
from mma2a.cluster.link import Names
from mma2a.cluster.server import NatsServer
from mma2a.gateway.history import DecisionRecord, HistoryRecorder, HistoryStore, PartSummary
from mma2a.gateway.observe.metrics import GatewayMetrics
from mma2a.routing import PartRoute, Target

MODALITIES = ["text/plain", "image/png", "image/jpeg", "audio/wav", "audio/ogg", "video/mp4", "application/pdf",
              "model/gltf+json", "text/markdown"]
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User and system CPU of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def decisions(n: int, senders: int) -> list[DecisionRecord]:
    routes = [(PartRoute(0, m, (f"r{i % 12}",), (Target(f"agent{i % 8}", ()),), ("route_to",)),)
              for i, m in enumerate(MODALITIES * 8)]  # the same routes objects, as the router's memo hands them out
    return [DecisionRecord(f"m{i}", time.time(), f"client{i % senders}", (PartSummary(0, MODALITIES[i % 9], {}),),
                           routes[i % 72], "TASK_STATE_COMPLETED", 0.01) for i in range(n)]


async def run(args: argparse.Namespace, server: NatsServer, tmp: Path) -> dict[str, Any]:
    nc = await nats.connect(server.url)
    name = f"b{os.getpid()}{int(time.time() * 1000) % 100000}"
    member = SimpleNamespace(js=nc.jetstream(timeout=5.0), nc=nc, names=Names(name), id="bench-gw",
                             config=SimpleNamespace(replicas=1), sizing={},
                             gw=SimpleNamespace(metrics=GatewayMetrics()))
    local = HistoryRecorder(HistoryStore(tmp / f"{name}.sqlite3"))
    sink = JetStreamHistory(member, local, capacity=100_000, max_age_s=3600, max_bytes=256 << 20,  # type: ignore[arg-type]
                            follow=args.follow)
    local.start()
    await sink.setup()
    records = decisions(args.decisions, args.senders)
    burst = max(1, int(args.rate * 0.05))
    me, srv = os.getpid(), server.proc.pid  # type: ignore[union-attr]
    t0, c0, s0 = time.monotonic(), cpu_s(me), cpu_s(srv)
    w0 = 0.0
    for start in range(0, len(records), burst):
        for r in records[start:start + burst]:
            sink.record(r)
        await asyncio.sleep(0.05)
    while sink.published + sink.failed + sink.dropped < len(records) or \
            (hasattr(sink, "heard") and sink.heard < (await member.js.stream_info(sink.stream)).state.last_seq):
        await asyncio.sleep(0.01)
    if args.follow:
        while local.store.position() < (await member.js.stream_info(sink.stream)).state.last_seq:
            await asyncio.sleep(0.01)
        w0 = cpu_s(local.writer_pid) if local.writer_pid else 0.0
    wall, gw, ns = time.monotonic() - t0, cpu_s(me) - c0, cpu_s(srv) - s0
    messages = (await member.js.stream_info(sink.stream)).state.messages
    await sink.stop()
    await asyncio.to_thread(local.stop)
    await member.js.delete_stream(sink.stream)
    await nc.close()
    n = len(records)
    return {"wall_s": wall, "gateway_us": gw / n * 1e6, "writer_us": w0 / n * 1e6, "nats_us": ns / n * 1e6,
            "messages": messages, "failed": sink.failed, "dropped": sink.dropped}


async def count_cost(server: NatsServer, n: int) -> str:
    """The loop's CPU a message of reading a stream's messages headers only, as every gateway counts them: what reading
    a whole stream at each start would cost."""
    nc = await nats.connect(server.url)
    js = nc.jetstream()
    stream = f"C{os.getpid()}_HISTORY"
    await js.add_stream(name=stream, subjects=[f"c{os.getpid()}.history.>"])
    body = b'{"shapes":2,"parts":[[]],"rows":[["m",1.0,"c",null,null,1.0,0,"[1]",null]]}'
    for start in range(0, n, 1000):
        await asyncio.gather(*(js.publish(f"c{os.getpid()}.history.g1", body, stream=stream,
                                          headers={"Mma2a-Clients": "c0123456789abcdef01234:300"})
                               for _ in range(min(1000, n - start))))
    t, c = time.monotonic(), time.process_time()
    sub = await js.subscribe(f"c{os.getpid()}.history.>", stream=stream, ordered_consumer=True,
                             config=api.ConsumerConfig(headers_only=True, deliver_policy=api.DeliverPolicy.ALL))
    seen = 0
    async for msg in sub.messages:
        _ = msg.metadata.sequence.stream, msg.headers
        seen += 1
        if seen == n:
            break
    wall, cpu = time.monotonic() - t, time.process_time() - c
    await js.delete_stream(stream)
    await nc.close()
    return f"{n} messages read headers only: {wall:.1f} s wall, {cpu / n * 1e6:.1f} us of CPU each; " \
           f"load {os.getloadavg()[0]:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--senders", type=int, default=40)
    ap.add_argument("--decisions", type=int, default=50_000)
    ap.add_argument("--rate", type=int, default=5_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--follow", action="store_true")
    ap.add_argument("--count-cost", type=int, default=0, metavar="N",
                    help="only: the CPU of reading N one-decision messages headers only")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mma2a-bench-hs-"))
    server = NatsServer(tmp / "nats")
    server.start()
    try:
        if args.count_cost:
            print(asyncio.run(count_cost(server, args.count_cost)))
            return
        for _ in range(args.rounds):
            got = asyncio.run(run(args, server, tmp))
            print(f"senders {args.senders}, {args.decisions} at {args.rate}/s{' (follow)' if args.follow else ''}: "
                  f"gateway {got['gateway_us']:.2f} us CPU a decision, writer {got['writer_us']:.2f}, "
                  f"nats-server {got['nats_us']:.2f}; {got['messages']} messages, {got['wall_s']:.1f} s; "
                  f"failed {got['failed']}, dropped {got['dropped']}; load {os.getloadavg()[0]:.1f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
