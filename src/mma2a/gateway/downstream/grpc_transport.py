"""Calls to agents over gRPC, for agents whose cards prefer it (the `grpc` extra: grpcio).

The pipeline speaks A2A's JSON form; here each call becomes the `A2AService` request message,
the reply comes back as the same JSON the JSON-RPC binding carries, and an agent's gRPC error
(status + `google.rpc.ErrorInfo`) becomes the `AgentRPCError` its JSON-RPC twin would be. The
A2A version and the extension travel in metadata (`a2a-version`, `a2a-extensions`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc
import grpc.aio
import orjson
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2

from ...request_body import json_values

from ...errors import (ERROR_INFO_TYPE, INTERNAL_ERROR, INVALID_REQUEST, AgentRefusal, AgentRPCError, AgentTooLarge,
                       DispatchError, code_for_reason)
from .addresses import agent_failure
from .service_params import extensions_for_agent

_REQUESTS: dict[str, type[Any]] = {
    "SendMessage": a2a_pb2.SendMessageRequest,
    "SendStreamingMessage": a2a_pb2.SendMessageRequest,
    "GetTask": a2a_pb2.GetTaskRequest,
    "CancelTask": a2a_pb2.CancelTaskRequest,
    "ListTasks": a2a_pb2.ListTasksRequest,
    "SubscribeToTask": a2a_pb2.SubscribeToTaskRequest,
}


INLINE_VALUES = 2048
"""The most JSON values of a request converted to its protobuf on the event loop (`json_format.ParseDict`, pure Python:
~5 us a value); a larger one is converted in a thread, as is an answer of more than `INLINE_ANSWER_BYTES` serialized
(`MessageToDict`, ~3 us a value): a client's message of 300,000 empty objects in its metadata (900 KB, within every
bound) held the loop 1.8 s on its way to a gRPC agent and back (docs/security.md S19-4)."""
INLINE_ANSWER_BYTES = 8192  # an empty object takes 2-4 bytes serialized: ~2,048 values at most inline


def _many(params: Mapping[str, Any]) -> bool:
    """Whether `params` hold more than `INLINE_VALUES` JSON values (counted on their orjson serialization: under a
    microsecond for a small request)."""
    try:
        data = orjson.dumps(params)
    except (TypeError, orjson.JSONEncodeError):
        return True
    return len(data) > INLINE_VALUES and json_values(data) > INLINE_VALUES


async def _request(method: str, params: Mapping[str, Any]) -> Any:
    """`params` as the method's protobuf request, converted off the loop when they hold many values."""
    cls = _REQUESTS[method]
    if _many(params):
        return await asyncio.to_thread(json_format.ParseDict, dict(params), cls(), ignore_unknown_fields=True)
    return json_format.ParseDict(dict(params), cls(), ignore_unknown_fields=True)


async def _answer(reply: Any) -> Any:
    """An agent's protobuf answer as the JSON the pipeline speaks, converted off the loop when it is large."""
    if reply.ByteSize() > INLINE_ANSWER_BYTES:
        return await asyncio.to_thread(json_format.MessageToDict, reply)
    return json_format.MessageToDict(reply)


class GrpcAgents:
    """One channel per agent address (`grpc://HOST:PORT`), reused across calls, reading answers of up to
    `max_response_bytes` as the HTTP transport does (grpc's own default, 4 MiB, failed a larger answer as the agent's
    failure: three such, from one client's messages, ejected the agent for every client)."""

    def __init__(self, max_response_bytes: int = 256 * 1024 * 1024) -> None:
        self._options = [("grpc.max_receive_message_length", max_response_bytes)]
        self._channels: dict[str, tuple[grpc.aio.Channel, a2a_pb2_grpc.A2AServiceStub]] = {}

    def _stub(self, url: str) -> a2a_pb2_grpc.A2AServiceStub:
        target = url.removeprefix("grpc://").rstrip("/")
        if target not in self._channels:
            channel = grpc.aio.insecure_channel(target, options=self._options)
            self._channels[target] = (channel, a2a_pb2_grpc.A2AServiceStub(channel))  # type: ignore[no-untyped-call]
        return self._channels[target][1]

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        for channel, _ in channels.values():
            await channel.close()

    @staticmethod
    def _metadata(extension: bool, extra: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
        md = [("a2a-version", "1.0"), *((k.lower(), v) for k, v in (extra or {}).items())]
        extensions = extensions_for_agent(extension)  # the client's, and ours when the agent reads it
        if extensions is not None:
            md.append(("a2a-extensions", extensions))
        return md

    async def call(self, agent: str, url: str, method: str, params: Mapping[str, Any], *, extension: bool,
                   timeout_s: float, extra: Mapping[str, str] | None = None) -> Any:
        request = await _request(method, params)
        rpc = getattr(self._stub(url), method)
        try:
            reply = await rpc(request, metadata=self._metadata(extension, extra), timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise _agent_error(agent, url, exc, timeout_s, request) from None
        return await _answer(reply)

    async def stream(self, agent: str, url: str, method: str, params: Mapping[str, Any], *, extension: bool,
                     timeout_s: float, extra: Mapping[str, str] | None = None) -> AsyncIterator[Any]:
        request = await _request(method, params)
        call = getattr(self._stub(url), method)(request, metadata=self._metadata(extension, extra))
        try:
            async for event in call:
                yield await _answer(event)
        except grpc.aio.AioRpcError as exc:
            raise _agent_error(agent, url, exc, timeout_s, request) from None


_REFUSED = {grpc.StatusCode.UNAUTHENTICATED: 401, grpc.StatusCode.PERMISSION_DENIED: 403}


# grpc-core's refusal of a message over the receiver's `max_receive_message_length`, before any handler reads it;
# `SERVER:` the agent's (`CLIENT:` would be this gateway's channel refusing the agent's answer)
_TOO_LARGE = re.compile(r"SERVER: (Received message larger than max \(\d+ vs\. \d+\))")


def _agent_error(agent: str, url: str, exc: grpc.aio.AioRpcError, timeout_s: float, request: Any) -> Exception:
    """A gRPC failure as the error the JSON-RPC binding would give: the agent's A2A error, or a dispatch error (told
    to clients without the agent's address: gRPC's own details name it, `ipv4:10.0.0.7:50051: …`).

    `RESOURCE_EXHAUSTED` is two things: grpc-core's refusal of `request` as over the agent's size limit (no ErrorInfo)
    is the agent's 413 (`AgentTooLarge`, as a peer gateway's HTTP 413); the agent's own, with its ErrorInfo, is its
    refusal for now (`AgentRefusal` 429, as an HTTP agent's 429, its `retry-after` kept)."""
    if exc.code() in _REFUSED:  # as an HTTP agent's 401/403: an OAuth2 token is fetched again once on the first
        status = _REFUSED[exc.code()]
        return DispatchError(f"agent {agent} refused the gateway's credentials (gRPC {exc.code().name}); check its "
                             "agents[].auth (or token_env)", data={"agent": agent, "status": status})
    info = _error_info(exc)
    exhausted = exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    if exhausted and info is None:
        too_large = _TOO_LARGE.search(exc.details() or "")
        if too_large is not None:
            return AgentTooLarge(agent, {"code": INVALID_REQUEST, "message": too_large.group(1)}, request.ByteSize())
    if info is not None:
        code = code_for_reason(info.reason)
        detail = {"@type": ERROR_INFO_TYPE, "reason": info.reason, "domain": info.domain, "metadata": dict(info.metadata)}
        if exhausted:  # a reason no A2A code names: the code of the gateway's own refusal for now (-32600)
            error = {"code": code or INVALID_REQUEST, "message": exc.details() or "", "data": [detail]}
            return AgentRefusal(agent, error, 429, retry_after=_trailer(exc, "retry-after"))
        return AgentRPCError(agent, {"code": code or INTERNAL_ERROR, "message": exc.details() or "", "data": [detail]},
                             grpc_code=exc.code().name)  # a reason no table names: the status the agent gave
    if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DispatchError(f"agent {agent} timed out after {timeout_s:g} s", data={"agent": agent, "timeout": timeout_s})
    if exc.code() == grpc.StatusCode.UNAVAILABLE:
        return agent_failure(f"agent {agent} unreachable: {exc.details()}", url, data={"agent": agent})
    return agent_failure(f"agent {agent} failed: gRPC {exc.code().name}: {exc.details()}", url, data={"agent": agent})


def _trailer(exc: grpc.aio.AioRpcError, key: str) -> str | None:
    for name, value in exc.trailing_metadata() or ():
        if name == key and isinstance(value, str):
            return value
    return None


def _error_info(exc: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo | None:
    for key, value in exc.trailing_metadata() or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            status = status_pb2.Status()
            status.ParseFromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return info
    return None
