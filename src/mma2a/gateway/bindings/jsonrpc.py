"""Ingress: the fast JSON-RPC path, and the hand-off to the SDK's bindings for the rest.

`SendMessage`, `GetTask` and `CancelTask` on A2A 1.x are parsed once with orjson and
answered from the pipeline without a protobuf round trip. Every other request (streaming,
v0.3 `message/send`, push configs, …) goes to the SDK's `JsonRpcDispatcher` with the same
pipeline behind it, so conformance comes from the SDK where speed matters less (loaded by
the first such request: `bindings`).
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

import orjson
from starlette.responses import Response

from ...card import VERSION_HEADER
from ...errors import (
    VERSION_NOT_SUPPORTED,
    AgentStatusError,
    InvalidParams,
    InvalidRequest,
    MMA2AError,
    Overloaded,
    PayloadTooLarge,
    RateLimited,
)
from ...json_worker import FAST_METHODS, proto_spelled
from ...request_body import ReadRequest, header_map, parse_json_body, too_deep
from ...responses import jsonrpc_error_json
from ..access.clients import StreamSlot, StreamSlots, current_client
from ..access.security import AccessControl, retry_after
from ..downstream.overload import shed_note
from ..pipeline import Pipeline
from .body_parser import JSONBodyParser
from .sdk_routes import SdkBindings

from ..stages.feedback import FEEDBACK_METHOD

log = logging.getLogger("mma2a.gateway")

# the A2A 0.3 method names (answered through the SDK's compat layer); any other name with a slash is unknown (-32601)
V03_METHODS = frozenset({
    "message/send", "message/stream", "tasks/get", "tasks/cancel", "tasks/resubscribe", "tasks/pushNotificationConfig/set",
    "tasks/pushNotificationConfig/get", "tasks/pushNotificationConfig/list", "tasks/pushNotificationConfig/delete",
    "agent/getAuthenticatedExtendedCard",
})
# the methods answered with a stream (SSE): each holds one of the caller's stream slots while open
STREAM_METHODS = frozenset({"SendStreamingMessage", "SubscribeToTask", "message/stream", "tasks/resubscribe"})
MAX_JSON_DEPTH = 64  # levels of objects and arrays under `params`; protobuf-based agents refuse about 100
_PART_KINDS = ("text", "raw", "url", "data")


_JSON_TYPE = (b"content-type", b"application/json")
# "1.0", "1.2.3": the fast path's versions; any other value (a list, "1.x-beta") is the SDK's to accept or refuse
_PLAIN_V1 = re.compile(r"1\.[0-9]+(?:\.[0-9]+)?").fullmatch
_DECIMAL = re.compile(r"-?[0-9]+")
_VERSION = VERSION_HEADER.lower().encode("latin-1")
_ROLE_VALUES = (b':"ROLE_USER"', b': "ROLE_USER"', b':"ROLE_AGENT"', b': "ROLE_AGENT"')  # as `_underscore` counts them


def rpc_response(rid: Any, result: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": result})


def rpc_error(rid: Any, exc: MMA2AError) -> bytes:
    return orjson.dumps(jsonrpc_error_json(rid, exc))


def _v03_version(version: str) -> bool:
    """An A2A-Version the SDK's 0.3 methods take (its `validate_version`): none (read as 0.3), or one of major 0. Any
    other — `1`, `2.0`, `v1.0`, not a version at all — it refuses with an internal error (-32603)."""
    if not version:
        return True
    from packaging.version import InvalidVersion, Version  # (the SDK's 0.3 handler loads it anyway)

    try:
        return Version(version).major == 0
    except InvalidVersion:
        return False


def check_message(message: Any) -> dict[str, Any]:
    """Shape checks of an A2A 1.0 message, each error naming the field."""
    if not isinstance(message, dict):
        raise InvalidParams("params.message: required, must be an object", field="params.message")
    if not isinstance(message.get("messageId"), str) or not message["messageId"]:
        raise InvalidParams("params.message.messageId: required, must be a non-empty string", field="params.message.messageId")
    role = message.get("role")
    if role not in ("ROLE_USER", "ROLE_AGENT", "user", "agent"):
        raise InvalidParams(f"params.message.role: must be ROLE_USER or ROLE_AGENT, got {role!r}", field="params.message.role")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise InvalidParams("params.message.parts: required, must be a non-empty list", field="params.message.parts")
    for i, part in enumerate(parts):
        where = f"params.message.parts[{i}]"
        if not isinstance(part, dict):
            raise InvalidParams(f"{where}: must be an object", field=where)
        kinds = [k for k in _PART_KINDS if k in part]
        if len(kinds) != 1:
            raise InvalidParams(f"{where}: must carry exactly one of text, raw, url, data (got {kinds or 'none'})", field=where)
        kind = kinds[0]
        if kind in ("text", "raw", "url") and not isinstance(part[kind], str):
            raise InvalidParams(f"{where}.{kind}: must be a string", field=f"{where}.{kind}")
        if "metadata" in part and not isinstance(part["metadata"], dict):
            raise InvalidParams(f"{where}.metadata: must be an object", field=f"{where}.metadata")
    if "metadata" in message and not isinstance(message["metadata"], dict):
        raise InvalidParams("params.message.metadata: must be an object", field="params.message.metadata")
    return message


class JsonRpcIngress:
    """The POST endpoint of the JSON-RPC binding at `/` and `/agents/{agent}/`."""

    def __init__(self, pipeline: Pipeline, sdk: SdkBindings, *, max_body_bytes: int, metrics: Any,
                 control: AccessControl | None = None, parser: JSONBodyParser | None = None) -> None:
        """`sdk`: the SDK's bindings, for what the fast path does not answer; `control`: the access gate whose stream
        slots the streaming methods take (None: not counted); `parser`: where bodies are parsed (its depth limit must
        be `MAX_JSON_DEPTH`; default: a parser of its own)."""
        self.control = control
        self.pipeline = pipeline
        self.sdk = sdk
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics
        self.parser = parser or JSONBodyParser(MAX_JSON_DEPTH)
        self._bytes_in = metrics.bytes_in.labels("jsonrpc")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The route's ASGI app: no per-request wrapping beyond the request and the response themselves.

        A JSON-RPC answer (result or error, HTTP 200) goes out as two raw ASGI messages; other answers
        (413, a client gone mid-body, the SDK's) are Starlette responses."""
        answer = await self.handle(scope, receive)
        if isinstance(answer, bytes):
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", b"%d" % len(answer)), _JSON_TYPE]})
            await send({"type": "http.response.body", "body": answer})
        else:
            await answer(scope, receive, send)

    async def _sdk(self, scope: dict[str, Any], receive: Any, body: bytes, method: Any = None, rid: Any = None,
                   read: tuple[Any, ...] | None = None) -> Response:
        """The request (its body already read; `read`: as the dispatcher reads it, if the worker has) answered by the
        SDK's dispatcher; a streaming `method` holds one of the caller's stream slots while it is answered."""
        if method.__class__ is str and method in STREAM_METHODS and self.control is not None:
            return await self._stream(scope, receive, body, rid, read)
        return await self._plain_sdk(scope, receive, body, rid, read)

    async def _plain_sdk(self, scope: dict[str, Any], receive: Any, body: bytes, rid: Any = None,
                         read: tuple[Any, ...] | None = None) -> Response:
        """The SDK's answer; a request whose message was shed (noted by the pipeline) is answered 503 instead, as
        on the fast path (the SDK answers every error with HTTP 200)."""
        await self.sdk.loaded()
        request = ReadRequest(scope, receive, body)  # the SDK dispatcher reads the body read here
        shed: list[MMA2AError] = []
        token = shed_note.set(shed)
        try:
            answer: Response = await self.sdk.dispatcher.handle_read(request, read)
        finally:
            shed_note.reset(token)
        if shed and answer.media_type == "application/json":  # (a stream that has begun says it in its events)
            return shed_response(rid, shed[0])
        return answer

    async def handle(self, scope: dict[str, Any], receive: Any) -> bytes | Response:
        """The answer to one POST: a JSON-RPC document (bytes), or a response of another shape."""
        headers = header_map(scope)
        declared, raw_version = headers.get(b"content-length"), headers.get(_VERSION)
        version = raw_version.decode("latin-1") if raw_version is not None else ""
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            return _too_large(self.max_body_bytes)
        chunks: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":  # gone mid-body (or cut off by the body deadline): nobody to answer
                return Response(status_code=400)
            chunk = msg.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_body_bytes:
                return _too_large(self.max_body_bytes)
            if not msg.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._bytes_in.inc(len(body))
        fast_version = version == "1.0" or _PLAIN_V1(version) is not None
        read: tuple[Any, ...] | None = None
        try:
            if len(body) <= self.parser.inline_bytes:  # here (about a millisecond a MiB; no coroutine to make)
                doc, brackets = parse_json_body(body, self.parser.max_depth)
            else:  # in the worker process (the loop stays free), read there for the SDK too if it answers it
                doc, brackets, read = await self.parser.parse(body, every=not fast_version)
        except RateLimited as exc:  # the caller's own jobs in the body worker past its bounds: 429 + Retry-After
            return shed_response(None, exc)
        except MMA2AError as exc:
            return rpc_error(None, exc)
        if not isinstance(doc, dict):
            return rpc_error(None, InvalidRequest("request must be a JSON-RPC 2.0 object (batches are not supported)"))
        if brackets is None:  # a small body: not counted by check_json_values
            brackets = body.count(b"{") + body.count(b"[")
        if brackets > MAX_JSON_DEPTH:  # cheap: only such a body can nest that deep
            deep = too_deep(doc.get("params"), "params", MAX_JSON_DEPTH)
            if deep is not None:
                return rpc_error(doc.get("id"), InvalidParams(
                    f"{deep}: nested deeper than {MAX_JSON_DEPTH} levels (A2A agents parse at most about 100)", field=deep))
        rid = doc.get("id")
        if rid is not None and (rid.__class__ is not str and rid.__class__ is not int):  # bool is not int here
            if rid.__class__ is float:  # orjson reads an integer past 64 bits as a float: the SDK's parser keeps it
                return await self._sdk(scope, receive, body, doc.get("method"), rid, read)
            return rpc_error(None, InvalidRequest("request id must be a string, an integer or null", field="id"))
        method = doc.get("method")
        if doc.get("jsonrpc") != "2.0" or not isinstance(method, str):
            return rpc_error(rid, InvalidRequest("request must have jsonrpc: \"2.0\" and a string method", field="method"))
        if method in V03_METHODS and not _v03_version(version):  # the SDK would answer -32603 (internal error)
            err = InvalidRequest(f"method {method!r} is A2A 0.3; with A2A-Version {version[:40]!r} use the 1.0 method "
                                 "names (SendMessage, GetTask, ...) with A2A-Version: 1.0, or send A2A-Version: 0.3",
                                 field="method")
            err.code = VERSION_NOT_SUPPORTED
            return rpc_error(rid, err)
        params = doc.get("params")
        target = (scope.get("path_params") or {}).get("agent")
        # A2A 1.0's `tenant` names the agent (the gateway's tenants are its agents, as on gRPC and REST): checked here
        # against the agents the client may use, for the SDK's path too; a path (`/agents/{name}/`) wins
        tenant = params.get("tenant") if params.__class__ is dict else None
        if tenant is not None and (tenant.__class__ is not str or not tenant or target is not None):
            tenant = None
        if tenant is not None:
            try:
                AccessControl.check_agent(current_client.get(), tenant, field="params.tenant")
            except MMA2AError as exc:
                return rpc_error(rid, exc)
        if method == FEEDBACK_METHOD:  # the extension's own method (docs/extension.md)
            return await self._feedback(params, target if target is not None else tenant, rid,
                                        (scope.get("client") or ("?",))[0])
        if (read is not None or method not in FAST_METHODS or not fast_version  # (read: the worker found it the SDK's)
                or (_underscore(body) and proto_spelled(params))):
            return await self._sdk(scope, receive, body, method, rid, read)
        try:
            if not isinstance(params, dict):
                if params is not None and not isinstance(params, list):  # JSON-RPC 2.0 §4.2: a structured value
                    raise InvalidRequest("params: must be an object or an array, if present", field="params")
                raise InvalidParams("params: required, must be an object", field="params")
            if target is None and tenant is not None:
                target = tenant
            if method == "SendMessage":
                message = check_message(params.get("message"))
                config = params.get("configuration")
                if config is not None and not isinstance(config, dict):
                    raise InvalidParams("params.configuration: must be an object", field="params.configuration")
                result: Any = await self.pipeline.send(message, config, target=target)
            else:
                tid = params.get("id")
                if not isinstance(tid, str) or not tid:
                    raise InvalidParams("params.id: required, must be a task id string", field="params.id")
                if method == "GetTask":
                    result = await self.pipeline.get_task(tid, history_length(params), target=target)
                else:
                    result = await self.pipeline.cancel_task(tid, target=target)
        except (Overloaded, AgentStatusError) as exc:  # shed (503), an agent's refusal for now (its status +
            # Retry-After), a peer's 413
            return shed_response(rid, exc)
        except MMA2AError as exc:
            return rpc_error(rid, exc)
        except Exception:  # a bug of ours: no stack trace on the wire
            log.exception("internal error in %s", method)
            return rpc_error(rid, MMA2AError("internal error"))  # code -32603
        return rpc_response(rid, result)


    async def _feedback(self, params: Any, target: str | None, rid: Any, address: str) -> bytes:
        """`a2a-multimodal/TaskFeedback`: `params` `{id, score, agent?, comment?}` (gateway/stages/feedback.py)."""
        try:
            if not isinstance(params, dict):
                raise InvalidParams("params: required, must be an object with id and score", field="params")
            tid = params.get("id")
            if not isinstance(tid, str) or not tid:
                raise InvalidParams("params.id: required, must be a task id string", field="params.id")
            result = await self.pipeline.feedback.submit(tid, params, target=target, where="params", address=address)
        except MMA2AError as exc:
            return rpc_error(rid, exc)
        return rpc_response(rid, result)

    async def _stream(self, scope: dict[str, Any], receive: Any, body: bytes, rid: Any,
                      read: tuple[Any, ...] | None) -> Response:
        """A streaming method: one of the caller's stream slots while its answer is sent, or 429 + `Retry-After`
        with the JSON-RPC error (-32600, `data.retryAfter`) past the caps."""
        assert self.control is not None
        try:
            sender = self.control.open_stream(current_client.get(), scope)
        except RateLimited as exc:
            return Response(orjson.dumps(jsonrpc_error_json(rid, exc)), status_code=429, media_type="application/json",
                            headers={"Retry-After": str(max(1, math.ceil(exc.retry_after)))})
        try:
            answer = await self._plain_sdk(scope, receive, body, rid, read)
        except BaseException:
            self.control.streams.give(sender)
            raise
        return _Holding(answer, self.control.streams, sender)


class _Holding(Response):
    """An answer that gives its stream slot back once it is sent (or the client left)."""

    def __init__(self, answer: Response, slots: StreamSlots, sender: str) -> None:  # noqa: D107 (no body of its own)
        self.answer, self.slots, self.sender = answer, slots, sender
        self.status_code = answer.status_code

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        slot = StreamSlot(self.slots, self.sender)
        try:
            await self.answer(scope, receive, slot.sending(send))  # free before the last byte is out
        finally:
            slot.give()


def history_length(params: dict[str, Any]) -> int | None:
    """`historyLength` (or `history_length`, as the SDK also reads it): absent, or a count (0 = no history;
    a negative count is the task owner's to refuse, see `Pipeline.get_task`)."""
    hl = params.get("historyLength", params.get("history_length"))
    if hl is None:
        return None
    if isinstance(hl, bool) or not isinstance(hl, int):
        # as protobuf's JSON reading (the SDK's) takes them: a decimal string, a float with no fraction
        if isinstance(hl, str) and _DECIMAL.fullmatch(hl) and len(hl) <= 20:
            hl = int(hl)
        elif isinstance(hl, float) and hl.is_integer():
            hl = int(hl)
        else:
            raise InvalidParams(f"params.historyLength: must be an integer, got {hl!r}"[:200], field="params.historyLength")
    if not -(1 << 31) <= hl < 1 << 31:  # the field is an int32; past 64 bits it could not even be passed on
        raise InvalidParams(f"params.historyLength: must be a 32-bit integer, got {hl}"[:200], field="params.historyLength")
    return hl


def _underscore(body: bytes) -> bool:
    """An underscore in the body outside the role values (`"role":"ROLE_USER"`): only such a body can have a proto
    field name for `proto_spelled` to find. (`:"ROLE_USER"` can only be a value: a key is never after a colon, and a
    quote inside a JSON string is escaped.)"""
    underscores = body.count(b"_")
    if not underscores:
        return False
    if len(body) > 2048:  # not worth counting: `proto_spelled` reads only keys
        return True
    # each role value holds one underscore: any other is outside them (counted, not copied out); the counting stops
    # once the role values account for every underscore (a body of one role value: one count, not four)
    roles = 0
    for value in _ROLE_VALUES:
        roles += body.count(value)
        if roles >= underscores:
            return False
    return True


def shed_response(rid: Any, exc: MMA2AError) -> Response:
    """A message shed under overload on JSON-RPC: HTTP 503 with `Retry-After`, the JSON-RPC error (ErrorInfo reason
    `OVERLOADED`, the agent in its metadata) in the body; an agent's refusal for now (`AgentRefusal`) the same way,
    with its status (429, 503) and its error, and a peer's 413 (`AgentTooLarge`) with 413. Any other error noted (an
    agent's the SDK has no class for): the error as the agent sent it, HTTP 200 as the SDK answers errors."""
    wait = retry_after(exc)
    status = exc.http_status if wait is not None or isinstance(exc, AgentStatusError) else 200
    return Response(orjson.dumps(jsonrpc_error_json(rid, exc)), status_code=status, media_type="application/json",
                    headers={"Retry-After": str(wait)} if wait is not None else None)


def _too_large(limit: int) -> Response:
    err = PayloadTooLarge(f"request body exceeds {limit} bytes; send large media by reference (POST /blobs)")
    return Response(orjson.dumps(jsonrpc_error_json(None, err)), status_code=413, media_type="application/json")
