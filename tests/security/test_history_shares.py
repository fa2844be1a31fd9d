"""The decision history's bounds hold against one client (docs/security.md S17-1): `history.max_bytes` and each
client's share of it (`max_bytes_per_client`) count everything a client's decisions put in the file, the shapes
(their parts' routes, media types of the client's choosing) as well as the rows."""

from __future__ import annotations

import asyncio
import time

import httpx
import orjson

from tests.gateway.conftest import ADMIN
from tests.security.conftest import API_KEY, TOKEN, bearer, secured, send_body

MAX_BYTES = 2_000_000
SHARE = 500_000


def _sizes(store) -> tuple[int, dict[str, int]]:
    """The file's bytes as the rows and shapes count them, and each sender's."""
    db = store._writer
    total = db.execute("SELECT (SELECT COALESCE(SUM(size), 0) FROM decisions) + "
                       "(SELECT COALESCE(SUM(size), 0) FROM shapes)").fetchone()[0]
    shapes = "SELECT sender, size FROM shapes" if "sender" in {r[1] for r in db.execute("PRAGMA table_info(shapes)")} \
        else "SELECT NULL, 0"  # before S17-1 a shape was no sender's
    by_sender = dict(db.execute(f"SELECT sender, SUM(size) FROM (SELECT sender, size FROM decisions UNION ALL {shapes}) "
                                "WHERE sender IS NOT NULL GROUP BY sender"))
    return total, by_sender


async def flood(c: httpx.AsyncClient, url: str, *, alices: int, bobs_each: int) -> None:
    """alice's plain decisions, then bob's (API key) of 64 parts of distinct shapes each, from four tasks at once."""
    for i in range(alices):
        r = await c.post(url + "/", json=send_body(f"alice-{i}"), headers=bearer(TOKEN))
        assert r.status_code == 200 and "result" in r.json(), r.text

    async def bobs(k: int) -> None:
        for j in range(k * bobs_each, (k + 1) * bobs_each):
            parts = [{"text": "x", "mediaType": f"text/plain; n={'b' * 180}{j}.{i}"} for i in range(64)]
            r = await c.post(url + "/", json=send_body(f"bob-{j}", parts),
                             headers={"X-API-Key": API_KEY, "A2A-Version": "1.0"})
            assert r.status_code == 200 and "result" in r.json(), r.text[:300]

    await asyncio.gather(*(bobs(k) for k in range(4)))


async def test_a_clients_decisions_of_new_shapes_each_count_in_its_share_and_the_file_stays_bounded(tmp_path,
                                                                                                   monkeypatch):
    """Bob's 120 messages of 64 text parts, each part of a media type of his own (`text/plain; n=…`, 200 characters):
    each decision is a new shape of ~45 KB, its row ~200 B. Before: only the rows counted in his share (24 KB of
    500 KB), the shapes in the file's total alone, which no prune could bring down (the oldest-first prune reads the
    rows' sizes): the file held 5.4 MB against a `max_bytes` of 2 MB and grew on at his rate, ~6 MB a second on this
    host, until `max_age_s` (7 days). Now his shapes count in his share: a prune leaves him within it, the file within
    `max_bytes`, and alice's decisions every one."""
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)
    extra = {"data_dir": str(tmp_path / "data"),
             "history": {"max_bytes": MAX_BYTES, "max_bytes_per_client": SHARE}}
    async with secured(extra, monkeypatch=monkeypatch, names=("text",)) as (gw, url, _):
        async with httpx.AsyncClient(timeout=30) as c:
            await flood(c, url, alices=10, bobs_each=30)
        store = gw.history.store
        assert await asyncio.to_thread(gw.history.flush, 30)
        total, by_sender = _sizes(store)
        assert total > 2 * MAX_BYTES  # bob's 120 decisions hold ~5 MB: past the file's bound
        assert store.stats()["bytes"] == total and store.stats()["decisions"] == 130
        await asyncio.to_thread(store.prune, time.time())  # what the writer process runs every prune_interval_s
        total, by_sender = _sizes(store)
        assert store.stats()["bytes"] == total <= MAX_BYTES
        assert 0 < by_sender["bob"] <= SHARE * 0.9
        held = dict(store._writer.execute("SELECT sender, bytes FROM senders"))
        assert held == by_sender  # each running total is what the file holds of that client
        alice = [r[0] for r in store._writer.execute("SELECT message_id FROM decisions WHERE sender = 'alice'")]
        assert sorted(alice) == sorted(f"alice-{i}" for i in range(10))
        newest = store._writer.execute("SELECT message_id FROM decisions WHERE sender = 'bob' ORDER BY id DESC "
                                       "LIMIT 1").fetchone()[0]
        assert newest.startswith("bob-")
        orphans = store._writer.execute("SELECT COUNT(*) FROM shapes WHERE id NOT IN (SELECT shape FROM decisions)")
        assert orphans.fetchone()[0] == 0  # every shape of his that lost its decisions went with them


async def test_a_clients_large_decisions_are_read_in_bounded_pages_and_the_route_map_reads_bounded_shapes(
        tmp_path, monkeypatch):
    """Bob's 200 decisions of 64 parts of long media types (~48 KB of parts each, as a page shows them). Before: a page
    of `/admin/history?limit=1000` was every one of them (9.6 MB here; 47.8 MB for 1,000 on a live gateway, where
    `/healthz` waited 587 ms beside it) and the route map (`/admin/history/flows`) parsed every shape of the span
    (12,000: 10.6 s, `/healthz` waited 3.0 s), in threads of the gateway holding its event loop's GIL. Now a page
    ends past `PAGE_BYTES` of parts, with a cursor, and the pages together are every decision once; the map reads
    the shapes of most decisions first, up to `FLOW_SHAPE_BYTES`, and says it left the rest out."""
    from mma2a.gateway.history.store import FLOW_SHAPE_BYTES, PAGE_BYTES

    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)
    async with secured({"data_dir": str(tmp_path / "data")}, monkeypatch=monkeypatch, names=("text",)) as (gw, url, _):
        async with httpx.AsyncClient(timeout=60) as c:
            await flood(c, url, alices=20, bobs_each=50)
            admin = {"Authorization": "Bearer " + ADMIN}
            seen: list[str] = []
            cursor = None
            pages = 0
            while True:
                params = {"limit": "1000"} | ({"cursor": cursor} if cursor else {})
                r = await c.get(url + "/admin/history", params=params, headers=admin)
                assert r.status_code == 200
                page = r.json()
                pages += 1
                # a page's parts: at most PAGE_BYTES as stored, plus the one decision that passed it
                assert len(orjson.dumps([d["parts"] for d in page["decisions"]])) <= PAGE_BYTES + 200_000
                seen += [d["messageId"] for d in page["decisions"]]
                cursor = page.get("cursor")
                if not cursor:
                    break
            assert pages >= 3  # 200 decisions of ~48 KB: more than 4 MiB twice over
            assert sorted(seen) == sorted([f"alice-{i}" for i in range(20)] + [f"bob-{j}" for j in range(200)])
            r = await c.get(url + "/admin/history/flows", params={"since": "1h"}, headers=admin)
            assert r.status_code == 200
            flows = r.json()
        store = gw.history.store
        sizes = sorted((n for n, in store._writer.execute("SELECT length(parts) FROM shapes")), reverse=True)
        assert sum(sizes) > FLOW_SHAPE_BYTES  # the span's shapes are more than the map reads
        assert flows["truncated"] is True and flows["decisions"] < 220
        alice = [f for f in flows["flows"] if f["modality"] == "text/plain" and f["target"] == "text"]
        assert alice and alice[0]["parts"] >= 20  # the shape of most decisions is read first: alice's is shown


def _large_rows(n: int, sender: str = "bob"):
    """`n` decisions of 64 parts of media types of their own (a new shape of ~45 KB each), as the recorder makes them."""
    from mma2a.gateway.history import DecisionRecord, PartSummary, to_row

    now = time.time()
    return [to_row(DecisionRecord(f"{sender}-{j}", now + j * 1e-3, sender,
                                  tuple(PartSummary(i, f"text/plain; n={'b' * 180}{j}.{i}") for i in range(64)), (),
                                  "TASK_STATE_COMPLETED", 0.01)) for j in range(n)]


def test_a_query_of_many_large_decisions_holds_a_page_of_them_not_its_limit(tmp_path):
    """600 decisions of 64 parts of media types of their own (~20 KB of shape each): a query of 5,000 (the replay's
    most) reads the sizes of all, then the decisions and shapes of one page only (`PAGE_BYTES` of parts: 203 of them).
    Before, every decision's detail and shape were read before the page was cut: its peak grew with the limit, by each
    decision past the page (29.2 MB here, against 21.1 MB for a query of that page's 203; 5,000 such decisions would
    add ~100 MB); now it is a page's whatever the limit (21.2 MB)."""
    import tracemalloc

    from mma2a.gateway.history import HistoryFilter, HistoryStore
    from mma2a.gateway.history.store import PAGE_BYTES

    store = HistoryStore(tmp_path / "h.sqlite3", max_bytes=1 << 30)
    rows = _large_rows(600)
    for start in range(0, len(rows), 50):
        store.write(rows[start:start + 50])
    del rows

    def peak(limit: int) -> tuple[int, int, str | None]:
        tracemalloc.start()
        try:
            page, cursor = store.query(HistoryFilter(limit=limit))
            size = len(page)
            del page
            return tracemalloc.get_traced_memory()[1], size, cursor
        finally:
            tracemalloc.stop()

    whole, n, cursor = peak(5000)
    one, m, _ = peak(n)  # a query whose limit is that page's decisions
    assert 0 < n == m < 600 and cursor is not None  # a page, and a cursor to the rest
    assert whole <= one * 1.2  # before: 29.2 MB against 21.1 MB
    assert whole < 8 * PAGE_BYTES
    store.close()


async def test_a_replay_reads_page_by_page_and_examines_every_decision_it_was_asked_for(tmp_path, monkeypatch):
    """`POST /admin/history/replay` over bob's 120 decisions of ~48 KB of parts each and alice's 10: it examines all
    130 (pages of `PAGE_BYTES`, each read and replayed in turn). Before, it read one page of its `limit` and examined
    that alone: 98 of 130."""
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)
    candidate = "version: 1\ndefault: {capability: any}\nrules:\n  - {name: no-text, match: {modality: text/*}, " \
                "action: {drop: no text today}}\n"
    async with secured({"data_dir": str(tmp_path / "data")}, monkeypatch=monkeypatch, names=("text",)) as (gw, url, _):
        async with httpx.AsyncClient(timeout=60) as c:
            await flood(c, url, alices=10, bobs_each=30)
            admin = {"Authorization": "Bearer " + ADMIN}
            first = (await c.get(url + "/admin/history", params={"limit": "1000"}, headers=admin)).json()
            r = await c.post(url + "/admin/history/replay", json={"rules": candidate, "limit": 5000}, headers=admin)
            assert r.status_code == 200, r.text
            every = r.json()
            r = await c.post(url + "/admin/history/replay", json={"rules": candidate, "limit": 20, "sender": "alice"},
                             headers=admin)
            alices = r.json()
    assert first["cursor"] is not None and len(first["decisions"]) < 130  # more than a page
    assert every["examined"] == 130 and every["changed"] == 130 and every["skipped"] == 0  # before: 98
    assert every["changedPartsByModality"] == {"text/plain": 120 * 64 + 10}
    assert len(every["decisions"]) == 100  # the first 100 changed are listed, as before
    assert alices["examined"] == 10 and alices["changed"] == 10
