"""bench/overload_cost: what the per-agent slots cost a message when no limit binds — CPU per SendMessage through
`Gateway.app`'s JSON-RPC fast path in-process (ingress, routing, the exchange, the slot, dispatch, the answer), the
agent's answer stubbed at the transport, with `limits.agent_concurrency` adaptive and off in alternating rounds of
the same tree (one process each). Prints each round and the median ratio.

    .venv/bin/python bench/overload_cost.py [--rounds 5] [--n 4000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import asgi_post_scope

CARD = {"name": "fast", "url": "http://127.0.0.1:9/", "version": "1", "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"], "capabilities": {},
        "skills": [{"id": "s", "name": "s", "description": "d", "tags": []}],
        "supportedInterfaces": [{"url": "http://127.0.0.1:9/", "protocolBinding": "JSONRPC"}]}


async def measure(limits: str, n: int) -> float:
    from mma2a.gateway import Gateway, parse_config
    from mma2a.gateway.config import AgentConfig

    cfg = parse_config({"listen": "127.0.0.1:1", "log_decisions": False, "features": False,
                        "history": {"enabled": False}, "limits": {"agent_concurrency": limits}})
    gw = Gateway(cfg)

    async def fetch(url: str, **kw: Any) -> Any:
        return CARD

    async def call(agent: str, url: str, method: str, params: Any, **kw: Any) -> Any:
        return {"message": {"messageId": "r", "role": "ROLE_AGENT", "parts": [{"text": "ok"}]}}

    gw.transport.fetch_json = fetch  # type: ignore[method-assign]
    gw.transport.call = call  # type: ignore[method-assign]
    await gw.directory.add(AgentConfig(name="fast", url="http://127.0.0.1:9"))
    gw.state.rebuild()
    best = float("inf")
    for rep in range(5):
        t0 = time.process_time()
        for i in range(n):
            body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": {
                "messageId": f"m-{rep}-{i}", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}}).encode()
            scope = asgi_post_scope("/", [(b"host", b"gw"), (b"a2a-version", b"1.0")], len(body))
            sent: list[Any] = []

            async def receive(body: bytes = body) -> Any:
                return {"type": "http.request", "body": body, "more_body": False}

            async def send(m: Any, sent: list[Any] = sent) -> None:
                sent.append(m)

            await gw.app(scope, receive, send)
            assert sent[0]["status"] == 200, sent
        best = min(best, (time.process_time() - t0) / n * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--one", choices=["adaptive", "off"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps({"us": asyncio.run(measure(args.one, args.n))}))
        return
    ratios = []
    for r in range(args.rounds):
        got = {}
        for arm in (("off", "adaptive") if r % 2 == 0 else ("adaptive", "off")):
            out = subprocess.run([sys.executable, __file__, "--one", arm, "--n", str(args.n)], check=True,
                                 capture_output=True, text=True, env=os.environ, cwd=Path(__file__).parent).stdout
            got[arm] = json.loads(out.strip().splitlines()[-1])["us"]
        ratios.append(got["adaptive"] / got["off"])
        print(f"round {r + 1}: off {got['off']:.1f} us, adaptive {got['adaptive']:.1f} us per message "
              f"({ratios[-1]:.3f}x)", flush=True)
    print(f"median adaptive/off: {statistics.median(ratios):.3f}x")


if __name__ == "__main__":
    main()
