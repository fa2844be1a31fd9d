"""The gateway's ASGI entry: JSON-RPC POSTs reach their route through the app's middleware once, the rest the full app."""

from __future__ import annotations

from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from mma2a.gateway.bindings.front import FrontDoor


class Counting:
    """A middleware that records every request it sees, by path."""

    def __init__(self, app: Any, seen: list[str]) -> None:
        self.app, self.seen = app, seen

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.append(f"{scope['method']} {scope['path']}")
        await self.app(scope, receive, send)


class Outer:
    """A middleware the hot path must not see (as TracingMiddleware is left out of it)."""

    def __init__(self, app: Any, seen: list[str]) -> None:
        self.app, self.seen = app, seen

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.append("outer")
        await self.app(scope, receive, send)


def make(tracing: bool = False) -> tuple[FrontDoor, list[str]]:
    seen: list[str] = []

    async def rpc(request: Request) -> Response:
        agent = request.path_params.get("agent", "-")
        return PlainTextResponse(f"rpc {agent} {(await request.body()).decode()}")

    async def rest(request: Request) -> Response:
        return PlainTextResponse("rest " + request.path_params["agent"])

    security = [Middleware(Counting, seen=seen)]
    app = Starlette(routes=[Route("/", rpc, methods=["POST"]),
                            Route("/agents/{agent}/message:send", rest, methods=["POST"]),
                            Route("/agents/{agent}/", rpc, methods=["POST"]),
                            Route("/agents/{agent}", rpc, methods=["POST"])],
                    middleware=[Middleware(Outer, seen=seen), *security])
    return FrontDoor(app, middleware=security, tracing=lambda: tracing), seen


async def call(door: FrontDoor, method: str, path: str, body: bytes = b"") -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=door), base_url="http://gw") as c:
        return await c.request(method, path, content=body)


async def test_json_rpc_posts_take_their_route_through_the_given_middleware_once():
    door, seen = make()
    root = await call(door, "POST", "/", b"hello")
    named = await call(door, "POST", "/agents/vision", b"x")
    slashed = await call(door, "POST", "/agents/vision/", b"y")
    assert (root.text, named.text, slashed.text) == ("rpc - hello", "rpc vision x", "rpc vision y")
    assert seen == ["POST /", "POST /agents/vision", "POST /agents/vision/"]  # no outer layer, no second pass


async def test_other_paths_and_methods_take_the_full_app_with_its_middleware_once():
    door, seen = make()
    rest = await call(door, "POST", "/agents/vision/message:send")
    get = await call(door, "GET", "/")
    missing = await call(door, "POST", "/nowhere")
    assert rest.text == "rest vision" and get.status_code == 405 and missing.status_code == 404
    assert seen == ["outer", "POST /agents/vision/message:send", "outer", "GET /", "outer", "POST /nowhere"]


async def test_with_a_tracer_provider_everything_takes_the_full_app():
    door, seen = make(tracing=True)
    r = await call(door, "POST", "/", b"traced")
    assert r.text == "rpc - traced" and seen == ["outer", "POST /"]


def test_the_app_routes_stay_reachable():
    door, _ = make()
    assert [r.path for r in door.routes][:2] == ["/", "/agents/{agent}/message:send"]
    assert [r.path for r in door.routes_hot] == ["/", "/agents/{agent}/", "/agents/{agent}"]


async def test_a_remembered_path_takes_the_same_route_with_path_params_of_its_own():
    door, seen = make()
    first = [await call(door, "POST", path, b"1") for path in ("/", "/agents/vision", "/agents/audio/")]
    again = [await call(door, "POST", path, b"1") for path in ("/", "/agents/vision", "/agents/audio/")]
    assert [r.text for r in first] == [r.text for r in again] == ["rpc - 1", "rpc vision 1", "rpc audio 1"]
    scope: dict = {"type": "http", "method": "POST", "path": "/agents/vision", "root_path": "", "headers": []}
    matched = door._match(dict(scope))
    assert matched is not None
    matched[1]["path_params"]["agent"] = "changed"  # one request's scope changed: the next one's is not
    later = door._match(dict(scope))
    assert later is not None and later[1]["path_params"] == {"agent": "vision"} and later[0] is matched[0]
    assert "outer" not in seen
