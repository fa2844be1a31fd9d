"""Admission on the gRPC binding: the HTTP gate's access decision, in front of every `A2AService` method.

One policy, two front doors. Each gRPC method is the twin of a JSON-RPC method and gets that
method's access class (`JSONRPC_TWINS`, looked up in the JSON-RPC route's table at start; a
method without a twin stops the start, and a call to a method served without a class is refused).
`Admission` wraps each method's handler so that, before the request message is read, the call
passes `security.AccessControl.admit` — drain refusal, credentials (metadata `authorization`, the
API-key header, or a verified client certificate), and a rate-limit token keyed like HTTP's: the
client's name, else `ip:<address>` of the peer (`peers.client_address`, `x-forwarded-for` from
trusted proxies as on HTTP). The request message must then arrive whole within
`server.body_timeout_s`; its `tenant` (the target agent) is checked against the agents the client
may use and must name a registered agent. Refusals carry the gRPC status of the error (UNAUTHENTICATED,
PERMISSION_DENIED, NOT_FOUND, RESOURCE_EXHAUSTED, UNAVAILABLE, DEADLINE_EXCEEDED, INVALID_ARGUMENT), its message, and a
`google.rpc.Status` with the ErrorInfo (and RetryInfo plus `retry-after` metadata when HTTP would
send `Retry-After`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any, NoReturn

import grpc
import grpc.aio
from a2a.types import SendMessageRequest, a2a_pb2
from google.protobuf import any_pb2, descriptor, duration_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from ... import client_link
from ...client_link import CallLink
from ...errors import A2A_DOMAIN, AgentNotFound, Forbidden, InvalidRequest, MMA2AError, RequestTimeout, grpc_status, metadata_strings
from ...sdk_requests import raise_refusal
from ..access.authz import AccessClass, RouteAccess, UnclassifiedRoute
from ..access.clients import BodyBudget, BodyHold, Client, client_jwt, current_client, jwt_of
from ..access.peers import TrustedProxies, address_key, current_address, peer_host
from ..access.security import AccessControl, BodiesBusy, retry_after
from ..downstream.overload import client_deadline, shed_note
from ..downstream.service_params import activated_extensions, read_extensions, requested_extensions
from .body_parser import INLINE_GRPC_BYTES, JSONBodyParser, read_ahead

A2A_SERVICE: descriptor.ServiceDescriptor = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"]

# Each A2AService method and the JSON-RPC method it is the twin of (A2A 1.0 names them alike); a method
# added to the service without a line here stops the gateway's start.
JSONRPC_TWINS: Mapping[str, str] = {
    "SendMessage": "SendMessage",
    "SendStreamingMessage": "SendStreamingMessage",
    "GetTask": "GetTask",
    "ListTasks": "ListTasks",
    "CancelTask": "CancelTask",
    "SubscribeToTask": "SubscribeToTask",
    "CreateTaskPushNotificationConfig": "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig": "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs": "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig": "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard": "GetExtendedAgentCard",
}

_STATUS_DETAILS_KEY = "grpc-status-details-bin"

_SERVICE_PATH = f"/{A2A_SERVICE.full_name}"
_INPUTS = {m.name: m.input_type.name for m in A2A_SERVICE.methods}  # each method's request type, by its name
READ_AHEAD_METHODS = frozenset(f"/{A2A_SERVICE.full_name}/{m}" for m in ("SendMessage", "SendStreamingMessage"))
"""The methods whose request, past `body_parser.INLINE_GRPC_BYTES`, the JSON body worker also makes the pipeline's
JSON of (`read_ahead`). Every A2A request reaches the door as bytes (no deserializer) and is parsed there (`_parse`)."""


def method_access(jsonrpc: Mapping[str, RouteAccess], *, service: descriptor.ServiceDescriptor = A2A_SERVICE,
                  twins: Mapping[str, str] = JSONRPC_TWINS) -> dict[str, RouteAccess]:
    """`/package.Service/Method` -> the access of its JSON-RPC twin (`jsonrpc`: JSON-RPC method -> access).

    `UnclassifiedRoute` names every method with no twin, a twin the JSON-RPC binding does not serve, or a
    class gRPC cannot enforce (`signed`: there is no URL to sign)."""
    out: dict[str, RouteAccess] = {}
    missing = []
    for m in service.methods:
        access = jsonrpc.get(twins.get(m.name, ""))
        if access is None or access.cls is AccessClass.SIGNED or access.cls is AccessClass.WEBHOOK:
            missing.append(m.name)
            continue
        out[f"/{service.full_name}/{m.name}"] = access
    if missing:
        raise UnclassifiedRoute(f"gRPC methods without an access class (no JSON-RPC twin with one): "
                                f"{', '.join(missing)}", field="grpc", data={"methods": missing})
    return out


def metadata_headers(metadata: Any) -> dict[str, str]:
    """gRPC invocation metadata as lower-case HTTP-style headers (binary `-bin` values left out)."""
    return {k.lower(): v for k, v in (metadata or ()) if isinstance(v, str)}


def error_status(exc: MMA2AError) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str | bytes], ...]]:
    """An mma2a error as a gRPC status: code, message, and trailing metadata — a `google.rpc.Status` with its
    ErrorInfo (and RetryInfo), and `retry-after` (seconds) when HTTP would answer with `Retry-After`."""
    code = getattr(grpc.StatusCode, grpc_status(exc), grpc.StatusCode.UNKNOWN)
    info = exc.details()[0]
    wait = retry_after(exc)
    extra: list[Message] = []
    if wait is not None:
        extra.append(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=wait)))
    trailers = rich_status(code, exc.message, info["reason"], metadata_strings(exc.data), extra,
                           domain=str(info.get("domain") or A2A_DOMAIN))  # an agent's error: its own domain
    return code, exc.message, (*trailers, *((("retry-after", str(wait)),) if wait is not None else ()))


def rich_status(code: grpc.StatusCode, message: str, reason: str, metadata: Mapping[str, str],
                extra: list[Message] | None = None, *, domain: str = A2A_DOMAIN) -> tuple[tuple[str, bytes], ...]:
    """The `grpc-status-details-bin` trailer: a `google.rpc.Status` led by the ErrorInfo (A2A's domain unless an
    agent's error names another, `metadata` as on JSON-RPC and REST), then `extra` details."""
    details = []
    for item in [error_details_pb2.ErrorInfo(reason=reason, domain=domain, metadata=dict(metadata)), *(extra or ())]:
        detail = any_pb2.Any()
        detail.Pack(item)
        details.append(detail)
    status = status_pb2.Status(code=code.value[0], message=message, details=details)
    return ((_STATUS_DETAILS_KEY, status.SerializeToString()),)


async def abort(context: grpc.aio.ServicerContext, exc: MMA2AError) -> NoReturn:
    code, message, trailers = error_status(exc)
    await context.abort(code, message, trailing_metadata=trailers)
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


def _extensions(context: grpc.aio.ServicerContext) -> tuple[str, ...]:
    """The extensions the call activates (`a2a-extensions` metadata), passed on to the agents it reaches."""
    return read_extensions(v for k, v in context.invocation_metadata() or ()
                           if k.lower() == "a2a-extensions" and isinstance(v, str))


async def _echo(context: grpc.aio.ServicerContext, activated: list[str]) -> None:
    """The extensions the agents said they activated, in the answer's initial metadata (`a2a-extensions`)."""
    if activated:
        await context.send_initial_metadata((("a2a-extensions", ", ".join(activated)),))


def _jwt(client: Client | None, context: grpc.aio.ServicerContext) -> str | None:
    """The caller's own JWT (metadata `authorization`) when it named the client."""
    if client is None or client.scheme != "jwt":
        return None
    return jwt_of(client, metadata_headers(context.invocation_metadata() or ()).get("authorization"))


def _deadline(context: grpc.aio.ServicerContext) -> float | None:
    """The call's deadline (the client's own, propagated as gRPC does) in loop time; None without one."""
    left = context.time_remaining()
    return asyncio.get_running_loop().time() + left if left is not None else None


def _cn(context: grpc.aio.ServicerContext) -> str | None:
    """The common name of the verified client certificate (mutual TLS), if any."""
    cn = (context.auth_context() or {}).get("x509_common_name")
    return cn[0].decode("utf-8", "replace") if cn else None


class Admission(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Every call's access decision (the HTTP gate's), its request read within a deadline, and its place in the
    drain count. Methods are served in their client-streaming form here, so the decision comes before the
    request message is read; A2A's methods all take one message, and a call with another count is refused."""

    def __init__(self, control: AccessControl, methods: Mapping[str, RouteAccess], *, message_timeout_s: float,
                 proxies: TrustedProxies | None = None, agent_of: Callable[[str], object] | None = None,
                 relayed: Callable[[str], tuple[str, str | None] | None] | None = None,
                 bodies: JSONBodyParser | None = None) -> None:
        """`agent_of`: the directory's lookup, which raises `AgentNotFound` for a tenant naming no agent;
        `relayed`: the client address and certificate CN behind a connection the gateway's own TLS relayed
        (`grpc_relay.TlsRelay.identity`, by grpc's peer string), None for others; `bodies`: the JSON body worker,
        which reads the large requests of `READ_AHEAD_METHODS` (without it grpc parses every request itself)."""
        self.control = control
        self.bodies = bodies
        self.relayed = relayed
        self.agent_of = agent_of
        self.methods = methods
        self.message_timeout_s = message_timeout_s
        self.proxies = proxies or TrustedProxies()

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]], details: Any) -> Any:
        handler = await continuation(details)
        if handler is None:  # not served: gRPC answers UNIMPLEMENTED
            return None
        access = self.methods.get(details.method)
        if access is None or handler.request_streaming:
            return self._wrap(handler, None, details.method)
        return self._wrap(handler, access, details.method)

    def _wrap(self, handler: Any, access: RouteAccess | None, method: str) -> Any:
        admit = self._admit
        parse = handler.request_deserializer
        # every A2A request arrives as bytes: parsed by the door (`_parse`), a large one in the JSON body worker
        raw = self.bodies is not None and parse is not None and method.rpartition("/")[0] == _SERVICE_PATH

        async def unary(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            client, request, held, read, address = await admit(access, method, requests, context, parse if raw else None)
            try:
                with self._call(client, context, read, address) as activated:
                    reply = await handler.unary_unary(request, context)
                    await _echo(context, activated)
                    return reply
            finally:
                if held is not None:
                    held.release()

        async def stream(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            client, request, held, read, address = await admit(access, method, requests, context, parse if raw else None)
            try:  # one of the caller's stream slots while the stream is open, as SSE takes on HTTP
                slot = self.control.open_stream(client, peer=address)
            except MMA2AError as exc:
                if held is not None:
                    held.release()
                await abort(context, exc)
            try:
                with self._call(client, context, read, address) as activated:
                    first = True
                    async for item in handler.unary_stream(request, context):
                        if first:  # the agent's answer has begun: its activated extensions go in the head
                            first = False
                            await _echo(context, activated)
                        yield item
            finally:
                if held is not None:
                    held.release()
                self.control.streams.give(slot)

        kw = {"request_deserializer": None if raw else parse, "response_serializer": handler.response_serializer}
        if handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(stream, **kw)
        return grpc.stream_unary_rpc_method_handler(unary, **kw)

    @contextlib.contextmanager
    def _call(self, client: Client | None, context: grpc.aio.ServicerContext,
              read: tuple[Any, ...] | None, address: str) -> Iterator[list[str]]:
        """One call's context (its client, JWT, requested extensions, deadline, shed note, link to its client, the
        request read in the worker) and its place in the drain; yields the list the call's activated extensions are noted in."""
        token, asked = current_client.set(client), requested_extensions.set(_extensions(context))
        where = current_address.set(address) if client is None else None  # (as the body budget keys the caller)
        ahead = read_ahead.set(read)
        own = client_jwt.set(_jwt(client, context))
        activated: list[str] = []
        noted = activated_extensions.set(activated)
        shed, deadline = shed_note.set([]), client_deadline.set(_deadline(context))
        link = CallLink()
        linked = client_link.current.set(link)  # a cancelled call's legs leave their agents' queues, counted
        self.enter()
        try:
            yield activated
        except asyncio.CancelledError:
            # grpc cancels a call's task when its client cancelled it, its deadline passed or its connection closed
            # (and when the server stops past its grace: not the client's doing, so not counted as it)
            if self.control.drain is None or not self.control.drain.draining:
                link.leave()
            raise
        finally:
            self.leave()
            client_link.current.reset(linked)
            client_deadline.reset(deadline)
            shed_note.reset(shed)
            activated_extensions.reset(noted)
            read_ahead.reset(ahead)
            requested_extensions.reset(asked)
            client_jwt.reset(own)
            current_client.reset(token)
            if where is not None:
                current_address.reset(where)

    def enter(self) -> None:
        if self.control.drain is not None:
            self.control.drain.enter()

    def leave(self) -> None:
        if self.control.drain is not None:
            self.control.drain.leave()

    def peer(self, context: grpc.aio.ServicerContext) -> tuple[str, str | None]:
        """The caller's address and verified certificate CN: grpc's own TLS peer, or the relay's record of it."""
        seen = self.relayed(context.peer()) if self.relayed is not None else None
        if seen is not None:
            return seen
        return peer_host(context.peer()), _cn(context)

    async def _admit(self, access: RouteAccess | None, method: str, requests: AsyncIterator[Any],
                     context: grpc.aio.ServicerContext, parse: Callable[[bytes], Message] | None
                     ) -> tuple[Client | None, Any, BodyHold | None, tuple[Any, ...] | None, str]:
        """The caller admitted (from metadata and peer), then its one request message read, held in the body budget
        (the hold returned: the caller releases it when the call ends) and its tenant checked. With `parse` the
        message arrives as bytes (`READ_AHEAD_METHODS`) and is parsed here (`_parse`: the worker's answer returned
        too, for `read_ahead`)."""
        held: BodyHold | None = None
        read: tuple[Any, ...] | None = None
        try:
            if access is None:
                raise Forbidden(f"gRPC method {method} has no access class; refused", field="method")
            metadata = context.invocation_metadata() or ()
            headers = metadata_headers(metadata)
            if len(headers) != len(metadata):  # a repeated key: never a credential (as on HTTP)
                self.control.single_credentials(k for k, _ in metadata)
            peer = "?"
            address, cn = self.peer(context)
            if self.control.keys_by_address:  # rate limits, failed credentials
                forwarded = [v for k, v in metadata if k.lower() == "x-forwarded-for" and isinstance(v, str)]
                peer = self.proxies.client_address(address, forwarded)
            client = await self.control.admit_async(access, headers, peer=peer, cn=cn)
            request = await self._read(requests)
            if parse is None:
                held = self._hold(request.ByteSize(), client, address)
            else:  # the bytes as grpc received them: what is held is their length
                held = self._hold(len(request), client, address)
                request, read = await self._parse(request, parse, method,
                                                  client.key if client is not None else address_key(address))
            tenant = getattr(request, "tenant", "") or None
            self.control.check_agent(client, tenant, field="tenant")
            if tenant is not None and self.agent_of is not None:
                try:  # NOT_FOUND, as the REST tenant path `/{tenant}/…` answers 404 (was INVALID_ARGUMENT)
                    self.agent_of(tenant)
                except AgentNotFound as exc:
                    raise AgentNotFound(exc.message, field="tenant") from None
        except MMA2AError as exc:
            if held is not None:
                held.release()
            await abort(context, exc)
        except BaseException:  # bytes that are no request message: grpc answers it as its own deserializer's error
            if held is not None:
                held.release()
            raise
        return client, request, held, read, address

    async def _parse(self, data: bytes, parse: Callable[[bytes], Message], method: str, caller: str
                     ) -> tuple[Message, tuple[Any, ...] | None]:
        """A request that arrived as bytes: parsed on the loop up to `INLINE_GRPC_BYTES` (as grpc would have parsed it,
        its `DecodeError` raised as grpc's), past it in the JSON body worker (in `caller`'s queue). A SendMessage is
        read there into the pipeline's JSON too (`sdk_requests.read_send_proto_as_data`) and returned as the servicer
        needs it (its tenant alone; the handler takes the rest from `read_ahead`), with the worker's answer; another
        method's request comes back without its unknown fields (`sdk_requests.read_known_fields_as_data`: 4 MiB of
        small ones held the loop 10-26 ms, and a message may be `max_body_bytes`), parsed here."""
        assert self.bodies is not None
        if len(data) <= self.bodies.inline_bytes and len(data) <= INLINE_GRPC_BYTES:
            return parse(data), None
        if method not in READ_AHEAD_METHODS:
            known = await self.bodies.read_known(_INPUTS[method.rpartition("/")[2]], data, caller)
            raise_refusal(known)
            return parse(known[1]), None
        tenant, answer = await self.bodies.read_send_proto_answer(data, many=True, caller=caller)  # (its caller's queue)
        if not answer[0] and answer[1] == "DecodeError":
            raise_refusal(answer)
        return SendMessageRequest(tenant=tenant), answer

    def _hold(self, size: int, client: Client | None, address: str) -> BodyHold | None:
        """A request message over `BodyBudget.LARGE` bytes held in the HTTP doors' body budget
        (`max_body_bytes_in_flight`, in all and per sender) until its call ends; `BodiesBusy` (UNAVAILABLE) when it
        does not fit. gRPC has read it whole by then (`grpc.max_receive_message_length` caps one), so a refusal drops
        it at once: what many large calls hold together is bounded as on HTTP (round 5 left gRPC outside)."""
        if size <= BodyBudget.LARGE:
            return None
        held = self.control.bodies.hold(client.key if client is not None else address_key(address),
                                        self.control.max_body_bytes)
        why = held.grow(size)
        if why is not None:
            raise BodiesBusy(f"{why}; retry, or send large media by reference (POST /blobs)", field="request")
        return held

    async def _read(self, requests: AsyncIterator[Any]) -> Any:
        """The call's one request message, whole within `message_timeout_s` (then the client's half-close)."""
        try:
            async with asyncio.timeout(self.message_timeout_s):
                request = None
                count = 0
                async for message in requests:
                    count += 1
                    if count > 1:
                        raise InvalidRequest("a call of this method carries exactly one request message, got more",
                                             field="request")
                    request = message
        except TimeoutError:
            raise RequestTimeout(f"the request message did not arrive whole within {self.message_timeout_s:g} s "
                                  "(server.body_timeout_s); send large media by reference (POST /blobs)",
                                  field="request") from None
        if count == 0:
            raise InvalidRequest("the call carried no request message", field="request")
        return request
