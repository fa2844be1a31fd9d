"""bench/pipelined_cost: what holding pipelined requests adds to each request on a connection, in process.

Per request the gateway's httptools protocol (`deadlines.http_protocol`) now looks at its pipeline on each read and
after the head (`bool(self.pipeline)`), and at what it holds after starting the request's task (`self._held is not
None`); nothing else runs unless a request waits behind another. Times those looks on a real protocol object on a
loopback connection, each inside a lambda, against an empty lambda, best of `--rounds` interleaved rounds of `--n`.

    PYTHONPATH=src .venv/bin/python bench/pipelined_cost.py [--rounds 9] [--n 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import timeit

import uvicorn
from uvicorn.server import ServerState

from mma2a.deadlines import Timeouts, http_protocol


async def main(rounds: int, n: int) -> None:
    config = uvicorn.Config(app=None, http=http_protocol(Timeouts()), log_level="warning")
    config.load()
    ours, theirs = socket.socketpair()
    proto = config.http_protocol_class(config=config, server_state=ServerState(), app_state={})
    transport, _ = await asyncio.get_running_loop().connect_accepted_socket(lambda: proto, ours)
    arms = {"pipeline": lambda: bool(proto.pipeline), "held": lambda: proto._held is not None, "empty": lambda: None}
    best = {k: float("inf") for k in arms}
    for _ in range(rounds):
        for name, arm in arms.items():
            best[name] = min(best[name], timeit.timeit(arm, number=n) / n * 1e9)
    transport.close()
    theirs.close()
    added = 2 * (best["pipeline"] - best["empty"]) + best["held"] - best["empty"]
    print(f"a look at the pipeline {best['pipeline'] - best['empty']:.1f} ns, at what is held "
          f"{best['held'] - best['empty']:.1f} ns (over an empty lambda, {best['empty']:.1f} ns): ~{added:.0f} ns a "
          f"request (two and one), best of {rounds} interleaved rounds of {n}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--n", type=int, default=1_000_000)
    args = ap.parse_args()
    asyncio.run(main(args.rounds, args.n))
