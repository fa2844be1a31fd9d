"""An agent that refuses a message as too large, or for now, is answering, not failing (session 18, edges;
docs/security.md ED1, ED2). Over gRPC both refusals are `RESOURCE_EXHAUSTED`, and the gateway tells them apart; over
HTTP a proxy in front of an agent answers 413 with a page of its own, no JSON-RPC error.

grpc-core refuses a message over the agent's `grpc.max_receive_message_length` before any handler runs, with
`RESOURCE_EXHAUSTED` and no ErrorInfo: `SERVER: Received message larger than max (N vs. LIMIT)`. That is the agent's
size limit, told to the client as a peer gateway's HTTP 413 is (`AgentTooLarge`: JSON-RPC HTTP 413 / -32600, REST 413,
gRPC `INVALID_ARGUMENT`, naming the agent and the bytes passed on). Before: a failed task (HTTP 200) whose status said
`agent notes failed: gRPC RESOURCE_EXHAUSTED: …`, counted as the agent's failure: three such messages of one client
ejected the agent for every client. An agent's own `RESOURCE_EXHAUSTED` with an ErrorInfo (an a2a-sdk
agent's error mapped to it, reason `RATE_LIMIT_EXCEEDED`) is its refusal for now, as an HTTP agent's 429: 429 +
`Retry-After` on every binding (gRPC `RESOURCE_EXHAUSTED` with `retry-after`). Before: JSON-RPC HTTP 200 -32603, REST
500 `INTERNAL`, gRPC `INTERNAL`, no `Retry-After`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import httpx
import pytest
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.grpc_handler import GrpcHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import AgentCard, AgentInterface, a2a_pb2, a2a_pb2_grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from starlette.applications import Starlette

import mma2a.gateway.bindings.sdk_binding  # noqa: F401  (its tables made before the agent's error is in the SDK's)
from tests.agents import RecordingExecutor, run_agent, serve_app
from tests.conformance.test_tck import first_info
from tests.gateway.conftest import agent, gateway

pytestmark = pytest.mark.timeout(120)

V1 = {"A2A-Version": "1.0"}
LIMIT = 8192
RATE_REASON = "RATE_LIMIT_EXCEEDED"


class Limited(RecordingExecutor):
    """Refuses messages whose id starts with `rate-` with its own rate-limit error (`rate_limited`'s class)."""

    error: type[Exception] | None = None

    async def execute(self, context: Any, event_queue: Any) -> None:
        if self.error is not None and context.message.message_id.startswith("rate-"):
            raise self.error("too many messages from this gateway: slow down")
        await super().execute(context, event_queue)


@pytest.fixture
def rate_limited(monkeypatch: pytest.MonkeyPatch) -> type[Exception]:
    """An a2a-sdk agent's own rate-limit error, in the SDK's tables as an agent adds one: gRPC `RESOURCE_EXHAUSTED`
    with the ErrorInfo reason `RATE_LIMIT_EXCEEDED` (JSON-RPC -32051 on its HTTP side, unused here)."""
    from a2a.server.jsonrpc_models import JSONRPCError
    from a2a.server.request_handlers import grpc_handler, response_helpers
    from a2a.utils import errors

    class RateLimit(errors.A2AError):
        message = "rate limit"

    monkeypatch.setitem(errors.JSON_RPC_ERROR_CODE_MAP, RateLimit, -32051)
    monkeypatch.setitem(errors.A2A_ERROR_MAPPING, RateLimit, errors.ErrorMapping(429, "RESOURCE_EXHAUSTED", RATE_REASON))
    monkeypatch.setitem(errors.A2A_ERROR_REASONS, RateLimit, RATE_REASON)
    monkeypatch.setitem(response_helpers.EXCEPTION_MAP, RateLimit, JSONRPCError)
    monkeypatch.setitem(grpc_handler._ERROR_CODE_MAP, RateLimit, grpc.StatusCode.RESOURCE_EXHAUSTED)
    return RateLimit


@contextlib.asynccontextmanager
async def grpc_agent(card: AgentCard, executor: Limited, *, max_receive: int) -> AsyncIterator[str]:
    """An a2a-sdk agent whose card prefers gRPC (its gRPC server taking messages of at most `max_receive` bytes), the
    card and JSON-RPC served over HTTP; yields the card's base URL (the gateway registers it and calls over gRPC)."""
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", max_receive)])
    address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    card.supported_interfaces.append(AgentInterface(url=address, protocol_binding="GRPC", protocol_version="1.0"))
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card)
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)  # type: ignore[no-untyped-call]
    await server.start()
    try:
        async with serve_app(Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/"))) as url:
            yield url
    finally:
        await server.stop(grace=None)


async def grpc_answer(target: str, method: str, msg: dict[str, Any]) -> tuple[str, tuple[Any, ...], str | None]:
    """A gRPC call's status name, its ErrorInfo (reason, domain, metadata) and its `retry-after`; ("OK", …) served."""
    request = json_format.ParseDict({"message": msg}, a2a_pb2.SendMessageRequest())
    async with grpc.aio.insecure_channel(target) as channel:
        rpc = getattr(a2a_pb2_grpc.A2AServiceStub(channel), method)  # type: ignore[no-untyped-call]
        try:
            if method == "SendStreamingMessage":
                [event async for event in rpc(request, metadata=[("a2a-version", "1.0")])]
            else:
                await rpc(request, metadata=[("a2a-version", "1.0")])
        except grpc.aio.AioRpcError as exc:
            trailers = dict(exc.trailing_metadata() or ())
            info = error_details_pb2.ErrorInfo()
            for detail in status_pb2.Status.FromString(trailers.get("grpc-status-details-bin", b"")).details:
                if detail.Unpack(info):
                    break
            return exc.code().name, (info.reason, info.domain, dict(info.metadata)), trailers.get("retry-after")
    return "OK", (), None


def error_of(r: httpx.Response) -> Any:
    """An HTTP answer's `error` (JSON-RPC's or REST's), or its text when it is none (a stream)."""
    if r.headers.get("content-type", "").startswith("application/json"):
        return r.json().get("error")
    return r.text[:500]


async def every_binding(url: str, grpc_url: str, msg: dict[str, Any]) -> dict[str, Any]:
    """What a SendMessage and a SendStreamingMessage of `msg` get on JSON-RPC, REST and gRPC: (status, Retry-After,
    error) on HTTP, (code, ErrorInfo, retry-after) on gRPC."""
    base = url.rstrip("/")
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=30) as c:
        for name, method in (("rpc", "SendMessage"), ("rpc-stream", "SendStreamingMessage")):
            r = await c.post(base + "/", headers=V1, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": {
                "message": {**msg, "messageId": f"{msg['messageId']}-{name}"}}})
            out[name] = (r.status_code, r.headers.get("retry-after"), error_of(r))
        for name, path in (("rest", "/message:send"), ("rest-stream", "/message:stream")):
            r = await c.post(base + path, headers=V1, json={"message": {**msg, "messageId": f"{msg['messageId']}-{name}"}})
            out[name] = (r.status_code, r.headers.get("retry-after"), error_of(r))
    for name, method in (("grpc", "SendMessage"), ("grpc-stream", "SendStreamingMessage")):
        out[name] = await grpc_answer(grpc_url, method, {**msg, "messageId": f"{msg['messageId']}-{name}"})
    return out


async def test_a_grpc_agents_size_limit_is_413_naming_the_agent_and_the_bytes_on_every_binding() -> None:
    card, _ = agent("notes", ["text/*"])
    ex = Limited(reply="notes ok")
    async with grpc_agent(card, ex, max_receive=LIMIT) as agent_url, \
            gateway({"agents": [{"name": "notes", "url": agent_url}], "grpc_listen": "127.0.0.1:0"}) as (gw, url), \
            httpx.AsyncClient(timeout=30) as c:
        assert gw.startup_errors == []
        small = await c.post(url, headers=V1, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": "small", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}})
        assert small.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"  # reached over gRPC
        assert gw.grpc_url is not None
        seen = await every_binding(url, gw.grpc_url, {"messageId": "big", "role": "ROLE_USER",
                                                      "parts": [{"text": "x" * 20_000}]})
        again = await c.post(url, headers=V1, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": "small-2", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}})
        healthy = gw.directory.get("notes").healthy
    # the agent's refusals are answers, not its failures: before, three of them ejected it for every client (the
    # rest of the six, and everyone's messages after, were -32005 `notes (unhealthy: its health check fails)`)
    assert healthy and again.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(ex.received) == 2  # the small ones only

    def said(message: str, meta: dict[str, str]) -> None:
        head = "the request as passed on to agent notes ("
        tail = (" bytes: the message with this gateway's routing metadata) is over that agent's body limit: "
                "Received message larger than max (")
        assert message.startswith(head) and tail in message, message
        sent = int(message[len(head):].split(" ", 1)[0])
        assert message.endswith(f"({sent} vs. {LIMIT})"), message  # grpc-core's words: the bytes it was given
        assert meta == {"agent": "notes", "sentBytes": str(sent)} and sent > 20_000, meta

    for name in ("rpc", "rpc-stream"):
        status, wait, error = seen[name]
        assert (status, wait, error["code"]) == (413, None, -32600), seen[name]
        reason, domain, meta = first_info(error["data"])
        assert (reason, domain) == ("INVALID_REQUEST", "a2a-protocol.org"), seen[name]
        said(error["message"], meta)
    for name in ("rest", "rest-stream"):
        status, wait, error = seen[name]
        assert (status, wait, error["code"], error["status"]) == (413, None, 413, "INVALID_ARGUMENT"), seen[name]
        said(error["message"], first_info(error["details"])[2])
    for name in ("grpc", "grpc-stream"):
        code, (reason, domain, meta), wait = seen[name]
        assert (code, reason, domain, wait) == ("INVALID_ARGUMENT", "INVALID_REQUEST", "a2a-protocol.org", None), seen
        assert meta["agent"] == "notes" and int(meta["sentBytes"]) > 20_000, meta


async def test_a_grpc_agents_own_rate_limit_stays_429_with_retry_after_on_every_binding(
        rate_limited: type[Exception]) -> None:
    card, _ = agent("notes", ["text/*"])
    ex = Limited(reply="notes ok")
    ex.error = rate_limited
    async with grpc_agent(card, ex, max_receive=LIMIT) as agent_url, \
            gateway({"agents": [{"name": "notes", "url": agent_url}], "grpc_listen": "127.0.0.1:0"}) as (gw, url):
        assert gw.grpc_url is not None
        seen = await every_binding(url, gw.grpc_url, {"messageId": "rate-1", "role": "ROLE_USER",
                                                      "parts": [{"text": "hello"}]})
    words = "too many messages from this gateway: slow down"
    for name in ("rpc", "rpc-stream"):
        status, wait, error = seen[name]
        assert (status, wait, error["code"], error["message"]) == (429, "1", -32600, words), seen[name]
        assert first_info(error["data"]) == (RATE_REASON, "a2a-protocol.org", {}), seen[name]
    for name in ("rest", "rest-stream"):
        status, wait, error = seen[name]
        assert (status, wait, error["status"], error["message"]) == (429, "1", "RESOURCE_EXHAUSTED", words), seen[name]
        assert first_info(error["details"]) == (RATE_REASON, "a2a-protocol.org", {}), seen[name]
    for name in ("grpc", "grpc-stream"):
        assert seen[name] == ("RESOURCE_EXHAUSTED", (RATE_REASON, "a2a-protocol.org", {}), "1"), seen[name]


async def test_a_grpc_agents_answer_past_grpcs_default_4_mib_is_read_as_an_http_agents_is() -> None:
    """A gRPC agent echoing a 5 MB message: the gateway's channel took answers of 4 MiB at most (grpc's default), so the
    answer failed (`agent notes failed: gRPC RESOURCE_EXHAUSTED: … CLIENT: Received message larger than max`), counted
    as the agent's failure — three ejected it for every client — where an HTTP agent's answer is read up to the
    transport's `max_response_bytes` (256 MiB). Now the channel takes what the transport takes; the size refusals
    above are never counted as failures (the agent stays healthy)."""
    card, _ = agent("notes", ["text/*"])
    ex = Limited(echo=True)
    text = "y" * 5_000_000
    async with grpc_agent(card, ex, max_receive=16 << 20) as agent_url, \
            gateway({"agents": [{"name": "notes", "url": agent_url}], "max_body_bytes": 16 << 20,
                     "offload_threshold": 64 << 20}) as (gw, url), httpx.AsyncClient(timeout=60) as c:
        answers = []
        for i in range(3):
            r = await c.post(url, headers=V1, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "message": {"messageId": f"echo-{i}", "role": "ROLE_USER", "parts": [{"text": text}]}}})
            answers.append(r.json()["result"]["task"])
        healthy = gw.directory.get("notes").healthy
    for task in answers:
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", str(task["status"])[:300]
        assert task["status"]["message"]["parts"][0]["text"] == text
    assert healthy


def behind_a_proxy(limit: int) -> Any:
    """ASGI middleware answering 413 with a text page for a body over `limit` bytes, as a proxy in front of an agent
    (nginx's `client_max_body_size`) does."""
    def wrap(app: Any) -> Any:
        async def proxy(scope: Any, receive: Any, send: Any) -> None:
            size = int(dict(scope.get("headers") or ()).get(b"content-length", b"0"))
            if scope["type"] == "http" and size > limit:
                page = b"<html><body><h1>413 Request Entity Too Large</h1></body></html>"
                await send({"type": "http.response.start", "status": 413, "headers": [
                    (b"content-type", b"text/html"), (b"content-length", str(len(page)).encode())]})
                await send({"type": "http.response.body", "body": page})
                return
            await app(scope, receive, send)
        return proxy
    return wrap


async def test_an_http_agents_proxy_413_page_is_413_naming_the_agent_and_never_its_failure() -> None:
    """Before: `agent notes answered HTTP 413 with a body that is not JSON`, a failed task (HTTP 200) counted as the
    agent's failure, so three of one client's large messages ejected the agent for every client; a stream's 413 the
    same (`answered HTTP 413 to a stream`)."""
    card, ex = agent("notes", ["text/*"])
    big = {"messageId": "big", "role": "ROLE_USER", "parts": [{"text": "x" * 20_000}]}
    async with run_agent(card, ex, wrap=behind_a_proxy(LIMIT)) as agent_url, \
            gateway({"agents": [{"name": "notes", "url": agent_url}], "grpc_listen": "127.0.0.1:0"}) as (gw, url), \
            httpx.AsyncClient(timeout=30) as c:
        assert gw.grpc_url is not None
        seen = await every_binding(url, gw.grpc_url, big)
        small = await c.post(url, headers=V1, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": "small", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}})
        healthy = gw.directory.get("notes").healthy
    head = "the request as passed on to agent notes ("
    tail = (" bytes: the message with this gateway's routing metadata) is over that agent's body limit: HTTP 413 "
            "(Content Too Large)")
    for name in ("rpc", "rpc-stream", "rest", "rest-stream"):
        status, wait, error = seen[name]
        assert (status, wait) == (413, None), seen[name]
        assert error["message"].startswith(head) and error["message"].endswith(tail), error
    for name in ("grpc", "grpc-stream"):
        code, (reason, _, meta), _ = seen[name]
        assert (code, reason, meta["agent"]) == ("INVALID_ARGUMENT", "INVALID_REQUEST", "notes"), seen[name]
        assert int(meta["sentBytes"]) > 20_000
    assert healthy and small.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(ex.received) == 1


def behind_a_rate_limit(app: Any) -> Any:
    """ASGI middleware answering 429 with a text page and `Retry-After: 7` to a request naming `limited`, as a proxy's
    rate limit in front of an agent does."""
    async def proxy(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            event = await receive()
            chunks.append(event.get("body", b""))
            more = event.get("more_body", False)
        body = b"".join(chunks)
        if b"limited" in body:
            page = b"<html><body><h1>429 Too Many Requests</h1></body></html>"
            await send({"type": "http.response.start", "status": 429, "headers": [
                (b"content-type", b"text/html"), (b"retry-after", b"7"), (b"content-length", str(len(page)).encode())]})
            await send({"type": "http.response.body", "body": page})
            return

        async def again() -> Any:
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, again, send)
    return proxy


async def test_an_http_agents_proxy_429_page_is_429_with_its_retry_after_and_never_its_failure() -> None:
    """Before: `agent notes answered HTTP 429 with a body that is not JSON`, a failed task counted as the agent's
    failure (three ejected it for every client), its `Retry-After` lost; a stream's `answered HTTP 429 to a stream`."""
    card, ex = agent("notes", ["text/*"])
    async with run_agent(card, ex, wrap=behind_a_rate_limit) as agent_url, \
            gateway({"agents": [{"name": "notes", "url": agent_url}], "grpc_listen": "127.0.0.1:0"}) as (gw, url), \
            httpx.AsyncClient(timeout=30) as c:
        assert gw.grpc_url is not None
        seen = await every_binding(url, gw.grpc_url, {"messageId": "limited", "role": "ROLE_USER",
                                                      "parts": [{"text": "hello"}]})
        small = await c.post(url, headers=V1, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": "small", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}})
        healthy = gw.directory.get("notes").healthy
    words = "agent notes refused the request for now: HTTP 429 (Too Many Requests)"
    for name in ("rpc", "rpc-stream", "rest", "rest-stream"):
        status, wait, error = seen[name]
        assert (status, wait, error["message"]) == (429, "7", words), seen[name]
    for name in ("grpc", "grpc-stream"):
        code, (reason, _, _), wait = seen[name]
        assert (code, reason, wait) == ("RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED", "7"), seen[name]
    assert healthy and small.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(ex.received) == 1
