"""The gRPC door passes the HTTP door's policy: access classes of the JSON-RPC twins, credentials, rate-limit
buckets per sender (anonymous callers by address), the request deadline; refusals in gRPC status codes.

Real a2a-sdk agents, a real gateway with its gRPC binding, the SDK's gRPC stubs on loopback (IPv4 and IPv6)."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest
from a2a.server.agent_execution import RequestContext
from a2a.server.events import EventQueue
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.rpc import error_details_pb2, status_pb2

from mma2a.errors import A2A_DOMAIN
from mma2a.gateway.access.clients import Authenticator, AuthConfig
from mma2a.gateway.access.authz import AccessClass, ErrorShape, RouteAccess, UnclassifiedRoute
from mma2a.gateway.bindings.grpc_gate import A2A_SERVICE, JSONRPC_TWINS, Admission, method_access
from mma2a.gateway.access.security import AccessControl
from tests.agents import RecordingExecutor, run_agent
from tests.gateway.conftest import agent, agents, gateway
from tests.security.conftest import API_KEY, CAROL, CLIENTS, TOKEN, post, send_body

SEND = f"/{A2A_SERVICE.full_name}/SendMessage"
CLIENT_RPC = RouteAccess(AccessClass.CLIENT, ErrorShape.JSONRPC)


@pytest.fixture(autouse=True)
def _bob_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)


def _message(text: str, message_id: str, tenant: str = "") -> a2a_pb2.SendMessageRequest:
    msg = a2a_pb2.Message(message_id=message_id, role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=text)])
    return a2a_pb2.SendMessageRequest(message=msg, tenant=tenant)


def _status(err: grpc.aio.AioRpcError) -> status_pb2.Status:
    """The `google.rpc.Status` a refusal carries in its trailing metadata."""
    raw = dict(err.trailing_metadata() or ())["grpc-status-details-bin"]
    return status_pb2.Status.FromString(raw)


def _retry_info(status: status_pb2.Status) -> error_details_pb2.RetryInfo | None:
    for d in status.details:
        if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            d.Unpack(info)
            return info
    return None


def _error_info(status: status_pb2.Status) -> error_details_pb2.ErrorInfo:
    info = error_details_pb2.ErrorInfo()
    next(d for d in status.details if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)).Unpack(info)
    return info


@contextlib.asynccontextmanager
async def grpc_gateway(extra: dict[str, Any]) -> AsyncIterator[tuple[Any, str, int, Any]]:
    """An agent `text` behind a gateway whose gRPC binding listens on both loopbacks (127.0.0.1 and ::1);
    yields (gateway, HTTP url, gRPC port, the agent's executor)."""
    card, executor = agent("text", ["text/plain"])
    async with agents({"text": (card, executor)}) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}], "grpc_listen": "localhost:0", **extra}
        async with gateway(cfg) as (gw, url):
            assert gw.grpc is not None
            yield gw, url, gw.grpc.port, executor


async def _send(host: str, port: int, request: a2a_pb2.SendMessageRequest,
                metadata: list[tuple[str, str]] | None = None) -> a2a_pb2.SendMessageResponse:
    async with grpc.aio.insecure_channel(f"{host}:{port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]
        return await stub.SendMessage(request, metadata=[("a2a-version", "1.0"), *(metadata or [])], timeout=60)


async def _refused(host: str, port: int, request: a2a_pb2.SendMessageRequest,
                   metadata: list[tuple[str, str]] | None = None) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _send(host, port, request, metadata)
    return info.value


# --- one table: every gRPC method has the access class of its JSON-RPC twin -----------------------------------


async def test_every_grpc_method_has_the_access_class_of_its_json_rpc_twin() -> None:
    methods = [m.name for m in A2A_SERVICE.methods]
    # a method added to A2AService (a new a2a-sdk) without a twin fails here, and stops the gateway's start
    assert sorted(JSONRPC_TWINS) == sorted(methods)
    assert set(JSONRPC_TWINS.values()) <= set(JsonRpcDispatcher.METHOD_TO_MODEL)
    async with gateway({"grpc_listen": "127.0.0.1:0"}) as (gw, _):
        table = method_access(gw.jsonrpc_access)
    assert sorted(table) == sorted(f"/{A2A_SERVICE.full_name}/{m}" for m in methods)
    assert {a.cls for a in table.values()} == {AccessClass.CLIENT}  # as the JSON-RPC route `POST /`

    jsonrpc = {m: CLIENT_RPC for m in JsonRpcDispatcher.METHOD_TO_MODEL}
    twins = {k: v for k, v in JSONRPC_TWINS.items() if k != "CancelTask"}
    with pytest.raises(UnclassifiedRoute) as missing:
        method_access(jsonrpc, twins=twins)
    assert missing.value.message == "gRPC methods without an access class (no JSON-RPC twin with one): CancelTask"
    with pytest.raises(UnclassifiedRoute, match=r": GetTask$"):  # a twin the JSON-RPC binding does not serve
        method_access({k: v for k, v in jsonrpc.items() if k != "GetTask"})
    with pytest.raises(UnclassifiedRoute, match=r": ListTasks$"):  # `signed` has no meaning without a URL
        method_access({**jsonrpc, "ListTasks": RouteAccess(AccessClass.SIGNED, ErrorShape.JSONRPC)})


async def test_a_method_served_without_an_access_class_is_refused_not_allowed() -> None:
    reached: list[bytes] = []

    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        reached.append(request)
        return request

    control = AccessControl(auth=Authenticator(AuthConfig()), limiter=None, max_body_bytes=1 << 20)
    admission = Admission(control, method_access({m: CLIENT_RPC for m in JsonRpcDispatcher.METHOD_TO_MODEL}),
                          message_timeout_s=30)
    server = grpc.aio.server(interceptors=[admission])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "mma2a.test.Extra", {"Echo": grpc.unary_unary_rpc_method_handler(echo)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as unclassified:
                await channel.unary_unary("/mma2a.test.Extra/Echo")(b"hi", timeout=30)
            with pytest.raises(grpc.aio.AioRpcError) as unknown:
                await channel.unary_unary("/mma2a.test.Extra/Nothing")(b"hi", timeout=30)
    finally:
        await server.stop(None)
    assert unclassified.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert unclassified.value.details() == "gRPC method /mma2a.test.Extra/Echo has no access class; refused"
    assert reached == []
    assert unknown.value.code() == grpc.StatusCode.UNIMPLEMENTED


# --- credentials: the HTTP door's decision and messages, in gRPC status codes ---------------------------------


async def test_wrong_or_missing_credentials_are_refused_with_the_status_naming_what_is_wrong() -> None:
    async with grpc_gateway({"auth": {"clients": CLIENTS}}) as (gw, url, port, executor):
        host = "127.0.0.1"
        missing = await _refused(host, port, _message("a", "c1"))
        wrong = await _refused(host, port, _message("b", "c2"), [("authorization", "Bearer tok-nobody")])
        basic = await _refused(host, port, _message("c", "c3"), [("authorization", f"Basic {TOKEN}")])
        bad_key = await _refused(host, port, _message("d", "c4"), [("x-api-key", "key-nobody")])
        not_hers = await _refused(host, port, _message("e", "c5", tenant="text"), [("authorization", f"Bearer {CAROL}")])
        alice = await _send(host, port, _message("f", "c6"), [("authorization", f"Bearer {TOKEN}")])
        bob = await _send(host, port, _message("g", "c7", tenant="text"), [("x-api-key", API_KEY)])
        # the HTTP door refuses the same caller for the same reason
        http_not_hers = await post(url, "/agents/text/", send_body("c8"), {"Authorization": f"Bearer {CAROL}",
                                                                           "A2A-Version": "1.0"})
    for err in (missing, wrong, basic, bad_key):
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    assert missing.details() == "missing credentials: send Authorization: Bearer <token> or an API key header"
    assert wrong.details() == "Authorization: invalid bearer token"
    assert basic.details() == "Authorization: only the Bearer scheme is accepted"
    assert bad_key.details() == "x-api-key: invalid API key"
    info = _error_info(_status(wrong))
    assert (info.reason, info.domain, dict(info.metadata)) == ("UNAUTHENTICATED", A2A_DOMAIN, {"field": "Authorization"})
    assert not_hers.code() == grpc.StatusCode.PERMISSION_DENIED
    assert not_hers.details() == "client carol may not call agent text"
    assert dict(_error_info(_status(not_hers)).metadata) == {"field": "tenant"}
    assert http_not_hers.status_code == 403
    assert http_not_hers.json()["error"]["message"] == not_hers.details()
    assert alice.task.status.state == a2a_pb2.TASK_STATE_COMPLETED and bob.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert [p.text for r in executor.received for p in r.message.parts] == ["f", "g"]  # no refused call reached it


async def test_the_decision_comes_before_the_request_message_is_read() -> None:
    """An anonymous caller that never sends its message is refused for its credentials, not cut by the deadline:
    nothing of a stranger's request is read."""
    async with grpc_gateway({"auth": {"clients": CLIENTS}}) as (gw, url, port, executor):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.stream_unary(SEND, request_serializer=a2a_pb2.SendMessageRequest.SerializeToString,
                                        response_deserializer=a2a_pb2.SendMessageResponse.FromString)

            async def never() -> AsyncIterator[a2a_pb2.SendMessageRequest]:
                await _forever()
                yield _message("never", "n1")

            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call(never(), timeout=60)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert executor.received == []


async def _forever() -> None:
    await asyncio.Event().wait()


# --- rate limits: one bucket per sender, anonymous callers by address, shared by both doors ---------------------


async def test_anonymous_grpc_callers_from_distinct_addresses_get_separate_buckets() -> None:
    limit = {"rate_limit": {"enabled": True, "rate": 0.001, "burst": 1}}  # one call, then a token in 1,000 s
    async with grpc_gateway(limit) as (gw, url, port, executor):
        v4_first = await _send("127.0.0.1", port, _message("v4", "r1"))
        v4_again = await _refused("127.0.0.1", port, _message("v4 again", "r2"))
        v6_first = await _send("[::1]", port, _message("v6", "r3"))  # another peer: its own bucket
        v6_again = await _refused("[::1]", port, _message("v6 again", "r4"))
        # one policy: the HTTP door from 127.0.0.1 draws on the same bucket
        http_v4 = await post(url, "/", send_body("r5"), {"A2A-Version": "1.0"})
    assert v4_first.task.status.state == v6_first.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    for err, key in ((v4_again, "ip:127.0.0.1"), (v6_again, "ip:::/64")):  # an IPv6 caller by its /64 (S15-13)
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert err.details().startswith(f"rate limit of {key} exceeded; retry in ")
        wait = math.ceil(float(err.details().rsplit(" ", 2)[1]))
        assert dict(err.trailing_metadata() or ())["retry-after"] == str(wait)
        retry = _retry_info(_status(err))
        assert retry is not None and retry.retry_delay.seconds == wait
    assert http_v4.status_code == 429
    assert http_v4.json()["error"]["message"].startswith("rate limit of ip:127.0.0.1 exceeded")
    assert [p.text for r in executor.received for p in r.message.parts] == ["v4", "v6"]


async def test_x_forwarded_for_is_read_from_trusted_proxies_only_as_on_http() -> None:
    """The loopback is a trusted proxy by default (`FORWARDED_ALLOW_IPS`, as uvicorn reads it for HTTP): callers
    it forwards for get their own buckets, on both doors alike."""
    limit = {"rate_limit": {"enabled": True, "rate": 0.001, "burst": 1}}
    fwd = [("x-forwarded-for", "198.51.100.4, 203.0.113.9")]
    async with grpc_gateway(limit) as (gw, url, port, executor):
        first = await _send("127.0.0.1", port, _message("forwarded", "x1"), fwd)
        direct = await _send("127.0.0.1", port, _message("direct", "x2"))  # the proxy's own bucket is untouched
        again = await _refused("127.0.0.1", port, _message("forwarded again", "x3"), fwd)
        http = await post(url, "/", send_body("x4"), {"A2A-Version": "1.0", "X-Forwarded-For": "203.0.113.9"})
    assert first.task.status.state == direct.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert again.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert again.details().startswith("rate limit of ip:203.0.113.9 exceeded")
    assert http.status_code == 429 and http.json()["error"]["message"].startswith("rate limit of ip:203.0.113.9 exceeded")


async def test_untrusted_peers_cannot_choose_their_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "10.9.9.9")  # the loopback is no proxy now
    limit = {"rate_limit": {"enabled": True, "rate": 0.001, "burst": 1}}
    async with grpc_gateway(limit) as (gw, url, port, executor):
        await _send("127.0.0.1", port, _message("one", "u1"), [("x-forwarded-for", "203.0.113.1")])
        spoofed = await _refused("127.0.0.1", port, _message("two", "u2"), [("x-forwarded-for", "203.0.113.2")])
    assert spoofed.details().startswith("rate limit of ip:127.0.0.1 exceeded")


# --- the request deadline ------------------------------------------------------------------------------------


async def test_a_request_message_that_does_not_arrive_in_time_is_cut_off() -> None:
    cfg = {"auth": {"clients": CLIENTS}, "server": {"body_timeout_s": 0.5}}
    md = (("authorization", f"Bearer {TOKEN}"), ("a2a-version", "1.0"))
    async with grpc_gateway(cfg) as (gw, url, port, executor):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.stream_unary(SEND, request_serializer=a2a_pb2.SendMessageRequest.SerializeToString,
                                        response_deserializer=a2a_pb2.SendMessageResponse.FromString)

            async def stalled() -> AsyncIterator[a2a_pb2.SendMessageRequest]:
                await _forever()
                yield _message("never", "d1")

            async def two() -> AsyncIterator[a2a_pb2.SendMessageRequest]:
                yield _message("one", "d2")
                yield _message("two", "d3")

            with pytest.raises(grpc.aio.AioRpcError) as late:
                await call(stalled(), metadata=md, timeout=60)
            with pytest.raises(grpc.aio.AioRpcError) as extra:
                await call(two(), metadata=md, timeout=60)
            ok = await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(  # type: ignore[no-untyped-call]
                _message("in time", "d4"), metadata=md, timeout=60)
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert late.value.details() == ("the request message did not arrive whole within 0.5 s (server.body_timeout_s); "
                                    "send large media by reference (POST /blobs)")
    assert extra.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert extra.value.details() == "a call of this method carries exactly one request message, got more"
    assert ok.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert [p.text for r in executor.received for p in r.message.parts] == ["in time"]


# --- draining: gRPC calls in flight are counted, new ones refused ------------------------------------------------


class HoldingExecutor(RecordingExecutor):
    """Answers once released; says when a message has arrived."""

    def __init__(self) -> None:
        super().__init__(reply="held")
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.arrived.set()
        await self.release.wait()
        await super().execute(context, event_queue)


async def test_a_draining_gateway_finishes_grpc_calls_in_flight_and_refuses_new_ones() -> None:
    card, _ = agent("slow", ["text/plain"])
    holder = HoldingExecutor()
    async with run_agent(card, holder) as a_url:
        cfg = {"agents": [{"name": "slow", "url": a_url.rstrip("/")}], "grpc_listen": "127.0.0.1:0"}
        async with gateway(cfg) as (gw, url):
            assert gw.grpc is not None
            port = gw.grpc.port
            first = asyncio.create_task(_send("127.0.0.1", port, _message("in flight", "h1")))
            await holder.arrived.wait()
            counted = gw.drain.inflight  # the gateway's drain waits for this gRPC call
            gw.drain.begin()
            refused = await _refused("127.0.0.1", port, _message("too late", "h2"))
            holder.release.set()
            answered = await first
            after = gw.drain.inflight
    assert counted == 1 and after == 0
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    assert refused.details() == "the gateway is shutting down and takes no new work; retry on another instance"
    assert dict(refused.trailing_metadata() or ())["retry-after"] == "1"
    assert answered.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert [p.text for r in holder.received for p in r.message.parts] == ["in flight"]


async def test_an_oversize_request_message_is_refused_on_grpc_as_on_every_binding() -> None:
    """`max_body_bytes` is the gRPC port's message cap (HTTP: 413): refused before the call runs, on unary and
    streaming methods, and the drain count is left even."""
    big = _message("x" * 5000, "o1")
    async with grpc_gateway({"max_body_bytes": 4096}) as (gw, url, port, executor):
        unary = await _refused("127.0.0.1", port, big)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as stream:
                async for _ in a2a_pb2_grpc.A2AServiceStub(channel).SendStreamingMessage(  # type: ignore[no-untyped-call]
                        big, metadata=[("a2a-version", "1.0")], timeout=60):
                    pass
        inflight = gw.drain.inflight
    for err in (unary, stream.value):
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "Received message larger than max (5015 vs. 4096)" in (err.details() or "")
    assert inflight == 0 and executor.received == []


# --- connection deadlines: the `server:` section on the gRPC port too ------------------------------------------


async def test_silent_and_idle_grpc_connections_are_closed_and_calls_in_progress_are_spared() -> None:
    card, _ = agent("slow", ["text/plain"])
    holder = HoldingExecutor()
    holder.release.set()
    async with run_agent(card, holder) as a_url:
        cfg = {"agents": [{"name": "slow", "url": a_url.rstrip("/")}], "grpc_listen": "127.0.0.1:0",
               "server": {"header_timeout_s": 0.5, "keep_alive_s": 0.5}}
        async with gateway(cfg) as (gw, url):
            assert gw.grpc is not None
            port = gw.grpc.port
            # a TCP connection that never speaks HTTP/2 is closed (grpc's default would hold it 120 s, then forever)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            eof = await asyncio.wait_for(reader.read(), 30)  # everything until the server closes
            writer.close()
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]
                md = [("a2a-version", "1.0")]
                first = await stub.SendMessage(_message("first", "k1"), metadata=md, timeout=60)
                ready = channel.get_state()
                await asyncio.wait_for(channel.wait_for_state_change(ready), 30)  # the server's GOAWAY once idle
                idle = channel.get_state()
                # a call that lasts longer than the idle deadline is not cut; the channel reconnects for it
                holder.release.clear()
                holder.arrived.clear()
                held = asyncio.ensure_future(stub.SendMessage(_message("held", "k2"), metadata=md, timeout=60))
                await holder.arrived.wait()
                await asyncio.sleep(1.5)  # three idle deadlines pass while the call is in progress
                holder.release.set()
                answered = await held
    assert isinstance(eof, bytes)  # read() returned: the server closed the connection
    assert ready == grpc.ChannelConnectivity.READY and idle == grpc.ChannelConnectivity.IDLE
    assert first.task.status.state == answered.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert [p.text for r in holder.received for p in r.message.parts] == ["first", "held"]


def test_the_grpc_server_takes_its_deadlines_from_the_server_section() -> None:
    from mma2a.gateway import parse_config
    from mma2a.gateway.bindings.grpc_service import server_options

    cfg = parse_config({"max_body_bytes": 4096, "server": {"header_timeout_s": 2, "keep_alive_s": 7.5,
                                                           "ws_ping_interval_s": 15, "ws_ping_timeout_s": 4,
                                                           "max_header_bytes": 16384}})
    assert dict(server_options(cfg)) == {
        "grpc.max_receive_message_length": 4096, "grpc.server_handshake_timeout_ms": 2000,
        "grpc.max_connection_idle_ms": 7500, "grpc.keepalive_time_ms": 15000, "grpc.keepalive_timeout_ms": 4000,
        "grpc.http2.max_pings_without_data": 0, "grpc.max_metadata_size": 16384}


async def test_the_gateways_deadline_for_an_agent_call_is_the_same_on_both_doors() -> None:
    """`timeout_s` bounds the agent call of a gRPC request as of a JSON-RPC one: the same FAILED task naming it."""
    card, _ = agent("stuck", ["text/plain"])
    holder = HoldingExecutor()  # never released while the calls run
    async with run_agent(card, holder) as a_url:
        cfg = {"agents": [{"name": "stuck", "url": a_url.rstrip("/")}], "grpc_listen": "127.0.0.1:0",
               "timeout_s": 0.5, "retries": 0}
        async with gateway(cfg) as (gw, url):
            assert gw.grpc is not None
            over_grpc = await _send("127.0.0.1", gw.grpc.port, _message("via grpc", "t1"))
            over_http = (await post(url, "/", send_body("t2"), {"A2A-Version": "1.0"})).json()["result"]["task"]
        holder.release.set()
    assert over_grpc.task.status.state == a2a_pb2.TASK_STATE_FAILED
    assert [p.text for p in over_grpc.task.status.message.parts] == ["agent stuck timed out after 0.5 s"]
    assert over_http["status"]["state"] == "TASK_STATE_FAILED"
    assert [p["text"] for p in over_http["status"]["message"]["parts"]] == ["agent stuck timed out after 0.5 s"]
