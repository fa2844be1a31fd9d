"""bench/transparency: how many conformance cases the gateway answers exactly as the agent does.

Runs the scenario list of tests/conformance against a sample a2a-sdk agent directly and through
a gateway (at /agents/{name} and at the root), on JSON-RPC and HTTP+JSON (and gRPC with
`--grpc`), and counts the (scenario, binding, surface) cases whose observables equal the
agent's: as they are, and with the differences documented in docs/operations.md
("Transparency") allowed. A scenario that raises counts as different. To compare with the code
before issue 15, run it on that checkout (its gateway has no gRPC; `--modes text/plain` gives
it a card it can read):

    git worktree add /tmp/mma2a-before 99963d8
    PYTHONPATH=/tmp/mma2a-before/src .venv/bin/python bench/transparency.py --modes text/plain
    PYTHONPATH=src .venv/bin/python bench/transparency.py --modes text/plain
    PYTHONPATH=src .venv/bin/python bench/transparency.py --grpc
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conformance.sut import Way, sample_agent  # noqa: E402
from tests.conformance.test_conformance import DIFFERENCES, SCENARIOS  # noqa: E402
from tests.gateway.conftest import gateway  # noqa: E402


@contextlib.asynccontextmanager
async def surfaces(modes: tuple[str, ...], grpc: bool) -> AsyncIterator[dict[str, Way]]:
    async with sample_agent("sut", grpc=grpc, modes=modes) as sut:
        cfg = {"agents": [{"name": "sut", "url": sut.url}], **({"grpc_listen": "127.0.0.1:0"} if grpc else {})}
        async with gateway(cfg) as (gw_, gw):
            g = (gw_.grpc_url or "") if grpc else ""
            yield {"direct": Way("direct", sut.url + "/", sut.url, sut.url, sut.grpc or ""),
                   "agent-path": Way("agent-path", f"{gw}/agents/sut", f"{gw}/agents/sut", f"{gw}/agents/sut", g, "sut"),
                   "root": Way("root", gw + "/", gw, gw, g)}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="text", help="the agent card's modes, comma-separated (default: text)")
    ap.add_argument("--grpc", action="store_true", help="the gRPC binding too")
    args = ap.parse_args()
    logging.disable(logging.CRITICAL)
    modes = tuple(args.modes.split(","))
    bindings = ["jsonrpc", "rest"] + (["grpc"] if args.grpc else [])
    same = allowed = total = 0
    differing: list[str] = []
    async with surfaces(modes, args.grpc) as ways, httpx.AsyncClient(timeout=30) as client:
        for name, scenario in SCENARIOS.items():
            for binding in bindings:
                results = {}
                for kind, way in ways.items():
                    try:
                        results[kind] = await scenario(client, way, binding)
                    except Exception as exc:  # noqa: BLE001 - a scenario that breaks is a difference
                        results[kind] = {"raised": f"{type(exc).__name__}: {exc}"}
                direct = results.pop("direct")
                for kind, got in results.items():
                    total += 1
                    override = DIFFERENCES.get((name, binding, kind), ({}, ""))[0]
                    same += got == direct
                    if got == {**direct, **override}:
                        allowed += 1
                    else:
                        differing.append(f"{name}/{binding}/{kind}")
    print(f"cases: {total}  (scenarios {len(SCENARIOS)} x bindings {len(bindings)} x surfaces 2; card modes {list(modes)})")
    print(f"identical to the agent's answer: {same}/{total} ({same / total:.0%})")
    print(f"identical but for documented differences: {allowed}/{total} ({allowed / total:.0%})")
    if differing:
        print("differing:", ", ".join(differing))


if __name__ == "__main__":
    asyncio.run(main())
