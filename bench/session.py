"""bench/session: a live stream of N chunks through the gateway, pinned fast path vs full routing of every chunk.

The gateway runs as a subprocess exactly as `mma2a serve` runs it, in front of one real
a2a-sdk agent that accepts audio. Its CPU time (all threads, from /proc/PID/task/*/schedstat,
exact to the nanosecond) and its wake-ups (voluntary context switches) are read before and
after each arm; the idle gateway's own CPU rate is measured first and reported, not
subtracted.

- full routing: every chunk is its own A2A `SendMessage` (a base64 `raw` audio part) that
  the gateway parses, checks, views, routes and dispatches to the agent.
- pinned messages: the same, with the extension's `session` field, so the route is decided
  for the first chunk and the later ones take the pinned route (DESIGN.md, Sessions).
- fast path: one A2A message announces the stream (its part carries the `stream` field)
  and is routed once; then the producer sends every chunk over the stream WebSocket and a
  consumer reads them from the subscription WebSocket; no chunk is routed again.

    .venv/bin/python bench/session.py --chunks 10000 --fps 30 --rounds 10
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson

EXT = "https://mma2a.dev/ext/multimodal/v1"
MEDIA = "audio/ogg; codecs=opus"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """CPU time the process has run, all threads, from the scheduler's exact nanosecond count.

    (/proc/PID/stat's utime/stime are sampled at the 100 Hz clock tick: too coarse for work
    done in 100 µs slices.)
    """
    return sum(int((t / "schedstat").read_text().split()[0]) for t in Path(f"/proc/{pid}/task").iterdir()) / 1e9


def wakeups(pid: int) -> int:
    """Voluntary context switches of all the process's threads (each is a sleep, then a wake-up)."""
    n = 0
    for t in Path(f"/proc/{pid}/task").iterdir():
        for line in (t / "status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                n += int(line.split()[1])
    return n


# --- the gateway subprocess -------------------------------------------------------------------


def serve_gateway(port: int, agent_url: str, blob_dir: str) -> None:
    """The gateway exactly as `mma2a serve` runs it (uvicorn on uvloop, streams mounted)."""
    from mma2a.gateway.config import parse_config
    from mma2a.gateway.server import serve

    serve(parse_config({
        "listen": f"127.0.0.1:{port}",
        "agents": [{"name": "ear", "url": agent_url}],
        "log_decisions": False,
        "blob_dir": blob_dir,
    }))


# --- the agent (in this process) --------------------------------------------------------------


async def run_agent(port: int) -> tuple[Any, asyncio.Task[None]]:
    import uvicorn
    from a2a.helpers.proto_helpers import new_task_from_user_message
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part
    from starlette.applications import Starlette

    class Ear(AgentExecutor):
        """Takes audio chunks and acknowledges each."""

        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            assert context.message is not None
            task = context.current_task or new_task_from_user_message(context.message)
            if context.current_task is None:
                await event_queue.enqueue_event(task)
            updater = TaskUpdater(event_queue, task.id, task.context_id)
            await updater.complete(updater.new_agent_message([Part(text="ok")]))

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            raise NotImplementedError

    url = f"http://127.0.0.1:{port}/"
    card = AgentCard(
        name="ear", description="listens", version="1.0.0", capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["audio/*", "text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="listen", name="listen", description="listens", tags=["audio"])],
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
    )
    handler = DefaultRequestHandler(agent_executor=Ear(), task_store=InMemoryTaskStore(), agent_card=card)
    app = Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    return server, task


# --- the arms ---------------------------------------------------------------------------------


def rpc(method: str, params: dict[str, object]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params})


def message(parts: list[dict[str, object]], session: dict[str, object] | None = None) -> dict[str, object]:
    ext: dict[str, object] = {"protocol": "a2a-multimodal/1.0"}
    if session is not None:
        ext["session"] = session
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": parts, "metadata": {EXT: ext}, "extensions": [EXT]}


async def send(client: httpx.AsyncClient, gw: str, msg: dict[str, object]) -> None:
    r = await client.post(gw + "/", content=rpc("SendMessage", {"message": msg}), headers={"A2A-Version": "1.0", "Content-Type": "application/json"})
    doc = r.json()
    if "error" in doc:
        raise RuntimeError(f"gateway error: {doc['error']}")


async def pace(i: int, t0: float, fps: float) -> None:
    if fps > 0:
        delay = t0 + i / fps - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)


async def arm_messages(gw: str, chunks: list[bytes], fps: float, *, pinned: bool) -> None:
    sid = str(uuid.uuid4())
    async with httpx.AsyncClient(timeout=30) as client:
        t0 = time.perf_counter()
        for i, chunk in enumerate(chunks):
            await pace(i, t0, fps)
            part = {"raw": base64.b64encode(chunk).decode(), "mediaType": MEDIA}
            session = {"id": sid, "seq": i, "final": i == len(chunks) - 1} if pinned else None
            await send(client, gw, message([part], session))


async def arm_full(gw: str, chunks: list[bytes], fps: float) -> None:
    await arm_messages(gw, chunks, fps, pinned=False)


async def arm_pinned(gw: str, chunks: list[bytes], fps: float) -> None:
    await arm_messages(gw, chunks, fps, pinned=True)


async def arm_fast(gw: str, chunks: list[bytes], fps: float) -> None:
    from websockets.asyncio.client import connect

    from mma2a.payload import decode_frame

    async with httpx.AsyncClient(timeout=30) as client:
        s = (await client.post(gw + "/streams", json={"mediaType": MEDIA})).json()
        announce = {"url": s["subscribeUrl"], "mediaType": MEDIA, "metadata": {EXT: {"encoding": "opus", "stream": s["stream"]}}}
        await send(client, gw, message([announce], {"id": s["sessionId"], "seq": 0}))
    total = sum(len(c) for c in chunks)

    async def consume() -> int:
        got = 0
        async with connect(s["subscribeUrl"], max_size=None) as ws:
            while (f := decode_frame(await ws.recv())).type != "stop":
                got += len(f.data)
        return got

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0.2)
    async with connect(s["producerWsUrl"]) as producer:
        t0 = time.perf_counter()
        for i, chunk in enumerate(chunks):
            await pace(i, t0, fps)
            await producer.send(chunk)
        await producer.send(orjson.dumps({"type": "stop"}).decode())
        await producer.recv()
    got = await consumer
    if got != total:
        raise RuntimeError(f"fast path: consumer got {got} of {total} bytes")


async def main_async(args: argparse.Namespace) -> None:
    agent_port, gw_port = free_port(), free_port()
    agent_server, agent = await run_agent(agent_port)
    blob_dir = Path(f"/tmp/mma2a-bench-session-{os.getpid()}")
    proc = subprocess.Popen([
        sys.executable, __file__, "--serve-gateway", str(gw_port),
        "--agent-url", f"http://127.0.0.1:{agent_port}/", "--blob-dir", str(blob_dir),
    ])
    gw = f"http://127.0.0.1:{gw_port}"
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(300):
                try:
                    if (await client.get(gw + "/healthz")).json().get("healthy") == 1:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError("gateway did not become healthy")
        chunks = [os.urandom(args.chunk_size) for _ in range(args.chunks)]
        # warm up both paths (imports, connection pools, first-call caches) outside the measurement
        await arm_full(gw, chunks[:50], 0)
        await arm_fast(gw, chunks[:50], 0)
        c0 = cpu_seconds(proc.pid)
        await asyncio.sleep(args.idle)
        idle = (cpu_seconds(proc.pid) - c0) / args.idle
        print(f"{args.chunks} chunks of {args.chunk_size} bytes at {args.fps or 'unpaced'} fps")
        print(f"idle gateway: {idle * 1e3:.2f} ms CPU per second (measured over {args.idle:g} s, not subtracted below)")
        print(f"{'arm':<12} {'gateway CPU':>12} {'per chunk':>12} {'wake-ups per chunk':>20} {'wall':>8}")
        arms = {"full": arm_full, "pinned msgs": arm_pinned, "fast path": arm_fast}
        chosen = [(n, a) for n, a in arms.items() if n.split()[0] in args.arms.split(",")]
        totals = {n: [0.0, 0, 0.0] for n, _ in chosen}  # CPU seconds, wake-ups, wall seconds
        per_round = args.chunks // args.rounds
        for r in range(args.rounds):  # arms interleaved round by round, so the machine's drift hits them alike
            for name, arm in chosen:
                c0, v0, w0 = cpu_seconds(proc.pid), wakeups(proc.pid), time.perf_counter()
                await arm(gw, chunks[r * per_round : (r + 1) * per_round], args.fps)
                t = totals[name]
                t[0] += cpu_seconds(proc.pid) - c0
                t[1] += wakeups(proc.pid) - v0
                t[2] += time.perf_counter() - w0
        results = {}
        n_chunks = per_round * args.rounds
        for name, (cpu, wakes, wall) in totals.items():
            results[name] = cpu / n_chunks
            print(f"{name:<12} {cpu:>10.2f} s {cpu / n_chunks * 1e6:>9.0f} µs {wakes / n_chunks:>20.2f} {wall:>7.1f}s", flush=True)
        for other in ("full", "pinned msgs"):
            if other in results and "fast path" in results:
                print(f"fast path is {results[other] / results['fast path']:.1f}x cheaper per chunk than {other}")
    finally:
        proc.terminate()
        proc.wait(30)
        agent_server.should_exit = True
        await agent
        subprocess.run(["rm", "-rf", str(blob_dir)], check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--chunk-size", type=int, default=4000, help="bytes per chunk (default 4000: 30 fps at ~1 Mbit/s)")
    ap.add_argument("--fps", type=float, default=30.0, help="chunks per second; 0 = as fast as possible")
    ap.add_argument("--rounds", type=int, default=1, help="split the chunks into rounds, arms interleaved (default 1)")
    ap.add_argument("--arms", default="full,pinned,fast", help="which arms to run, comma-separated")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds to measure the idle gateway first")
    ap.add_argument("--serve-gateway", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--agent-url", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--blob-dir", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_gateway is not None:
        serve_gateway(args.serve_gateway, args.agent_url, args.blob_dir)
        return
    try:
        asyncio.run(main_async(args))
    except asyncio.CancelledError:
        pass


if __name__ == "__main__":
    main()
