"""A client's resumable uploads open at once (`blob_max_uploads_per_client`, docs/security.md S17-5) held once for the
whole cluster: a count per client in the `blob_quota` bucket, changed by compare-and-set, so a client spreading its
uploads over the gateways (or the workers of `serve --workers N`) gets its bound once. Two gateways of one cluster on a
real nats-server, auth on; the refusal in the local store's words (tests/security/test_upload_bound.py). A count a
gateway left wrong (it died between counting and writing the record, or between deleting the record and counting) is
set right by the prune that lists the records."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from mma2a.cluster.blob_quota import OPEN_TOTAL, SharedByteQuota, uploads_key
from mma2a.cluster.objects import ObjectBlobStore, open_object_store
from mma2a.cluster.server import NatsServer
from mma2a.errors import TooManyUploads
from mma2a.gateway.cluster_config import ClusterConfig
from tests.agents import RecordingExecutor, make_card, run_agent
from tests.cluster.conftest import cluster_name
from tests.cluster.test_blob_quota import ALICE, CAROL, store_of, two_gateways
from tests.cluster.test_security import bearer
from tests.cluster.test_workers import serve_workers
from tests.security.test_upload_bound import assert_store_full, assert_too_many

pytestmark = pytest.mark.timeout(300)  # gateway processes (serve --workers 2) and nats-server: minutes on a loaded 2-core box

LIMIT = 3
PRUNE_S = 600.0  # the Object Store prunes idle uploads every 10 min at most (one gateway a turn)


async def begin(c: httpx.AsyncClient, url: str, headers: dict[str, str] = ALICE) -> httpx.Response:
    return await c.post(url + "/blobs/uploads", headers=headers)


def counts(store: ObjectBlobStore) -> SharedByteQuota:
    assert store.quota is not None and store.quota.counts_uploads
    return store.quota


async def test_a_client_at_its_open_uploads_on_one_gateway_is_refused_on_the_other_and_another_client_still_begins(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    async with two_gateways(nats_server.url, monkeypatch, blob_max_uploads_per_client=LIMIT) as ((a, url_a), (_, url_b)):
        async with httpx.AsyncClient(timeout=30) as c:
            mine = [await begin(c, url) for url in (url_a, url_b, url_a)]
            on_b, on_a = await begin(c, url_b), await begin(c, url_a)
            other = await begin(c, url_b, CAROL)
            held = await counts(store_of(a)).open_uploads("alice"), await counts(store_of(a)).open_uploads("carol")
    assert [r.status_code for r in mine] == [201] * LIMIT and other.status_code == 201
    assert_too_many(on_b)
    assert_too_many(on_a)
    assert held == (LIMIT, 1)


async def test_two_uploads_begun_at_once_on_two_gateways_at_the_last_place_are_one_taken_one_refused(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    async with two_gateways(nats_server.url, monkeypatch, blob_max_uploads_per_client=LIMIT) as ((a, url_a), (_, url_b)):
        async with httpx.AsyncClient(timeout=30) as c:
            assert [(await begin(c, url_a)).status_code for _ in range(LIMIT - 1)] == [201] * (LIMIT - 1)
            answers = await asyncio.gather(begin(c, url_a), begin(c, url_b))
            held = await counts(store_of(a)).open_uploads("alice")
    assert sorted(r.status_code for r in answers) == [201, 429]
    assert_too_many(next(r for r in answers if r.status_code == 429))
    assert held == LIMIT


async def test_finishing_aborting_or_pruning_an_upload_on_either_gateway_gives_its_place_back(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    async with two_gateways(nats_server.url, monkeypatch, blob_max_uploads_per_client=LIMIT) as ((a, url_a), (b, url_b)):
        quota = counts(store_of(b))
        async with httpx.AsyncClient(timeout=30) as c:
            ids = [(await begin(c, url_a)).json()["uploadId"] for _ in range(LIMIT)]
            await c.patch(f"{url_a}/blobs/uploads/{ids[0]}", content=b"a" * 1000, headers=ALICE | {"Upload-Offset": "0"})
            finished = await c.post(f"{url_b}/blobs/uploads/{ids[0]}/finish", headers=ALICE)  # begun on A
            after_finish = await quota.open_uploads("alice")
            again = await begin(c, url_a)
            aborted = await c.delete(f"{url_b}/blobs/uploads/{ids[1]}", headers=ALICE)
            after_abort = await quota.open_uploads("alice")
            third = await begin(c, url_b)
            refused = await begin(c, url_a)
            pruned = await store_of(b).prune(None, now=time.time() + 24 * 3600)  # every upload idle past a day
            after_prune = await quota.open_uploads("alice")
            fresh = [await begin(c, url) for url in (url_a, url_b, url_a)]
    assert finished.status_code == 201 and (after_finish, again.status_code) == (LIMIT - 1, 201)
    assert (aborted.status_code, after_abort, third.status_code) == (204, LIMIT - 1, 201)
    assert_too_many(refused)
    assert (pruned, after_prune) == (LIMIT, 0)
    assert [r.status_code for r in fresh] == [201] * LIMIT


async def test_a_count_a_dead_gateway_left_high_is_set_right_by_the_second_prune_and_a_count_missing_by_the_first(
        nats_server: NatsServer) -> None:
    config = ClusterConfig(nats=nats_server.url, name=cluster_name())
    bare, link0 = await open_object_store(config)  # a gateway of before the bound: its uploads are counted by nobody
    before = [await bare.begin_upload(owner="carol") for _ in range(2)]
    await link0.close()
    store, link = await open_object_store(config, max_uploads_per_client=LIMIT)
    try:
        quota = counts(store)
        kept = await store.begin_upload(owner="alice")
        await quota.begin_upload("alice")  # a gateway died after counting an upload, before making its record
        gone = await store.begin_upload(owner="alice")
        await store._uploads.delete(gone)  # a gateway died after deleting a record, before counting it down
        assert (await quota.open_uploads("alice"), await quota.open_uploads("carol")) == (3, 0)
        at = time.time()
        first = await store.prune(None, now=at)
        after_first = await quota.open_uploads("alice"), await quota.open_uploads("carol")
        second = await store.prune(None, now=at + PRUNE_S)
        after_second = await quota.open_uploads("alice"), await quota.open_uploads("carol")
        room = [await store.begin_upload(owner="alice") for _ in range(LIMIT - 1)]
        with pytest.raises(TooManyUploads):
            await store.begin_upload(owner="alice")
    finally:
        await link.close()
    assert (first, second) == (0, 0)  # nothing idle: every upload is kept
    assert after_first == (3, 2)  # carol's uploads of before counted at once; alice's 3 for 1 record not yet lowered
    assert after_second == (1, 2)  # still 3 at the same revision a turn later: left by a dead gateway, set right
    assert len({kept, *room, *before}) == 2 + LIMIT  # alice has her places back


async def test_a_count_changed_between_two_prunes_is_not_lowered_by_the_second(nats_server: NatsServer) -> None:
    """A count found high by one prune and changed before the next (a gateway took it down after deleting a record,
    or an upload began) is one a write in flight made, not a dead gateway: the second prune does not lower it."""
    config = ClusterConfig(nats=nats_server.url, name=cluster_name())
    store, link = await open_object_store(config, max_uploads_per_client=5)
    try:
        quota = counts(store)
        await store.begin_upload(owner="alice")
        await quota.begin_upload("alice")  # counted, its record not made yet
        at = time.time()
        await store.prune(None, now=at)
        upload = await store.begin_upload(owner="alice")  # the count moves: 3 for 2 records
        await store._uploads.delete(upload)  # and this record is deleted, its count not yet taken down: 3 for 1
        await store.prune(None, now=at + PRUNE_S)
        unchanged = await quota.open_uploads("alice")
        await store.prune(None, now=at + 2 * PRUNE_S)
        lowered = await quota.open_uploads("alice")
    finally:
        await link.close()
    assert (unchanged, lowered) == (3, 1)


async def test_a_prune_reads_no_record_one_get_at_a_time(nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """The records are streamed (S17-5: a `get` each held the loop ~32 s of CPU for 262,144): a prune with nothing
    idle reads no record by `get`; the idle ones are read once more before they are aborted."""
    config = ClusterConfig(nats=nats_server.url, name=cluster_name())
    store, link = await open_object_store(config, max_uploads_per_client=50)
    try:
        for i in range(40):
            await store.begin_upload(owner=f"c{i % 4}")
        gets = 0
        real_get = store._uploads.get

        async def get(key: str, *args: object, **kw: object) -> object:
            nonlocal gets
            gets += 1
            return await real_get(key, *args, **kw)

        monkeypatch.setattr(store._uploads, "get", get)
        at = time.time()
        kept = await store.prune(None, now=at)
        kept_gets = gets
        idle = await store.prune(None, now=at + UPLOAD_DAY)
        held = [await counts(store).open_uploads(f"c{i}") for i in range(4)]
    finally:
        await link.close()
    assert (kept, kept_gets) == (0, 0)
    assert (idle, gets, held) == (40, 40, [0] * 4)


UPLOAD_DAY = 24 * 3600.0


async def test_serve_with_two_workers_holds_a_clients_open_uploads_once_whichever_worker_takes_them(
        tmp_path: Path) -> None:
    """`serve --workers 2`: each new connection reaches either worker; alice's uploads past 3 are refused however they
    were spread; bob still begins one."""
    async with run_agent(make_card("echo"), RecordingExecutor(echo=True)) as agent_url:
        async with serve_workers(tmp_path, "echo", agent_url, {"blob_max_uploads_per_client": LIMIT}) as served:
            answers = []
            for _ in range(8):
                async with httpx.AsyncClient(timeout=30) as c:  # a connection of its own: either worker takes it
                    answers.append(await begin(c, served.url, bearer("alice")))
            async with httpx.AsyncClient(timeout=30) as c:
                bob = await begin(c, served.url, bearer("bob"))
    assert [r.status_code for r in answers] == [201] * LIMIT + [429] * 5
    for r in answers[LIMIT:]:
        assert_too_many(r)
    assert bob.status_code == 201


def test_the_count_of_a_clients_uploads_is_a_key_of_its_own_beside_its_bytes() -> None:
    assert uploads_key("alice") == "f.o.c.YWxpY2U=" and uploads_key("a" * 400).startswith("f.o.h.")


# --- all uploads open at once, whoever holds them (`blob_max_uploads`, docs/security.md LO1) -----------------------------

async def test_with_auth_off_the_clusters_uploads_past_its_bound_are_refused_on_either_gateway_and_nothing_is_made(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Auth off: uploads have no client; the cluster holds at most `blob_max_uploads` of them open, counted once in the
    `blob_quota` bucket (`f.open`), however they are spread over its gateways; one ended on either gives a place back."""
    async with two_gateways(nats_server.url, monkeypatch, auth={}, blob_max_uploads=LIMIT) as ((a, url_a), (b, url_b)):
        assert not a.config.auth.active
        store = store_of(a)
        async with httpx.AsyncClient(timeout=30) as c:
            mine = [await begin(c, url, {}) for url in (url_a, url_b, url_a)]
            on_b, on_a = await begin(c, url_b, {}), await begin(c, url_a, {})
            records = [e async for e in store._records()]
            held = await counts(store).all_open_uploads()
            first = mine[0].json()["uploadId"]
            aborted = await c.delete(f"{url_b}/blobs/uploads/{first}")  # begun on A
            again = await begin(c, url_b, {})
            second = mine[1].json()["uploadId"]
            await c.patch(f"{url_a}/blobs/uploads/{second}", content=b"b" * 100, headers={"Upload-Offset": "0"})
            finished = await c.post(f"{url_a}/blobs/uploads/{second}/finish")  # begun on B
            third = await begin(c, url_b, {})
            last = await begin(c, url_a, {})
            after = await counts(store_of(b)).all_open_uploads()
    assert [r.status_code for r in mine] == [201] * LIMIT
    assert_store_full(on_b)
    assert_store_full(on_a)
    assert_store_full(last)
    assert (len(records), held) == (LIMIT, LIMIT)  # the refused ones made no record
    assert (aborted.status_code, again.status_code, finished.status_code, third.status_code) == (204, 201, 201, 201)
    assert after == LIMIT


async def test_two_anonymous_uploads_begun_at_once_on_two_gateways_at_the_last_place_are_one_taken_one_refused(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    async with two_gateways(nats_server.url, monkeypatch, auth={}, blob_max_uploads=LIMIT) as ((a, url_a), (_, url_b)):
        async with httpx.AsyncClient(timeout=30) as c:
            assert [(await begin(c, url_a, {})).status_code for _ in range(LIMIT - 1)] == [201] * (LIMIT - 1)
            answers = await asyncio.gather(begin(c, url_a, {}), begin(c, url_b, {}))
            held = await counts(store_of(a)).all_open_uploads()
    assert sorted(r.status_code for r in answers) == [201, 429]
    assert_store_full(next(r for r in answers if r.status_code == 429))
    assert held == LIMIT


async def test_with_auth_on_the_clusters_bound_holds_all_clients_uploads_after_each_ones_own(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    async with two_gateways(nats_server.url, monkeypatch, blob_max_uploads_per_client=2,
                            blob_max_uploads=LIMIT) as ((a, url_a), (_, url_b)):
        async with httpx.AsyncClient(timeout=30) as c:
            alices = [await begin(c, url) for url in (url_a, url_b)]
            alice_past = await begin(c, url_a)
            carol = await begin(c, url_b, CAROL)
            carol_past = await begin(c, url_a, CAROL)
            quota = counts(store_of(a))
            held = (await quota.open_uploads("alice"), await quota.open_uploads("carol"), await quota.all_open_uploads())
    assert [r.status_code for r in alices] == [201, 201] and carol.status_code == 201
    assert alice_past.json()["error"]["data"] == {"setting": "blob_max_uploads_per_client", "limit": 2, "open": 2}
    assert_store_full(carol_past)
    assert held == (2, 1, LIMIT)  # carol's refused upload took back the place it had counted for her


async def test_the_count_of_all_uploads_left_high_or_missing_is_set_right_by_the_prunes(nats_server: NatsServer) -> None:
    """As a client's count: a cluster made before the bound (uploads counted by nobody) is counted at the first prune;
    a count a dead gateway left high, at the second that finds it so at the same revision."""
    config = ClusterConfig(nats=nats_server.url, name=cluster_name())
    bare, link0 = await open_object_store(config)  # a gateway of before the bound
    before = [await bare.begin_upload() for _ in range(2)]
    await link0.close()
    store, link = await open_object_store(config, max_uploads=5)
    try:
        quota = counts(store)
        await store.begin_upload()
        await quota.begin_upload(None)  # a gateway died after counting an upload, before making its record
        at = time.time()
        counted = await quota.all_open_uploads()
        await store.prune(None, now=at)
        after_first = await quota.all_open_uploads()
        await quota.begin_upload(None)  # another left high: 4 for 3 records
        await store.prune(None, now=at + PRUNE_S)
        changed = await quota.all_open_uploads()
        await store.prune(None, now=at + 2 * PRUNE_S)
        after_third = await quota.all_open_uploads()
        room = [await store.begin_upload() for _ in range(2)]
        with pytest.raises(TooManyUploads):
            await store.begin_upload()
    finally:
        await link.close()
    assert counted == 2  # the two of before counted by nobody, one of now, one left high
    assert after_first == 3  # raised to the records at once
    assert (changed, after_third) == (4, 3)  # found high by one prune, lowered by the next at the same revision
    assert len({*before, *room}) == 4


def test_the_count_of_all_uploads_is_outside_the_clients_counts() -> None:
    assert OPEN_TOTAL == "f.open" and not OPEN_TOTAL.startswith(uploads_key("x")[:4])
