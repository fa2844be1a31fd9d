"""The SDK's bindings (REST, SSE, v0.3, JSON-RPC past the fast path), loaded by the first request that needs them.

a2a-sdk's server stack (its dispatchers and request handlers, the v0.3 compat models, and what their packages pull
in: httpx, grpc, the OpenTelemetry API) is about half of what a gateway imports before it listens. A gateway
answered on the fast JSON-RPC path (`ingress`) never needs it; the first request that does (a REST call, a stream,
a v0.3 method, a push config, ...) imports `sdk_binding` in a thread, so the event loop goes on serving meanwhile,
and every request that comes while it loads waits for the same import.

The routes are declared here: the paths and methods `create_rest_routes` makes, and the JSON-RPC methods of
`JsonRpcDispatcher` (each route gets its access class at the start, before the SDK is loaded;
tests/gateway/test_bindings.py checks these tables against the SDK's).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...errors import MMA2AError, status_for_reason
from ...request_body import READ_BODY, ReadRequest
from ...responses import json_response
from ..access.security import retry_after
from ..downstream.overload import shed_note
from ..pipeline import Pipeline

if TYPE_CHECKING:
    from .body_parser import JSONBodyParser
    from .sdk_binding import PipelineRequestHandler

JSONRPC_METHODS = (
    "SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask", "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig", "ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig",
    "SubscribeToTask", "GetExtendedAgentCard",
)
"""The A2A 1.0 JSON-RPC methods (`JsonRpcDispatcher.METHOD_TO_MODEL`); each takes the JSON-RPC route's access."""

REST_ROUTES = (
    ("/message:send", "POST"), ("/message:stream", "POST"), ("/tasks/{id}:cancel", "POST"),
    ("/tasks/{id}:subscribe", "GET"), ("/tasks/{id}:subscribe", "POST"), ("/tasks/{id}", "GET"),
    ("/tasks/{id}/pushNotificationConfigs/{push_id}", "GET"), ("/tasks/{id}/pushNotificationConfigs/{push_id}", "DELETE"),
    ("/tasks/{id}/pushNotificationConfigs", "POST"), ("/tasks/{id}/pushNotificationConfigs", "GET"), ("/tasks", "GET"),
    ("/extendedAgentCard", "GET"),
)
"""A2A 1.0's HTTP+JSON routes, in `create_rest_routes`' order (without its `/{tenant}` mount: see app.py)."""

V03_REST_ROUTES = (
    ("/v1/message:send", "POST"), ("/v1/message:stream", "POST"), ("/v1/tasks/{id}:cancel", "POST"),
    ("/v1/tasks/{id}:subscribe", "GET"), ("/v1/tasks/{id}:subscribe", "POST"), ("/v1/tasks/{id}", "GET"),
    ("/v1/tasks/{id}/pushNotificationConfigs/{push_id}", "GET"), ("/v1/tasks/{id}/pushNotificationConfigs", "POST"),
    ("/v1/tasks/{id}/pushNotificationConfigs", "GET"), ("/v1/card", "GET"),
)
"""A2A 0.3's HTTP+JSON routes (`enable_v0_3_compat`), in the SDK's order, before the 1.0 routes as it puts them."""


class SdkBindings:
    """The SDK's request handler, JSON-RPC dispatcher and REST endpoints over one pipeline, built once, at first use.
    `bodies`: where the REST binding reads large SendMessage bodies (None: the SDK reads them, on the loop)."""

    def __init__(self, pipeline: Pipeline, card_fn: Callable[[], Any], bodies: JSONBodyParser | None = None) -> None:
        self._pipeline = pipeline
        self._card_fn = card_fn
        self._bodies = bodies
        self._loading: asyncio.Future[Any] | None = None
        self.handler: PipelineRequestHandler | None = None  # set once loaded
        self.dispatcher: Any = None  # the SDK's JsonRpcDispatcher, once loaded
        self._rest: dict[tuple[str, str], Callable[[Request], Any]] = {}

    def load(self) -> PipelineRequestHandler:
        """Import the SDK's stack (here, on the calling thread) and build the bindings; the handler. Used as it is
        where the SDK is imported anyway (the gRPC binding at start), else through `loaded`."""
        if self.handler is None:
            self._build(importlib.import_module("mma2a.gateway.bindings.sdk_binding"))
        assert self.handler is not None
        return self.handler

    async def loaded(self) -> None:
        """The bindings, built: the import runs in a thread (~0.4 s of CPU, once) while the loop serves on; callers
        that come meanwhile wait for the same import (one caller giving up does not stop it)."""
        if self.handler is not None:
            return
        if self._loading is None:
            self._loading = asyncio.ensure_future(asyncio.to_thread(importlib.import_module, "mma2a.gateway.bindings.sdk_binding"))
        try:
            module = await asyncio.shield(self._loading)
        except Exception:
            self._loading = None  # the import failed: tried again by the next request
            raise
        if self.handler is None:  # the objects are built on the loop (the import above is the cost)
            self._build(module)

    def _build(self, module: Any) -> None:
        handler = module.PipelineRequestHandler(self._pipeline, card_fn=self._card_fn, bodies=self._bodies)
        ctx = module.TargetContextBuilder()
        self.dispatcher = module.LargeBodyJsonRpcDispatcher(request_handler=handler, context_builder=ctx,
                                                            enable_v0_3_compat=True, bodies=self._bodies)
        self._rest = module.rest_endpoints(handler, ctx, self._bodies)
        self.handler = handler

    async def rest_endpoint(self, path: str, method: str) -> Callable[[Request], Any]:
        """The SDK's endpoint of one route of `REST_ROUTES` or `V03_REST_ROUTES` (paths without a prefix)."""
        await self.loaded()
        return self._rest[path, method]


def rest_routes(bindings: SdkBindings, *, path_prefix: str = "", v03: bool = True,
                agent_of: Callable[[str], object] | None = None) -> list[Route]:
    """The SDK's REST (HTTP+JSON) routes under `path_prefix`, answering with the A2A error table's statuses (415 for
    an unsupported content type, 409 for a task that cannot be canceled, 502 for an invalid agent response).
    With `agent_of` (the directory's lookup), a path naming an agent not registered is answered 404 before the SDK
    reads the request (the SDK has no error class that renders 404 but TaskNotFound's)."""
    table = (*V03_REST_ROUTES, *REST_ROUTES) if v03 else REST_ROUTES
    return [Route(path_prefix + path, _rest_answer(bindings, path, method, agent_of), methods=[method])
            for path, method in table]


def _rest_answer(bindings: SdkBindings, path: str, method: str, agent_of: Callable[[str], object] | None
                 ) -> Callable[[Request], Any]:
    async def answer(request: Request) -> Response:
        if agent_of is not None and (name := request.path_params.get("agent")) is not None:
            try:
                agent_of(name)
            except MMA2AError as exc:
                return json_response(exc.to_rest(), exc.http_status)
        endpoint = await bindings.rest_endpoint(path, method)
        body = request.scope.get(READ_BODY)
        if body is not None:  # read by the gate: the SDK's endpoint reads it without another copy
            request = ReadRequest(request.scope, request.receive, body)
        shed: list[MMA2AError] = []
        token = shed_note.set(shed)
        try:
            response: Response = await endpoint(request)
        finally:
            shed_note.reset(token)
        if shed and response.media_type == "application/json":  # shed under overload: 503 + Retry-After; an
            # agent's error the SDK has no class for: its own status and ErrorInfo (sdk_binding.to_sdk_error)
            wait = retry_after(shed[0])
            return json_response(shed[0].to_rest(), shed[0].http_status,
                                 {"Retry-After": str(wait)} if wait is not None else None)
        if response.status_code >= 400 and response.media_type == "application/json":
            return _restatus(response)
        return response

    answer.__name__ = f"rest {method} {path}"
    return answer


def _restatus(response: Response) -> Response:
    """The SDK's error response with the HTTP status the A2A error table gives its ErrorInfo reason."""
    try:
        doc = orjson.loads(bytes(response.body))
        reason = doc["error"]["details"][0]["reason"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return response
    status = status_for_reason(reason) if isinstance(reason, str) else None
    if status is None or status == response.status_code:
        return response
    doc["error"]["code"] = status
    return Response(orjson.dumps(doc), status_code=status, media_type="application/json")
