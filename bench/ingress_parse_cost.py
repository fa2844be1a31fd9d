"""bench/ingress_parse_cost: what the JSON-RPC ingress spends on a small body's parse, in process: as this tree does it
(parsed in place when it is within the parser's inline size; the worker's read looked at), against the code before
session 15 (every body through `JSONBodyParser.parse`'s coroutine), interleaved, best of `--rounds` rounds of 1,000
(bench/send_cost.py's SendMessage body).

    PYTHONPATH=src .venv/bin/python bench/ingress_parse_cost.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from mma2a.gateway.bindings.body_parser import JSONBodyParser
from mma2a.request_body import parse_json_body

BODY = (b'{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":{"message":{"messageId":"m-1-7",'
        b'"role":"ROLE_USER","parts":[{"text":"hello"}]}}}')


async def before(parser: JSONBodyParser) -> None:
    """The code before: the parser's coroutine for every body (its small path, as it was)."""

    async def parse(body: bytes) -> tuple[Any, int | None]:
        if len(body) <= parser.inline_bytes:
            return parse_json_body(body, parser.max_depth)
        raise AssertionError("a small body")

    for _ in range(1000):
        doc, brackets = await parse(BODY)


async def after(parser: JSONBodyParser) -> None:
    """This tree's `JsonRpcIngress.handle`: a small body parsed in place, the worker's read (None) looked at."""
    for _ in range(1000):
        read = None
        if len(BODY) <= parser.inline_bytes:
            doc, brackets = parse_json_body(BODY, parser.max_depth)
        else:
            doc, brackets, read = await parser.parse(BODY, every=False)
        if read is not None:
            raise AssertionError("a small body")


async def main(rounds: int) -> None:
    parser = JSONBodyParser(64)
    best = {"before": float("inf"), "after": float("inf")}
    for _ in range(rounds):
        for name, arm in (("before", before), ("after", after)):
            t0 = time.perf_counter()
            await arm(parser)
            best[name] = min(best[name], (time.perf_counter() - t0) / 1000 * 1e9)
    print(f"a small body's parse at the ingress: before {best['before']:.1f} ns, after {best['after']:.1f} ns "
          f"({best['after'] - best['before']:+.1f} ns), best of {rounds} interleaved rounds of 1,000")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    asyncio.run(main(ap.parse_args().rounds))
