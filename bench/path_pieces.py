"""bench/path_pieces: user-space instructions of pieces of one routed request's path, each beside what it replaced.

Each case is a small program run under valgrind's callgrind twice, with N iterations and with none; the difference
over N is the piece's count (a count, not a time: it holds on a loaded machine). Cases:

- `layer`: one more coroutine awaited between a request and the future it waits on (uvloop, one suspension);
- `nosuspend`: an awaited coroutine that returns at once, beside a plain call;
- `feed`: `DecisionFeed.record` of a one-part decision, its route written again beside its JSON handed in;
- `heads`: a JSON-RPC answer's head and body through uvicorn's httptools request cycle beside `checked_heads`'.

    PYTHONPATH=src .venv/bin/python bench/path_pieces.py [--n 20000] [--cases layer,nosuspend,feed,heads]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LAYER = """
import asyncio, sys, uvloop
N, DEPTH = {n}, {arg}
async def leaf(loop):
    f = loop.create_future()
    loop.call_soon(f.set_result, 1)
    return await f
async def mid(d, loop):
    return await leaf(loop) if d == 0 else await mid(d - 1, loop)
async def main():
    loop = asyncio.get_running_loop()
    for _ in range(N):
        await mid(DEPTH, loop)
uvloop.run(main())
"""

NOSUSPEND = """
import asyncio
N, KIND = {n}, {arg}
async def a(x): return x
def s(x): return x
async def main():
    if KIND == "coroutine":
        for i in range(N): await a(i)
    else:
        for i in range(N): s(i)
asyncio.run(main())
"""

FEED = """
import orjson
from mma2a.gateway.observe.feed import DecisionFeed
N, GIVEN = {n}, {arg}
route = [{{"index": 0, "modality": "text/plain", "targets": ["fast"], "matched": [], "transforms": [], "dropped": None,
          "bottleneck": False}}]
encoded = orjson.dumps(route)
message = {{"messageId": "m-1-1", "role": "ROLE_USER", "parts": [{{"text": "hello"}}]}}
feed = DecisionFeed()
for _ in range(N):
    feed.record(message, route, "TASK_STATE_COMPLETED", route_json=encoded if GIVEN else None)
"""

HEADS = """
import asyncio, logging
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle
from mma2a.checked_heads import CheckedCycle
N, CHECKED = {n}, {arg}
class Transport:
    def write(self, data): pass
    def is_closing(self): return False
    def close(self): pass
class Flow:
    write_paused = False
cls, log = (CheckedCycle if CHECKED else RequestResponseCycle), logging.getLogger("bench")
date = [(b"date", b"Sun, 06 Dec 2026 03:50:00 GMT")]
body = b'{{"jsonrpc":"2.0","id":1,"result":{{"task":{{"id":"x"}}}}}}'
head = [(b"content-length", b"%d" % len(body)), (b"content-type", b"application/json")]
async def main():
    for _ in range(N):
        c = cls({{"method": "POST", "type": "http"}}, Transport(), Flow(), log, log, False, date, asyncio.Event(), False,
                True, lambda: None)
        await c.send({{"type": "http.response.start", "status": 200, "headers": head}})
        await c.send({{"type": "http.response.body", "body": body}})
asyncio.run(main())
"""

CASES = {
    "layer": (LAYER, [("5 coroutines deep", 5), ("none between", 0)], 5),
    "nosuspend": (NOSUSPEND, [("awaited coroutine", "coroutine"), ("plain call", "call")], 1),
    "feed": (FEED, [("route written again", False), ("route's JSON given", True)], 1),
    "heads": (HEADS, [("uvicorn's cycle", False), ("checked_heads' cycle", True)], 1),
}


def collected(program: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c",
                          program], env=env, capture_output=True, text=True, check=True).stderr
    found = re.search(r"Collected : (\d+)", out)
    if found is None:
        raise SystemExit(f"callgrind said no count:\n{out[-2000:]}")
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    for case in args.cases.split(","):
        template, arms, per = CASES[case]
        counts = []
        for name, arg in arms:
            base = collected(template.format(n=0, arg=repr(arg)))
            total = collected(template.format(n=args.n, arg=repr(arg)))
            counts.append((name, (total - base) / args.n))
        if case == "layer":
            print(f"layer: {(counts[0][1] - counts[1][1]) / per:,.0f} instructions a coroutine layer "
                  f"({counts[0][0]}: {counts[0][1]:,.0f}, {counts[1][0]}: {counts[1][1]:,.0f} an await)")
        else:
            print(f"{case}: " + ", ".join(f"{name} {count:,.0f}" for name, count in counts) + " instructions each")


if __name__ == "__main__":
    main()
