"""Access classes from the route table: every route of the gateway gets exactly one, at build time.

- `public`: no credential (agent cards, `/healthz`, the console page).
- `client`: a client credential (`auth.clients`), rate limits and the body cap.
- `admin`: the admin token, checked in one place (`security.AccessControl.admin`).
- `signed`: the route verifies its own URL signature (blob reads, stream consumers).
- `webhook`: an agent's push notification; the route verifies the secret the gateway gave that agent for
  that leg of that task (`push.follow`), and caps its own body.

`guard_routes` wraps each route's ASGI app in a `Guarded` gate that enforces its class after
the router matched it, so the class is looked up for free and no path prefix decides who may
call what. `check_classified` refuses an app with any route (or mount) that was not classified:
the gateway does not start with one. Paths that match no route get 401 before 404 when auth
is on (see `security.AccessControl.unmatched`).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.routing import BaseRoute, Match, Mount, NoMatchFound, Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from ...errors import MMA2AError


class AccessClass(enum.Enum):
    """Who may call a route."""

    PUBLIC = "public"
    CLIENT = "client"
    ADMIN = "admin"
    SIGNED = "signed"
    WEBHOOK = "webhook"


class ErrorShape(enum.Enum):
    """The shape refusals take on a route: its binding's own error format."""

    JSONRPC = "jsonrpc"  # {"jsonrpc": "2.0", "id": null, "error": {...}}
    REST = "rest"  # google.rpc.Status
    PAYLOAD = "payload"  # {"error": {"code": "unauthorized", "message": ...}} (blobs, streams)
    ADMIN = "admin"  # {"error": {"code": -32600, "message": ...}}


@dataclass(frozen=True, slots=True)
class RouteAccess:
    """The access class of one route and how its refusals look.

    `admin_also`: the admin token is accepted besides a client credential (`/metrics`). `stream`: the route
    answers with a stream (REST `message:stream`, `tasks/{id}:subscribe`), which takes one of the caller's
    stream slots while it is open.
    """

    cls: AccessClass
    shape: ErrorShape
    admin_also: bool = False
    stream: bool = False


class Enforcer(Protocol):
    async def enforce(self, access: RouteAccess, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None: ...

    def check_body(self, access: RouteAccess, app: ASGIApp, scope: Scope, receive: Receive, send: Send
                   ) -> Awaitable[None]: ...

    async def unmatched(self, scope: Scope, receive: Receive, send: Send) -> None: ...


Stage = Callable[[RouteAccess, ASGIApp, Scope, Receive, Send], Awaitable[None]]


class Staged:
    """A route's ASGI app behind one stage that knows the route's access (the body checks)."""

    __slots__ = ("access", "app", "stage")

    def __init__(self, app: ASGIApp, access: RouteAccess, stage: Stage) -> None:
        self.app = app
        self.access = access
        self.stage = stage

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        return self.stage(self.access, self.app, scope, receive, send)  # the stage's coroutine: no frame of ours


class Guarded(Staged):
    """The outermost stage of a route: its access class (the router has matched the route already)."""

    __slots__ = ()


Wrap = Callable[[ASGIApp, RouteAccess], ASGIApp]


class Unrouted(BaseRoute):
    """Last in the table: an HTTP request no route matched (a partial match, so a known path with another method
    still gets its 405 from the route it partly matched) is answered by the enforcer: 401 before 404."""

    def __init__(self, enforcer: Enforcer) -> None:
        self.enforcer = enforcer

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        return (Match.PARTIAL if scope["type"] == "http" else Match.NONE), {}

    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        raise NoMatchFound(name, path_params)  # the catch-all has no URL: the router goes on to the next route

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.enforcer.unmatched(scope, receive, send)


class RouteIndex:
    """Outermost: a path whose first segment starts no route template is answered as unrouted at once.

    Exact, not a policy: it is built from the templates (every one starts with a literal segment, or the index
    is not used) and only ever says "no route can match".
    """

    def __init__(self, app: ASGIApp, *, routes: Sequence[BaseRoute], enforcer: Enforcer) -> None:
        self.app = app
        self.enforcer = enforcer
        self.first: frozenset[str] | None = first_segments(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.first is not None and scope["type"] == "http":
            path: str = scope.get("path", "/")
            head = path[1:].split("/", 1)[0] if path.startswith("/") else None
            if head is not None and head not in self.first:
                await self.enforcer.unmatched(scope, receive, send)
                return
        await self.app(scope, receive, send)


def first_segments(routes: Iterable[BaseRoute]) -> frozenset[str] | None:
    """The literal first path segments of the routes' templates; None if a template starts with a parameter."""
    out = set()
    for r in routes:
        path = getattr(r, "path", None)
        if path is None:
            continue
        head = path[1:].split("/", 1)[0]
        if "{" in head:
            return None
        out.add(head)
    return frozenset(out)


class UnclassifiedRoute(MMA2AError):
    """A route of the app has no access class: the gateway refuses to start."""


def _guard(route: BaseRoute, access: RouteAccess, enforcer: Enforcer, wrap: Wrap | None) -> BaseRoute:
    def gated(app: ASGIApp) -> Guarded:  # access, then (wrap: e.g. decoding), then the body checks, then the route
        checks_body = access.cls is AccessClass.CLIENT or access.cls is AccessClass.ADMIN
        inner: ASGIApp = Staged(app, access, enforcer.check_body) if checks_body else app
        return Guarded(wrap(inner, access) if wrap is not None else inner, access, enforcer.enforce)

    if isinstance(route, Route):
        methods = sorted(route.methods) if route.methods is not None else None
        return Route(route.path, gated(route.app), methods=methods, name=route.name,
                     include_in_schema=route.include_in_schema)
    if isinstance(route, WebSocketRoute):
        return WebSocketRoute(route.path, gated(route.app), name=route.name)
    if isinstance(route, Mount):
        return Mount(route.path, app=gated(route.app), name=route.name)
    raise UnclassifiedRoute(f"route {route!r}: only Route, WebSocketRoute and Mount can be given an access class",
                            field="routes")


def guard_routes(table: Iterable[tuple[RouteAccess, Sequence[BaseRoute]]], enforcer: Enforcer, *,
                 wrap: Wrap | None = None) -> list[BaseRoute]:
    """The routes of `table` (access, routes), in order, each behind its access class; `wrap(app, access)`
    adds a stage that runs once access is granted (before the body checks)."""
    return [_guard(route, access, enforcer, wrap) for access, routes in table for route in routes]


def _endpoint_of(route: BaseRoute) -> Any:
    if isinstance(route, (Route, WebSocketRoute, Mount)):
        return route.app
    return None


def describe(route: BaseRoute) -> str:
    methods = ",".join(sorted(route.methods)) if isinstance(route, Route) and route.methods else (
        "WEBSOCKET" if isinstance(route, WebSocketRoute) else "*")
    return f"{methods} {getattr(route, 'path', repr(route))}"


def check_classified(routes: Iterable[BaseRoute]) -> None:
    """Raise `UnclassifiedRoute` naming every route (or mount) of the app without an access class."""
    missing = [describe(r) for r in routes if not isinstance(_endpoint_of(r), Guarded) and not isinstance(r, Unrouted)]
    if missing:
        raise UnclassifiedRoute(f"routes without an access class (public, client, admin or signed): {', '.join(missing)}",
                                field="routes", data={"routes": missing})


def route_table(routes: Iterable[BaseRoute]) -> Iterator[tuple[BaseRoute, RouteAccess]]:
    """Every route of the app with its access (for tests and docs)."""
    for r in routes:
        app = _endpoint_of(r)
        if isinstance(app, Guarded):
            yield r, app.access
