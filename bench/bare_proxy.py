"""bench/bare_proxy: the floor for a Python A2A gateway — a Starlette + aiohttp pass-through, nothing else.

POST bodies go to the backend as they are and its answer comes back as it is; the Agent
Card is passed through for readiness checks. Served either like the gateway (`--server mma2a`:
mma2a's server, uvicorn with the gateway's deadlines and HTTP protocol, so the difference
between the two is the gateway's own work) or by stock uvicorn (`--server stock`: `uvicorn.run`
with uvloop and httptools and uvicorn's defaults, what a Python proxy is usually served with;
the baseline issue 36 compares one gateway worker to).

    .venv/bin/python bench/bare_proxy.py --port 9002 --backend http://127.0.0.1:9001 [--server stock]
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mma2a.serving import Server, uvicorn_config


def proxy_app(backend: str) -> Starlette:
    session: aiohttp.ClientSession | None = None

    async def forward(request: Request) -> Response:
        assert session is not None
        body = await request.body()
        async with session.request(request.method, backend + request.url.path, data=body,
                                   headers={"Content-Type": "application/json"}) as resp:
            return Response(await resp.read(), status_code=resp.status, media_type="application/json")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        nonlocal session
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))
        yield
        await session.close()

    return Starlette(routes=[Route("/", forward, methods=["POST"]),
                             Route("/.well-known/agent-card.json", forward, methods=["GET"])], lifespan=lifespan)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--backend", required=True)
    ap.add_argument("--server", choices=("mma2a", "stock"), default="mma2a",
                    help="mma2a's server (as the gateway is served), or stock uvicorn (uvloop, httptools, its defaults)")
    args = ap.parse_args()
    app = proxy_app(args.backend.rstrip("/"))
    if args.server == "stock":
        uvicorn.run(app, host="127.0.0.1", port=args.port, loop="uvloop", http="httptools", log_level="warning",
                    access_log=False)
    else:
        Server(uvicorn_config(app, "127.0.0.1", args.port)).run()


if __name__ == "__main__":
    main()
