"""Request bodies sent with `Content-Encoding` (round 5): a 64 KB gzip body that decodes to 64 MiB was decoded in
one go on the event loop, which every other request (`/healthz` too) waited for: 0.59 s a body, and a client may
send one body after another. Decoding is bounded in size (the body cap) and now lets the loop run every MiB."""

from __future__ import annotations

import asyncio
import gzip

import httpx
import pytest

from mma2a.compression import SLICE, codings, decode_yielding, encode
from tests.security.conftest import TOKEN, bearer, secured, send_body

BOMB = 64 * SLICE  # decoded size; coded it is about 64 KB (gzip) or 2 KB (zstd)


@pytest.mark.parametrize("coding", codings())
async def test_the_loop_turns_once_per_slice_while_a_bomb_decodes(coding: str) -> None:
    packed = encode(b"\0" * BOMB, coding)
    turns = 0
    done = False

    async def other_work() -> None:  # another request's coroutine: one step each time the loop gets to it
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(other_work())
    await asyncio.sleep(0)
    out = await decode_yielding(packed, coding, BOMB)
    done = True
    await other
    assert len(packed) < BOMB // 500 and len(out) == BOMB
    assert turns >= BOMB // SLICE - 1  # before: 1 (the decode held the loop from start to end)


async def test_a_bomb_past_the_body_cap_gets_413_naming_the_coding() -> None:
    async with secured({"max_body_bytes": 8 * SLICE}) as (gw, url, _):
        body = gzip.compress(b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"pad": "'
                             + b" " * BOMB + b'"}}')
        async with httpx.AsyncClient() as c:
            r = await c.post(url + "/", content=body, headers={**bearer(TOKEN), "Content-Encoding": "gzip",
                                                                "Content-Type": "application/json"})
            ok = await c.post(url + "/", json=send_body(), headers=bearer(TOKEN))
        err = r.json()["error"]
        assert r.status_code == 413 and err["message"] == f"request body decodes to more than {8 * SLICE} bytes"
        assert ok.status_code == 200 and "result" in ok.json()
