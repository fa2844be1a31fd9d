"""The blob store keeps disk space free (round 4): any client could fill the disk with `POST /blobs` and resumable
uploads (each up to `max_upload_bytes`, 8 GiB, with no total). A write that would leave less than
`blob_min_free_bytes` free is refused with 507, the bytes already written of a single-shot upload removed."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from mma2a.errors import InsufficientStorage
from mma2a.payload.store import LocalBlobStore
from tests.security.conftest import TOKEN, secured


async def test_uploads_stop_at_the_disk_reserve_with_507(tmp_path):
    reserve = shutil.disk_usage(tmp_path).total + 1  # more than the disk holds: every write is refused
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with secured({"blob_dir": str(tmp_path), "blob_min_free_bytes": reserve}) as (gw, url, _), \
            httpx.AsyncClient(timeout=30) as c:
        put = await c.post(url + "/blobs", content=b"x" * 200_000, headers=auth | {"Content-Type": "text/plain"})
        begun = (await c.post(url + "/blobs/uploads", headers=auth)).json()
        where = f"{url}/blobs/uploads/{begun['uploadId']}"
        patch = await c.patch(where, content=b"y" * 200_000, headers=auth | {"Upload-Offset": "0"})
        offset = (await c.get(where, headers=auth)).json()["offset"]
    for r in (put, patch):
        assert r.status_code == 507
        message = r.json()["error"]["message"]
        assert message.startswith("the blob store is full: ") and message.endswith(
            f"bytes free on its disk, {reserve} kept in reserve (blob_min_free_bytes); retry later or send a smaller payload")
    assert offset == 0  # nothing of the refused chunk was written
    assert os.listdir(tmp_path / "tmp") == [] and os.listdir(tmp_path / "objects") == []


INODE_REFUSAL = re.compile(r"the blob store is full: (\d+) files \(inodes\) free on its disk, (\d+) kept in reserve "
                           r"\(blob_min_free_inodes\); retry later")


async def test_blobs_and_uploads_stop_at_the_inode_reserve_with_507(tmp_path):
    """Session 16 (tinyblobs' leftover): the store checked the disk's free bytes, not its free files, and each blob
    or upload takes two (its bytes and its sidecar): 1,000 blobs of 8 bytes took 2,000 inodes and ~8 MiB, far from any
    byte reserve. A blob, an empty one and an upload begun with fewer free inodes than `blob_min_free_inodes` are
    refused 507 naming the reserve and the setting, nothing of them left."""
    reserve = os.statvfs(tmp_path).f_files + 1  # more than the disk holds at all: every new file is refused, however
    # many files other processes free meanwhile (its free count + 1 was passed when a parallel test freed two)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with secured({"blob_dir": str(tmp_path), "blob_min_free_inodes": reserve}) as (gw, url, _), \
            httpx.AsyncClient(timeout=30) as c:
        put = await c.post(url + "/blobs", content=b"tinyblob", headers=auth | {"Content-Type": "text/plain"})
        empty = await c.post(url + "/blobs", content=b"", headers=auth | {"Content-Type": "text/plain"})
        begun = await c.post(url + "/blobs/uploads", headers=auth)
    for r in (put, empty, begun):
        assert r.status_code == 507, r.text  # before: 201 (and the setting unknown)
        message = INODE_REFUSAL.fullmatch(r.json()["error"]["message"])
        assert message is not None and int(message[2]) == reserve and int(message[1]) < reserve
    assert os.listdir(tmp_path / "tmp") == [] and os.listdir(tmp_path / "objects") == []
    assert os.listdir(tmp_path / "uploads") == []


@contextlib.contextmanager
def small_tmpfs(path: Path, inodes: int) -> Iterator[Path]:
    """A tmpfs of `inodes` files mounted at `path` (root only: skipped otherwise), unmounted at the end."""
    path.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=4m,nr_inodes={inodes},mode=0700", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


async def test_many_tiny_blobs_stop_at_the_inode_reserve_of_a_small_filesystem(tmp_path):
    """On a real filesystem of 64 inodes: carol's 8-byte blobs are stored until the next would leave fewer than the
    reserve free, then refused 507 (blobs and uploads), the reserve left free. Before: the blobs ran the filesystem
    out of inodes (20 stored, then `OSError: No space left on device` writing a sidecar, the store's files down to 1)."""
    reserve = 16
    with small_tmpfs(tmp_path / "small", 64) as root:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with secured({"blob_dir": str(root), "blob_min_free_inodes": reserve, "blob_min_free_bytes": 0}) as (
                gw, url, _), \
                httpx.AsyncClient(timeout=30) as c:
            answers = []
            for n in range(40):
                answers.append(await c.post(url + "/blobs", content=n.to_bytes(8, "big"), headers=auth))
                if answers[-1].status_code != 201:
                    break
            begun = await c.post(url + "/blobs/uploads", headers=auth)
            free = os.statvfs(root).f_favail
        stored = [r for r in answers if r.status_code == 201]
        assert 0 < len(stored) == len(answers) - 1  # stored until the reserve, then refused
        for r in (answers[-1], begun):
            assert r.status_code == 507, r.text
            message = INODE_REFUSAL.fullmatch(r.json()["error"]["message"])
            assert message is not None and int(message[2]) == reserve
        assert reserve <= free < reserve + 2  # the reserve kept, and the store went up to it
        assert len([f for f in os.listdir(root / "objects") for _ in os.listdir(root / "objects" / f)]) == 2 * len(stored)


def test_a_filesystem_without_a_count_of_inodes_is_checked_for_bytes_only(tmp_path, monkeypatch):
    """btrfs and some network filesystems report no inodes (`f_files` 0, `f_favail` 0): none to run out of, so the
    inode reserve refuses nothing there (os.statvfs stands in for such a filesystem, which cannot be mounted here)."""
    real = os.statvfs(tmp_path)
    fields = {name: getattr(real, name) for name in dir(real) if name.startswith("f_")}
    monkeypatch.setattr(os, "statvfs", lambda _path: SimpleNamespace(**(fields | {
        "f_files": 0, "f_ffree": 0, "f_favail": 0})))
    store = LocalBlobStore(tmp_path / "blobs", min_free_inodes=16_384)

    async def put() -> str:
        async def one() -> AsyncIterator[bytes]:
            yield b"tinyblob"
        return (await store.put_stream(one())).key

    assert asyncio.run(put()) == hashlib.sha256(b"tinyblob").hexdigest()
    monkeypatch.setattr(os, "statvfs", lambda _path: SimpleNamespace(**(fields | {"f_files": 100, "f_favail": 3})))
    with pytest.raises(InsufficientStorage, match=r"3 files \(inodes\) free on its disk, 16384 kept in reserve"):
        asyncio.run(put())  # the same store on a filesystem that counts them: refused
