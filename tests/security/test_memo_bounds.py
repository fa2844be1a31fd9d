"""What a gateway remembers of decisions is bounded by parts and bytes, not by entries alone (docs/security.md S17-3):
one client's messages of 64 parts, each part of a media type of its own, made every remembered decision, route
summary, history shape and task route ~50-100 times a one-part one."""

from __future__ import annotations

import asyncio

import httpx

from mma2a.gateway.stages import admission
from mma2a.gateway.state.tasks import ROUTES_BYTES
from tests.security.conftest import API_KEY, TOKEN, bearer, secured, send_body

MESSAGES = 300


async def test_a_clients_many_part_messages_are_remembered_within_parts_and_bytes(tmp_path, monkeypatch):
    """Bob's 300 messages of 64 text parts of media types of his own (`text/plain; n=…`, 200 characters). Before: the
    admission's memo kept 4,096 decisions, the route summaries 1,024, the history's shape memo 1,024 shapes, the task
    map 4,096 interned routes, whatever their parts: a live gateway held ~450 MB more (RSS 236 -> 650-690 MB, flat
    after ~6,000 such messages), and a task record counted an eighth of its route (~22 KB here), so bob's records held
    8 times his task budget. Now each is held to parts or bytes (16,384 parts, 4,096 parts, 4 MiB, 4 MiB) and a
    record that brings a new route counts it whole; alice is served throughout."""
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)
    async with secured({"data_dir": str(tmp_path / "data")}, monkeypatch=monkeypatch, names=("text",)) as (gw, url, _):
        async with httpx.AsyncClient(timeout=60) as c:
            async def bobs(k: int) -> None:
                for j in range(k * MESSAGES // 4, (k + 1) * MESSAGES // 4):
                    parts = [{"text": "x", "mediaType": f"text/plain; n={'b' * 180}{j}.{i}"} for i in range(64)]
                    r = await c.post(url + "/", json=send_body(f"bob-{j}", parts),
                                     headers={"X-API-Key": API_KEY, "A2A-Version": "1.0"})
                    assert r.status_code == 200 and "result" in r.json(), r.text[:300]

            await asyncio.gather(*(bobs(k) for k in range(4)))
            r = await c.post(url + "/", json=send_body("alice-after"), headers=bearer(TOKEN))
            assert r.status_code == 200 and "result" in r.json(), r.text
        pipeline = gw.pipeline
        memo = pipeline.admission._memo
        assert sum(len(d.parts) for d in memo.values()) <= admission._MEMO_PARTS  # before: 300 decisions, 19,201 parts
        routes = pipeline.exchange.routes
        assert sum(len(known[0]) for known in routes._known.values()) <= routes.max_parts  # before: 19,201
        shapes = gw.history._memo
        assert sum(len(s.parts_json) for s in shapes._shapes.values()) <= shapes.max_bytes  # before: ~13 MB
        tasks = pipeline.tasks
        assert sum(len(r) for r in tasks._routes) <= ROUTES_BYTES  # before: ~6.6 MB
        # each of bob's records that brought a new route counted it whole: his records count at least his routes
        rows = [tasks._rows[t] for t in tasks._by_owner.get("bob", {})]
        held = {id(row[1]): len(row[1]) for row in rows}
        assert rows and tasks._owner_bytes["bob"] >= sum(held.values())  # before: an eighth of them
