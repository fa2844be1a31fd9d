"""gRPC request messages inside the body budget (round 5 left them outside): a message over 1 MiB holds its bytes of
`max_body_bytes_in_flight` (in all and per sender) until its call ends, as an HTTP body does, and one that does not
fit is refused UNAVAILABLE with the HTTP door's reason. Deterministic: the budget is held by the test, not raced."""

from __future__ import annotations

import grpc
from a2a.types import a2a_pb2

from tests.security.test_grpc_admission import _refused, _send, grpc_gateway


def request(text_bytes: int) -> a2a_pb2.SendMessageRequest:
    return a2a_pb2.SendMessageRequest(message=a2a_pb2.Message(
        message_id=f"big-{text_bytes}", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="x" * text_bytes)]))


async def test_a_large_grpc_message_holds_its_bytes_of_the_body_budget_and_is_refused_past_it() -> None:
    big = request(2_000_000)
    size = big.ByteSize()
    async with grpc_gateway({"max_body_bytes": 4 << 20}) as (gw, url, port, executor):
        bodies = gw.access.bodies
        room = bodies.total - 2_000_000  # what the test holds: less than the message's 2 MiB reservation is left
        assert bodies.take("someone", bodies.per_sender) is None
        assert bodies.take("someone else", room - bodies.per_sender) is None
        refused = await _refused("127.0.0.1", port, big)
        assert bodies.held == room  # the refused message holds nothing
        small = await _send("127.0.0.1", port, request(1000))  # under 1 MiB: never counted
        bodies.give("someone else", room - bodies.per_sender)
        bodies.give("someone", bodies.per_sender)
        served = await _send("127.0.0.1", port, big)
        assert bodies.held == 0  # given back when the call ended
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    assert refused.details() == (f"the gateway is reading {room} bytes of request bodies already "
                                 "(max_body_bytes_in_flight); retry, or send large media by reference (POST /blobs)")
    assert small.HasField("task") and served.HasField("task")
    assert size > 2_000_000
