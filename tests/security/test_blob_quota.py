"""Byte quotas of the blob store (round 4): with only the disk reserve, one client with a credential could fill the
disk down to `blob_min_free_bytes` and leave nothing for the others. Each client may hold
`blob_max_bytes_per_client` in blobs and uploads (413 past it), the store `blob_max_bytes` (507); a body whose
Content-Length passes a quota is refused before it is read, one without is refused at the chunk that passes it,
and nothing of a refused body stays on disk. Counts survive a restart and are freed by deletion and abort.

What is counted is each blob's and upload's footprint (`payload.quota.footprint`, session 15): its bytes in whole
4 KiB blocks plus one block, so 60,000 bytes are charged 65,536, 40,000 bytes 45,056, an upload begun 4,096."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from tests.security.conftest import API_KEY, CAROL, TOKEN, bearer, post, secured, send_body

ALICE = {"Authorization": f"Bearer {TOKEN}"}
QUOTA = 114_688
"""alice's quota where she stores 60,000 bytes (65,536 charged), begins an upload (4,096) and stores 40,000 (45,056):
exactly full."""
CAROL_H = {"Authorization": f"Bearer {CAROL}"}


def client_quota_message(held: int, more: int, limit: int, client: str = "alice") -> str:
    return (f"blob quota exceeded: client {client!r} holds {held} bytes in blobs and uploads, {more} more would pass "
            f"its quota of {limit} bytes (blob_max_bytes_per_client); abort its unfinished uploads, delete blobs it "
            "no longer needs (URLs signed for DELETE) or send a smaller payload")


def setting(r: httpx.Response) -> Any:
    return r.json()["error"]["data"]["setting"]


async def chunked(data: bytes, size: int = 16_384) -> AsyncIterator[bytes]:
    """A body without Content-Length (chunked transfer encoding)."""
    for i in range(0, len(data), size):
        yield data[i:i + size]


def assert_alice_refused_past_her_quota(declared: httpx.Response, *chunked_ones: httpx.Response) -> None:
    """alice, holding 60 KB (65,536 charged) of her `QUOTA`, refused 60 KB more: with a Content-Length before the body is
    read (413, the exact message), and without one at the chunk that passes the quota; no other client named."""
    assert declared.status_code == 413
    assert declared.json()["error"]["message"] == client_quota_message(65_536, 65_536, QUOTA)
    assert setting(declared) == "blob_max_bytes_per_client"
    for r in chunked_ones:  # no Content-Length: refused at the chunk that passes the quota
        assert r.status_code == 413 and setting(r) == "blob_max_bytes_per_client"
        message = r.json()["error"]["message"]
        assert message.startswith("blob quota exceeded: client 'alice' holds ")
        assert message.endswith(client_quota_message(0, 0, QUOTA).split(" more would pass ")[1])
        assert "carol" not in message


def assert_the_store_full_past_100_kb(first: httpx.Response, full: httpx.Response, streamed: httpx.Response) -> None:
    """60 KB stored (65,536 charged) of the store's 100 KB (`blob_max_bytes`), then 60 KB more refused for any client:
    507 with the exact message when the length is declared, 507 at the chunk that passes the quota when it is not."""
    assert first.status_code == 201
    assert full.status_code == 507 and setting(full) == "blob_max_bytes"
    assert full.json()["error"]["message"] == (
        "the blob store is full: it holds 65536 bytes, 65536 more would pass its quota of 100000 bytes "
        "(blob_max_bytes); retry later or send a smaller payload")
    assert streamed.status_code == 507 and setting(streamed) == "blob_max_bytes"


def left_on_disk(root: Path) -> list[str]:
    return sorted(os.listdir(root / "tmp"))


async def test_a_client_over_its_quota_gets_413_and_another_client_still_uploads(tmp_path):
    cfg = {"blob_dir": str(tmp_path), "blob_max_bytes_per_client": QUOTA}
    async with secured(cfg) as (_, url, _), httpx.AsyncClient(timeout=30) as c:
        first = await c.post(url + "/blobs", content=b"a" * 60_000, headers=ALICE)
        declared = await c.post(url + "/blobs", content=b"b" * 60_000, headers=ALICE)
        streamed = await c.post(url + "/blobs", content=chunked(b"c" * 60_000), headers=ALICE)
        begun = (await c.post(url + "/blobs/uploads", headers=ALICE)).json()
        where = f"{url}/blobs/uploads/{begun['uploadId']}"
        patch = await c.patch(where, content=chunked(b"d" * 50_000), headers=ALICE | {"Upload-Offset": "0"})
        offset = (await c.get(where, headers=ALICE)).json()["offset"]
        small = await c.post(url + "/blobs", content=b"e" * 40_000, headers=ALICE)  # still fits: QUOTA exactly
        other = await c.post(url + "/blobs", content=b"f" * 60_000, headers=CAROL_H)
    assert first.status_code == 201 and small.status_code == 201 and other.status_code == 201
    assert_alice_refused_past_her_quota(declared, streamed, patch)
    assert offset == 0  # the refused chunk was not kept
    assert left_on_disk(tmp_path) == []


async def test_the_store_quota_is_507_for_every_client(tmp_path):
    cfg = {"blob_dir": str(tmp_path), "blob_max_bytes": 100_000}
    async with secured(cfg) as (_, url, _), httpx.AsyncClient(timeout=30) as c:
        first = await c.post(url + "/blobs", content=b"a" * 60_000, headers=ALICE)
        full = await c.post(url + "/blobs", content=b"b" * 60_000, headers=CAROL_H)
        streamed = await c.post(url + "/blobs", content=chunked(b"c" * 60_000), headers=CAROL_H)
    assert_the_store_full_past_100_kb(first, full, streamed)
    assert left_on_disk(tmp_path) == []


async def test_counts_survive_a_restart(tmp_path):
    cfg = {"blob_dir": str(tmp_path), "blob_max_bytes_per_client": 100_000}
    async with secured(cfg) as (_, url, _), httpx.AsyncClient(timeout=30) as c:
        assert (await c.post(url + "/blobs", content=b"a" * 60_000, headers=ALICE)).status_code == 201
        begun = (await c.post(url + "/blobs/uploads", headers=ALICE)).json()
        patch = await c.patch(f"{url}/blobs/uploads/{begun['uploadId']}", content=b"b" * 20_000,
                              headers=ALICE | {"Upload-Offset": "0"})
        assert patch.status_code == 200
    async with secured(cfg) as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        assert gw.store.quota.held("alice") == 90_112 and gw.store.quota.total == 90_112  # 65,536 and 24,576
        over = await c.post(url + "/blobs", content=b"c" * 30_000, headers=ALICE)
        other = await c.post(url + "/blobs", content=b"c" * 30_000, headers=CAROL_H)
    assert over.status_code == 413
    assert over.json()["error"]["message"] == client_quota_message(90_112, 36_864, 100_000)
    assert other.status_code == 201


async def test_deleting_a_blob_and_aborting_an_upload_free_the_quota(tmp_path):
    cfg = {"blob_dir": str(tmp_path), "blob_max_bytes_per_client": 100_000, "blob_max_bytes": 150_000}
    async with secured(cfg) as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        blob = (await c.post(url + "/blobs", content=b"a" * 60_000, headers=ALICE)).json()
        refused = await c.post(url + "/blobs", content=b"b" * 60_000, headers=ALICE)
        deleted = await c.delete(f"{url}{gw.signer.sign(blob['sha256'], 'DELETE')}")
        again = await c.post(url + "/blobs", content=b"b" * 60_000, headers=ALICE)
        begun = (await c.post(url + "/blobs/uploads", headers=ALICE)).json()
        where = f"{url}/blobs/uploads/{begun['uploadId']}"
        await c.patch(where, content=b"c" * 20_000, headers=ALICE | {"Upload-Offset": "0"})
        held = gw.store.quota.held("alice")
        aborted = await c.delete(where, headers=ALICE)
        after = gw.store.quota.held("alice"), gw.store.quota.total
    assert refused.status_code == 413 and deleted.status_code == 204 and again.status_code == 201
    assert held == 65_536 + 24_576 and aborted.status_code == 204
    assert after == (65_536, 65_536)


async def test_the_same_content_twice_is_counted_once(tmp_path):
    """Blobs are content-addressed: a second copy adds no bytes, the first owner keeps the count."""
    cfg = {"blob_dir": str(tmp_path), "blob_max_bytes_per_client": 100_000}
    async with secured(cfg) as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        one = await c.post(url + "/blobs", content=b"a" * 40_000, headers=ALICE)
        two = await c.post(url + "/blobs", content=b"a" * 40_000, headers=CAROL_H)
        counts = gw.store.quota.held("alice"), gw.store.quota.held("carol"), gw.store.quota.total
    assert one.status_code == two.status_code == 201
    assert counts == (45_056, 0, 45_056)


async def test_blob_max_age_frees_a_full_quota(tmp_path):
    """Clients cannot delete their blobs without a URL signed for DELETE: `blob_max_age_s` is what frees a quota
    (here the pruning the gateway runs at start deletes the blob stored by its last run)."""
    cfg = {"blob_dir": str(tmp_path), "blob_max_bytes_per_client": 100_000}
    async with secured(cfg) as (_, url, _), httpx.AsyncClient(timeout=30) as c:
        key = (await c.post(url + "/blobs", content=b"a" * 60_000, headers=ALICE)).json()["sha256"]
    os.utime(tmp_path / "objects" / key[:2] / key, (1_000_000_000, 1_000_000_000))
    async with secured(cfg | {"blob_max_age_s": 3600}) as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        for _ in range(1000):  # the pruning task runs once the gateway has started
            if gw.store.quota.total == 0:
                break
            await asyncio.sleep(0.01)
        after = await c.post(url + "/blobs", content=b"b" * 60_000, headers=ALICE)
    assert after.status_code == 201
    assert not (tmp_path / "objects" / key[:2] / key).exists()


async def test_parts_the_gateway_offloads_count_in_the_senders_quota(tmp_path, monkeypatch):
    """A large inline part is stored by the gateway (offload): without counting it, a client would fill the store
    through messages past its own quota."""
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)
    cfg = {"blob_dir": str(tmp_path), "blob_max_bytes_per_client": 100_000, "offload_threshold": 10_000}

    def message(fill: bytes) -> dict[str, Any]:
        return send_body(parts=[{"raw": base64.b64encode(fill * 60_000).decode(), "mediaType": "text/plain"}])

    async with secured(cfg) as (gw, url, _):
        first = await post(url, "/", message(b"a"), bearer(TOKEN))
        held = gw.store.quota.held("alice")
        second = await post(url, "/", message(b"b"), bearer(TOKEN))
        other = await post(url, "/", message(b"c"), {"X-API-Key": API_KEY, "A2A-Version": "1.0"})
        after = gw.store.quota.held("alice")
    assert "result" in first.json() and held == 65_536
    refused = second.json()["error"]["message"]
    assert refused.startswith("blob quota exceeded: client 'alice' holds 65536 bytes in blobs and uploads, ")
    assert refused.endswith(client_quota_message(0, 0, 100_000).split(" more would pass ")[1])
    assert after == held  # nothing of the refused part was kept
    assert "result" in other.json()


async def test_many_tiny_blobs_are_refused_once_their_footprint_reaches_the_quota(tmp_path):
    """Session 15 (probe6's open finding): the quotas counted content bytes, so carol's 1,000 blobs of 8 bytes were
    counted 8,000 bytes and took 8,996 KiB of disk and 2,000 inodes; at 1 GiB a client could store ~134 million of
    them. Each blob is now charged its footprint (8 bytes: one block and the object's, 8,192): ten fill a quota of
    81,920, every further one is refused with the quota's exact words (a declared length or not), and so is an upload
    begun (its files: 4,096). What the blobs take on the disk is at most what they are charged, and the same bytes
    again are counted once."""
    cfg = {"blob_dir": str(tmp_path), "blob_max_bytes_per_client": 10 * 8192}
    async with secured(cfg) as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        answers = [await c.post(url + "/blobs", content=i.to_bytes(8, "big"), headers=ALICE) for i in range(9)]
        again = await c.post(url + "/blobs", content=(0).to_bytes(8, "big"), headers=CAROL_H)  # alice's: counted once
        answers += [await c.post(url + "/blobs", content=i.to_bytes(8, "big"), headers=ALICE) for i in range(9, 14)]
        streamed = await c.post(url + "/blobs", content=chunked(b"tinyblob"), headers=ALICE)
        upload = await c.post(url + "/blobs/uploads", headers=ALICE)
        other = await c.post(url + "/blobs", content=b"carol's8", headers=CAROL_H)
        counts = gw.store.quota.held("alice"), gw.store.quota.held("carol"), gw.store.quota.total
    assert [r.status_code for r in answers] == [201] * 10 + [413] * 4  # before: all 201, 112 bytes counted
    for r, more in [(r, 8_192) for r in answers[10:] + [streamed]] + [(upload, 4_096)]:
        assert r.json()["error"]["message"] == client_quota_message(81_920, more, 81_920)
        assert setting(r) == "blob_max_bytes_per_client"
    assert upload.status_code == 413 and again.status_code == 201 and other.status_code == 201
    assert counts == (81_920, 8_192, 90_112)
    files = [p for p in (tmp_path / "objects").rglob("*") if p.is_file()]
    assert len(files) == 2 * 11  # alice's ten blobs and carol's one: the bytes and a sidecar each
    assert sum(p.stat().st_blocks * 512 for p in files) <= counts[2]  # on this disk (ext4): 90,112 exactly
    assert left_on_disk(tmp_path) == [] and os.listdir(tmp_path / "uploads") == []


async def fill_by_upload_chunks(c: httpx.AsyncClient, url_of: Any, alice: dict[str, str] = ALICE
                                ) -> list[httpx.Response]:
    """alice, with a quota of 16,384, begins an upload (4,096) and sends it 4,096-byte chunks, `url_of(i)` the gateway
    of the i-th request: two fit (a block each), a chunk of 4,097 bytes would need two more blocks and is refused before
    it is read, one of 4,096 fills the quota exactly; the upload then finishes into a blob charged the same."""
    begun = await c.post(url_of(0) + "/blobs/uploads", headers=alice)
    assert begun.status_code == 201, begun.text
    where = begun.json()["uploadId"]
    answers = []
    for i, (offset, size) in enumerate([(0, 4096), (4096, 4096), (8192, 4097), (8192, 4096)]):
        answers.append(await c.patch(f"{url_of(i + 1)}/blobs/uploads/{where}", content=b"u" * size,
                                     headers=alice | {"Upload-Offset": str(offset)}))
    answers.append(await c.post(f"{url_of(5)}/blobs/uploads/{where}/finish", headers=alice))
    return answers


def assert_filled_by_upload_chunks(answers: list[httpx.Response], counts: tuple[int, ...]) -> None:
    assert [r.status_code for r in answers] == [200, 200, 413, 200, 201]
    assert answers[2].json()["error"]["message"] == client_quota_message(12_288, 8_192, 16_384)
    assert answers[4].json()["size"] == 12_288 and counts == (16_384, 16_384)


async def test_an_uploads_chunks_are_charged_the_blocks_they_add(tmp_path):
    cfg = {"blob_dir": str(tmp_path), "blob_max_bytes_per_client": 16_384}
    async with secured(cfg) as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        answers = await fill_by_upload_chunks(c, lambda i: url)
        counts = gw.store.quota.held("alice"), gw.store.quota.total
    assert_filled_by_upload_chunks(answers, counts)
