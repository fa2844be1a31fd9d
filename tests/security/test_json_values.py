"""JSON bodies bounded by their values, not only their bytes (round 5): parsed, a value takes up to ~24 times its
bytes, so a 64 MiB body of empty objects (`{},` × 22 M, within `max_body_bytes`) parsed to 1.5 GB and held the
event loop for seconds (14 s under load) on JSON-RPC and REST alike."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from mma2a.errors import InvalidRequest
from mma2a.request_body import MAX_JSON_VALUES, check_json_values
from tests.security.conftest import TOKEN, bearer, secured, send_body

EXT = "https://mma2a.dev/ext/multimodal/v1"


def rpc_with(values: int) -> bytes:
    """A SendMessage whose message metadata holds a list of `values` empty objects (and a few values around it)."""
    return (b'{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER",'
            b'"parts":[{"text":"x"}],"metadata":{"a":[' + b",".join([b"{}"] * values) + b"]}}}}")


def count(body: bytes) -> int:
    return body.count(b",") + body.count(b"{") + body.count(b"[")


def refusal(n: int) -> str:
    return (f"request body has {n} commas and opening brackets (about one JSON value each), the most is "
            f"{MAX_JSON_VALUES}; send large data by reference (POST /blobs)")


def test_the_count_is_a_cap_reached_and_held() -> None:
    at = b"[" + b"," * (MAX_JSON_VALUES - 1) + b"]"  # exactly the cap: a bracket and commas
    check_json_values(at)
    with pytest.raises(InvalidRequest) as err:
        check_json_values(at + b",")
    assert err.value.message == refusal(MAX_JSON_VALUES + 1)
    assert err.value.field == "body"
    check_json_values(b'{"text": "' + b"x" * (4 * MAX_JSON_VALUES) + b'"}')  # bytes alone are not values


async def test_a_body_of_many_tiny_values_is_refused_before_it_is_parsed_on_json_rpc_and_rest() -> None:
    body = rpc_with(MAX_JSON_VALUES // 2)  # 3 MB, well within the body cap; `{}` in a list counts twice
    sent = body[body.index(b'{"message"'):-1]  # the same as a REST body
    async with secured({"max_body_bytes": 8 << 20}) as (gw, url, _):
        async with httpx.AsyncClient(timeout=60) as c:
            r = await c.post(url + "/", content=body, headers={**bearer(TOKEN), "Content-Type": "application/json"})

            async def unsized() -> AsyncIterator[bytes]:  # no length said: chunked
                yield body

            chunked = await c.post(url + "/", content=unsized(), headers=bearer(TOKEN))
            rest = await c.post(url + "/message:send", content=sent,
                                headers={**bearer(TOKEN), "Content-Type": "application/json"})
            ok = await c.post(url + "/", content=rpc_with(1000), headers=bearer(TOKEN))
            data = await c.post(url + "/", json=send_body(parts=[{"data": {"embedding": [0.125] * 200_000}}]),
                                headers=bearer(TOKEN))
    for answer in (r, chunked):
        err = answer.json()["error"]
        assert answer.status_code == 200 and err["code"] == -32600 and err["message"] == refusal(count(body))
    assert rest.status_code == 400 and rest.json()["error"]["message"] == refusal(count(sent))
    assert "result" in ok.json()  # a thousand values: parsed and served as before
    assert "error" not in data.json() or data.json()["error"]["code"] != -32600  # 200,000 numbers in a data part pass


async def test_on_grpc_free_form_fields_are_bounded_in_bytes_before_they_are_converted() -> None:
    """The gRPC door converts a request with `MessageToDict` (pure Python): 8 MiB of empty structs, 26 s."""
    import grpc
    from a2a.types import a2a_pb2
    from google.protobuf import struct_pb2

    from mma2a.sdk_requests import MAX_STRUCT_BYTES
    from tests.security.test_grpc_admission import _refused, _send, grpc_gateway

    def request(values: int) -> a2a_pb2.SendMessageRequest:
        empties = struct_pb2.Value()
        empties.list_value.ParseFromString(b"\n\x02*\x00" * values)  # `values` empty structs, 4 bytes each
        req = a2a_pb2.SendMessageRequest(message=a2a_pb2.Message(
            message_id="g-1", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="hello")]))
        req.message.parts[0].metadata.fields["a"].CopyFrom(empties)
        return req

    async with grpc_gateway({}) as (gw, url, port, executor):
        refused = await _refused("127.0.0.1", port, request(MAX_STRUCT_BYTES // 4))
        ok = await _send("127.0.0.1", port, request(1000))
    size = request(MAX_STRUCT_BYTES // 4).message.parts[0].metadata.ByteSize()
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.details() == (f"message.parts[0]: the request's metadata, data and configuration take {size} "
                                 f"bytes, the most is {MAX_STRUCT_BYTES}; send large data by reference (POST /blobs)")
    assert ok.HasField("task")
