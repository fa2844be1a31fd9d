"""The SDK's bindings are declared by the gateway (routes, JSON-RPC methods) and loaded at the first request needing
them: the declared tables are the SDK's, and a gateway answered on the fast path never imports the SDK's server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

from a2a.server.request_handlers import RequestHandler
from a2a.server.routes import create_rest_routes
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from starlette.routing import Mount, Route

from mma2a.gateway.bindings.sdk_routes import JSONRPC_METHODS, REST_ROUTES, V03_REST_ROUTES

SRC = Path(__file__).resolve().parents[2] / "src"


def _sdk_routes(v03: bool) -> list[tuple[str, str]]:
    return [(r.path, m) for r in create_rest_routes(mock.Mock(spec=RequestHandler), enable_v0_3_compat=v03)
            if isinstance(r, Route) for m in sorted(r.methods or ()) if m != "HEAD"]


def test_the_declared_routes_and_methods_are_the_sdks() -> None:
    assert list(V03_REST_ROUTES) + list(REST_ROUTES) == _sdk_routes(v03=True)
    assert list(REST_ROUTES) == _sdk_routes(v03=False)
    mounts = [r for r in create_rest_routes(mock.Mock(spec=RequestHandler)) if isinstance(r, Mount)]
    assert [m.path for m in mounts] == ["/{tenant}"]  # served by the gateway's own /{agent} routes instead
    assert list(JSONRPC_METHODS) == list(JsonRpcDispatcher.METHOD_TO_MODEL)


_FAST_PATH_ONLY = """
import asyncio, json, sys
import httpx
from mma2a.gateway.config import parse_config
from mma2a.gateway.app import Gateway

async def run():
    gateway = Gateway(parse_config({"listen": "127.0.0.1:0", "health_interval_s": 3600, "agents": []}))
    await gateway.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway.app), base_url="http://gw") as c:
            fast = await c.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}},
                                headers={"A2A-Version": "1.0"})
            before = "a2a.server.routes" in sys.modules
            rest = await c.get("/tasks/nope", headers={"A2A-Version": "1.0"})
            v03 = await c.post("/", json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": "nope"}})
    finally:
        await gateway.stop()
    print(json.dumps({"fast": fast.json(), "before": before, "rest": [rest.status_code, rest.json()],
                      "v03": v03.json(), "after": "a2a.server.routes" in sys.modules}))

asyncio.run(run())
"""


def test_the_fast_path_answers_without_the_sdk_server_and_the_first_rest_call_loads_it() -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", _FAST_PATH_ONLY], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout.splitlines()[-1])
    assert doc["fast"]["error"]["code"] == -32001 and doc["before"] is False  # TaskNotFound, the SDK not imported
    status, rest = doc["rest"]
    assert status == 404 and rest["error"]["status"] == "NOT_FOUND", rest  # answered by the SDK's REST binding
    assert doc["v03"]["error"]["code"] == -32001, doc["v03"]  # the v0.3 method, through the SDK's dispatcher
    assert doc["after"] is True
