"""A client's resumable uploads open at once are bounded (`blob_max_uploads_per_client`, docs/security.md S17-5): an
upload begun is charged one 4 KiB block, so the byte quota alone (1 GiB) let one client keep 262,144 of them open for a
day. Past the bound the next `POST /blobs/uploads` is 429 naming the setting and the count; finishing, aborting or
pruning one gives its place back, and the count survives a restart. On the local store here; across a cluster's
gateways and workers in tests/cluster/test_upload_bound.py."""

from __future__ import annotations

import hashlib
import time

import httpx

from mma2a.errors import TooManyUploads
from mma2a.payload import LocalBlobStore
from tests.security.conftest import CAROL, TOKEN, secured

ALICE = {"Authorization": f"Bearer {TOKEN}"}
CAROL_H = {"Authorization": f"Bearer {CAROL}"}
LIMIT = 3


def too_many_message(held: int, limit: int = LIMIT, client: str = "alice") -> str:
    return (f"too many uploads open: client {client!r} has {held} resumable uploads open, its limit is {limit} "
            "(blob_max_uploads_per_client); finish or abort one (DELETE /blobs/uploads/{id}) before beginning another")


def assert_refused(r: httpx.Response, message: str, setting: str, held: int, limit: int) -> None:
    """The refusal of one upload past a bound: 429, the exact message, the setting, limit and count in its data."""
    assert r.status_code == 429, r.text
    error = r.json()["error"]
    assert error["message"] == message
    assert error["data"] == {"setting": setting, "limit": limit, "open": held}


def assert_too_many(r: httpx.Response, held: int = LIMIT, limit: int = LIMIT) -> None:
    """Past the client's bound (`blob_max_uploads_per_client`)."""
    assert_refused(r, too_many_message(held, limit), "blob_max_uploads_per_client", held, limit)


async def begin(c: httpx.AsyncClient, url: str, headers: dict[str, str]) -> httpx.Response:
    return await c.post(url + "/blobs/uploads", headers=headers)


async def test_a_client_past_its_open_uploads_gets_429_and_another_client_still_begins(tmp_path):
    cfg = {"blob_dir": str(tmp_path), "blob_max_uploads_per_client": LIMIT}
    async with secured(cfg) as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        mine = [await begin(c, url, ALICE) for _ in range(LIMIT)]
        refused = await begin(c, url, ALICE)
        other = await begin(c, url, CAROL_H)
        counts = gw.store.open_uploads("alice"), gw.store.open_uploads("carol")
    assert [r.status_code for r in mine] == [201] * LIMIT and other.status_code == 201
    assert_too_many(refused)
    assert counts == (LIMIT, 1)
    assert len(list((tmp_path / "uploads").glob("*.part"))) == LIMIT + 1  # the refused one left nothing on disk


async def test_finishing_or_aborting_an_upload_gives_its_place_back(tmp_path):
    cfg = {"blob_dir": str(tmp_path), "blob_max_uploads_per_client": LIMIT}
    async with secured(cfg) as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        ids = [(await begin(c, url, ALICE)).json()["uploadId"] for _ in range(LIMIT)]
        await c.patch(f"{url}/blobs/uploads/{ids[0]}", content=b"a" * 1000, headers=ALICE | {"Upload-Offset": "0"})
        finished = await c.post(f"{url}/blobs/uploads/{ids[0]}/finish", headers=ALICE)
        after_finish = gw.store.open_uploads("alice")
        again = await begin(c, url, ALICE)
        aborted = await c.delete(f"{url}/blobs/uploads/{ids[1]}", headers=ALICE)
        after_abort = gw.store.open_uploads("alice")
        third = await begin(c, url, ALICE)
        refused = await begin(c, url, ALICE)
    assert finished.status_code == 201 and finished.json()["sha256"] == hashlib.sha256(b"a" * 1000).hexdigest()
    assert (after_finish, again.status_code) == (LIMIT - 1, 201)
    assert (aborted.status_code, after_abort, third.status_code) == (204, LIMIT - 1, 201)
    assert_too_many(refused)


async def test_open_uploads_are_counted_again_at_a_restart_and_freed_by_pruning(tmp_path):
    cfg = {"blob_dir": str(tmp_path), "blob_max_uploads_per_client": LIMIT}
    async with secured(cfg) as (_, url, _), httpx.AsyncClient(timeout=30) as c:
        assert [(await begin(c, url, ALICE)).status_code for _ in range(LIMIT)] == [201] * LIMIT
    async with secured(cfg) as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        counted = gw.store.open_uploads("alice")
        refused = await begin(c, url, ALICE)
        pruned = await gw.store.prune(60, now=time.time() + 120)  # every upload idle past blob_max_age_s
        freed = gw.store.open_uploads("alice")
        again = await begin(c, url, ALICE)
    assert counted == LIMIT
    assert_too_many(refused)
    assert (pruned, freed, again.status_code) == (LIMIT, 0, 201)


async def test_the_store_refuses_past_the_bound_with_nothing_made_and_counts_uploads_without_owner_never(tmp_path):
    store = LocalBlobStore(tmp_path, max_uploads_per_client=2)
    await store.begin_upload(owner="alice")
    await store.begin_upload(owner="alice")
    try:
        await store.begin_upload(owner="alice")
        raise AssertionError("a third upload was begun")
    except TooManyUploads as exc:
        assert exc.message == too_many_message(2, 2) and exc.http_status == 429
    anonymous = [await store.begin_upload() for _ in range(3)]  # no owner (auth off): no client to bound
    assert len(anonymous) == 3 and store.open_uploads("alice") == 2 and store.open_uploads(None) == 0
    assert store.quota.held("alice") == 2 * 4096  # the refused one charged nothing


async def test_an_operator_sees_the_refusals_at_each_bound_counted_by_their_setting(tmp_path):
    """Refusals at the open uploads' bound, at a client's byte quota and at the disk's inode reserve are counted in
    `/metrics` by the setting that refused them (`mma2a_blob_refused_total{setting=...}`): before, an operator saw
    them only in what the clients were answered."""
    import os

    from tests.gateway.conftest import ADMIN

    def counted(metrics: str) -> dict[str, float]:
        return {line.split('setting="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
                for line in metrics.splitlines() if line.startswith("mma2a_blob_refused_total{")}

    admin = {"Authorization": f"Bearer {ADMIN}"}
    cfg = {"blob_dir": str(tmp_path / "a"), "blob_max_uploads_per_client": 1, "blob_max_bytes_per_client": 64 * 1024}
    async with secured(cfg) as (_, url, _), httpx.AsyncClient(timeout=30) as c:
        assert (await begin(c, url, ALICE)).status_code == 201
        uploads = [await begin(c, url, ALICE) for _ in range(2)]
        quota = await c.post(url + "/blobs", content=b"x" * (128 * 1024), headers=ALICE | {"Content-Type": "text/plain"})
        first = counted((await c.get(url + "/metrics", headers=admin)).text)
    (tmp_path / "b").mkdir()
    reserve = os.statvfs(tmp_path).f_files + 1  # more than the disk holds: every new file is refused
    async with secured({"blob_dir": str(tmp_path / "b"), "blob_min_free_inodes": reserve}) as (_, url, _), \
            httpx.AsyncClient(timeout=30) as c:
        full = await c.post(url + "/blobs", content=b"tiny", headers=CAROL_H | {"Content-Type": "text/plain"})
        second = counted((await c.get(url + "/metrics", headers=admin)).text)
    assert [r.status_code for r in uploads] == [429, 429] and quota.status_code == 413, quota.text
    assert first == {"blob_max_uploads_per_client": 2.0, "blob_max_bytes_per_client": 1.0}, first
    assert full.status_code == 507 and full.json()["error"]["data"]["setting"] == "blob_min_free_inodes"
    assert second == {"blob_min_free_inodes": 1.0}, second


# --- all uploads open at once, whoever holds them (`blob_max_uploads`, docs/security.md LO1) -----------------------------

def too_many_in_store_message(held: int, limit: int = LIMIT) -> str:
    return (f"too many uploads open: the blob store has {held} resumable uploads open, its limit is {limit} "
            "(blob_max_uploads); finish or abort one (DELETE /blobs/uploads/{id}) or retry later")


def assert_store_full(r: httpx.Response, held: int = LIMIT, limit: int = LIMIT) -> None:
    """Past the store's bound (`blob_max_uploads`)."""
    assert_refused(r, too_many_in_store_message(held, limit), "blob_max_uploads", held, limit)


async def test_with_auth_off_uploads_past_the_stores_bound_are_429_whoever_begins_them_and_nothing_is_made(tmp_path):
    """Auth off: no upload has a client, so `blob_max_uploads_per_client` bounds none; before, one anonymous caller
    opened as many as the bytes allowed (2 M at 4 KiB each in the default 8 GiB). Now the store's bound holds them all,
    whichever connection (caller) begins them; aborting or finishing one gives a place back."""
    from tests.gateway.conftest import gateway

    cfg = {"blob_dir": str(tmp_path), "blob_max_uploads": LIMIT}
    async with gateway(cfg) as (gw, url):
        assert not gw.config.auth.active
        async with httpx.AsyncClient(timeout=30) as one, httpx.AsyncClient(timeout=30) as two:
            mine = [await begin(c, url, {}) for c in (one, two, one)]
            refused = [await begin(c, url, {}) for c in (one, two)]
            files = len(list((tmp_path / "uploads").glob("*.part")))
            first = mine[0].json()["uploadId"]
            aborted = await two.delete(f"{url}/blobs/uploads/{first}")
            again = await begin(one, url, {})
            second = mine[1].json()["uploadId"]
            await one.patch(f"{url}/blobs/uploads/{second}", content=b"b" * 100, headers={"Upload-Offset": "0"})
            finished = await two.post(f"{url}/blobs/uploads/{second}/finish")
            third = await begin(two, url, {})
            last = await begin(one, url, {})
            held = gw.store.uploads_open
    assert [r.status_code for r in mine] == [201] * LIMIT
    for r in refused + [last]:
        assert_store_full(r)
    assert files == LIMIT  # the refused ones left nothing on disk
    assert (aborted.status_code, again.status_code, finished.status_code, third.status_code) == (204, 201, 201, 201)
    assert held == LIMIT


async def test_with_auth_on_the_stores_bound_holds_every_clients_uploads_together_after_their_own(tmp_path):
    """Auth on: a client at its own bound is told of its own (the one it can act on); within it, the store's bound
    refuses when all clients together hold `blob_max_uploads`."""
    cfg = {"blob_dir": str(tmp_path), "blob_max_uploads_per_client": 2, "blob_max_uploads": LIMIT}
    async with secured(cfg) as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        alices = [await begin(c, url, ALICE) for _ in range(2)]
        alice_past = await begin(c, url, ALICE)
        carol = await begin(c, url, CAROL_H)
        carol_past = await begin(c, url, CAROL_H)
        counts = gw.store.open_uploads("alice"), gw.store.open_uploads("carol"), gw.store.uploads_open
    assert [r.status_code for r in alices] == [201, 201] and carol.status_code == 201
    assert alice_past.status_code == 429
    assert alice_past.json()["error"]["data"] == {"setting": "blob_max_uploads_per_client", "limit": 2, "open": 2}
    assert_store_full(carol_past)
    assert counts == (2, 1, LIMIT)


async def test_the_stores_open_uploads_are_counted_again_at_a_restart_with_and_without_a_client(tmp_path):
    store = LocalBlobStore(tmp_path, max_uploads=LIMIT)
    await store.begin_upload()
    await store.begin_upload(owner="alice")
    again = LocalBlobStore(tmp_path, max_uploads=LIMIT)
    await again.begin_upload()
    try:
        await again.begin_upload(owner="bob")
        raise AssertionError("a fourth upload was begun")
    except TooManyUploads as exc:
        assert exc.message == too_many_in_store_message(LIMIT) and exc.http_status == 429
    assert again.uploads_open == LIMIT and again.quota.held("bob") == 0  # the refused one charged nothing
    assert await again.prune(60, now=time.time() + 120) == LIMIT and again.uploads_open == 0


def test_the_stores_bound_is_on_by_default() -> None:
    from mma2a.gateway.config import parse_config
    from mma2a.payload.quota import DEFAULT_MAX_UPLOADS, DEFAULT_MAX_UPLOADS_TOTAL

    config = parse_config({})
    assert config.blob_max_uploads == DEFAULT_MAX_UPLOADS_TOTAL == 16 * DEFAULT_MAX_UPLOADS
