"""`ObjectBlobStore`: the payload `BlobStore` on the NATS JetStream Object Store, for clusters.

The layout is the Object Store's own (stream `OBJ_<bucket>`, chunks on `$O.<bucket>.C.<nuid>`,
the object's info on `$O.<bucket>.M.<base64url(name)>`), so `nats object get` reads what we
store. Objects are named by the SHA-256 of their bytes; chunks are published as they arrive
(acks pipelined) and read back one at a time, so memory stays bounded by the chunk size.
The info is published last, so a reader never sees a half-written blob; storing bytes
already present drops the new chunks. Resumable uploads keep their chunks under their own
subject, with the accepted chunks' sequence numbers in a KV record (any gateway can resume
an upload); `finish` copies them into the blob, hashing as it goes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import secrets
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

import orjson
from nats.js import api
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError

from ..errors import (
    ClusterError,
    PayloadError,
    PayloadNotFound,
    PayloadTooLarge,
    RangeNotSatisfiable,
    UploadOffsetMismatch,
)
from ..gateway.cluster_config import ClusterConfig
from ..payload.store import (
    DEFAULT_MEDIA_TYPE,
    BlobInfo,
    BlobStore,
    check_key,
    check_sha256,
    check_upload_id,
    digest_mismatch,
)

from .link import ClusterLink, Connected, ensure_kv

CHUNK_SIZE = 128 * 1024
"""The Object Store's default chunk size (well under NATS's 1 MB message limit)."""
ACK_WINDOW = 16
"""Chunks published before waiting for their acks."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode()


async def _rechunk(chunks: AsyncIterator[bytes], size: int = CHUNK_SIZE) -> AsyncIterator[bytes]:
    """The bytes of `chunks` in pieces of exactly `size` (the last one shorter)."""
    buf = bytearray()
    async for chunk in chunks:
        buf += chunk
        while len(buf) >= size:
            yield bytes(buf[:size])
            del buf[:size]
    if buf:
        yield bytes(buf)


class ObjectBlobStore(BlobStore):
    """Blobs in a JetStream Object Store bucket shared by every gateway of the cluster."""

    def __init__(self, cluster: Connected) -> None:
        self.cluster = cluster
        self.bucket = cluster.names.blobs_bucket
        self.stream = f"OBJ_{self.bucket}"
        self._uploads: Any = None
        self._locks: dict[str, asyncio.Lock] = {}

    @property
    def js(self) -> Any:
        if self.cluster.js is None:
            raise ClusterError("blob store: not connected to the cluster yet", field="cluster")
        return self.cluster.js

    async def setup(self) -> None:
        js, c = self.js, self.cluster.config
        try:
            await js.object_store(self.bucket)
        except Exception:
            with contextlib.suppress(Exception):  # created concurrently by another gateway
                await js.create_object_store(self.bucket, config=api.ObjectStoreConfig(replicas=c.replicas))
        self._uploads = await ensure_kv(js, self.cluster.names.bucket("uploads"), ttl=24 * 3600.0, replicas=c.replicas)

    def _chunk_subject(self, nuid: str) -> str:
        return f"$O.{self.bucket}.C.{nuid}"

    def _meta_subject(self, key: str) -> str:
        return f"$O.{self.bucket}.M.{_b64(key.encode())}"

    # --- writing ------------------------------------------------------------------------
    async def _publish_all(self, subject: str, pieces: AsyncIterator[bytes], *, max_size: int | None,
                           what: str) -> tuple[str, int, int]:
        """Publish every piece to `subject`, acks pipelined; returns (sha256, size, chunks)."""
        js, h, size, n = self.js, hashlib.sha256(), 0, 0
        window: list[asyncio.Future[Any]] = []
        try:
            async for piece in pieces:
                size += len(piece)
                if max_size is not None and size > max_size:
                    raise PayloadTooLarge(f"{what} is larger than the limit of {max_size} bytes", field="body")
                h.update(piece)
                window.append(await js.publish_async(subject, piece))
                n += 1
                if len(window) >= ACK_WINDOW:
                    await asyncio.gather(*window)
                    window.clear()
            await asyncio.gather(*window)
        except BaseException:
            with contextlib.suppress(Exception):  # let published chunks land, then drop them all
                await asyncio.wait_for(asyncio.gather(*window, return_exceptions=True), 5)
            with contextlib.suppress(Exception):
                await js.purge_stream(self.stream, subject=subject)
            raise
        return h.hexdigest(), size, n

    async def _commit(self, nuid: str, key: str, size: int, chunks: int, media_type: str) -> BlobInfo:
        """Publish the object's info (its name is its digest); if it is already stored, drop the new chunks."""
        try:
            first = await self.stat(key)
            await self.js.purge_stream(self.stream, subject=self._chunk_subject(nuid))
            return BlobInfo(key, size, first.media_type)  # the first media type stays (never rewritten by another)
        except PayloadNotFound:
            pass
        info = {
            "name": key, "bucket": self.bucket, "nuid": nuid, "size": size, "chunks": chunks,
            "mtime": datetime.now(timezone.utc).isoformat(),
            "digest": "SHA-256=" + _b64(bytes.fromhex(key)),
            "headers": {"Content-Type": [media_type]}, "options": {"max_chunk_size": CHUNK_SIZE},
        }
        await self.js.publish(self._meta_subject(key), orjson.dumps(info), headers={api.Header.ROLLUP: "sub"})
        return BlobInfo(key, size, media_type)

    async def put_stream(
        self,
        chunks: AsyncIterator[bytes],
        media_type: str = DEFAULT_MEDIA_TYPE,
        *,
        sha256: str | None = None,
        max_size: int | None = None,
        owner: str | None = None,
    ) -> BlobInfo:
        expected = None if sha256 is None else check_sha256(sha256)
        nuid = secrets.token_hex(11)
        key, size, n = await self._publish_all(self._chunk_subject(nuid), _rechunk(chunks), max_size=max_size, what="blob")
        if expected is not None and key != expected:
            await self.js.purge_stream(self.stream, subject=self._chunk_subject(nuid))
            raise digest_mismatch("the body", key, expected)
        return await self._commit(nuid, key, size, n, media_type)

    # --- reading ------------------------------------------------------------------------
    async def _info(self, key: str) -> dict[str, Any]:
        check_key(key)
        try:
            msg = await self.js.get_msg(self.stream, subject=self._meta_subject(key))
        except NotFoundError:
            raise PayloadNotFound(f"blob {key} not found", field="key") from None
        info: dict[str, Any] = orjson.loads(msg.data)
        if info.get("deleted"):
            raise PayloadNotFound(f"blob {key} not found", field="key")
        return info

    async def stat(self, key: str) -> BlobInfo:
        info = await self._info(key)
        media = ((info.get("headers") or {}).get("Content-Type") or [DEFAULT_MEDIA_TYPE])[0]
        return BlobInfo(key, int(info.get("size") or 0), media)

    async def _chunks(self, subject: str) -> AsyncIterator[bytes]:
        """Every message on `subject`, in order, one request each (nothing buffered ahead)."""
        seq = 0
        while True:
            try:
                msg = await self.js.get_msg(self.stream, seq=seq + 1, subject=subject, next=True)
            except NotFoundError:
                return
            seq = msg.seq
            yield msg.data or b""

    async def open_range(self, key: str, start: int = 0, end: int | None = None) -> AsyncIterator[bytes]:
        info = await self._info(key)
        total = int(info.get("size") or 0)
        stop = total if end is None else end
        if start < 0 or stop > total or start > stop:
            raise RangeNotSatisfiable(f"range {start}-{stop} is outside blob {key} of {total} bytes", field="range",
                                      data={"size": total})
        pos = 0
        if stop == start:
            return
        async for data in self._chunks(self._chunk_subject(info["nuid"])):
            lo, hi = pos, pos + len(data)
            pos = hi
            if hi <= start:
                continue
            yield data[max(0, start - lo): min(len(data), stop - lo)]
            if hi >= stop:
                return
        if pos < stop:
            raise PayloadError(f"blob {key} ended early (chunks missing from the object store)", field="key")

    async def delete(self, key: str) -> None:
        info = await self._info(key)
        info.update(deleted=True, size=0, chunks=0, digest="", mtime=datetime.now(timezone.utc).isoformat())
        await self.js.publish(self._meta_subject(key), orjson.dumps(info), headers={api.Header.ROLLUP: "sub"})
        await self.js.purge_stream(self.stream, subject=self._chunk_subject(info["nuid"]))

    # --- resumable uploads ----------------------------------------------------------------
    async def _record(self, upload_id: str) -> tuple[dict[str, Any], int]:
        check_upload_id(upload_id)
        try:
            entry = await self._uploads.get(upload_id)
        except KeyNotFoundError:
            raise PayloadNotFound(f"upload {upload_id} not found", field="uploadId") from None
        return orjson.loads(entry.value), int(entry.revision)

    async def begin_upload(self, media_type: str = DEFAULT_MEDIA_TYPE, *, owner: str | None = None) -> str:
        upload_id = secrets.token_hex(16)
        await self._uploads.create(upload_id, orjson.dumps({"mediaType": media_type, "offset": 0, "seqs": []}))
        return upload_id

    async def upload_offset(self, upload_id: str) -> int:
        return int((await self._record(upload_id))[0]["offset"])

    def _lock(self, upload_id: str) -> asyncio.Lock:
        return self._locks.setdefault(upload_id, asyncio.Lock())

    async def append(
        self, upload_id: str, offset: int, chunks: AsyncIterator[bytes], *, max_size: int | None = None
    ) -> int:
        """Publish the chunk's pieces, then record them; a chunk cut off mid-way is not recorded (resend it)."""
        async with self._lock(upload_id):
            rec, rev = await self._record(upload_id)
            current = int(rec["offset"])
            if offset != current:
                raise UploadOffsetMismatch(f"upload {upload_id}: chunk sent at offset {offset}, expected offset {current}",
                                           field="Upload-Offset", data={"expectedOffset": current})
            subject = self._chunk_subject("up" + upload_id)
            seqs, size = list(rec["seqs"]), current
            async for piece in _rechunk(chunks):
                size += len(piece)
                if max_size is not None and size > max_size:
                    raise PayloadTooLarge(f"upload {upload_id} is larger than the limit of {max_size} bytes", field="body")
                ack = await self.js.publish(subject, piece)
                seqs.append(ack.seq)
            try:
                await self._uploads.update(upload_id, orjson.dumps({**rec, "offset": size, "seqs": seqs}), last=rev)
            except KeyWrongLastSequenceError:
                now = await self.upload_offset(upload_id)
                raise UploadOffsetMismatch(f"upload {upload_id}: another chunk was stored at offset {offset} first",
                                           field="Upload-Offset", data={"expectedOffset": now}) from None
            return size

    async def finish(self, upload_id: str, sha256: str | None = None) -> BlobInfo:
        expected = None if sha256 is None else check_sha256(sha256)
        async with self._lock(upload_id):
            rec, _ = await self._record(upload_id)
            up_subject = self._chunk_subject("up" + upload_id)

            async def pieces() -> AsyncIterator[bytes]:
                for seq in rec["seqs"]:
                    msg = await self.js.get_msg(self.stream, seq=seq)
                    yield msg.data or b""

            nuid = secrets.token_hex(11)
            key, size, n = await self._publish_all(self._chunk_subject(nuid), pieces(), max_size=None, what="upload")
            if expected is not None and key != expected:
                await self.js.purge_stream(self.stream, subject=self._chunk_subject(nuid))
                raise digest_mismatch(f"upload {upload_id}", key, expected)
            info = await self._commit(nuid, key, size, n, rec.get("mediaType", DEFAULT_MEDIA_TYPE))
            await self.js.purge_stream(self.stream, subject=up_subject)
            await self._uploads.delete(upload_id)
        self._locks.pop(upload_id, None)
        return info

    async def abort_upload(self, upload_id: str) -> None:
        async with self._lock(upload_id):
            await self._record(upload_id)
            await self.js.purge_stream(self.stream, subject=self._chunk_subject("up" + upload_id))
            await self._uploads.delete(upload_id)
        self._locks.pop(upload_id, None)


async def open_object_store(config: ClusterConfig) -> tuple[ObjectBlobStore, ClusterLink]:
    """An `ObjectBlobStore` on its own connection (close the link when done)."""
    link = await ClusterLink(config).connect()
    store = ObjectBlobStore(link)
    await store.setup()
    return store, link
