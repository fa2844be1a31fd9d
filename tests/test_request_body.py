"""Bodies read within a limit and replayed (mma2a.request_body), on ASGI `receive` callables."""

from __future__ import annotations

import pytest

from mma2a.errors import PayloadTooLarge
from mma2a.request_body import TAIL_BYTES, header_map, read_body, replaying


def feeding(*messages: dict):
    """A `receive` that yields `messages`, then disconnects; records how many it gave."""
    given = []

    async def receive() -> dict:
        msg = messages[len(given)] if len(given) < len(messages) else {"type": "http.disconnect"}
        given.append(msg)
        return msg

    return receive, given


def chunk(data: bytes, more: bool) -> dict:
    return {"type": "http.request", "body": data, "more_body": more}


async def test_a_body_in_pieces_is_read_whole_and_replayed_once():
    receive, _ = feeding(chunk(b'{"a":', True), chunk(b"1}", False))
    body = await read_body(receive, 10)
    assert body == b'{"a":1}'
    replay = replaying(body, receive)
    assert await replay() == {"type": "http.request", "body": b'{"a":1}', "more_body": False}
    assert (await replay())["type"] == "http.disconnect"


async def test_a_client_that_leaves_mid_body_gives_none():
    receive, _ = feeding(chunk(b"abc", True))
    assert await read_body(receive, 10) is None


async def test_past_the_limit_a_bounded_tail_is_drained_then_payload_too_large():
    piece = b"x" * (256 * 1024)
    many = [chunk(piece, True) for _ in range(40)]  # 10 MiB offered
    receive, given = feeding(*many)
    with pytest.raises(PayloadTooLarge) as err:
        await read_body(receive, 1000)
    assert err.value.message == "request body exceeds 1000 bytes" and err.value.http_status == 413
    drained = sum(len(m.get("body", b"")) for m in given[1:])
    assert TAIL_BYTES <= drained < TAIL_BYTES + len(piece)  # read on for the 413 to be seen, but not to the end
    assert len(given) < len(many)


def test_the_header_map_is_made_once_per_header_list_and_a_repeated_name_gives_its_first_value():
    scope = {"type": "http", "headers": [(b"a2a-version", b"1.0"), (b"authorization", b"Bearer one"),
                                         (b"authorization", b"Bearer two")]}
    headers = header_map(scope)
    assert headers == {b"a2a-version": b"1.0", b"authorization": b"Bearer one"}
    assert header_map(scope) is headers  # every layer reads the same map
    scope["headers"] = [(b"content-length", b"2")]  # a layer replaced the list (a decoded body)
    assert header_map(scope) == {b"content-length": b"2"}
    assert header_map({"type": "http", "headers": ((b"x", b"1"),)}) == {b"x": b"1"}
    assert header_map({"type": "http"}) == {}
