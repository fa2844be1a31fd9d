"""bench/send_cost: the gateway's own CPU per SendMessage, in-process (no uvicorn, no client sockets).

A `Gateway` is built in this process in front of bench/fast_agent.py (its own process, reached over
loopback like any agent), and `--concurrency` tasks post one-text-part `SendMessage` requests
(the body bench/gateway.py's wrk script sends: a fresh id and messageId each) straight into the
ASGI app. Every answer is checked (HTTP 200, a `result` with the agent's part). Reports this
process's CPU microseconds per request (`process_time`: every thread, so the history writer
counts), best of `--repeat` runs of `--n` requests. Without uvicorn's parsing and writing, and
with the agent in another process, what is left is the gateway's own Python per request plus the
downstream call's socket work. `--profile FILE` writes a cProfile of one extra run.

    .venv/bin/python bench/send_cost.py [--n 4000] [--repeat 5] [--concurrency 16] [--history] [--json]
    .venv/bin/python bench/ab.py --a /tmp/base/src --b src --rounds 6 --key send -- bench/send_cost.py --json
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import itertools
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import asgi_post_scope, free_port, stop, wait_ready

from mma2a.gateway import Gateway, parse_config

ROOT = Path(__file__).resolve().parent.parent
HEADERS = [(b"host", b"gw"), (b"content-type", b"application/json"), (b"a2a-version", b"1.0")]
_ids = itertools.count(1)


def body() -> bytes:
    n = next(_ids)
    return (b'{"jsonrpc":"2.0","id":%d,"method":"SendMessage","params":{"message":{"messageId":"m-1-%d",'
            b'"role":"ROLE_USER","parts":[{"text":"hello"}]}}}' % (n, n))


async def post(app: Any, data: bytes) -> bytes:
    scope = asgi_post_scope("/", list(HEADERS), len(data))
    out: list[bytes] = []
    status = 0
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": data, "more_body": False}
        await asyncio.Event().wait()  # the client stays: nothing more to read
        return {"type": "http.disconnect"}

    async def send(msg: dict[str, Any]) -> None:
        nonlocal status
        if msg["type"] == "http.response.start":
            status = msg["status"]
        elif msg["type"] == "http.response.body":
            out.append(msg.get("body", b""))

    await app(scope, receive, send)
    answer = b"".join(out)
    if status != 200 or b'"result"' not in answer or b'{"text":"ok"}' not in answer:
        raise AssertionError(f"bad answer: {status} {answer[:300]!r}")
    return answer


async def run(app: Any, n: int, concurrency: int) -> None:
    left = iter(range(n))

    async def worker() -> None:
        for _ in left:
            await post(app, body())

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def measure(args: argparse.Namespace, agent_url: str, data_dir: str) -> dict[str, float]:
    cfg: dict[str, Any] = {"listen": "127.0.0.1:1", "log_decisions": False, "features": False, "data_dir": data_dir,
                           "agents": [{"name": "fast", "url": agent_url}]}
    if not args.history:
        cfg["history"] = {"enabled": False}
    hooks = None
    if args.worker:  # one worker of `serve --workers N` over the nats-server it starts, as that supervisor sets it up
        from mma2a.cluster import cluster_state
        from mma2a.cluster.task_files import make_task_dir

        cfg["cluster"] = {"nats": args.worker["url"], "auth": {"token_env": "MMA2A_WORKER_NATS_TOKEN"}}
        parsed = parse_config(cfg)
        hooks = cluster_state(parsed, history="file", task_dir=make_task_dir(2, parsed.limits.task_bytes))
    gw = Gateway(parse_config(cfg), cluster=hooks)
    await gw.start()
    try:
        await run(gw.app, max(500, args.n // 4), args.concurrency)  # warm: pools, caches, the allocator
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.process_time()
            await run(gw.app, args.n, args.concurrency)
            best = min(best, (time.process_time() - t0) / args.n * 1e6)
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            await run(gw.app, args.n, args.concurrency)
            prof.disable()
            prof.dump_stats(args.profile)
    finally:
        await gw.stop()
    return {"send": round(best, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--history", action="store_true", help="decision history on (off by default: measured apart)")
    ap.add_argument("--profile", metavar="FILE", help="also write a cProfile of one more run to FILE")
    ap.add_argument("--worker", action="store_true", help="as one worker of `serve --workers N` (cluster mode over an "
                    "embedded nats-server, task records in files, the shared history file)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    port = free_port()
    agent = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fast_agent.py"), "--port", str(port)])
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, timeout=60)
        with tempfile.TemporaryDirectory(prefix="mma2a-send-cost-") as tmp:
            import uvloop

            server = None
            if args.worker:
                from mma2a.cluster import NatsServer

                token = secrets.token_urlsafe(16)
                conf = Path(tmp) / "auth.conf"
                conf.write_text(f'authorization {{ token: "{token}" }}\n')
                (Path(tmp) / "nats").mkdir()
                server = NatsServer(Path(tmp) / "nats", args=["-c", str(conf)]).start()
                os.environ["MMA2A_WORKER_NATS_TOKEN"] = token
                os.environ.setdefault("MMA2A_URL_SECRET", secrets.token_urlsafe(16))
                args.worker = {"url": server.url}
            try:
                result = uvloop.run(measure(args, url, tmp))
            finally:
                if server is not None:
                    server.stop()
    finally:
        stop([agent])
    print(json.dumps(result) if args.json else f"SendMessage {result['send']:8.1f} us CPU/request")


if __name__ == "__main__":
    main()
