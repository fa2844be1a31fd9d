"""The SDK's bindings in front of the pipeline: REST (HTTP+JSON), SSE and v0.3 compat.

`a2a-sdk`'s JsonRpcDispatcher and REST routes call this `RequestHandler`; it converts
protobuf to the JSON form once, runs the same `Pipeline` as the fast JSON-RPC path, and
maps mma2a errors onto the SDK's error types (same codes on every binding). Imported at the
first request that needs it (`bindings`), or at the start with gRPC.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any, TypeVar

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import RequestHandler
from a2a.server.request_handlers.request_handler import validate_request_params
from a2a.utils.proto_utils import validate_proto_required_fields
from a2a.server.routes import DefaultServerCallContextBuilder, create_rest_routes
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils import errors as sdk_errors
from google.protobuf import json_format
from starlette.requests import Request
from starlette.routing import Route

from ...errors import AgentRPCError, InvalidParams, MMA2AError, metadata_strings
from ..access.clients import current_client
from ..access.security import AccessControl
from ..pipeline import Pipeline
from .listing import list_tasks

_Proto = TypeVar("_Proto", Message, Task, TaskPushNotificationConfig)
_BY_CODE: dict[int, type[sdk_errors.A2AError]] = {code: cls for cls, code in sdk_errors.JSON_RPC_ERROR_CODE_MAP.items()}
_CODES = sdk_errors.JSON_RPC_ERROR_CODE_MAP
_REASONS = sdk_errors.A2A_ERROR_REASONS


def to_sdk_error(exc: MMA2AError) -> sdk_errors.A2AError:
    """The SDK error with the same JSON-RPC code as an mma2a error; its `data` becomes the ErrorInfo metadata
    (an agent's error passed through keeps the metadata and the ErrorInfo reason the agent sent)."""
    cls = _BY_CODE.get(exc.code, sdk_errors.InvalidParamsError if exc.http_status < 500 else sdk_errors.InternalError)
    if isinstance(exc, AgentRPCError):
        cls = _agent_error_class(exc, cls)
    return cls(exc.message, data=metadata_strings(exc.data) or None)


def _agent_error_class(exc: AgentRPCError, by_code: type[sdk_errors.A2AError]) -> type[sdk_errors.A2AError]:
    """The SDK class that renders an agent's error with the ErrorInfo reason the agent gave it: an a2a-sdk
    agent's own `A2AError` is -32603 with reason `UNKNOWN_ERROR`, which only the SDK's base class renders."""
    reasons = [d.get("reason") for d in exc.details() if str(d.get("@type", "")).endswith("google.rpc.ErrorInfo")]
    if not reasons or reasons[0] == _REASONS.get(by_code):
        return by_code
    if reasons[0] == "UNKNOWN_ERROR" and by_code is sdk_errors.InternalError:
        return sdk_errors.A2AError
    named = sdk_errors.A2A_REASON_TO_ERROR.get(reasons[0]) if isinstance(reasons[0], str) else None
    return named if named is not None and _CODES.get(named) == exc.code else by_code


def rest_endpoints(handler: RequestHandler, context_builder: Any) -> dict[tuple[str, str], Callable[[Request], Any]]:
    """The SDK's REST (HTTP+JSON) endpoints, A2A 1.0's and 0.3's, by (path, method) as `bindings.REST_ROUTES` and
    `bindings.V03_REST_ROUTES` name them (the same endpoints serve every prefix: they read only the path's `id`
    and `push_id`, and the context builder its `agent`)."""
    return {(route.path, method): route.endpoint
            for route in create_rest_routes(handler, context_builder=context_builder, enable_v0_3_compat=True)
            if isinstance(route, Route) for method in route.methods or () if method != "HEAD"}


def _target(context: ServerCallContext) -> str | None:
    """The explicit target: `/agents/{name}` (or `/{tenant}/…`) on HTTP, else the request's `tenant` (gRPC, and
    JSON-RPC's `params.tenant`), checked against the agents the client may use (a path before the call gets here:
    `security.AccessControl`; gRPC's tenant in `grpc_admission` too)."""
    target: str | None = context.state.get("target")
    if target is None and context.tenant:
        target = context.tenant
        AccessControl.check_agent(current_client.get(), target, field="tenant")
    return target


class TargetContextBuilder(DefaultServerCallContextBuilder):
    """Carries the `/agents/{name}` path parameter into the call context."""

    def build(self, request: Request) -> ServerCallContext:
        ctx = super().build(request)
        ctx.state["target"] = request.path_params.get("agent")
        return ctx


def _parse(doc: dict[str, Any], into: _Proto) -> _Proto:
    """Fill a protobuf message from its JSON form (in place, as `ParseDict` does) and return it typed."""
    json_format.ParseDict(doc, into, ignore_unknown_fields=True)
    return into


def _check_required(params: SendMessageRequest | GetTaskRequest | CancelTaskRequest | SubscribeToTaskRequest) -> None:
    """The required fields checked as an a2a-sdk agent checks them, with its error (InvalidParams, the missing
    fields in ErrorInfo and BadRequest); the SDK's walk of the whole request (~100 us on a message) only once a
    cheap look finds one missing."""
    if isinstance(params, SendMessageRequest):
        m = params.message
        complete = (params.HasField("message") and bool(m.message_id) and m.role != 0 and len(m.parts) > 0
                    and not params.configuration.HasField("task_push_notification_config"))
    else:
        complete = bool(params.id)
    if not complete:
        validate_proto_required_fields(params)


MAX_STRUCT_BYTES = 1 << 20
"""The most bytes of `Struct`/`Value` fields (metadata, data parts, configuration) a protobuf request may carry into
`MessageToDict` (pure Python, run on the event loop): an empty struct is 4 bytes on the wire, and 8 MiB of them took
26 s to convert (load average 14). JSON bodies are bounded by their values instead (`check_json_values`)."""


def _check_struct_bytes(params: SendMessageRequest) -> None:
    """`InvalidParams` naming the field when the request's free-form JSON fields pass `MAX_STRUCT_BYTES` (their sizes
    are computed in C, without a walk in Python)."""
    m = params.message
    fields = [("message.metadata", m.metadata.ByteSize())]
    fields += [(f"message.parts[{i}]", p.metadata.ByteSize() + (p.data.ByteSize() if p.HasField("data") else 0))
               for i, p in enumerate(m.parts)]
    fields += [("configuration", params.configuration.ByteSize()), ("metadata", params.metadata.ByteSize())]
    total = sum(n for _, n in fields)
    if total > MAX_STRUCT_BYTES:
        where = max(fields, key=lambda f: f[1])[0]
        raise to_sdk_error(InvalidParams(
            f"{where}: the request's metadata, data and configuration take {total} bytes, the most is "
            f"{MAX_STRUCT_BYTES}; send large data by reference (POST /blobs)", field=where))


def _to_stream_event(event: dict[str, Any]) -> Any:
    resp = json_format.ParseDict(event, StreamResponse(), ignore_unknown_fields=True)
    which = resp.WhichOneof("payload")
    return getattr(resp, which) if which else None


class PipelineRequestHandler(RequestHandler):
    """An SDK `RequestHandler` whose every method runs through the gateway's pipeline."""

    def __init__(self, pipeline: Pipeline, card_fn: Any) -> None:
        self.pipeline = pipeline
        self.card_fn = card_fn

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        _check_required(params)
        _check_struct_bytes(params)
        message = json_format.MessageToDict(params.message)
        config = json_format.MessageToDict(params.configuration) if params.HasField("configuration") else None
        try:
            result = await self.pipeline.send(message, config, target=_target(context))
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None
        if "message" in result:
            return _parse(result["message"], Message())
        return _parse(result["task"], Task())

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        _check_required(params)
        _check_struct_bytes(params)
        message = json_format.MessageToDict(params.message)
        config = json_format.MessageToDict(params.configuration) if params.HasField("configuration") else None
        try:
            async for event in self.pipeline.send_stream(message, config, target=_target(context)):
                ev = _to_stream_event(event)
                if ev is not None:
                    yield ev
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        _check_required(params)
        try:
            hl = params.history_length if params.HasField("history_length") else None
            task = await self.pipeline.get_task(params.id, hl, target=_target(context))
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None
        return _parse(task, Task())

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        _check_required(params)
        try:
            task = await self.pipeline.cancel_task(params.id, target=_target(context))
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None
        return _parse(task, Task())

    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest, context: ServerCallContext) -> AsyncGenerator[Any]:
        _check_required(params)
        try:
            async for event in self.pipeline.subscribe(params.id, target=_target(context)):
                ev = _to_stream_event(event)
                if ev is not None:
                    yield ev
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        client = current_client.get()
        try:
            page = await list_tasks(self.pipeline, json_format.MessageToDict(params), target=_target(context),
                                    allowed=client.agents if client is not None else None,
                                    owner=client.key if client is not None else None)
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None
        out = ListTasksResponse()
        json_format.ParseDict(page, out, ignore_unknown_fields=True)
        return out

    # push configs: kept by the gateway (gateway/push), never passed to an agent
    @validate_request_params  # params checked first, as an a2a-sdk agent checks them
    async def on_create_task_push_notification_config(self, params: TaskPushNotificationConfig,
                                                      context: ServerCallContext) -> TaskPushNotificationConfig:
        try:
            kept = await self.pipeline.push.create(json_format.MessageToDict(params), _target(context))
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None
        return _parse(kept, TaskPushNotificationConfig())

    @validate_request_params
    async def on_get_task_push_notification_config(self, params: GetTaskPushNotificationConfigRequest,
                                                   context: ServerCallContext) -> TaskPushNotificationConfig:
        try:
            kept = await self.pipeline.push.get(params.task_id, params.id, _target(context))
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None
        return _parse(kept, TaskPushNotificationConfig())

    @validate_request_params
    async def on_list_task_push_notification_configs(self, params: ListTaskPushNotificationConfigsRequest,
                                                     context: ServerCallContext) -> ListTaskPushNotificationConfigsResponse:
        try:
            kept = await self.pipeline.push.list(params.task_id, _target(context))
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None
        return ListTaskPushNotificationConfigsResponse(configs=[_parse(c, TaskPushNotificationConfig()) for c in kept])

    @validate_request_params
    async def on_delete_task_push_notification_config(self, params: DeleteTaskPushNotificationConfigRequest,
                                                      context: ServerCallContext) -> None:
        try:
            await self.pipeline.push.delete(params.task_id, params.id, _target(context))
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None

    async def on_get_extended_agent_card(self, params: GetExtendedAgentCardRequest, context: ServerCallContext) -> AgentCard:
        # the gateway's cards never declare capabilities.extendedAgentCard (see cards.py), and A2A 1.0 answers
        # GetExtendedAgentCard on such a card with UnsupportedOperationError
        raise sdk_errors.UnsupportedOperationError(
            "this card does not declare capabilities.extendedAgentCard: the gateway serves no extended agent card")
