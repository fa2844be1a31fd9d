"""Large gRPC SendMessage requests are read off the event loop (security round 4, finding 10 on gRPC): a 20 MB
PNG sent over gRPC was parsed by grpc (`FromString`), sized, and turned into the pipeline's JSON (`MessageToDict`:
base64 of every raw part, in Python) on the loop, holding another client's text up to 245 ms at load 2. The door
now takes SendMessage and SendStreamingMessage requests as bytes; past the body parser's inline size they are parsed
and converted in the JSON body worker, as a REST body is; what the pipeline gets, and every refusal, is the same as
grpc's and the inline conversion's. Such messages also hold their bytes of the body budget until their call ends."""

from __future__ import annotations

import io
import os
from typing import Any

import grpc
import grpc.aio
import httpx
import pytest
from a2a.types import SendMessageRequest, a2a_pb2, a2a_pb2_grpc
from a2a.utils import errors as sdk_errors
from google.protobuf.message import DecodeError
from PIL import Image

from mma2a.errors import InvalidParams
from mma2a.gateway.bindings.body_parser import INLINE_PARSE_BYTES
from mma2a.sdk_requests import MAX_STRUCT_BYTES, raise_refusal, read_send_proto_as_data, send_request_json
from tests.gateway.conftest import agent, agents, gateway
from tests.security.test_grpc_admission import _refused, _send, grpc_gateway

VERSION = (("a2a-version", "1.0"),)


def big_png() -> bytes:
    """A real PNG past the inline size (noise does not compress)."""
    out = io.BytesIO()
    Image.frombytes("RGB", (720, 720), os.urandom(720 * 720 * 3)).save(out, format="PNG")
    data = out.getvalue()
    assert len(data) > INLINE_PARSE_BYTES
    return data


def request(mid: str, **over: Any) -> SendMessageRequest:
    parts = over.pop("parts", [a2a_pb2.Part(text="look"), a2a_pb2.Part(raw=b"\x89PNG" + b"x" * 5000, media_type="image/png")])
    return SendMessageRequest(message=a2a_pb2.Message(message_id=mid, role=a2a_pb2.ROLE_USER, parts=parts), **over)


def inline(params: SendMessageRequest) -> tuple[Any, ...]:
    """What the handler made of the request on the loop (before): the JSON, or the refusal's kind and text."""
    try:
        return (True, *send_request_json(params))
    except sdk_errors.A2AError as exc:
        return False, type(exc).__name__, exc.message
    except InvalidParams as exc:
        return False, "InvalidParams", exc.message


def in_worker(params: SendMessageRequest) -> tuple[Any, ...]:
    tenant, answer = read_send_proto_as_data(params.SerializeToString())
    assert tenant == params.tenant
    if answer[0]:
        return answer
    return (False, answer[2], answer[3]) if answer[1] == "A2AError" else (False, answer[1], answer[2])


@pytest.mark.parametrize("params", [
    request("m-ok"),
    request("m-conf", configuration=a2a_pb2.SendMessageConfiguration(accepted_output_modes=["text/plain"])),
    request(""),  # a required field missing
    request("m-noparts", parts=[]),
    request("m-struct", metadata={"big": "x" * (MAX_STRUCT_BYTES + 10)}),
    request("m-tenant", tenant="vision"),
], ids=["ok", "configuration", "no message id", "no parts", "free-form too large", "tenant"])
def test_the_worker_reads_a_serialized_request_as_the_handler_reads_it(params: SendMessageRequest) -> None:
    assert in_worker(params) == inline(params)


@pytest.mark.parametrize("data", [b"\xff\xff\xff", request("m-cut").SerializeToString()[:-1]], ids=["garbage", "cut"])
def test_bytes_that_are_no_request_are_refused_as_grpcs_own_parse_refuses_them(data: bytes) -> None:
    with pytest.raises(DecodeError) as grpcs:
        SendMessageRequest.FromString(data)
    tenant, answer = read_send_proto_as_data(data)
    assert (tenant, answer) == ("", (False, "DecodeError", str(grpcs.value)))
    with pytest.raises(DecodeError) as raised:
        raise_refusal(answer)
    assert str(raised.value) == str(grpcs.value)


async def test_a_large_grpc_send_is_converted_in_the_worker_and_reaches_the_agent_intact() -> None:
    png = big_png()
    card, executor = agent("vision", ["image/png", "text/plain"])
    async with agents({"vision": (card, executor)}) as urls:
        async with gateway({"agents": [{"name": "vision", "url": urls["vision"]}], "grpc_listen": "127.0.0.1:0",
                            "features": False}) as (gw, _):
            assert gw.grpc is not None
            async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.grpc.port}", options=[
                    ("grpc.max_send_message_length", 64 << 20)]) as channel:
                stub = a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]
                sent = await stub.SendMessage(request("m-big", parts=[
                    a2a_pb2.Part(text="what is this"), a2a_pb2.Part(raw=png, media_type="image/png")]),
                    metadata=VERSION, timeout=60)
                assert sent.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
                assert gw._body_parser.worker_pid is not None  # converted in the worker (started by this request)
                got = executor.received[0].message.parts  # the image offloaded: the agent fetches it by reference
                assert got[0].text == "what is this" and got[1].media_type == "image/png"
                assert (await httpx.AsyncClient().get(got[1].url)).content == png
                with pytest.raises(grpc.aio.AioRpcError) as refused:  # a large request refused as a small one is
                    await stub.SendMessage(request("", parts=[a2a_pb2.Part(raw=png, media_type="image/png")]),
                                           metadata=VERSION, timeout=60)
                with pytest.raises(grpc.aio.AioRpcError) as small:
                    await stub.SendMessage(request(""), metadata=VERSION, timeout=60)
    assert refused.value.code() == small.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details() == small.value.details()


def _padded(mid: str, tenant: str = "", text_bytes: int = 2_000_000) -> SendMessageRequest:
    return request(mid, tenant=tenant, parts=[a2a_pb2.Part(text="x" * text_bytes)])


@pytest.mark.parametrize("method", ["SendMessage", "SendStreamingMessage"])
async def test_large_requests_read_in_the_worker_get_the_answers_small_ones_get(method: str) -> None:
    """Each case sent small (parsed on the loop) and padded past 1 MiB (parsed in the worker): the same status, details
    and ErrorInfo; bytes that are no request get grpc's own UNKNOWN `Unexpected <class …DecodeError'>: …`."""
    cases = {"served": lambda pad: _padded("m-ok", text_bytes=pad),
             "no message id": lambda pad: _padded("", text_bytes=pad),
             "unknown tenant": lambda pad: _padded("m-t", tenant="nope", text_bytes=pad),
             "tenant not hers": lambda pad: _padded("m-h", tenant="other", text_bytes=pad)}
    async with grpc_gateway({"auth": {"clients": [{"name": "alice", "token": "tok-a", "agents": ["text", "nope"]}]},
                             "max_body_bytes": 4 << 20}) as (gw, _, port, _executor):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[
                ("grpc.max_send_message_length", 8 << 20)]) as channel:
            token = (("authorization", "Bearer tok-a"),)

            async def answer(data: bytes) -> tuple[Any, ...]:
                path = f"/lf.a2a.v1.A2AService/{method}"
                try:
                    if method == "SendMessage":
                        reply = await channel.unary_unary(path)(data, metadata=VERSION + token, timeout=60)
                        return "ok", a2a_pb2.SendMessageResponse.FromString(reply).WhichOneof("payload")
                    events = [a2a_pb2.StreamResponse.FromString(e) async for e in channel.unary_stream(path)(
                        data, metadata=VERSION + token, timeout=60)]
                    return "ok", events[-1].WhichOneof("payload")
                except grpc.aio.AioRpcError as exc:
                    return exc.code(), exc.details(), dict(exc.trailing_metadata() or ()).get("grpc-status-details-bin")

            got = {}
            for name, make in cases.items():
                small, large = make(1000).SerializeToString(), make(2_000_000).SerializeToString()
                assert len(small) <= INLINE_PARSE_BYTES < len(large)
                got[name] = (await answer(small), await answer(large))
            got["not a request"] = (await answer(b"\xff\xff\xff"), await answer(b"\x0a\xff\xff\xff\xff\x0f" + bytes(2 << 20)))
            assert gw._body_parser.worker_pid is not None  # the large ones were read there
            left = gw.access.bodies.held
    for name, (small, large) in got.items():
        assert small == large, name
    assert got["served"][0] == ("ok", "task")
    assert got["no message id"][0][:2] == (grpc.StatusCode.INVALID_ARGUMENT, "Validation failed")
    assert got["unknown tenant"][0][:2] == (grpc.StatusCode.NOT_FOUND, "agent 'nope' is not registered")
    assert got["tenant not hers"][0][:2] == (grpc.StatusCode.PERMISSION_DENIED, "client alice may not call agent other")
    assert got["not a request"][0][:2] == (grpc.StatusCode.UNKNOWN, "Unexpected <class 'google.protobuf.message.DecodeError'>: "
                                           "Error parsing message with type 'lf.a2a.v1.SendMessageRequest': Wire format was corrupt")
    assert left == 0  # every large message's hold given back


async def test_a_large_request_is_parsed_by_the_worker_not_by_grpc_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the worker unable to run (it exits at once: a worker killed, out of memory), a large SendMessage, even
    one that is no request at all, is UNAVAILABLE as a large REST body is (before: grpc parsed it on the loop, and
    the garbage got its DecodeError), while a small request is still served."""
    import subprocess
    import sys

    from mma2a.gateway.bindings.body_parser import WorkerLane

    monkeypatch.setattr(WorkerLane, "_start", staticmethod(lambda: subprocess.Popen(
        [sys.executable, "-c", "pass"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)))
    async with grpc_gateway({"max_body_bytes": 4 << 20}) as (gw, _, port, _executor):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[
                ("grpc.max_send_message_length", 8 << 20)]) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as garbage:
                await channel.unary_unary("/lf.a2a.v1.A2AService/SendMessage")(
                    b"\x0a\xff\xff\xff\xff\x0f" + bytes(2 << 20), metadata=VERSION, timeout=60)
        refused = await _refused("127.0.0.1", port, _padded("m-large"))
        served = await _send("127.0.0.1", port, _padded("m-small", text_bytes=1000))
        left = gw.access.bodies.held
    for exc in (garbage.value, refused):
        assert exc.code() == grpc.StatusCode.UNAVAILABLE
        assert exc.details() == ("the gateway could not parse the request body (its parser process stopped); retry, "
                                 "or send large media by reference (POST /blobs)")
    assert served.HasField("task") and left == 0


async def test_a_large_grpc_message_holds_its_bytes_of_the_body_budget_and_is_refused_past_it() -> None:
    """gRPC request messages inside the body budget (round 5 left them outside): a message over 1 MiB holds its bytes
    of `max_body_bytes_in_flight` (in all and per sender) until its call ends, as an HTTP body does, and one that does
    not fit is refused UNAVAILABLE with the HTTP door's reason. Deterministic: the budget is held by the test."""
    big = _padded("m-big")
    size = big.ByteSize()
    async with grpc_gateway({"max_body_bytes": 4 << 20}) as (gw, url, port, executor):
        bodies = gw.access.bodies
        room = bodies.total - 2_000_000  # what the test holds: less than the message's 2 MiB reservation is left
        assert bodies.take("someone", bodies.per_sender) is None
        assert bodies.take("someone else", room - bodies.per_sender) is None
        refused = await _refused("127.0.0.1", port, big)
        assert bodies.held == room  # the refused message holds nothing
        small = await _send("127.0.0.1", port, _padded("m-small", text_bytes=1000))  # under 1 MiB: never counted
        bodies.give("someone else", room - bodies.per_sender)
        bodies.give("someone", bodies.per_sender)
        served = await _send("127.0.0.1", port, big)
        assert bodies.held == 0  # given back when the call ended
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    assert refused.details() == (f"the gateway is reading {room} bytes of request bodies already "
                                 "(max_body_bytes_in_flight); retry, or send large media by reference (POST /blobs)")
    assert small.HasField("task") and served.HasField("task")
    assert size > 2_000_000


async def test_a_small_request_of_many_free_form_values_is_converted_in_the_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Security probe S16-2 on gRPC: a request within the inline size was converted on the loop (`MessageToDict`, pure
    Python, ~3.4 us a value): 1 MiB of empty structs, within `MAX_STRUCT_BYTES`, held every client 0.9 s. Free-form
    fields of more than `INLINE_SDK_STRUCT_BYTES` are converted in the worker; the request is served as before."""
    from google.protobuf import struct_pb2

    from mma2a.gateway.bindings import sdk_binding

    on_loop: list[int] = []
    real = sdk_binding._request_json

    def recording(params: SendMessageRequest) -> Any:
        on_loop.append(params.ByteSize())
        return real(params)

    monkeypatch.setattr(sdk_binding, "_request_json", recording)
    many = request("m-many", parts=[a2a_pb2.Part(text="hi")])
    many.message.metadata.update({"a": [{} for _ in range(20_000)]})
    assert isinstance(many.message.metadata["a"], struct_pb2.ListValue)
    async with grpc_gateway({}) as (gw, _, port, _executor):
        served = await _send("127.0.0.1", port, many)
        few = await _send("127.0.0.1", port, request("m-few", parts=[a2a_pb2.Part(text="hi")]))
        worker = gw._body_parser.worker_pid
    assert served.HasField("task") and few.HasField("task") and worker is not None
    assert len(on_loop) == 1 and on_loop[0] < 1000, on_loop  # m-few's alone (before: m-many's 80 KB too)


async def test_a_request_of_many_parts_or_repeated_values_is_parsed_and_converted_in_the_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 17 (lanes) LN2: a gRPC SendMessage within the inline size (1 MiB) was parsed (`FromString`) and converted
    (`struct_fields` walked its parts in Python, then `MessageToDict`) on the loop, and its repeated fields counted for
    nothing: 1 MiB of empty parts (2 bytes each, 524,288) held every client for seconds (at load 21: parse 195 ms,
    `struct_fields` 3.9 s, `MessageToDict` 8.1 s), 1 MiB of empty extensions 0.6 s. Now a request past
    `INLINE_GRPC_BYTES` is parsed in the worker, and one of more than `INLINE_SDK_REPEATED` repeated elements is
    converted there; each is answered as before (the pipeline's part limit, or served)."""
    from mma2a.gateway.bindings import sdk_binding
    from mma2a.gateway.bindings.body_parser import INLINE_GRPC_BYTES, JSONBodyParser

    on_loop: list[int] = []
    real = sdk_binding._request_json

    def recording(params: SendMessageRequest) -> Any:
        on_loop.append(params.ByteSize())
        return real(params)

    to_worker: list[int] = []
    read = JSONBodyParser.read_send_proto_answer

    async def sent(self: JSONBodyParser, body: bytes, **kw: Any) -> Any:
        to_worker.append(len(body))
        return await read(self, body, **kw)

    monkeypatch.setattr(sdk_binding, "_request_json", recording)
    monkeypatch.setattr(JSONBodyParser, "read_send_proto_answer", sent)
    parts = request("m-parts", parts=[a2a_pb2.Part() for _ in range(20_000)])  # 40 KB: parsed on the loop
    huge = request("m-huge", parts=[a2a_pb2.Part() for _ in range(300_000)])  # 600 KB: parsed in the worker
    extensions = request("m-ext", parts=[a2a_pb2.Part(text="hi")])
    extensions.message.extensions.extend([""] * 20_000)
    assert parts.ByteSize() < INLINE_GRPC_BYTES < huge.ByteSize() < INLINE_PARSE_BYTES
    async with grpc_gateway({}) as (gw, _, port, _executor):
        refused = [await _refused("127.0.0.1", port, r) for r in (parts, huge)]
        served = await _send("127.0.0.1", port, extensions)
        few = await _send("127.0.0.1", port, request("m-few", parts=[a2a_pb2.Part(text="hi")]))
    for exc, n in zip(refused, (20_000, 300_000)):
        assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT and f"{n} parts" in exc.details(), exc.details()
    assert served.HasField("task") and few.HasField("task")
    assert len(on_loop) == 1 and on_loop[0] < 1000, on_loop  # m-few's alone (before: all four)
    assert sorted(to_worker) == sorted([parts.ByteSize(), huge.ByteSize(), extensions.ByteSize()])


async def test_a_large_request_of_another_method_is_parsed_in_the_worker_without_its_unknown_fields(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 17 (lanes) LN4: grpc parsed every other method's request on the loop, up to `max_body_bytes` (64 MiB):
    4 MiB of small unknown fields in a GetTask took `FromString` 10-26 ms. Past `INLINE_GRPC_BYTES` the door takes it
    as bytes to the worker, which parses it and sends it back without its unknown fields (nothing reads them): the
    same answer as the plain request's, and bytes that are no request get grpc's own error, whichever side."""
    from a2a.types import GetTaskRequest, Task

    from mma2a import json_worker
    from mma2a.gateway.bindings.body_parser import INLINE_GRPC_BYTES, WorkerLane

    jobs: list[tuple[int, int]] = []
    exchange = WorkerLane._exchange

    def counted(self: WorkerLane, data: bytes, job: int, *prefix: bytes) -> object:
        jobs.append((job, len(data)))
        return exchange(self, data, job, *prefix)

    monkeypatch.setattr(WorkerLane, "_exchange", counted)
    unknown = b"\x98\x06\x00" * ((2 << 20) // 3)  # field 99, varint 0: 2 MiB of small unknown fields
    async with grpc_gateway({}) as (gw, _, port, _executor):
        task = (await _send("127.0.0.1", port, request("m-1", parts=[a2a_pb2.Part(text="hi")]))).task
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            get = channel.unary_unary("/lf.a2a.v1.A2AService/GetTask", response_deserializer=Task.FromString)
            plain = await get(GetTaskRequest(id=task.id).SerializeToString(), metadata=VERSION, timeout=60)
            before = list(jobs)
            padded = await get(GetTaskRequest(id=task.id).SerializeToString() + unknown, metadata=VERSION, timeout=60)
            refused = []
            for garbage in (b"\x0a\xff\xff\xff\xff\x0f", b"\x0a\xff\xff\xff\xff\x0f" + bytes(2 << 20)):
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await get(garbage, metadata=VERSION, timeout=60)
                refused.append((info.value.code(), info.value.details()))
    assert before == [] and padded == plain and plain.id == task.id
    assert [j for j, n in jobs] == [json_worker.KNOWN] * 2 and all(n > INLINE_GRPC_BYTES for _, n in jobs)
    assert refused[0] == refused[1] and refused[0][0] == grpc.StatusCode.UNKNOWN, refused
    assert "DecodeError" in refused[0][1]
