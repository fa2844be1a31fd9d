"""The SDK's bindings in front of the pipeline: REST (HTTP+JSON), SSE and v0.3 compat.

`a2a-sdk`'s JsonRpcDispatcher and REST routes call this `RequestHandler`; it converts
protobuf to the JSON form once, runs the same `Pipeline` as the fast JSON-RPC path, and
maps mma2a errors onto the SDK's error types (same codes on every binding). Imported at the
first request that needs it (`bindings`), or at the start with gRPC.

The pipeline's answers are converted into the SDK's forms as the SDK converts them (`ParseDict`, `MessageToDict`,
v0.3's conversions), in the JSON body worker when they hold many values (`sdk_answers`, S16-3): the REST and JSON-RPC
dispatchers' methods that answer tasks and messages take the handler's JSON answers (`*_doc`) for that.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import orjson
from sse_starlette import EventSourceResponse, ServerSentEvent
from a2a.server.context import ServerCallContext
from a2a.server.jsonrpc_models import InvalidRequestError as JsonRpcInvalidRequest
from a2a.server.request_handlers import RequestHandler
from a2a.server.request_handlers.request_handler import validate_request_params
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.server.routes import DefaultServerCallContextBuilder, create_rest_routes
from a2a.server.routes.common import create_event_source_response

# after a2a.server.routes: imported first, the SDK's v0.3 adapter meets a cycle through routes.rest_routes
# (ImportError: `mma2a serve` with grpc_listen, which loads this module at start, did not start)
from a2a.compat.v0_3 import a2a_v0_3_pb2 as v03_pb2
from a2a.compat.v0_3 import conversions as v03_conversions
from a2a.compat.v0_3 import proto_utils as v03_proto_utils
from a2a.compat.v0_3 import types as v03_types
from a2a.compat.v0_3.jsonrpc_adapter import JSONRPC03Adapter
from a2a.compat.v0_3.request_handler import RequestHandler03
from a2a.compat.v0_3.rest_adapter import REST03Adapter
from a2a.compat.v0_3.rest_handler import REST03Handler
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.server.routes.rest_dispatcher import A2AJSONResponse, RestDispatcher  # type: ignore[attr-defined]
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
    SendMessageResponse,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils import constants, proto_utils
from a2a.utils import errors as sdk_errors
from a2a.utils.error_handlers import rest_error_handler, rest_stream_error_handler
from a2a.utils.version_validator import validate_version
from google.protobuf import json_format
from jsonrpc.jsonrpc2 import JSONRPC20Request, JSONRPC20Response
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...errors import (A2A_DOMAIN, AgentRPCError, AgentStatusError, MMA2AError, PayloadTooLarge, RateLimited,
                       metadata_strings, status_for_reason)
from ...json_worker import JSONRPC, PUSH, PUSH_V03, SEND_V03
from ...request_body import ReadRequest
from ...responses import jsonrpc_error_json
from ...sdk_answers import (
    DICT,
    EVENT,
    KINDS,
    LIST,
    LIST_ARTIFACTS,
    LIST_TASKS,
    PROTO,
    SEND_RESPONSE,
    STREAM_EVENT,
    TASK,
    V03_DICT,
    V03_EVENT,
    V03_EVENT_DICT,
    V03_MODEL,
    convert,
    many_values,
)
from ...sdk_requests import check_required, raise_refusal, repeated_elements, send_request_json, struct_fields
from ..access.clients import current_client
from ..access.federation import check_listing
from ..access.security import AccessControl, retry_after
from ..downstream.overload import note_shed
from ..pipeline import Pipeline
from .body_parser import INLINE_SDK_REPEATED, INLINE_SDK_STRUCT_BYTES, JSONBodyParser, read_ahead
from .listing import list_tasks

_Proto = TypeVar("_Proto", Message, Task, TaskPushNotificationConfig, ListTasksResponse, StreamResponse)
_Answer = TypeVar("_Answer", Message, Task, ListTasksResponse, StreamResponse)
_BY_CODE: dict[int, type[sdk_errors.A2AError]] = {code: cls for cls, code in sdk_errors.JSON_RPC_ERROR_CODE_MAP.items()}
_CODES = sdk_errors.JSON_RPC_ERROR_CODE_MAP
_REASONS = sdk_errors.A2A_ERROR_REASONS


def to_sdk_error(exc: MMA2AError) -> sdk_errors.A2AError:
    """The SDK error with the same JSON-RPC code as an mma2a error; its `data` becomes the ErrorInfo metadata
    (an agent's error passed through keeps the metadata and the ErrorInfo reason the agent sent)."""
    cls = _BY_CODE.get(exc.code, sdk_errors.InvalidParamsError if exc.http_status < 500 else sdk_errors.InternalError)
    if isinstance(exc, AgentRPCError):
        cls = _agent_error_class(exc, cls)
    if isinstance(exc, (AgentStatusError, RateLimited)) or not _renders(cls, exc):
        # answered by the binding itself, with its status (and Retry-After), its code and its ErrorInfo (as a shed
        # is): an agent's refusal for now or 413, a caller's own jobs of the JSON body worker past its bounds, an
        # error the SDK's classes would render with another reason or status
        note_shed(exc)
    return cls(exc.message, data=metadata_strings(exc.data) or None)


def own_error(exc: sdk_errors.A2AError) -> MMA2AError | None:
    """The gateway's error an SDK error was made of (`to_sdk_error`, raised in its place: its context), when the SDK's
    class would render it with another code, reason or status; None otherwise. A stream's writers, which render an
    error in the middle of a stream by its class, write this one as it is instead."""
    own = exc.__context__
    return own if isinstance(own, MMA2AError) and not _renders(type(exc), own) else None


def _renders(cls: type[sdk_errors.A2AError], exc: MMA2AError) -> bool:
    """Whether the SDK's `cls` renders `exc` as it is: its JSON-RPC code, its ErrorInfo's reason and domain, and its
    HTTP status (as REST's `_restatus` corrects the SDK's by the reason). An agent's own reason, a later A2A's code,
    a refusal's PERMISSION_DENIED, a 413 are not: the SDK would answer INTERNAL_ERROR, or the code's reason and
    status, in their place."""
    infos = [d for d in exc.details() if str(d.get("@type", "")).endswith("google.rpc.ErrorInfo")]
    own = _REASONS.get(cls, "UNKNOWN_ERROR")
    reason = infos[0].get("reason") if infos else own
    domain = infos[0].get("domain", A2A_DOMAIN) if infos else A2A_DOMAIN
    status = status_for_reason(own) or (500 if cls is sdk_errors.A2AError else None)
    return (_CODES.get(cls, -32603) == exc.code and own == reason and domain == A2A_DOMAIN
            and (status is None or status == exc.http_status))


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


def rest_endpoints(handler: PipelineRequestHandler, context_builder: Any, bodies: JSONBodyParser | None = None
                   ) -> dict[tuple[str, str], Callable[[Request], Any]]:
    """The SDK's REST (HTTP+JSON) endpoints, A2A 1.0's and 0.3's, by (path, method) as `bindings.REST_ROUTES` and
    `bindings.V03_REST_ROUTES` name them (the same endpoints serve every prefix: they read only the path's `id`
    and `push_id`, and the context builder its `agent`). The endpoints are this module's own dispatcher's
    (`LargeBodyRestDispatcher`: with `bodies`, 1.0's `message:send` and `message:stream` read large bodies there)
    and v0.3 adapter's (`FreeingREST03Adapter`): each route's refusal is freed with its answer."""
    rest = LargeBodyRestDispatcher(handler, context_builder, bodies)
    v03 = FreeingREST03Adapter(handler, context_builder, bodies)
    endpoints: dict[tuple[str, str], Callable[[Request], Any]] = {}
    for route in create_rest_routes(handler, context_builder=context_builder, enable_v0_3_compat=True):
        if not isinstance(route, Route):
            continue
        for method in route.methods or ():
            if method != "HEAD":  # the SDK's table of paths; the endpoints are the same methods of this module's own
                endpoints[route.path, method] = _own_endpoint(route.endpoint, rest, v03)
    return endpoints


def _own_endpoint(endpoint: Any, rest: LargeBodyRestDispatcher, v03: FreeingREST03Adapter) -> Callable[[Request], Any]:
    """The endpoint of `rest` or `v03` that the SDK's `endpoint` (a method of its own dispatcher, or a partial of its
    v0.3 adapter's) stands for."""
    if isinstance(endpoint, functools.partial):  # v0.3: partial(adapter._handle_…, adapter.handler.METHOD)
        runner, method = endpoint.func, endpoint.args[0]
        own: Callable[[Request], Any] = functools.partial(getattr(v03, runner.__name__),
                                                          getattr(v03.handler, method.__name__))
        return own
    return getattr(rest, endpoint.__name__)  # type: ignore[no-any-return]


class LargeBodyRestDispatcher(RestDispatcher):
    """The SDK's REST dispatcher, but a SendMessage body past `bodies.inline_bytes` is read (parsed, checked, turned
    into the pipeline's JSON: `sdk_requests.read_send_body`) in the JSON body worker process, not on the event loop:
    the SDK's `json_format.Parse` and the handler's `MessageToDict` of a 26.7 MB body held every other client for
    ~0.5 s; a smaller one is read as the SDK's endpoint reads it. The answers of sends, streams, GetTask, CancelTask,
    ListTasks and SubscribeToTask are made as the SDK's endpoints make them, in the JSON body worker when they hold
    many values (`PipelineRequestHandler.converted`, S16-3). Either way the same checks in the same order (the
    version, then the body, then the pipeline), and the SDK's error handlers render the refusals."""

    def __init__(self, handler: PipelineRequestHandler, context_builder: Any, bodies: JSONBodyParser | None) -> None:
        super().__init__(request_handler=handler, context_builder=context_builder)
        self._pipeline_handler = handler
        self._bodies = bodies

    async def _handle_non_streaming(self, request: Request, handler_func: Any) -> Any:
        """The SDK's, its refusal freed at once (`_drop_tracebacks`), on every route of this dispatcher."""
        try:
            return await super()._handle_non_streaming(request, handler_func)
        except Exception as exc:
            _drop_tracebacks(exc)
            raise  # rendered by the SDK's handler, as on its own endpoint

    async def _handle_streaming(self, request: Request, handler_func: Any) -> Any:
        """The SDK's, a refusal before the first event freed at once (`_drop_tracebacks`), and an error in the middle
        of the stream the SDK's class would render otherwise (`own_error`: an agent's of a reason no table names)
        written as it is (`to_rest()`) in the stream's `error` event."""
        failed: list[MMA2AError] = []

        def watched(context: ServerCallContext) -> AsyncIterator[Any]:
            async def items() -> AsyncIterator[Any]:
                try:
                    async for item in handler_func(context):
                        yield item
                except sdk_errors.A2AError as exc:
                    if (own := own_error(exc)) is not None:
                        failed.append(own)
                    raise
            return items()

        try:
            response = await super()._handle_streaming(request, watched)
        except Exception as exc:
            _drop_tracebacks(exc)
            raise
        if not isinstance(response, EventSourceResponse):
            return response
        return create_event_source_response(_own_error_events(response.body_iterator, failed),
                                            shutdown_grace_period=self._shutdown_grace_period)

    async def on_message_send(self, request: Request) -> Response:
        body = await _body(request)
        if body is None or self._bodies is None:
            return await super().on_message_send(request)
        answer = None
        if not self._bodies.inline(body):
            try:
                answer = await self._bodies.read_send_answer(body)  # its refusal is raised where the SDK's parse was
            except MMA2AError as exc:  # the worker stopped: 503, as the gate answers it
                return _refused(exc)
        return await self._send(request, body, answer)

    async def on_message_send_stream(self, request: Request) -> Any:
        body = await _body(request)
        if body is None or self._bodies is None:
            return await super().on_message_send_stream(request)
        answer = None
        if not self._bodies.inline(body):
            try:
                answer = await self._bodies.read_send_answer(body)
            except MMA2AError as exc:
                return _refused(exc)
        return await self._send_stream(request, body, answer)

    async def _rendered(self, doc: dict[str, Any], kind: int, mode: int) -> Response:
        """The REST response the SDK renders of the pipeline's answer `doc` (its `ParseDict`, `MessageToDict` and
        `JSONResponse`'s bytes), made in the JSON body worker when it holds many values (`converted`)."""
        content = await self._pipeline_handler.converted(doc, kind, mode, rendered=True)
        return Response(content, media_type=A2AJSONResponse.media_type)

    @rest_error_handler
    async def on_get_task(self, request: Request) -> Response:
        """The SDK's, its answer rendered by `_rendered`."""
        @validate_version(constants.PROTOCOL_VERSION_1_0)
        async def _handler(context: ServerCallContext) -> dict[str, Any]:
            params = GetTaskRequest()
            proto_utils.parse_params(request.query_params, params)
            params.id = request.path_params["id"]
            return await self._pipeline_handler.get_task_doc(params, context)

        return await self._rendered(await self._handle_non_streaming(request, _handler), TASK, DICT)

    @rest_error_handler
    async def on_cancel_task(self, request: Request) -> Response:
        """The SDK's, its answer rendered by `_rendered`."""
        @validate_version(constants.PROTOCOL_VERSION_1_0)
        async def _handler(context: ServerCallContext) -> dict[str, Any]:
            return await self._pipeline_handler.cancel_task_doc(CancelTaskRequest(id=request.path_params["id"]),
                                                                context)

        return await self._rendered(await self._handle_non_streaming(request, _handler), TASK, DICT)

    @rest_error_handler
    async def list_tasks(self, request: Request) -> Response:
        """The SDK's, its answer rendered by `_rendered` (as `serialize_list_tasks_response` renders it)."""
        params = ListTasksRequest()

        @validate_version(constants.PROTOCOL_VERSION_1_0)
        async def _handler(context: ServerCallContext) -> dict[str, Any]:
            proto_utils.parse_params(request.query_params, params)
            return await self._pipeline_handler.list_tasks_doc(params, context)

        page = await self._handle_non_streaming(request, _handler)
        return await self._rendered(page, LIST_TASKS, LIST_ARTIFACTS if params.include_artifacts else LIST)

    @rest_stream_error_handler
    async def on_subscribe_to_task(self, request: Request) -> Any:
        """The SDK's, each event made in the JSON body worker when it holds many values (`event_items`)."""
        task_id = request.path_params["id"]

        @validate_version(constants.PROTOCOL_VERSION_1_0)
        async def _handler(context: ServerCallContext) -> AsyncIterator[dict[str, Any]]:
            handler = self._pipeline_handler
            async for item in handler.event_items(handler.subscribe_docs(SubscribeToTaskRequest(id=task_id), context)):
                yield item

        return await self._handle_streaming(request, _handler)

    async def set_push_notification(self, request: Request) -> Response:
        body = await _body(request)
        if body is None or self._bodies is None or self._bodies.inline(body):
            return await super().set_push_notification(request)
        try:
            answer = await self._bodies.sdk_answer(body, PUSH)
        except MMA2AError as exc:
            return _refused(exc)
        return await self._set_push_large(request, answer)

    @rest_error_handler
    async def _set_push_large(self, request: Request, answer: tuple[Any, ...]) -> Response:
        """The SDK's `set_push_notification`, the body parsed in the worker (`sdk_requests.read_push_config_as_data`:
        a large one is padding or unknown fields, which the parse drops)."""
        @validate_version(constants.PROTOCOL_VERSION_1_0)
        async def _handler(context: ServerCallContext) -> TaskPushNotificationConfig:
            raise_refusal(answer)
            params = TaskPushNotificationConfig.FromString(answer[1])
            params.task_id = request.path_params["id"]
            return await self.request_handler.on_create_task_push_notification_config(params, context)

        response = await self._handle_non_streaming(request, _handler)
        return A2AJSONResponse(content=json_format.MessageToDict(response))

    @staticmethod
    def _read(answer: tuple[Any, ...]) -> tuple[dict[str, Any], dict[str, Any] | None]:
        try:
            raise_refusal(answer)
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None
        return answer[1], answer[2]

    async def _request(self, body: bytes, answer: tuple[Any, ...] | None
                       ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """A SendMessage body read as the SDK's endpoint reads it (`Parse`, then the handler's read), or the worker's
        `answer` for a large one."""
        if answer is not None:
            return self._read(answer)
        params = SendMessageRequest()
        json_format.Parse(body, params, ignore_unknown_fields=True)
        return await self._pipeline_handler.read_request(params)

    @rest_error_handler
    async def _send(self, request: Request, body: bytes, answer: tuple[Any, ...] | None) -> Response:
        """The SDK's `on_message_send`, a large body read in the worker (`answer`), the answer rendered by
        `_rendered`."""
        @validate_version(constants.PROTOCOL_VERSION_1_0)
        async def _handler(context: ServerCallContext) -> dict[str, Any]:
            message, config = await self._request(body, answer)
            return await self._pipeline_handler.send_doc(message, config, context)

        return await self._rendered(await self._handle_non_streaming(request, _handler), SEND_RESPONSE, DICT)

    @rest_stream_error_handler
    async def _send_stream(self, request: Request, body: bytes, answer: tuple[Any, ...] | None) -> Any:
        """The SDK's `on_message_send_stream`, a large body read in the worker (`answer`), each event made in the JSON
        body worker when it holds many values (`event_items`)."""
        @validate_version(constants.PROTOCOL_VERSION_1_0)
        async def _handler(context: ServerCallContext) -> AsyncIterator[dict[str, Any]]:
            message, config = await self._request(body, answer)
            handler = self._pipeline_handler
            async for item in handler.event_items(handler.send_stream_docs(message, config, context)):
                yield item

        return await self._handle_streaming(request, _handler)


class FreeingREST03Adapter(REST03Adapter):
    """The SDK's v0.3 REST adapter, a refusal of a non-streaming route freed at once (`_drop_tracebacks`): the SDK's
    traced v0.3 handler kept it, and the request's frames with its body, in a cycle until the collector ran. With
    `bodies`, its handler reads large bodies in the JSON body worker (`LargeBodyREST03Handler`)."""

    def __init__(self, handler: PipelineRequestHandler, context_builder: Any, bodies: JSONBodyParser | None) -> None:
        super().__init__(handler, context_builder)
        if bodies is not None:
            self.handler = LargeBodyREST03Handler(handler, bodies)

    async def _handle_request(self, method: Callable[[Request, ServerCallContext], Awaitable[Any]],
                              request: Request) -> Response:
        refused: list[MMA2AError] = []

        async def freeing(req: Request, context: ServerCallContext) -> Any:
            try:
                return await method(req, context)
            except MMA2AError as exc:  # the gateway's own, before the SDK's read (the body worker stopped): 503
                refused.append(exc)
                return {}
            except Exception as exc:
                _drop_tracebacks(exc)
                raise

        response: Response = await super()._handle_request(freeing, request)
        return _refused(refused[0]) if refused else response


class LargeBodyREST03Handler(REST03Handler):
    """The SDK's v0.3 REST handler, but a `message:send`, `message:stream` or push-config body past
    `bodies.inline_bytes` is read in the JSON body worker, as the SDK reads it (`sdk_requests.read_v03_send_body_as_data`:
    its `Parse`, v0.3 types and conversion to 1.0, then the gateway's read; `read_push_config_as_data`), not on the
    event loop; a smaller one is read as the SDK reads it. The answers of sends, streams, GetTask, CancelTask and
    SubscribeToTask are the SDK's v0.3 conversions, made in the JSON body worker when they hold many values
    (`PipelineRequestHandler.converted`, S16-3). The steps are in the SDK's order: the version, then the body, then the
    pipeline."""

    def __init__(self, handler: PipelineRequestHandler, bodies: JSONBodyParser) -> None:
        super().__init__(request_handler=handler)
        self.handler03 = PipelineRequestHandler03(handler)
        self._pipeline_handler = handler
        self._bodies = bodies

    async def _large(self, request: Request, job: int) -> tuple[Any, ...] | None:
        """The worker's answer for a large body (None for a small one, or a body that could not be read)."""
        body = await _body(request)
        if body is None or self._bodies.inline(body):
            return None
        return await self._bodies.sdk_answer(body, job)  # `Unavailable` (503) when the worker stopped

    async def _send_request(self, request: Request) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """A v0.3 send's body read as the SDK's handler reads it (`Parse`, its v0.3 types, the conversion to 1.0, then
        the handler's read), in the worker when it is large (`_large`)."""
        answer = await self._large(request, SEND_V03)
        if answer is not None:
            return LargeBodyRestDispatcher._read(answer)
        v03_request = v03_pb2.SendMessageRequest()
        json_format.Parse(await request.body(), v03_request, ignore_unknown_fields=True)
        params = v03_types.SendMessageRequest(id="", params=v03_proto_utils.FromProto.message_send_params(v03_request))
        return await self._pipeline_handler.read_request(v03_conversions.to_core_send_message_request(params))

    @validate_version(constants.PROTOCOL_VERSION_0_3)
    async def on_message_send(self, request: Request, context: ServerCallContext) -> dict[str, Any]:
        """The SDK's, its answer made in the JSON body worker when it holds many values (`converted`)."""
        handler = self._pipeline_handler
        message, config = await self._send_request(request)
        out: dict[str, Any] = await handler.converted(await handler.send_doc(message, config, context), SEND_RESPONSE,
                                                      V03_DICT)
        return out

    @validate_version(constants.PROTOCOL_VERSION_0_3)
    async def on_get_task(self, request: Request, context: ServerCallContext) -> dict[str, Any]:
        """The SDK's, its answer made in the JSON body worker when it holds many values (`converted`)."""
        history_length = request.query_params.get("historyLength")
        params = v03_types.GetTaskRequest(id="", params=v03_types.TaskQueryParams(
            id=request.path_params["id"], history_length=int(history_length) if history_length else None))
        doc = await self._pipeline_handler.get_task_doc(v03_conversions.to_core_get_task_request(params), context)
        out: dict[str, Any] = await self._pipeline_handler.converted(doc, TASK, V03_DICT)
        return out

    @validate_version(constants.PROTOCOL_VERSION_0_3)
    async def on_cancel_task(self, request: Request, context: ServerCallContext) -> dict[str, Any]:
        """The SDK's, its answer made in the JSON body worker when it holds many values (`converted`)."""
        params = v03_types.CancelTaskRequest(id="", params=v03_types.TaskIdParams(id=request.path_params["id"]))
        doc = await self._pipeline_handler.cancel_task_doc(v03_conversions.to_core_cancel_task_request(params), context)
        out: dict[str, Any] = await self._pipeline_handler.converted(doc, TASK, V03_DICT)
        return out

    @validate_version(constants.PROTOCOL_VERSION_0_3)
    async def on_message_send_stream(self, request: Request, context: ServerCallContext
                                     ) -> AsyncIterator[dict[str, Any]]:
        """The SDK's, each event made in the JSON body worker when it holds many values (`event_items`)."""
        handler = self._pipeline_handler
        message, config = await self._send_request(request)
        async for item in handler.event_items(handler.send_stream_docs(message, config, context), V03_EVENT_DICT):
            yield item

    @validate_version(constants.PROTOCOL_VERSION_0_3)
    async def on_subscribe_to_task(self, request: Request, context: ServerCallContext
                                   ) -> AsyncIterator[dict[str, Any]]:
        """The SDK's, each event made in the JSON body worker when it holds many values (`event_items`)."""
        params = v03_types.TaskResubscriptionRequest(id="", params=v03_types.TaskIdParams(id=request.path_params["id"]))
        handler = self._pipeline_handler
        events = handler.subscribe_docs(v03_conversions.to_core_subscribe_to_task_request(params), context)
        async for item in handler.event_items(events, V03_EVENT_DICT):
            yield item

    @validate_version(constants.PROTOCOL_VERSION_0_3)
    async def set_push_notification(self, request: Request, context: ServerCallContext) -> dict[str, Any]:
        answer = await self._large(request, PUSH_V03)
        if answer is None:
            small: dict[str, Any] = await super().set_push_notification(request, context)
            return small
        raise_refusal(answer)
        v03_params = v03_proto_utils.FromProto.task_push_notification_config_request(
            v03_pb2.CreateTaskPushNotificationConfigRequest.FromString(answer[1]))
        v03_params.task_id = request.path_params["id"]
        kept = await self.handler03.on_create_task_push_notification_config(
            v03_types.SetTaskPushNotificationConfigRequest(id="", params=v03_params), context)
        out: dict[str, Any] = json_format.MessageToDict(v03_proto_utils.ToProto.task_push_notification_config(kept))
        return out


class PipelineRequestHandler03(RequestHandler03):
    """The SDK's v0.3 request handler (its JSON-RPC adapter's and REST handler's), but its answers of tasks and messages
    (`message/send`, `tasks/get`, `tasks/cancel`) are made from the pipeline's JSON in the JSON body worker when they
    hold many values (`PipelineRequestHandler.converted`: the SDK's `ParseDict`, then its v0.3 conversion,
    `to_compat_task`, pure Python; S16-3)."""

    def __init__(self, handler: PipelineRequestHandler) -> None:
        super().__init__(request_handler=handler)
        self._pipeline_handler = handler

    async def on_message_send(self, request: v03_types.SendMessageRequest, context: ServerCallContext
                              ) -> v03_types.Task | v03_types.Message:
        handler = self._pipeline_handler
        message, config = await handler.read_request(v03_conversions.to_core_send_message_request(request))
        out: v03_types.Task | v03_types.Message = await handler.converted(
            await handler.send_doc(message, config, context), SEND_RESPONSE, V03_MODEL)
        return out

    async def on_get_task(self, request: v03_types.GetTaskRequest, context: ServerCallContext) -> v03_types.Task:
        doc = await self._pipeline_handler.get_task_doc(v03_conversions.to_core_get_task_request(request), context)
        out: v03_types.Task = await self._pipeline_handler.converted(doc, TASK, V03_MODEL)
        return out

    async def on_cancel_task(self, request: v03_types.CancelTaskRequest, context: ServerCallContext) -> v03_types.Task:
        doc = await self._pipeline_handler.cancel_task_doc(v03_conversions.to_core_cancel_task_request(request), context)
        out: v03_types.Task = await self._pipeline_handler.converted(doc, TASK, V03_MODEL)
        return out

    async def on_message_send_stream(self, request: v03_types.SendMessageRequest, context: ServerCallContext
                                     ) -> AsyncGenerator[v03_types.SendStreamingMessageSuccessResponse]:
        handler = self._pipeline_handler
        message, config = await handler.read_request(v03_conversions.to_core_send_message_request(request))
        async for result in handler.event_items(handler.send_stream_docs(message, config, context), V03_EVENT):
            yield v03_types.SendStreamingMessageSuccessResponse(id=request.id, result=result)

    async def on_subscribe_to_task(self, request: v03_types.TaskResubscriptionRequest, context: ServerCallContext
                                   ) -> AsyncGenerator[v03_types.SendStreamingMessageSuccessResponse]:
        handler = self._pipeline_handler
        events = handler.subscribe_docs(v03_conversions.to_core_subscribe_to_task_request(request), context)
        async for result in handler.event_items(events, V03_EVENT):
            yield v03_types.SendStreamingMessageSuccessResponse(id=request.id, result=result)


class PipelineJSONRPC03Adapter(JSONRPC03Adapter):
    """The SDK's v0.3 JSON-RPC adapter, answering through `PipelineRequestHandler03`."""

    def __init__(self, handler: PipelineRequestHandler, context_builder: Any, shutdown_grace_period: float) -> None:
        super().__init__(handler, context_builder=context_builder, shutdown_grace_period=shutdown_grace_period)
        self.handler = PipelineRequestHandler03(handler)


class LargeBodyJsonRpcDispatcher(JsonRpcDispatcher):
    """The SDK's JSON-RPC dispatcher (what the fast path does not answer), but a body of an A2A 1.0 method past
    `bodies.inline_bytes` is read in the JSON body worker as the dispatcher reads it
    (`sdk_requests.read_jsonrpc_as_data`: `json.loads`, `ParseDict` of the params; for SendMessage and
    SendStreamingMessage the gateway's read), not on the event loop. The dispatcher then answers a stub of the
    request: a send's params hold only the tenant and the handler takes the worker's answer (`body_parser.read_ahead`);
    another method's params are what was read. A refusal of the params is answered as the dispatcher answers it.
    A body of any other method (v0.3's but its sends, a name no binding knows), which the SDK reads whole on the loop
    wherever it runs, is refused past the inline size (413, -32600 naming the limit: `_beyond_inline`); a body when
    the worker stopped takes the SDK's own path. The ingress's own job in the worker reads the body for the
    dispatcher as it parses it (`handle_read`): one parse of a large body."""

    def __init__(self, *args: Any, bodies: JSONBodyParser | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._bodies = bodies
        if self._v03_adapter is not None and isinstance(self.request_handler, PipelineRequestHandler):
            self._v03_adapter = PipelineJSONRPC03Adapter(self.request_handler, self._context_builder,
                                                         self._shutdown_grace_period)

    async def handle_requests(self, request: Request) -> Response:
        return await self.handle_read(request, None)

    async def handle_read(self, request: Request, answer: tuple[Any, ...] | None) -> Response:
        """`handle_requests`, the body read already as the dispatcher reads it (`answer`, the ingress's job in the
        worker: `json_worker.read_rpc_as_data`), or None: read here (past the inline size, in the worker)."""
        if answer is None:
            body = await _body(request)
            if self._bodies is None or body is None or self._bodies.inline(body):
                return await super().handle_requests(request)
            try:
                answer = await self._bodies.sdk_answer(body, JSONRPC)
            except RateLimited as exc:  # the caller's own jobs in the worker past its bounds: 429, not read here
                return Response(orjson.dumps(jsonrpc_error_json(None, exc)), status_code=exc.http_status,
                                media_type="application/json", headers={"Retry-After": str(retry_after(exc))})
            except MMA2AError:  # the worker stopped: the SDK reads it, as before
                return await super().handle_requests(request)
        if answer[0] == "other":
            body = await _body(request)
            if self._bodies is not None and len(body or b"") > self._bodies.inline_bytes:
                method, rid = (answer[1], answer[2]) if len(answer) > 1 else (None, None)
                return _beyond_inline(method, rid, len(body or b""), self._bodies.inline_bytes)
            return await super().handle_requests(request)  # (its many values read by pydantic, in Rust)
        stub = ReadRequest(request.scope, request.receive, answer[1])
        if answer[0] in ("params", "v03"):  # refused where the dispatcher (or its v0.3 adapter) reads the params,
            base = _jsonrpc_members(json.loads(answer[1]))  # once the members pass its checks
            if base is None:  # the dispatcher refuses the stub as it refuses the body, before the params
                return await super().handle_requests(stub)
            if answer[0] == "v03" and self._v03_adapter is not None:
                refused: Response = self._v03_adapter._generate_error_response(
                    base._id, JsonRpcInvalidRequest(data=answer[2]))  # noqa: SLF001
                return refused
            response: Response = self._generate_error_response(
                base._id, sdk_errors.InvalidParamsError(data={"parseError": answer[2]}))  # noqa: SLF001
            return response
        if answer[0] == "stub":  # another 1.0 method: its params as read, parsed again into the same message
            return await super().handle_requests(stub)
        # held for the rest of this request's task, not reset on return: v0.3's adapter starts a stream's handler
        # after the dispatcher has answered (the handler takes the answer once, `PipelineRequestHandler.read_request`)
        read_ahead.set(answer[2])
        return await super().handle_requests(stub)

    # The answers of A2A 1.0's methods, as the SDK's own methods make them (`MessageToDict` of the handler's protobuf),
    # made in the JSON body worker when they hold many values (`PipelineRequestHandler.converted`, S16-3).

    def _pipeline_handler(self) -> PipelineRequestHandler:
        handler = self.request_handler
        assert isinstance(handler, PipelineRequestHandler)
        return handler

    async def _handle_send_message(self, request_obj: SendMessageRequest, context: ServerCallContext
                                   ) -> dict[str, Any]:
        handler = self._pipeline_handler()
        answer = await handler.send_doc(*await handler.read_request(request_obj), context)
        out: dict[str, Any] = await handler.converted(answer, SEND_RESPONSE, DICT)
        return out

    async def _handle_cancel_task(self, request_obj: CancelTaskRequest, context: ServerCallContext) -> dict[str, Any]:
        handler = self._pipeline_handler()
        out: dict[str, Any] = await handler.converted(await handler.cancel_task_doc(request_obj, context), TASK, DICT)
        return out

    async def _handle_get_task(self, request_obj: GetTaskRequest, context: ServerCallContext) -> dict[str, Any]:
        handler = self._pipeline_handler()
        out: dict[str, Any] = await handler.converted(await handler.get_task_doc(request_obj, context), TASK, DICT)
        return out

    async def _handle_list_tasks(self, request_obj: ListTasksRequest, context: ServerCallContext) -> dict[str, Any]:
        handler = self._pipeline_handler()
        out: dict[str, Any] = await handler.converted(await handler.list_tasks_doc(request_obj, context), LIST_TASKS,
                                                      LIST_ARTIFACTS if request_obj.include_artifacts else LIST)
        return out

    async def _process_streaming_request(self, request_id: str | int | None, request_obj: Any,
                                         context: ServerCallContext) -> AsyncGenerator[dict[str, Any]]:
        """The SDK's, each event made by `PipelineRequestHandler.event_items`."""
        handler = self._pipeline_handler()
        method = context.state.get("method")
        if method == "SendStreamingMessage":
            stream = handler.send_stream_items(request_obj, context)
        elif method == "SubscribeToTask":
            stream = handler.event_items(handler.subscribe_docs(request_obj, context))
        else:
            return await super()._process_streaming_request(request_id, request_obj, context)
        try:  # the first event fetched at once: a refusal before it is answered as an error, not a stream
            first: dict[str, Any] | None = await anext(stream)
        except StopAsyncIteration:
            first = None

        async def wrapped() -> AsyncGenerator[dict[str, Any]]:
            try:
                if first is not None:
                    yield JSONRPC20Response(result=first, _id=request_id).data
                async for item in stream:
                    yield JSONRPC20Response(result=item, _id=request_id).data
            except sdk_errors.A2AError as exc:  # (the gateway's own as it is, where the SDK's class would change it)
                own = own_error(exc)
                yield build_error_response(request_id, exc) if own is None else JSONRPC20Response(
                    error=own.to_jsonrpc(), _id=request_id).data

        return wrapped()


async def _own_error_events(events: AsyncIterable[Any], failed: list[MMA2AError]) -> AsyncIterator[Any]:
    """A REST stream's events, its `error` event written of the gateway's own error (`failed`, noted as the stream
    failed) where there is one: as the binding answers it before a stream (`to_rest()`), not by the SDK's class."""
    async for event in events:
        if failed and isinstance(event, ServerSentEvent) and event.event == "error":
            event = ServerSentEvent(data=orjson.dumps(failed[0].to_rest()).decode(), event="error")
        yield event


def _beyond_inline(method: str | None, rid: Any, size: int, limit: int) -> Response:
    """A JSON-RPC request past the inline size whose method carries no media (v0.3's methods but its sends, a name
    no binding knows; None: it names no method): the SDK would read it whole on the event loop (`json.loads`, then
    v0.3's pydantic models), stalling every client for a body of padding. Refused, 413 and -32600 naming the limit,
    as a body past `max_body_bytes` is."""
    if rid.__class__ is not str and rid.__class__ is not int:
        rid = None
    what = f"a {method[:100]} request" if method is not None else "a request that names no method"
    err = PayloadTooLarge(
        f"request body of {size} bytes exceeds {limit} bytes, the most {what} may carry (only A2A 1.0's methods and "
        "v0.3's message/send and message/stream carry more); send large media by reference (POST /blobs)",
        field="body")
    return Response(orjson.dumps(jsonrpc_error_json(rid, err)), status_code=413, media_type="application/json")


def _jsonrpc_members(doc: dict[str, Any]) -> Any:
    """The SDK dispatcher's checks of a request's members before it reads the params (`JSONRPC20Request.from_data`,
    `jsonrpc` exactly "2.0", an id that is not a boolean, a method): the request they make, or None if they refuse it."""
    try:
        base = JSONRPC20Request.from_data(doc)
    except Exception:  # noqa: BLE001 (the dispatcher answers every failure here with InvalidRequestError)
        return None
    if (not isinstance(base, JSONRPC20Request) or doc.get("jsonrpc") != "2.0" or isinstance(base._id, bool)
            or not base.method):
        return None
    return base


def _refused(exc: MMA2AError) -> Response:
    """A refusal of the gateway's own before the SDK reads the request, in the REST shape the gate answers with."""
    wait = retry_after(exc)
    return Response(orjson.dumps(exc.to_rest()), status_code=exc.http_status, media_type="application/json",
                    headers={"Retry-After": str(wait)} if wait is not None else None)


def _drop_tracebacks(exc: BaseException) -> None:
    """Drop the tracebacks of a refusal and of the exceptions it chains. The SDK's traced wrappers
    (`a2a.utils.telemetry`) keep the exception in a local of their own frame: a cycle through the traceback, and
    through each frame's caller, that held the request's every frame (its body, the message read from it)
    until the collector ran, which a served gateway does rarely (`serving.GC_THRESHOLDS`): three rounds of three
    refused 26.7 MB REST bodies left the gateway +533 MB, and each refused body up to 1 MiB stayed as long."""
    seen: set[int] = set()
    chained: BaseException | None = exc
    while chained is not None and id(chained) not in seen:
        seen.add(id(chained))
        chained.__traceback__ = None
        chained = chained.__cause__ or chained.__context__


async def _body(request: Request) -> bytes | None:
    """The request's body (read by the gate already), or None when reading it fails: the SDK's endpoint then meets
    the same failure and answers it its way."""
    try:
        return await request.body()
    except (ValueError, RuntimeError, OSError):
        return None


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


def _request_json(params: SendMessageRequest) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """`send_request_json`, its refusal in the SDK's form."""
    try:
        return send_request_json(params)
    except MMA2AError as exc:
        raise to_sdk_error(exc) from None


class PipelineRequestHandler(RequestHandler):
    """An SDK `RequestHandler` whose every method runs through the gateway's pipeline."""

    def __init__(self, pipeline: Pipeline, card_fn: Any, bodies: JSONBodyParser | None = None) -> None:
        self.pipeline = pipeline
        self.card_fn = card_fn
        self.bodies = bodies  # reads a large request (gRPC's: the SDK's JSON bindings read theirs before) off the loop

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        return await self.send_json(*await self.read_request(params), context)

    async def _proto(self, doc: dict[str, Any], into: type[_Answer]) -> _Answer:
        """The pipeline's answer `doc` as the SDK's protobuf `into`: parsed here (`_parse`), or in the JSON body worker
        when it holds many values (`sdk_answers.many_values`: ParseDict's ~5 us a value held every client, S16-3),
        read back with `ParseFromString` (C)."""
        many = many_values(doc) if self.bodies is not None else None
        if many is None:
            return _parse(doc, into())
        out = into()
        out.ParseFromString(await self._in_worker(KINDS.index(into), PROTO, False, *many))
        return out

    async def converted(self, doc: dict[str, Any], kind: int, mode: int, rendered: bool = False) -> Any:
        """The pipeline's answer `doc` as the SDK's JSON bindings answer it (`sdk_answers.convert`: `ParseDict`, then
        `MessageToDict`, ~8 us a value), made in the JSON body worker when it holds many values
        (`sdk_answers.many_values`: a REST GetTask of a task keeping 300,000 held every client 1.7 s, S16-3)."""
        many = many_values(doc) if self.bodies is not None else None
        if many is None:
            return convert(doc, kind, mode, rendered)
        return await self._in_worker(kind, mode, rendered, *many)

    async def _in_worker(self, kind: int, mode: int, rendered: bool, data: bytes, held: int) -> Any:
        """`data` converted in the worker; `held`: what the answer's document holds here meanwhile (what the worker's
        queue counts for it, for its caller and in all)."""
        assert self.bodies is not None
        try:
            return await self.bodies.convert_answer(kind, mode, rendered, data, held)
        except MMA2AError as exc:  # the worker stopped: 503
            raise to_sdk_error(exc) from None

    async def event_items(self, events: AsyncIterator[dict[str, Any]], mode: int = EVENT) -> AsyncGenerator[Any]:
        """A stream's events (the pipeline's JSON) as the SDK's REST and JSON-RPC dispatchers write them (`converted`,
        `sdk_answers.EVENT`; v0.3's: `V03_EVENT`, `V03_EVENT_DICT`); an event with no payload is not sent."""
        async for event in events:
            item = await self.converted(event, STREAM_EVENT, mode)
            if item is not None:
                yield item

    async def send_stream_items(self, params: SendMessageRequest, context: ServerCallContext
                                ) -> AsyncGenerator[dict[str, Any]]:
        """`on_message_send_stream`'s events as `event_items` writes them."""
        message, config = await self.read_request(params)
        async for item in self.event_items(self.send_stream_docs(message, config, context)):
            yield item

    async def read_request(self, params: SendMessageRequest) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """`_request_json`, or the answer the gRPC door read from a large request's bytes in the JSON body worker
        (`body_parser.read_ahead`: `params` then holds only the tenant). A request parsed already past the body
        parser's inline size (the SDK's JSON-RPC dispatcher's) is serialized again (C, a copy) and converted there
        too: the conversion (base64 of every raw part, in Python) held the event loop, 245 ms for a 20 MB PNG."""
        answer = read_ahead.get()
        if answer is not None:
            read_ahead.set(None)  # taken once
        elif self.bodies is None or (
                ((size := params.ByteSize()) <= 2 * INLINE_SDK_REPEATED or repeated_elements(params) <= INLINE_SDK_REPEATED)
                and (size <= INLINE_SDK_STRUCT_BYTES or (size <= self.bodies.inline_bytes and sum(
                    n for _, n in struct_fields(params)) <= INLINE_SDK_STRUCT_BYTES))):
            return _request_json(params)  # (many free-form values, S16-2, or many elements, LN2: in the worker;
            # an element takes 2 bytes at least: a request of at most 512 is not counted)
        try:
            if answer is None:
                assert self.bodies is not None
                _, answer = await self.bodies.read_send_proto_answer(params.SerializeToString(), many=True)
            raise_refusal(answer)
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None
        return answer[1], answer[2]

    async def send_json(self, message: dict[str, Any], config: dict[str, Any] | None, context: ServerCallContext
                        ) -> Task | Message:
        """SendMessage of a request already read into its JSON (`sdk_requests.send_request_json`)."""
        answer = await self.send_doc(message, config, context)
        if "message" in answer:
            return await self._proto(answer["message"], Message)
        return await self._proto(answer["task"], Task)

    async def send_doc(self, message: dict[str, Any], config: dict[str, Any] | None, context: ServerCallContext
                       ) -> dict[str, Any]:
        """`send_json`'s answer in the pipeline's JSON, a SendMessageResponse's: `{"message": …}` or `{"task": …}`."""
        try:
            result = await self.pipeline.send(message, config, target=_target(context))
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None
        return {"message": result["message"]} if "message" in result else {"task": result["task"]}

    async def on_message_send_stream(self, params: SendMessageRequest, context: ServerCallContext
                                     ) -> AsyncGenerator[Any]:
        message, config = await self.read_request(params)  # refused at the first event, as an SDK agent refuses
        async for event in self.send_stream_json(message, config, context):
            yield event

    async def send_stream_json(self, message: dict[str, Any], config: dict[str, Any] | None,
                               context: ServerCallContext) -> AsyncGenerator[Any]:
        """SendStreamingMessage of a request already read into its JSON."""
        async for event in self.send_stream_docs(message, config, context):
            ev = await self._event(event)
            if ev is not None:
                yield ev

    async def send_stream_docs(self, message: dict[str, Any], config: dict[str, Any] | None,
                               context: ServerCallContext) -> AsyncGenerator[dict[str, Any]]:
        """`send_stream_json`'s events in the pipeline's JSON (StreamResponses')."""
        try:
            async for event in self.pipeline.send_stream(message, config, target=_target(context)):
                yield event
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None

    async def _event(self, event: dict[str, Any]) -> Any:
        """A stream's event as the SDK's protobuf (its payload: `_to_stream_event`), None for none."""
        resp = await self._proto(event, StreamResponse)
        which = resp.WhichOneof("payload")
        return getattr(resp, which) if which else None

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        return await self._proto(await self.get_task_doc(params, context), Task)

    async def get_task_doc(self, params: GetTaskRequest, context: ServerCallContext) -> dict[str, Any]:
        """`on_get_task`'s answer in the pipeline's JSON."""
        check_required(params)
        try:
            hl = params.history_length if params.HasField("history_length") else None
            return await self.pipeline.get_task(params.id, hl, target=_target(context))
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        return await self._proto(await self.cancel_task_doc(params, context), Task)

    async def cancel_task_doc(self, params: CancelTaskRequest, context: ServerCallContext) -> dict[str, Any]:
        """`on_cancel_task`'s answer in the pipeline's JSON."""
        check_required(params)
        try:
            return await self.pipeline.cancel_task(params.id, target=_target(context))
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None

    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest, context: ServerCallContext) -> AsyncGenerator[Any]:
        async for event in self.subscribe_docs(params, context):
            ev = await self._event(event)
            if ev is not None:
                yield ev

    async def subscribe_docs(self, params: SubscribeToTaskRequest, context: ServerCallContext
                             ) -> AsyncGenerator[dict[str, Any]]:
        """`on_subscribe_to_task`'s events in the pipeline's JSON."""
        check_required(params)
        try:
            async for event in self.pipeline.subscribe(params.id, target=_target(context)):
                yield event
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        return await self._proto(await self.list_tasks_doc(params, context), ListTasksResponse)

    async def list_tasks_doc(self, params: ListTasksRequest, context: ServerCallContext) -> dict[str, Any]:
        """`on_list_tasks`'s answer in the pipeline's JSON."""
        client = current_client.get()
        try:
            query = json_format.MessageToDict(params)
            check_listing(query)  # a peer gateway's assertion names this listing (lifted from another request: refused)
            return await list_tasks(self.pipeline, query, target=_target(context),
                                    allowed=client.agents if client is not None else None,
                                    owner=client.key if client is not None else None)
        except MMA2AError as exc:
            raise to_sdk_error(exc) from None

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
