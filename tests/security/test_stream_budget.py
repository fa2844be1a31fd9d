"""Live streams bounded together, not only one by one (issue 18, round 3): 64 streams of 16 MB each took the
gateway from 161 to 1,239 MB (1,024 streams allowed: 16 GiB), and one client could hold every stream slot."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from mma2a.errors import PayloadError
from mma2a.payload import StreamHub
from tests.security.conftest import CAROL, TOKEN, bearer, secured


def test_every_ring_together_stays_in_the_hub_budget_and_the_newest_chunks_stay():
    hub = StreamHub(chunk_size=1024, ring_bytes=64 * 1024, max_bytes=256 * 1024)
    ids = [hub.create().id for _ in range(32)]
    for round_ in range(64):
        for sid in ids:
            hub.publish(sid, bytes([round_]) * 1024)
            assert hub.total_bytes <= hub.max_bytes
    assert hub.total_bytes == sum(hub.info(s).size - hub.info(s).first_offset for s in ids)
    for sid in ids:  # each stream still holds its newest chunk, and what it holds is its tail
        info = hub.info(sid)
        assert info.size == 64 * 1024 and info.first_offset <= info.size - 1024


def test_streams_nobody_produces_into_free_their_slots_after_the_idle_ttl():
    now = [0.0]
    hub = StreamHub(max_streams=4, idle_ttl=300, clock=lambda: now[0])
    squatted = [hub.create().id for _ in range(4)]
    with pytest.raises(PayloadError) as full:
        hub.create()
    now[0] = 301.0
    fresh = hub.create()
    assert full.value.message == "too many open streams (limit 4)"
    assert fresh.open and all(sid not in hub for sid in squatted)


async def test_one_client_cannot_take_every_stream_slot():
    async with secured() as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        limit = gw.streams.max_streams_per_owner
        made = await asyncio.gather(*(c.post(url + "/streams", json={}, headers=bearer(TOKEN)) for _ in range(limit)))
        over = await c.post(url + "/streams", json={}, headers=bearer(TOKEN))
        other = await c.post(url + "/streams", json={}, headers=bearer(CAROL))
    assert all(r.status_code == 201 for r in made)
    assert over.status_code == 400
    assert over.json()["error"]["message"] == (f"too many open streams of client alice (limit {limit}); close one first")
    assert other.status_code == 201  # another client still gets a stream
