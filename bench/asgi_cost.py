"""bench/asgi_cost: CPU time per request through the gateway's ASGI app in-process (no sockets, no agent).

Auth on (three clients, like tests/security), requests straight into `Gateway.app`: a JSON-RPC
`GetTask` for an unknown task with a bearer token (authentication, rate limit off, the fast path), the same
with `A2A-Extensions` (the extensions passed on and relayed: `service_params`), `GET /healthz` (public), and an unknown path without credentials (refused). Reports process CPU
microseconds per request for each, best of `--repeat` runs of `--n` requests. Use it through
bench/ab.py to compare two source trees side by side:

    .venv/bin/python bench/ab.py --a /tmp/base/src --b src --rounds 6 --key getTask --key getTaskExt --key healthz --key unknown \\
        -- bench/asgi_cost.py --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from common import asgi_post_scope
from mma2a.gateway import Gateway, parse_config

TOKEN = "tok-bench-7f3c2b9e1d"
BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "no-such-task"}}).encode()


async def call(app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes = b"") -> int:
    scope = asgi_post_scope(path, [(b"host", b"gw"), *headers], len(body), method)
    status = 0
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    async def send(msg: dict[str, Any]) -> None:
        nonlocal status
        if msg["type"] == "http.response.start":
            status = msg["status"]

    await app(scope, receive, send)
    return status


async def measure(args: argparse.Namespace) -> dict[str, float]:
    cfg = {"listen": "127.0.0.1:1", "features": False, "log_decisions": False, "admin": {"token": "adm"},
           "auth": {"clients": [{"name": "alice", "token": TOKEN}, {"name": "bob", "api_key": "key-bob"},
                                {"name": "carol", "token": "tok-carol", "agents": ["vision"]}]}}
    gw = Gateway(parse_config(cfg))
    auth = [(b"authorization", f"Bearer {TOKEN}".encode()), (b"a2a-version", b"1.0"),
            (b"content-type", b"application/json")]
    extended = [*auth, (b"a2a-extensions", b"https://mma2a.dev/ext/multimodal/v1")]  # as the SDK's producer sends it
    cases = {"getTask": ("POST", "/", auth, BODY), "getTaskExt": ("POST", "/", extended, BODY),
             "healthz": ("GET", "/healthz", [], b""),
             "unknown": ("GET", "/no/such/path", [], b"")}
    out: dict[str, float] = {}
    for name, (method, path, headers, body) in cases.items():
        status = await call(gw.app, method, path, headers, body)
        assert status in (200, 401), (name, status)
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.process_time()
            for _ in range(args.n):
                await call(gw.app, method, path, headers, body)
            best = min(best, (time.process_time() - t0) / args.n * 1e6)
        out[name] = round(best, 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = asyncio.run(measure(args))
    print(json.dumps(result) if args.json else "\n".join(f"{k:8s} {v:8.1f} us CPU/request" for k, v in result.items()))


if __name__ == "__main__":
    main()
