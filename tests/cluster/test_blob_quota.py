"""The blob quotas on the cluster's Object Store (`blob_max_bytes_per_client` 413, `blob_max_bytes` 507), held once for
the whole cluster: before them, one client with a credential could fill JetStream's store through any gateway. Two
gateways of one cluster on a real nats-server, auth on; a client's bytes on one gateway count on the other, in the
local store's words and charges (tests/security/test_blob_quota.py: each blob or upload is charged its bytes in
whole 4 KiB blocks plus one block, `payload.quota.footprint`)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from nats.js.errors import KeyNotFoundError

from mma2a.cluster import cluster_state
from mma2a.cluster.account import nats_account
from mma2a.cluster.blob_quota import FORM, MAX_SWAPS, PRUNED, TOTAL, QuotaBusy, Reservation, SharedByteQuota, _key
from mma2a.cluster.kv_keys import held_keys
from mma2a.cluster.link import ClusterLink, reserved
from mma2a.errors import ClusterError
from mma2a.cluster.objects import UPLOAD_IDLE_S, ObjectBlobStore, open_object_store
from mma2a.cluster.server import NatsServer
from mma2a.errors import ClientQuotaExceeded
from mma2a.gateway import Gateway, parse_config
from mma2a.gateway.cluster_config import ClusterConfig
from mma2a.serving import free_port, running
from tests.agents import RecordingExecutor, make_card, run_agent
from tests.cluster.conftest import ADMIN, SECRET, cluster_name
from tests.cluster.test_gateways import until
from tests.cluster.test_security import bearer
from tests.cluster.test_workers import serve_workers
from tests.gateway.conftest import agent, agents
from tests.security.test_blob_quota import (
    QUOTA,
    assert_alice_refused_past_her_quota,
    assert_filled_by_upload_chunks,
    assert_the_store_full_past_100_kb,
    chunked,
    client_quota_message,
    fill_by_upload_chunks,
    setting,
)

pytestmark = pytest.mark.timeout(120)

TOKENS = {"alice": "alice-token-0123456789", "carol": "carol-token-0123456789"}
ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}
CAROL = {"Authorization": f"Bearer {TOKENS['carol']}"}


@contextlib.asynccontextmanager
async def two_gateways(nats_url: str, monkeypatch: pytest.MonkeyPatch, **extra: Any
                       ) -> AsyncIterator[tuple[tuple[Gateway, str], tuple[Gateway, str]]]:
    """Gateways A and B of one cluster, clients alice and carol, `extra` in both configs."""
    monkeypatch.setenv("MMA2A_URL_SECRET", SECRET)
    name = cluster_name()
    async with contextlib.AsyncExitStack() as stack:
        out = []
        for _ in range(2):
            port = free_port()
            config = parse_config({
                "listen": f"127.0.0.1:{port}", "admin": {"token": ADMIN}, "health_interval_s": 3600,
                "features": False, "auth": {"clients": [{"name": n, "token": t} for n, t in TOKENS.items()]},
                "cluster": {"nats": nats_url, "name": name}, **extra})
            gw = Gateway(config, cluster=cluster_state(config))
            url = await stack.enter_async_context(running(gw.app, "127.0.0.1", port, timeouts=config.server.timeouts()))
            out.append((gw, url))
        yield out[0], out[1]


def store_of(gw: Gateway) -> ObjectBlobStore:
    assert isinstance(gw.store, ObjectBlobStore) and gw.store.quota is not None
    return gw.store


async def held(gw: Gateway, *owners: str) -> tuple[int, ...]:
    """What each owner holds, then the total, as the cluster counts them."""
    quota = store_of(gw).quota
    assert quota is not None
    return (*[await quota.held(o) for o in owners], await quota.total())


async def test_a_client_at_its_quota_on_one_gateway_is_refused_on_the_other_and_another_client_still_uploads(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    async with two_gateways(nats_server.url, monkeypatch, blob_max_bytes_per_client=QUOTA) as ((a, url_a), (b, url_b)):
        async with httpx.AsyncClient(timeout=30) as c:
            first = await c.post(url_a + "/blobs", content=b"a" * 60_000, headers=ALICE)
            declared = await c.post(url_b + "/blobs", content=b"b" * 60_000, headers=ALICE)
            streamed = await c.post(url_b + "/blobs", content=chunked(b"c" * 60_000), headers=ALICE)
            begun = (await c.post(url_b + "/blobs/uploads", headers=ALICE)).json()
            patch = await c.patch(f"{url_b}/blobs/uploads/{begun['uploadId']}", content=chunked(b"d" * 50_000),
                                  headers=ALICE | {"Upload-Offset": "0"})
            offset = (await c.get(f"{url_a}/blobs/uploads/{begun['uploadId']}", headers=ALICE)).json()["offset"]
            other = await c.post(url_b + "/blobs", content=b"f" * 60_000, headers=CAROL)
            small = await c.post(url_b + "/blobs", content=b"e" * 40_000, headers=ALICE)  # still fits: QUOTA exactly
            counts = await held(a, "alice", "carol")
        assert first.status_code == 201 and other.status_code == 201 and small.status_code == 201
        assert_alice_refused_past_her_quota(declared, streamed, patch)
        assert offset == 0  # the refused chunk was not kept
        assert counts == (QUOTA, 65_536, QUOTA + 65_536)
        si = await store_of(a).js.stream_info(store_of(a).stream)
        assert si.state.bytes < 160_000 + 20_000  # refused bodies left no chunks behind (info messages aside)


async def test_the_store_quota_is_507_for_every_client_across_gateways(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    async with two_gateways(nats_server.url, monkeypatch, blob_max_bytes=100_000) as ((_, url_a), (b, url_b)):
        async with httpx.AsyncClient(timeout=30) as c:
            first = await c.post(url_a + "/blobs", content=b"a" * 60_000, headers=ALICE)
            full = await c.post(url_b + "/blobs", content=b"b" * 60_000, headers=CAROL)
            streamed = await c.post(url_b + "/blobs", content=chunked(b"c" * 60_000), headers=CAROL)
            counts = await held(b, "alice", "carol")
    assert_the_store_full_past_100_kb(first, full, streamed)
    assert counts == (65_536, 0, 65_536)


async def test_a_delete_or_an_abort_on_one_gateway_frees_the_quota_on_the_other(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = {"blob_max_bytes_per_client": 100_000, "blob_max_bytes": 150_000}
    async with two_gateways(nats_server.url, monkeypatch, **cfg) as ((a, url_a), (b, url_b)):
        async with httpx.AsyncClient(timeout=30) as c:
            blob = (await c.post(url_a + "/blobs", content=b"a" * 60_000, headers=ALICE)).json()
            refused = await c.post(url_b + "/blobs", content=b"b" * 60_000, headers=ALICE)
            deleted = await c.delete(f"{url_a}{a.signer.sign(blob['sha256'], 'DELETE')}")
            again = await c.delete(f"{url_b}{b.signer.sign(blob['sha256'], 'DELETE')}")  # deleted once, freed once
            stored = await c.post(url_b + "/blobs", content=b"b" * 60_000, headers=ALICE)
            begun = (await c.post(url_b + "/blobs/uploads", headers=ALICE)).json()
            where = f"/blobs/uploads/{begun['uploadId']}"
            await c.patch(url_b + where, content=b"c" * 20_000, headers=ALICE | {"Upload-Offset": "0"})
            during = await held(a, "alice")
            aborted = await c.delete(url_a + where, headers=ALICE)
            after = await held(b, "alice")
    assert refused.status_code == 413 and deleted.status_code == 204 and stored.status_code == 201
    assert again.status_code == 404
    assert during == (65_536 + 24_576,) * 2 and aborted.status_code == 204
    assert after == (65_536, 65_536)


async def test_one_clients_uploads_at_once_on_two_gateways_pass_its_quota_together_never(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each body passes the declared-length check alone (nothing is held yet); the bytes are counted before they are
    stored, so only one of them is kept."""
    async with two_gateways(nats_server.url, monkeypatch, blob_max_bytes_per_client=100_000) as ((a, url_a), (_, url_b)):
        async with httpx.AsyncClient(timeout=30) as c:
            answers = await asyncio.gather(*[c.post(url + "/blobs", content=fill * 60_000, headers=ALICE)
                                             for url, fill in ((url_a, b"x"), (url_b, b"y"))])
            counts = await held(a, "alice")
    assert sorted(r.status_code for r in answers) == [201, 413]
    refused = next(r for r in answers if r.status_code == 413)
    assert refused.json()["error"]["message"] == client_quota_message(65_536, 65_536, 100_000)
    assert counts == (65_536, 65_536)


async def test_the_same_content_on_two_gateways_is_counted_once_for_its_first_owner(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    async with two_gateways(nats_server.url, monkeypatch, blob_max_bytes_per_client=100_000) as ((a, url_a), (_, url_b)):
        async with httpx.AsyncClient(timeout=30) as c:
            one = await c.post(url_a + "/blobs", content=b"a" * 40_000, headers=ALICE)
            two = await c.post(url_b + "/blobs", content=b"a" * 40_000, headers=CAROL)
            begun = (await c.post(url_b + "/blobs/uploads", headers=CAROL)).json()
            where = f"/blobs/uploads/{begun['uploadId']}"
            await c.patch(url_b + where, content=b"a" * 40_000, headers=CAROL | {"Upload-Offset": "0"})
            finished = await c.post(url_a + where + "/finish", headers=CAROL)  # the same bytes again, by an upload
            counts = await held(a, "alice", "carol")
    assert one.status_code == two.status_code == finished.status_code == 201
    assert counts == (45_056, 0, 45_056)  # carol's upload (4,096 from its start) went with the same content


async def test_parts_a_gateway_offloads_count_in_the_senders_quota_on_every_gateway(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    def message(fill: bytes) -> dict[str, Any]:
        msg = {"messageId": f"m-{fill!r}", "role": "ROLE_USER",
               "parts": [{"raw": base64.b64encode(fill * 60_000).decode(), "mediaType": "text/plain"}]}
        return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": msg}}

    async with agents({"text": agent("text", ["text/plain"])}) as urls:
        cfg = {"blob_max_bytes_per_client": 100_000, "offload_threshold": 10_000,
               "agents": [{"name": "text", "url": urls["text"]}]}
        async with two_gateways(nats_server.url, monkeypatch, **cfg) as ((a, url_a), (_, url_b)):
            async with httpx.AsyncClient(timeout=30) as c:
                v1 = {"A2A-Version": "1.0"}
                first = (await c.post(url_a + "/", json=message(b"a"), headers=ALICE | v1)).json()
                during = await held(a, "alice")
                second = (await c.post(url_b + "/", json=message(b"b"), headers=ALICE | v1)).json()
                other = (await c.post(url_b + "/", json=message(b"c"), headers=CAROL | v1)).json()
                after = await held(a, "alice", "carol")
    assert "result" in first and during == (65_536, 65_536)
    refused = second["error"]["message"]
    assert refused == client_quota_message(65_536, 65_536, 100_000)
    assert "result" in other
    assert after == (65_536, 65_536, 131_072)  # nothing of the refused part was kept


async def test_blob_max_age_and_idle_uploads_are_pruned_on_the_object_store_freeing_their_bytes(
        nats_server: NatsServer) -> None:
    config = ClusterConfig(nats=nats_server.url, name=cluster_name())
    store, link = await open_object_store(config, max_bytes_per_client=100_000)
    try:
        quota = store.quota
        assert quota is not None
        info = await store.put_stream(chunked(b"a" * 60_000), owner="alice")
        upload = await store.begin_upload(owner="alice")
        await store.append(upload, 0, chunked(b"b" * 20_000))
        assert (await quota.held("alice"), await quota.total()) == (65_536 + 24_576,) * 2
        assert await store.prune(3600) == 0  # nothing is an hour old yet
        assert await store.prune(3600, now=time.time() + 7200) == 2  # the blob and the upload: idle past the age
        assert (await quota.held("alice"), await quota.total()) == (0, 0)
        with pytest.raises(Exception) as gone:
            await store.stat(info.key)
        assert gone.value.args[0] == f"blob {info.key} not found"
        upload = await store.begin_upload(owner="alice")
        await store.append(upload, 0, chunked(b"c" * 30_000))
        assert await store.prune(None, now=time.time() + UPLOAD_IDLE_S / 2) == 0
        other, link2 = await open_object_store(config, max_bytes_per_client=100_000)  # another gateway of the cluster
        later = time.time() + UPLOAD_IDLE_S + 60
        took = [await other.prune(None, now=later), await store.prune(None, now=later + 1)]
        assert took == [1, 0]  # aborted before its record would expire, by one gateway: the other's turn comes later
        assert (await quota.held("alice"), await quota.total()) == (0, 0)
        await link2.close()
    finally:
        await link.close()


async def test_the_counts_are_counted_again_from_the_objects_when_their_bucket_is_gone(
        nats_server: NatsServer) -> None:
    config = ClusterConfig(nats=nats_server.url, name=cluster_name())
    store, link = await open_object_store(config, max_bytes_per_client=100_000, max_bytes=1 << 20)
    try:
        await store.put_stream(chunked(b"a" * 60_000), owner="alice")
        await store.put_stream(chunked(b"b" * 10_000))  # no owner: in the total only
        upload = await store.begin_upload(owner="carol")
        await store.append(upload, 0, chunked(b"c" * 25_000))
        await link.js.delete_key_value(f"{config.name}_blob_quota")
        holdings = await store._stored()  # what a new count counts: what is stored before the bucket is made
        bare, link3 = await open_object_store(config)  # (a store that counts nothing, as the bucket is gone)
        await bare.put_stream(chunked(b"d" * 5_000), owner="alice")  # later: its gateway counts it, a recount not
        await bare.append(upload, 25_000, chunked(b"e" * 5_000))
        await link3.close()
        assert sorted([h async for h in holdings()], key=str) == [("alice", 65_536), ("carol", 32_768), (None, 16_384)]
        again, link2 = await open_object_store(config, max_bytes_per_client=100_000, max_bytes=1 << 20)
        try:
            quota = again.quota
            assert quota is not None
            # alice 60,000 + 5,000 bytes (65,536 + 12,288), carol's upload at 30,000 (36,864), no owner 10,000 (16,384)
            assert (await quota.held("alice"), await quota.held("carol"), await quota.total()) == (
                77_824, 36_864, 131_072)
        finally:
            await link2.close()
    finally:
        await link.close()


class CountedWhileOthersWrite(ObjectBlobStore):
    """A store whose count of what is stored waits, once it has claimed the count, until `go` is set: meanwhile the
    test writes through another gateway (real writes on the server), which must be counted once, by that gateway."""

    def __init__(self, link: ClusterLink) -> None:
        super().__init__(link)
        self.counting, self.go = asyncio.Event(), asyncio.Event()

    async def _stored(self) -> Any:
        holdings = await super()._stored()

        async def held() -> AsyncIterator[tuple[str | None, int]]:
            self.counting.set()
            await self.go.wait()
            async for h in holdings():
                yield h

        return held


async def test_counts_of_content_bytes_made_before_session_15_are_counted_again_as_footprints_on_upgrade(
        nats_server: NatsServer) -> None:
    """Session 15 charged footprints, but a bucket of counts made before held content bytes (alice's 60,000-byte blob
    counted 60,000, not 65,536) and kept them: the note said to delete it once by hand. Now the counts are keyed
    under `FORM`: a gateway finding none claims the count and counts the objects, while another gateway of the new
    version stores and deletes (its charges kept: the count adds to them), and purges the old keys."""
    config = ClusterConfig(nats=nats_server.url, name=cluster_name())
    bucket = f"{config.name}_blob_quota"
    limits = {"max_bytes_per_client": 1 << 20, "max_bytes": 1 << 22}
    store, link = await open_object_store(config, **limits)
    try:
        await store.put_stream(chunked(b"a" * 60_000), owner="alice")
        await store.put_stream(chunked(b"b" * 10_000))  # no owner: in the total only
        upload = await store.begin_upload(owner="carol")
        await store.append(upload, 0, chunked(b"c" * 25_000))
        # the bucket as session 14 left it: content bytes under keys without the prefix, and its claim
        await link.js.purge_stream(f"KV_{bucket}", subject=f"$KV.{bucket}.{FORM}>")
        kv = await link.js.key_value(bucket)
        old = {"counted": 1, "total": 115_000, "c." + base64.urlsafe_b64encode(b"alice").decode(): 80_000,
               "c." + base64.urlsafe_b64encode(b"carol").decode(): 25_000}
        for key, value in old.items():
            await kv.put(key, str(value).encode())
        upgraded_link = await ClusterLink(config).connect()
        upgraded = CountedWhileOthersWrite(upgraded_link)
        try:
            counting = asyncio.ensure_future(upgraded.setup(**limits))
            await upgraded.counting.wait()  # it claimed the count and is about to list the objects
            other, link2 = await open_object_store(config, **limits)  # a gateway of the new version, started meanwhile
            try:
                await other.put_stream(chunked(b"d" * 5_000), owner="alice")  # 12,288
                brief = await other.put_stream(chunked(b"f" * 20_000), owner="alice")  # stored and deleted: nothing
                await other.delete(brief.key)
                await other.append(upload, 25_000, chunked(b"e" * 5_000))  # carol's upload 25,000 -> 30,000: +4,096
                upgraded.go.set()
                await counting
                quota = upgraded.quota
                assert quota is not None
                # alice 60,000 + 5,000 (65,536 + 12,288), carol's upload at 30,000 (36,864), no owner 10,000 (16,384)
                want = (77_824, 36_864, 131_072)
                assert (await quota.held("alice"), await quota.held("carol"), await quota.total()) == want
                assert other.quota is not None
                assert (await other.quota.held("alice"), await other.quota.held("carol"),
                        await other.quota.total()) == want  # before: 92,288 and 30,000 (content bytes, then charges)
                for key in old:
                    with pytest.raises(KeyNotFoundError):
                        await kv.get(key)
                assert sorted(await held_keys(link.js, bucket)) == sorted(
                    [TOTAL, _key("alice"), _key("carol")])  # the old keys purged, nothing left of them
                again, link3 = await open_object_store(config, **limits)  # counted: a later gateway counts nothing
                await link3.close()
                assert (await quota.held("alice"), await quota.total()) == (77_824, 131_072)
            finally:
                await link2.close()
        finally:
            await upgraded_link.close()
    finally:
        await link.close()


class CountedAfterListing(CountedWhileOthersWrite):
    """As `CountedWhileOthersWrite`, but held once it has listed every object, before it adds what it counted."""

    async def _stored(self) -> Any:
        holdings = await ObjectBlobStore._stored(self)

        async def held() -> AsyncIterator[tuple[str | None, int]]:
            listed = [h async for h in holdings()]
            self.counting.set()
            await self.go.wait()
            for h in listed:
                yield h

        return held


@pytest.mark.parametrize("held_at", ["before the listing", "after the listing"])
async def test_a_blob_of_before_deleted_by_another_gateway_during_the_recount_leaves_its_owner_counted_right(
        nats_server: NatsServer, held_at: str) -> None:
    """A gateway counts the footprints again (no `f.total`: an upgrade) and, held after its claim, before it lists the
    objects or once it has listed them, another gateway of the new version stores 5,000 bytes for alice and deletes
    her 60,000-byte blob of before, taking its 65,536 back before the count adds anything. The count and the delete
    agree: alice holds her new blob's 12,288, the total that and carol's 16,384. Before: held before the listing, the
    listing left the deleted blob out while its delete took its footprint from a count of 12,288, floored at 0 (alice
    0 for good); held after it, the delete's take was floored and the listing's 65,536 added (alice 65,536)."""
    config = ClusterConfig(nats=nats_server.url, name=cluster_name())
    bucket = f"{config.name}_blob_quota"
    limits = {"max_bytes_per_client": 1 << 20, "max_bytes": 1 << 22}
    store, link = await open_object_store(config, **limits)
    try:
        old = await store.put_stream(chunked(b"a" * 60_000), owner="alice")  # 65,536
        await store.put_stream(chunked(b"c" * 10_000), owner="carol")  # 16,384
        await link.js.purge_stream(f"KV_{bucket}", subject=f"$KV.{bucket}.{FORM}>")  # no count: it is made again
        upgraded_link = await ClusterLink(config).connect()
        upgraded = (CountedWhileOthersWrite if held_at == "before the listing" else CountedAfterListing)(
            upgraded_link)
        try:
            counting = asyncio.ensure_future(upgraded.setup(**limits))
            await upgraded.counting.wait()  # it claimed the count (and listed the objects, or is about to)
            other, link2 = await open_object_store(config, **limits)
            try:
                await other.put_stream(chunked(b"d" * 5_000), owner="alice")  # 12,288, counted by `other`
                await other.delete(old.key)  # 65,536 taken back by `other`, before the recount adds anything
                upgraded.go.set()
                await counting
                for quota in (upgraded.quota, other.quota):
                    assert quota is not None
                    assert (await quota.held("alice"), await quota.held("carol"), await quota.total()) == (
                        12_288, 16_384, 28_672)  # before: alice 0, or 65,536
            finally:
                await link2.close()
        finally:
            await upgraded_link.close()
    finally:
        await link.close()


async def test_a_blob_of_before_stored_again_during_the_recount_stays_counted_for_its_first_owner(
        nats_server: NatsServer) -> None:
    """A gateway counts the footprints again (an upgrade) and, held after its claim, another gateway of the new
    version stores alice's blob of before again, for carol: the same content stays alice's (counted once, for its
    first owner; carol is charged nothing) and its age starts again (its info rewritten). The recount counts it for
    alice. Before: its info, rewritten after the count began, was left out and charged to nobody: alice 0 for good."""
    config = ClusterConfig(nats=nats_server.url, name=cluster_name())
    bucket = f"{config.name}_blob_quota"
    limits = {"max_bytes_per_client": 1 << 20, "max_bytes": 1 << 22}
    store, link = await open_object_store(config, **limits)
    try:
        await store.put_stream(chunked(b"a" * 60_000), owner="alice")  # 65,536
        await link.js.purge_stream(f"KV_{bucket}", subject=f"$KV.{bucket}.{FORM}>")  # no count: it is made again
        upgraded_link = await ClusterLink(config).connect()
        upgraded = CountedWhileOthersWrite(upgraded_link)
        try:
            counting = asyncio.ensure_future(upgraded.setup(**limits))
            await upgraded.counting.wait()  # it claimed the count and is about to list the objects
            other, link2 = await open_object_store(config, **limits)
            try:
                await other.put_stream(chunked(b"a" * 60_000), owner="carol")  # the same content: alice's still
                upgraded.go.set()
                await counting
                for quota in (upgraded.quota, other.quota):
                    assert quota is not None
                    assert (await quota.held("alice"), await quota.held("carol"), await quota.total()) == (
                        65_536, 0, 65_536)  # before: 0, 0, 0
                deleted_later, link3 = await open_object_store(config, **limits)
                try:  # and once deleted, it leaves alice's count
                    await deleted_later.delete((await deleted_later.put_stream(chunked(b"a" * 60_000))).key)
                    assert (await quota.held("alice"), await quota.total()) == (0, 0)
                finally:
                    await link3.close()
            finally:
                await link2.close()
        finally:
            await upgraded_link.close()
    finally:
        await link.close()


async def test_serve_with_two_workers_counts_a_clients_blobs_once_whichever_worker_takes_them(tmp_path: Path) -> None:
    """`serve --workers 2`: each new connection reaches either worker; alice's ten 10 KB blobs (16,384 charged each)
    fill her quota of 163,840 however they were spread, and every further one is refused, on either worker; bob still
    stores."""
    async with run_agent(make_card("echo"), RecordingExecutor(echo=True)) as agent_url:
        async with serve_workers(tmp_path, "echo", agent_url, {"blob_max_bytes_per_client": 163_840}) as served:
            answers = []
            for i in range(16):
                async with httpx.AsyncClient(timeout=30) as c:  # a connection of its own: either worker takes it
                    answers.append(await c.post(served.url + "/blobs", content=bytes([i]) * 10_000,
                                                headers=bearer("alice")))
            async with httpx.AsyncClient(timeout=30) as c:
                bob = await c.post(served.url + "/blobs", content=b"b" * 10_000, headers=bearer("bob"))
    assert [r.status_code for r in answers] == [201] * 10 + [413] * 6
    for r in answers[10:]:
        assert r.json()["error"]["message"] == client_quota_message(163_840, 16_384, 163_840)
        assert setting(r) == "blob_max_bytes_per_client"
    assert bob.status_code == 201


async def test_one_blob_deleted_and_one_upload_finished_on_two_gateways_at_once_are_counted_once(
        nats_server: NatsServer) -> None:
    """Two stores of one cluster (as two gateways) race on the same delete, then on the same finish: whichever wins,
    alice's count is what she holds (a double release would take her other blob's bytes off it too)."""
    config = ClusterConfig(nats=nats_server.url, name=cluster_name())
    a, link_a = await open_object_store(config, max_bytes_per_client=1 << 20)
    b, link_b = await open_object_store(config, max_bytes_per_client=1 << 20)
    try:
        quota = a.quota
        assert quota is not None
        gone = await a.put_stream(chunked(b"a" * 60_000), owner="alice")
        await b.put_stream(chunked(b"k" * 30_000), owner="alice")
        deletes = await asyncio.gather(a.delete(gone.key), b.delete(gone.key), return_exceptions=True)
        assert sorted(type(r).__name__ for r in deletes) == ["NoneType", "PayloadNotFound"]
        assert await quota.held("alice") == 36_864
        upload = await a.begin_upload(owner="alice")
        await a.append(upload, 0, chunked(b"u" * 300_000))
        finishes = await asyncio.gather(a.finish(upload), b.finish(upload), return_exceptions=True)
        assert all(not isinstance(r, BaseException) or type(r).__name__ == "PayloadNotFound" for r in finishes), finishes
        key = next(r for r in finishes if not isinstance(r, BaseException)).key
        assert (await b.stat(key)).size == 300_000
        assert (await quota.held("alice"), await quota.total()) == (36_864 + 307_200,) * 2
    finally:
        await link_a.close()
        await link_b.close()


async def test_counting_again_and_pruning_need_no_more_than_the_documented_nats_permissions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A nats-server configured as docs/operations.md says ("Securing NATS"): listing the objects (a recount, pruning)
    names its stream, as a stream lookup is not among the gateways' permissions (it timed out)."""
    name = cluster_name()
    monkeypatch.setenv("MMA2A_NATS_PASSWORD", "nats-gateway-s3cret-0123456789")
    conf = tmp_path / "nats.conf"
    conf.write_text(nats_account(name))
    server = NatsServer(tmp_path / "nats", args=["-c", str(conf)]).start()
    try:
        config = ClusterConfig(nats=server.url, name=name,
                               auth={"user": "mma2a-gateway", "password_env": "MMA2A_NATS_PASSWORD"})
        store, link = await open_object_store(config, max_bytes_per_client=1 << 20)
        for i in range(3):
            await store.put_stream(chunked(bytes([i]) * 1000), owner="alice")
        upload = await store.begin_upload(owner="alice")
        await store.append(upload, 0, chunked(b"u" * 500))
        await link.js.delete_key_value(f"{name}_blob_quota")
        again, link2 = await open_object_store(config, max_bytes_per_client=1 << 20)
        quota = again.quota
        assert quota is not None
        counted = await quota.held("alice")
        pruned = await again.prune(60, now=time.time() + UPLOAD_IDLE_S + 120)
        assert (counted, pruned, await quota.held("alice")) == (4 * 8192, 4, 0)  # 1,000 bytes thrice, 500
        # counts of content bytes as session 14 kept them: counted again and purged within the same permissions
        await store.put_stream(chunked(b"k" * 1000), owner="alice")
        bucket = f"{name}_blob_quota"
        kv = await link.js.key_value(bucket)
        for key in await held_keys(link.js, bucket):
            if key.startswith(FORM):
                await kv.purge(key)
        for key, value in (("c." + base64.urlsafe_b64encode(b"alice").decode(), 1000), ("total", 1000)):
            await kv.put(key, str(value).encode())
        upgraded, link3 = await open_object_store(config, max_bytes_per_client=1 << 20)
        assert upgraded.quota is not None and await upgraded.quota.held("alice") == 8192
        assert await held_keys(link.js, bucket) == sorted([PRUNED, TOTAL, _key("alice")])  # the old keys purged
        await link.close()
        await link2.close()
        await link3.close()
    finally:
        server.stop()


async def test_a_client_gone_mid_body_leaves_nothing_counted_nor_stored(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Alice declares 300 KB, sends 200 KB (a 128 KiB chunk is counted and published) and goes: the body's bytes are
    given back and its chunks dropped, as a refused body's are."""
    async with two_gateways(nats_server.url, monkeypatch, blob_max_bytes_per_client=1 << 20) as ((a, url_a), (b, _)):
        host, port = url_a.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"POST /blobs HTTP/1.1\r\nHost: {host}\r\nAuthorization: {ALICE['Authorization']}\r\n"
                     "Content-Length: 300000\r\n\r\n".encode() + b"p" * 200_000)
        await writer.drain()

        async def counted() -> bool:
            return (await held(b, "alice"))[0] > 0

        await until(counted)  # the first chunk is counted: the gateway is storing the body
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()

        async def given_back() -> bool:
            return await held(b, "alice") == (0, 0)

        await until(given_back)
        stream = await store_of(b).js.stream_info(store_of(b).stream)
        assert stream.state.messages == 0


class Contended(SharedByteQuota):
    """The counts as a gateway sees them while other gateways write `keys` between each of its reads and its writes:
    before each of its writes, a rival's write of the same value (a real write on the server, so this gateway's
    compare-and-set finds a newer revision every time)."""

    def __init__(self, keys: set[str], *limits: int | None) -> None:
        super().__init__(*limits)
        self.keys, self.rivals = keys, 0

    async def _put_over(self, key: str, data: bytes, revision: int) -> int | None:
        if key in self.keys:
            self.rivals += 1
            try:
                await self.kv.put(key, (await self.kv.get(key)).value)
            except KeyNotFoundError:
                await self.kv.put(key, b"0")
        return await super()._put_over(key, data, revision)


async def test_a_count_other_gateways_keep_changing_is_given_up_after_a_bounded_number_of_tries(
        nats_server: NatsServer) -> None:
    """Each compare-and-set of a count is tried at most `MAX_SWAPS` times: a write whose count keeps changing under
    it is refused 503 naming the quota as busy, and nothing of it stays counted (alice's count taken back when the
    total was the busy one)."""
    config = ClusterConfig(nats=nats_server.url, name=cluster_name())
    store, link = await open_object_store(config, max_bytes_per_client=100_000, max_bytes=1 << 20)
    try:
        assert store.quota is not None
        await store.put_stream(chunked(b"a" * 10_000), owner="alice")
        bucket, sizing = f"{config.name}_blob_quota", reserved(config)
        for busy, what in (({_key("alice")}, "a client's count"), ({TOTAL}, "the store's total")):
            rival = Contended(busy, 1 << 20, 100_000)
            await rival.open(link.js, bucket, replicas=1, max_bytes=config.blob_quota_bucket_bytes, sizing=sizing,
                             stored=store._stored)
            with pytest.raises(QuotaBusy) as info:
                await Reservation(rival, "alice").take(5_000)
            assert (info.value.http_status, info.value.message, info.value.data) == (
                503, f"the blob quota is busy: {what} was changed by other gateways {MAX_SWAPS} times in a row while "
                "this gateway tried to count its bytes; nothing was stored or counted, retry", {"field": "blob_quota"})
            assert rival.rivals == MAX_SWAPS  # tried that many times, not forever
            assert (await store.quota.held("alice"), await store.quota.total()) == (16_384, 16_384)
        # the same counts, uncontended, take the bytes at the first try (a new object of 5,000 bytes: 12,288)
        await Reservation(store.quota, "alice").take(5_000)
        assert (await store.quota.held("alice"), await store.quota.total()) == (28_672, 28_672)
    finally:
        await link.close()


async def test_a_client_with_a_long_id_is_counted_and_leaves_the_cluster_connection_up(nats_server: NatsServer) -> None:
    """Session 15 (probe6, S15-5): a client's count was keyed by its id in base64, and the key of a 3,500-character
    owner made a subject past nats-server's max_control_line (4 KiB): the server closed the connection and nats-py
    gave it up for good — the upload timed out after 5 s and every later one on that gateway (alice's) failed
    `nats: connection closed`. (Client ids are shorter today; a long `client_prefix` could reach it.) Now a long id
    is keyed by its digest: counted, held to its quota, the connection up."""
    config = ClusterConfig(nats=nats_server.url, name=cluster_name())
    store, link = await open_object_store(config, max_bytes_per_client=100_000, max_bytes=1 << 20)
    long_id = "https://idp.example/users/" + "x" * 3500
    try:
        assert store.quota is not None
        await store.put_stream(chunked(b"l" * 60_000), owner=long_id)
        with pytest.raises(ClientQuotaExceeded):
            await store.put_stream(chunked(b"m" * 60_000), owner=long_id)
        assert link.nc.is_connected  # before: closed by the server, never reconnected
        await store.put_stream(chunked(b"a" * 10_000), owner="alice")
        assert (await store.quota.held(long_id), await store.quota.held("alice"), await store.quota.total()) == (
            65_536, 16_384, 81_920)
        assert len(_key(long_id)) == 68 and _key("alice") == "f.c.YWxpY2U="  # short ids: in base64
    finally:
        await link.close()


class ContendedUploads(ObjectBlobStore):
    """The store as a gateway sees it while chunks keep being recorded to the upload it aborts: before each of its
    deletes over the record's revision, a rival's write of the same record (a real write on the server)."""

    rivals = 0

    async def _drop_record(self, upload_id: str, revision: int) -> bool:
        self.rivals += 1
        entry = await self._uploads.get(upload_id)
        await self._uploads.put(upload_id, entry.value)
        return await super()._drop_record(upload_id, revision)


async def test_an_abort_whose_upload_keeps_changing_is_given_up_after_a_bounded_number_of_tries(
        nats_server: NatsServer) -> None:
    """The abort's compare-and-delete of an upload's record is tried at most `MAX_SWAPS` times: then 503 naming the
    upload, nothing deleted or freed; an abort that is not raced frees the upload's bytes."""
    config = ClusterConfig(nats=nats_server.url, name=cluster_name())
    store, link = await open_object_store(config, max_bytes_per_client=100_000, max_bytes=1 << 20)
    rival_link = await ClusterLink(config).connect()
    try:
        upload = await store.begin_upload(owner="alice")
        await store.append(upload, 0, chunked(b"u" * 10_000))
        rival = ContendedUploads(rival_link)
        await rival.setup(max_bytes_per_client=100_000, max_bytes=1 << 20)
        with pytest.raises(ClusterError) as info:
            await rival.abort_upload(upload)
        assert (info.value.http_status, info.value.message) == (
            503, f"upload {upload}: its record was changed {MAX_SWAPS} times in a row while this gateway aborted it "
            "(chunks are being sent to it); nothing was deleted, retry")
        assert rival.rivals == MAX_SWAPS
        assert store.quota is not None
        assert await store.upload_offset(upload) == 10_000 and await store.quota.held("alice") == 16_384
        await store.abort_upload(upload)
        assert await store.quota.held("alice") == 0
    finally:
        await rival_link.close()
        await link.close()


async def test_many_tiny_blobs_are_refused_once_their_footprint_reaches_the_quota_on_either_gateway(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 15 (probe6's open finding, as tests/security/test_blob_quota.py replays it on one gateway): 8-byte blobs
    were counted 8 bytes each. Charged their footprint (8,192) in the Object Store's shared counts as in the local
    store, alice's tiny blobs spread over two gateways fill her quota of 81,920 at ten, and every further one — and an
    upload begun — is refused on either gateway in the quota's words; carol's fill the store's 122,880 (507) at the
    fifteenth blob of the cluster. The same bytes again count once."""
    cfg = {"blob_max_bytes_per_client": 10 * 8192, "blob_max_bytes": 15 * 8192}
    async with two_gateways(nats_server.url, monkeypatch, **cfg) as ((a, url_a), (b, url_b)):
        urls = (url_a, url_b)
        async with httpx.AsyncClient(timeout=30) as c:
            mine = [await c.post(urls[i % 2] + "/blobs", content=i.to_bytes(8, "big"), headers=ALICE)
                    for i in range(14)]
            upload = await c.post(url_b + "/blobs/uploads", headers=ALICE)
            again = await c.post(url_b + "/blobs", content=(0).to_bytes(8, "big"), headers=CAROL)  # counted once
            hers = [await c.post(urls[i % 2] + "/blobs", content=(100 + i).to_bytes(8, "big"), headers=CAROL)
                    for i in range(7)]
            counts = await held(b, "alice", "carol")
    assert [r.status_code for r in mine] == [201] * 10 + [413] * 4  # before: all 201, 112 bytes counted
    for r, more in [(r, 8_192) for r in mine[10:]] + [(upload, 4_096)]:
        assert r.json()["error"]["message"] == client_quota_message(81_920, more, 81_920)
        assert setting(r) == "blob_max_bytes_per_client"
    assert again.status_code == 201
    assert [r.status_code for r in hers] == [201] * 5 + [507] * 2
    for r in hers[5:]:
        assert r.json()["error"]["message"] == (
            "the blob store is full: it holds 122880 bytes, 8192 more would pass its quota of 122880 bytes "
            "(blob_max_bytes); retry later or send a smaller payload")
    assert counts == (81_920, 40_960, 122_880)


async def test_an_uploads_chunks_are_charged_the_blocks_they_add_whichever_gateway_takes_them(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    async with two_gateways(nats_server.url, monkeypatch, blob_max_bytes_per_client=16_384) as ((a, url_a), (b, url_b)):
        async with httpx.AsyncClient(timeout=30) as c:
            answers = await fill_by_upload_chunks(c, lambda i: (url_a, url_b)[i % 2], ALICE)
            counts = await held(a, "alice")
    assert_filled_by_upload_chunks(answers, counts)
