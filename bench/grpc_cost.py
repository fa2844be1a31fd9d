"""bench/grpc_cost: CPU time per call through the gateway's gRPC binding, in-process (client and server).

A gateway with no agents, auth on (one client) and rate limits on (never reached), its gRPC binding on a
loopback port; the a2a-sdk's gRPC stub calls, one at a time on one channel: `ListTasks` with a bearer token
(admitted: the root's merged list over no agents) and `ListTasks` without one (refused UNAUTHENTICATED).
Reports process CPU microseconds per call (client and server together) for each, best of `--repeat` runs
of `--n` calls. Use it through bench/ab.py to compare two source trees side by side:

    .venv/bin/python bench/ab.py --a /tmp/grpc-before/src --b src --rounds 6 --key admitted --key refused \\
        -- bench/grpc_cost.py --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import grpc
import grpc.aio
from a2a.types import a2a_pb2, a2a_pb2_grpc

from mma2a.gateway import Gateway, parse_config

TOKEN = "tok-bench-grpc-4d1e"


async def measure(stub: Any, metadata: list[tuple[str, str]], n: int, *, refused: bool) -> float:
    request = a2a_pb2.ListTasksRequest()
    t0 = time.process_time()
    for _ in range(n):
        try:
            await stub.ListTasks(request, metadata=metadata, timeout=30)
        except grpc.aio.AioRpcError as exc:
            if not refused or exc.code() != grpc.StatusCode.UNAUTHENTICATED:
                raise
        else:
            if refused:
                raise RuntimeError("an anonymous call was admitted")
    return (time.process_time() - t0) / n * 1e6


async def main(n: int, repeat: int) -> dict[str, float]:
    config = parse_config({"grpc_listen": "127.0.0.1:0", "features": False, "log_decisions": False,
                           "auth": {"clients": [{"name": "bench", "token": TOKEN}]},
                           "rate_limit": {"enabled": True, "rate": 1e9, "burst": 1_000_000}})
    gw = Gateway(config)
    await gw.start()
    try:
        assert gw.grpc is not None
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.grpc.port}") as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]
            good = [("a2a-version", "1.0"), ("authorization", f"Bearer {TOKEN}")]
            anonymous = [("a2a-version", "1.0")]
            await measure(stub, good, 50, refused=False)  # warm up: connection, first calls
            await measure(stub, anonymous, 50, refused=True)
            admitted = min([await measure(stub, good, n, refused=False) for _ in range(repeat)])
            refused = min([await measure(stub, anonymous, n, refused=True) for _ in range(repeat)])
    finally:
        await gw.stop()
    return {"admitted": round(admitted, 1), "refused": round(refused, 1)}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = asyncio.run(main(args.n, args.repeat))
    print(json.dumps(result) if args.json else "\n".join(f"{k:8s} {v:8.1f} us CPU/call" for k, v in result.items()))
