"""Large gRPC SendMessage requests are converted off the event loop (security round 4, finding 10 on gRPC): a 20 MB
PNG sent over gRPC was turned into the pipeline's JSON (`MessageToDict`: base64 of every raw part, in Python) on the
loop, holding another client's text up to 245 ms at load 2. Past the body parser's inline size the request is
serialized again and converted in the JSON body worker, as a REST body is; what the pipeline gets, and every
refusal, is the same as the inline conversion's."""

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
from PIL import Image

from mma2a.errors import InvalidParams
from mma2a.gateway.bindings.body_parser import INLINE_PARSE_BYTES
from mma2a.sdk_requests import MAX_STRUCT_BYTES, read_send_proto_as_data, send_request_json
from tests.gateway.conftest import agent, agents, gateway

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
    answer = read_send_proto_as_data(params.SerializeToString())
    if answer[0]:
        return answer
    return (False, answer[2], answer[3]) if answer[1] == "A2AError" else (False, answer[1], answer[2])


@pytest.mark.parametrize("params", [
    request("m-ok"),
    request("m-conf", configuration=a2a_pb2.SendMessageConfiguration(accepted_output_modes=["text/plain"])),
    request(""),  # a required field missing
    request("m-noparts", parts=[]),
    request("m-struct", metadata={"big": "x" * (MAX_STRUCT_BYTES + 10)}),
], ids=["ok", "configuration", "no message id", "no parts", "free-form too large"])
def test_the_worker_reads_a_serialized_request_as_the_handler_reads_it(params: SendMessageRequest) -> None:
    assert in_worker(params) == inline(params)


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
