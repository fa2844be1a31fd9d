"""The gateway's ASGI entry: JSON-RPC POSTs go straight to their route, everything else through Starlette.

A `SendMessage` is the gateway's hot path. Through the full Starlette stack it passes its
error middleware, the user middleware, the exception middleware and the router's scan
before its endpoint runs; `FrontDoor` matches `POST /` and `POST /agents/{agent}` itself
and calls the *same route objects* the app holds, so whatever the route table attaches to
them (access gates, the endpoint) applies unchanged. The app's own middleware that must
see these requests too (security) is given to `FrontDoor` and wraps the hot routes alone.

It also reads the extensions a request activates (`A2A-Extensions`) for the agents it reaches, and
answers with those the agents say they activated (`service_params`).

When a tracer provider is installed the hot path takes the full stack, so the server span
(`TracingMiddleware`) is made as before; without one there is nothing to trace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Match, Route

from ...errors import InvalidRequest
from ...request_body import header_map
from ..downstream.overload import client_deadline
from ..downstream.service_params import activated_extensions, read_extensions, requested_extensions
from ..observe.tracing import active as tracing_active

Scope = dict[str, Any]
ASGIApp = Callable[..., Any]


HOT_PATHS = ("/", "/agents/{agent}/", "/agents/{agent}")  # the JSON-RPC binding's POST routes
_MATCHES = 1024  # paths remembered (each agent's two); past it, matched each time
_EXTENSIONS = b"a2a-extensions"
_TIMEOUT = b"x-request-timeout"  # the client's deadline, in seconds from now (gRPC carries its own)
_ROUTE = "mma2a.route"  # the matched hot route, in the scope, for the innermost app of the chain


def _handle(scope: Scope, receive: Any, send: Any) -> Awaitable[None]:
    """The matched route's app (its access gate), as `Route.handle` calls it: a full match has the route's
    method, so `Route.handle` has no 405 to answer."""
    return scope[_ROUTE].app(scope, receive, send)  # type: ignore[no-any-return]


async def _refuse_timeout(value: bytes, send: Any) -> None:
    """400 for an `X-Request-Timeout` that is not a number of seconds."""
    exc = InvalidRequest(f"X-Request-Timeout: must be a number of seconds above 0, got {value[:40].decode('latin-1')!r}",
                         field="X-Request-Timeout")
    body = orjson.dumps(exc.to_rest())
    await send({"type": "http.response.start", "status": 400,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


def _echoing(send: Any, activated: list[str]) -> Any:
    """`send` with the extensions the agents activated (`A2A-Extensions`, as they answered) added to the answer's
    head; the head waits for the first body message, since a stream's head goes out before any agent is asked."""
    head: dict[str, Any] | None = None

    async def sending(message: dict[str, Any]) -> None:
        nonlocal head
        if message["type"] == "http.response.start":
            head = message
            return
        if head is not None:
            start, head = head, None
            if activated:
                start = {**start, "headers": [*start.get("headers", ()), (_EXTENSIONS, ", ".join(activated).encode("latin-1"))]}
            await send(start)
        await send(message)

    return sending


class FrontDoor:
    """ASGI app: the hot JSON-RPC routes directly, the rest (and everything while tracing) through `app`."""

    def __init__(self, app: Starlette, middleware: Sequence[Middleware] = (),
                 tracing: Callable[[], bool] = tracing_active) -> None:
        self.app = app
        self.routes_hot = tuple(r for r in app.routes if isinstance(r, Route) and r.path in HOT_PATHS
                                and "POST" in (r.methods or ()))
        chain: ASGIApp = _handle
        for cls, args, kwargs in reversed(list(middleware)):
            chain = cls(chain, *args, **kwargs)
        self.hot = chain
        self.tracing = tracing
        self._matched: dict[str, tuple[Route, Any, dict[str, Any]]] = {}  # path -> route, endpoint, path params

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        """One request (`enter`'s). (A coroutine function: servers tell an ASGI 3 app by it.)"""
        await self.enter(scope, receive, send)

    def enter(self, scope: Scope, receive: Any, send: Any) -> Awaitable[None]:
        """One request; without a deadline or extensions to read (the common case) the route's app's own coroutine, no
        frame of ours: the app `mma2a serve` runs, telling uvicorn it is ASGI 3 (which it cannot guess from it)."""
        if scope["type"] == "http":
            headers = header_map(scope)
            if _TIMEOUT in headers or _EXTENSIONS in headers:
                return self._deadline(scope, receive, send)
        return self._serve(scope, receive, send)

    async def _deadline(self, scope: Scope, receive: Any, send: Any) -> None:
        timeout = header_map(scope).get(_TIMEOUT)
        if timeout is not None:  # the client's deadline: legs wait for an agent's slot at most until then
            try:
                seconds = float(timeout)
                if not 0 < seconds < 1e9:
                    raise ValueError
            except ValueError:
                await _refuse_timeout(timeout, send)
                return
            token = client_deadline.set(asyncio.get_running_loop().time() + seconds)
            try:
                await self._extensions(scope, receive, send)
            finally:
                client_deadline.reset(token)
            return
        await self._extensions(scope, receive, send)

    async def _extensions(self, scope: Scope, receive: Any, send: Any) -> None:
        found = header_map(scope).get(_EXTENSIONS) if scope["type"] == "http" else None
        if found is not None:  # passed on to the agents the request reaches
            raw = scope["headers"]
            values = [found.decode("latin-1")] if len(header_map(scope)) == len(raw) else [  # a header repeated: all
                v.decode("latin-1") for k, v in raw if k.lower() == _EXTENSIONS]
            token = requested_extensions.set(read_extensions(values))
            activated: list[str] = []
            noted = activated_extensions.set(activated)
            try:
                await self._serve(scope, receive, _echoing(send, activated))
            finally:
                activated_extensions.reset(noted)
                requested_extensions.reset(token)
            return
        await self._serve(scope, receive, send)

    def _serve(self, scope: Scope, receive: Any, send: Any) -> Awaitable[None]:
        if (scope["type"] == "http" and scope["method"] == "POST" and not self.tracing()
                and (scope["path"] == "/" or scope["path"].startswith("/agents/"))):
            matched = self._match(scope)
            if matched is not None:
                route, child = matched
                scope.update(child)
                scope["app"] = self.app  # as Starlette sets it, for endpoints that look (the SDK's handling)
                scope[_ROUTE] = route
                return self.hot(scope, receive, send)  # type: ignore[no-any-return]
        return self.app(scope, receive, send)

    def _match(self, scope: Scope) -> tuple[Route, Scope] | None:
        """The hot route a POST matches in full, and its child scope; remembered by path (a path alone decides
        it when the scope has no root path or path parameters of its own, as a server's scope has not)."""
        plain = not scope.get("root_path") and "path_params" not in scope
        if plain:
            known = self._matched.get(scope["path"])
            if known is not None:
                route, endpoint, params = known
                return route, {"endpoint": endpoint, "path_params": dict(params)}
        for route in self.routes_hot:
            match, child = route.matches(scope)
            if match is Match.FULL:
                if plain and len(self._matched) < _MATCHES:
                    self._matched[scope["path"]] = (route, child["endpoint"], dict(child["path_params"]))
                return route, dict(child)
        return None

    @property
    def routes(self) -> list[Any]:
        return self.app.routes
