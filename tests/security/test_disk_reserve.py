"""The blob store keeps disk space free (round 4): any client could fill the disk with `POST /blobs` and resumable
uploads (each up to `max_upload_bytes`, 8 GiB, with no total). A write that would leave less than
`blob_min_free_bytes` free is refused with 507, the bytes already written of a single-shot upload removed."""

from __future__ import annotations

import os
import shutil

import httpx

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
