"""LocalBlobStore: content addressing, ranges, key validation, resumable uploads, bounded memory."""

from __future__ import annotations

import hashlib
import os
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mma2a.errors import PayloadError, PayloadNotFound, PayloadTooLarge, RangeNotSatisfiable, UploadOffsetMismatch
from mma2a.payload import LocalBlobStore
from mma2a.payload.quota import footprint, growth
from mma2a.payload.store import LEFT_OVER_S


async def chunks_of(data: bytes, size: int = 100_000) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def file_chunks(path: Path, size: int = 1 << 20) -> AsyncIterator[bytes]:
    with path.open("rb") as fh:
        while block := fh.read(size):
            yield block


async def test_put_stream_is_content_addressed(store: LocalBlobStore) -> None:
    data = os.urandom(1_000_003)
    info = await store.put_stream(chunks_of(data), "image/png")
    assert info.key == hashlib.sha256(data).hexdigest()
    assert (info.size, info.media_type) == (len(data), "image/png")
    assert await store.read_all(info.key) == data
    assert await store.stat(info.key) == info
    again = await store.put_stream(chunks_of(data, 7777), "image/png")
    assert again == info
    files = [p for p in (store.root / "objects").rglob("*") if p.is_file() and p.suffix != ".json"]
    assert len(files) == 1
    assert list((store.root / "tmp").iterdir()) == []


async def test_open_range_reads_slices(store: LocalBlobStore) -> None:
    data = os.urandom(600_000)
    info = await store.put_bytes(data)
    for start, end in [(0, 1), (10, 300_000), (299_999, 600_000), (600_000, 600_000)]:
        got = b"".join([c async for c in store.open_range(info.key, start, end)])
        assert got == data[start:end]
    with pytest.raises(RangeNotSatisfiable) as exc:
        [c async for c in store.open_range(info.key, 10, 600_001)]
    assert exc.value.message == f"range 10-600001 is outside blob {info.key} of 600000 bytes"


@pytest.mark.parametrize("key", ["../../etc/passwd", "..", "ABC", "a" * 63, "A" * 64, "g" * 64, "a" * 64 + "/x"])
async def test_bad_keys_are_refused(store: LocalBlobStore, key: str) -> None:
    with pytest.raises(PayloadError) as exc:
        await store.stat(key)
    assert exc.value.http_status == 400
    assert exc.value.message == f"blob key {key!r} is not a SHA-256 hex digest (64 lower-case hex digits)"


async def test_unknown_blob(store: LocalBlobStore) -> None:
    key = "0" * 64
    with pytest.raises(PayloadNotFound) as exc:
        await store.stat(key)
    assert (exc.value.message, exc.value.http_status) == (f"blob {key} not found", 404)
    with pytest.raises(PayloadNotFound):
        await store.delete(key)


async def test_delete(store: LocalBlobStore) -> None:
    info = await store.put_bytes(b"hello")
    await store.delete(info.key)
    with pytest.raises(PayloadNotFound):
        await store.stat(info.key)


async def test_sha256_check_and_size_limit(store: LocalBlobStore) -> None:
    data = b"x" * 1000
    wrong = "f" * 64
    with pytest.raises(PayloadError) as exc:
        await store.put_stream(chunks_of(data), sha256=wrong)
    assert exc.value.message == f"sha256 mismatch: the body hashes to {hashlib.sha256(data).hexdigest()}, the client said {wrong}"
    with pytest.raises(PayloadError) as exc:
        await store.put_stream(chunks_of(data), sha256="nothex")
    assert exc.value.message == "sha256: 'nothex' is not a SHA-256 hex digest (64 hex digits)"
    with pytest.raises(PayloadTooLarge) as exc2:
        await store.put_stream(chunks_of(data, 100), max_size=500)
    assert exc2.value.message == "blob is larger than the limit of 500 bytes"
    assert list((store.root / "tmp").iterdir()) == []
    ok = await store.put_stream(chunks_of(data), sha256=hashlib.sha256(data).hexdigest().upper())
    assert ok.size == 1000


async def test_resumable_upload(store: LocalBlobStore) -> None:
    data = os.urandom(700_000)
    uid = await store.begin_upload("video/mp4")
    assert await store.upload_offset(uid) == 0
    off = await store.append(uid, 0, chunks_of(data[:300_000]))
    assert off == 300_000
    with pytest.raises(UploadOffsetMismatch) as exc:
        await store.append(uid, 0, chunks_of(data[300_000:]))
    assert exc.value.message == f"upload {uid}: chunk sent at offset 0, expected offset 300000"
    assert (exc.value.http_status, exc.value.data["expectedOffset"]) == (409, 300000)
    off = await store.append(uid, 300_000, chunks_of(data[300_000:]))
    assert off == 700_000
    info = await store.finish(uid, hashlib.sha256(data).hexdigest())
    assert (info.key, info.size, info.media_type) == (hashlib.sha256(data).hexdigest(), 700_000, "video/mp4")
    assert await store.read_all(info.key) == data
    with pytest.raises(PayloadNotFound) as exc2:
        await store.upload_offset(uid)
    assert exc2.value.message == f"upload {uid} not found"


async def test_upload_interrupted_keeps_received_bytes_and_rehashes(store: LocalBlobStore) -> None:
    data = os.urandom(200_000)
    uid = await store.begin_upload()

    async def broken() -> AsyncIterator[bytes]:
        yield data[:50_000]
        raise ConnectionResetError("client went away")

    with pytest.raises(ConnectionResetError):
        await store.append(uid, 0, broken())
    assert await store.upload_offset(uid) == 50_000
    await store.append(uid, 50_000, chunks_of(data[50_000:]))
    info = await store.finish(uid)
    assert info.key == hashlib.sha256(data).hexdigest()


async def test_upload_errors(store: LocalBlobStore) -> None:
    with pytest.raises(PayloadError) as exc:
        await store.append("../x", 0, chunks_of(b"a"))
    assert exc.value.message == "upload id '../x' is not valid (32 lower-case hex digits)"
    uid = await store.begin_upload()
    with pytest.raises(PayloadTooLarge) as exc2:
        await store.append(uid, 0, chunks_of(b"a" * 1000, 100), max_size=500)
    assert exc2.value.message == f"upload {uid} is larger than the limit of 500 bytes"
    assert await store.upload_offset(uid) == 0
    await store.append(uid, 0, chunks_of(b"abc"))
    with pytest.raises(PayloadError) as exc3:
        await store.finish(uid, "0" * 64)
    assert exc3.value.message == f"sha256 mismatch: upload {uid} hashes to {hashlib.sha256(b'abc').hexdigest()}, the client said {'0' * 64}"
    await store.abort_upload(uid)
    with pytest.raises(PayloadNotFound):
        await store.abort_upload(uid)


async def test_memory_stays_bounded_by_chunk_size(store: LocalBlobStore, tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    with src.open("wb") as fh:
        for _ in range(32):
            fh.write(os.urandom(1 << 20))
    tracemalloc.start()
    try:
        info = await store.put_stream(file_chunks(src, 256 * 1024))
        h = hashlib.sha256()
        async for c in store.open_range(info.key):
            h.update(c)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.size == 32 << 20 and h.hexdigest() == info.key
    assert peak < 4 << 20, f"peak traced memory {peak} bytes for a 32 MiB blob"


async def test_prune_deletes_what_is_older_than_the_max_age_and_frees_its_quota(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path, max_bytes_per_client=1_000_000)
    old = await store.put_bytes(b"o" * 1000)
    kept = await store.put_stream(chunks_of(b"k" * 2000), owner="alice")
    again = await store.put_stream(chunks_of(b"a" * 3000), owner="alice")
    stale = await store.begin_upload(owner="alice")
    await store.append(stale, 0, chunks_of(b"u" * 500))
    long_ago = 1_000_000_000.0  # 2001: older than any max age counted from the time given to prune below
    for path in (tmp_path / "objects" / k[:2] / k for k in (old.key, kept.key, again.key)):
        os.utime(path, (long_ago, long_ago))
    os.utime(tmp_path / "uploads" / f"{stale}.part", (long_ago, long_ago))
    await store.put_stream(chunks_of(b"a" * 3000), owner="bob")  # stored again: its age starts again
    os.utime(tmp_path / "objects" / kept.key[:2] / kept.key, (long_ago + 100, long_ago + 100))
    # each blob or upload is charged its bytes in 4 KiB blocks plus one block (quota.footprint): 8192 each here
    assert store.quota.held("alice") == 3 * 8192 and store.quota.total == 4 * 8192

    assert await store.prune(60, now=long_ago + 120) == 2  # old and the stale upload; kept is 20 s old, again new
    assert store.quota.held("alice") == 2 * 8192 and store.quota.held("bob") == 0 and store.quota.total == 2 * 8192
    await store.stat(kept.key)
    await store.stat(again.key)
    with pytest.raises(PayloadNotFound):
        await store.stat(old.key)
    with pytest.raises(PayloadNotFound):
        await store.upload_offset(stale)


async def test_counts_are_rebuilt_from_the_directory(tmp_path: Path) -> None:
    """A blob written before owners were recorded (no `owner` in its sidecar) counts in the total only."""
    store = LocalBlobStore(tmp_path)
    mine = await store.put_stream(chunks_of(b"m" * 700), owner="alice")
    legacy = await store.put_bytes(b"l" * 300)
    meta = tmp_path / "objects" / legacy.key[:2] / f"{legacy.key}.json"
    meta.write_text('{"size": 300, "mediaType": "application/octet-stream"}')
    upload = await store.begin_upload(owner="alice")
    await store.append(upload, 0, chunks_of(b"u" * 50))

    again = LocalBlobStore(tmp_path)
    assert again.quota.held("alice") == 2 * 8192 and again.quota.total == 3 * 8192  # 700, 50 and 300 bytes
    await again.delete(mine.key)
    await again.abort_upload(upload)
    assert again.quota.held("alice") == 0 and again.quota.total == 8192


def test_a_blob_is_charged_its_bytes_in_whole_blocks_plus_one() -> None:
    """`footprint`: what the quotas of both stores count for a blob or upload (session 15: 8-byte blobs were counted
    8 bytes and took 8 KiB and two inodes each); `growth`: what more bytes add, to a new object or to an upload."""
    assert [footprint(n) for n in (0, 1, 8, 4096, 4097, 60_000, 1 << 20)] == [
        4096, 8192, 8192, 8192, 12_288, 65_536, 1_052_672]
    assert growth(None, 0) == 4096 and growth(None, 8) == 8192  # a new object: its own block too
    assert growth(0, 8) == 4096 and growth(8, 4088) == 0 and growth(4096, 1) == 4096  # an upload: the blocks added
    assert sum(growth(i * 1000, 1000) for i in range(60)) + footprint(0) == footprint(60_000)  # chunk by chunk


async def test_files_a_crash_left_are_removed_at_start_and_nothing_else(tmp_path: Path) -> None:
    """A process stopped mid-write leaves its temporary file in `tmp/` (up to a whole body's bytes), one stopped
    between a blob's or upload's two files a sidecar alone: each takes an inode, counted in no quota, and before
    session 16 none was ever removed. The store's start removes those untouched for `LEFT_OVER_S`; younger ones (a
    write going on) and every blob and upload stay."""
    store = LocalBlobStore(tmp_path, max_bytes_per_client=1_000_000)
    blob = await store.put_stream(chunks_of(b"b" * 700), owner="alice")
    upload = await store.begin_upload(owner="alice")
    await store.append(upload, 0, chunks_of(b"u" * 50))
    shard = tmp_path / "objects" / blob.key[:2]
    long_ago = time.time() - LEFT_OVER_S - 60
    left = [tmp_path / "tmp" / "0123.tmp", tmp_path / "tmp" / "0123.meta", shard / f"{'e' * 64}.json",
            tmp_path / "uploads" / f"{'f' * 32}.json"]
    young = [tmp_path / "tmp" / "4567.tmp", shard / f"{'d' * 64}.json"]
    for path in left + young:
        path.write_bytes(b"x" * 100)
    for path in left + [shard / blob.key, shard / f"{blob.key}.json", tmp_path / "uploads" / f"{upload}.part",
                        tmp_path / "uploads" / f"{upload}.json"]:
        os.utime(path, (long_ago, long_ago))  # the blob and the upload as old: kept all the same

    again = LocalBlobStore(tmp_path, max_bytes_per_client=1_000_000)
    assert [p.exists() for p in left] == [False] * 4  # before: all there
    assert all(p.exists() for p in young)
    assert again.quota.held("alice") == 2 * 8192  # 700 and 50 bytes
    assert (await again.stat(blob.key)).size == 700
    assert await again.upload_offset(upload) == 50
