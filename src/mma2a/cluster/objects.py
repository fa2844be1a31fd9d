"""`ObjectBlobStore`: the payload `BlobStore` on the NATS JetStream Object Store, for clusters.

The layout is the Object Store's own (stream `OBJ_<bucket>`, chunks on `$O.<bucket>.C.<nuid>`,
the object's info on `$O.<bucket>.M.<base64url(name)>`), so `nats object get` reads what we
store. Objects are named by the SHA-256 of their bytes; chunks are published as they arrive
(acks pipelined) and read back one at a time, so memory stays bounded by the chunk size.
The info is published last, so a reader never sees a half-written blob; storing bytes
already present drops the new chunks. Resumable uploads keep their chunks under their own
subject, with the accepted chunks' sequence numbers in a KV record (any gateway can resume
an upload); `finish` copies them into the blob, hashing as it goes.

Quotas (`blob_max_bytes`, `blob_max_bytes_per_client`) hold for the whole cluster: the bytes are counted in a KV
bucket shared by every gateway (`blob_quota.SharedByteQuota`) before they are published, and the client a blob is
counted for is in its info's `metadata` (`mma2a-owner`; an upload's in its record). An object's info is written
only over the one it read (JetStream's expected last subject sequence), so two gateways storing the same bytes, or
deleting one blob, at the same moment count it once. `prune` deletes what is older than `blob_max_age_s`, and
uploads idle for longer than their record would live (`UPLOAD_IDLE_S`), freeing their bytes: one gateway a turn.
A client's uploads open at once are counted in the same bucket (`blob_max_uploads_per_client`, 429 past it), and so are
all uploads open, whoever holds them (`blob_max_uploads`: with auth off their one bound but the bytes); the prune that
lists the records sets a count a dead gateway left wrong right (`SharedByteQuota.recount_uploads`). The
records are read streamed (a consumer of the listing's own, pulled a batch at a time), never one `get` each nor all
held at once (docs/security.md, S17-5: 262,144 records, a `get` each, held the loop ~32 s of CPU a round).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

import orjson
from nats.js import api
from nats.js.errors import APIError, KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError

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

from ..payload.quota import footprint, growth
from .blob_quota import MAX_SWAPS, OPEN_TOTAL, Reservation, SharedByteQuota, uploads_key
from .kv_keys import streamed_entries, streamed_last
from .link import ClusterLink, Connected, ensure_kv, reserved

log = logging.getLogger("mma2a.cluster")

CHUNK_SIZE = 128 * 1024
"""The Object Store's default chunk size (well under NATS's 1 MB message limit)."""
ACK_WINDOW = 16
"""Chunks published before waiting for their acks."""
UPLOADS_TTL_S = 24 * 3600.0
"""How long an upload's record lives after its last chunk (the `uploads` bucket's TTL)."""
UPLOAD_IDLE_S = UPLOADS_TTL_S - 3600.0
"""An upload idle this long is aborted by `prune` (its bytes freed) before its record would expire unseen."""
OWNER = "mma2a-owner"
"""The key of the object info's `metadata` naming the client the blob is counted for."""
FREED = "mma2a-freed"
"""In a deleted blob's info, written by a gateway that counts the quotas: the sequence of the blob's first info
(`_first_seq`) and the footprint it takes back from its owner's count (`_stored`: a recount under way counts it, so
the two cancel)."""
FIRST = "mma2a-first"
"""In the info of a blob stored again (its info rewritten, its age started again): the sequence of its first info, so
a recount tells a blob of before (counted by nobody, `_stored`) from one stored since."""
WRONG_LAST_SEQUENCE = (10071, 10164)
"""JetStream's error codes for a write refused because the subject moved past the expected sequence."""


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
        self.quota: SharedByteQuota | None = None
        self._settling: set[asyncio.Future[None]] = set()  # reservations being given back (held until done)

    @property
    def js(self) -> Any:
        if self.cluster.js is None:
            raise ClusterError("blob store: not connected to the cluster yet", field="cluster")
        return self.cluster.js

    async def setup(self, *, max_bytes: int | None = None, max_bytes_per_client: int | None = None,
                    max_uploads_per_client: int | None = None, max_uploads: int | None = None) -> None:
        """Open the Object Store and the uploads' records; with a limit, the cluster's counts of what is held
        (`blob_max_bytes`, `blob_max_bytes_per_client`), counted from the objects when their bucket is new, of each
        client's uploads open (`blob_max_uploads_per_client`) and of all uploads open (`blob_max_uploads`)."""
        js, c = self.js, self.cluster.config
        try:
            await js.object_store(self.bucket)
        except Exception:
            with contextlib.suppress(Exception):  # created concurrently by another gateway
                await js.create_object_store(self.bucket, config=api.ObjectStoreConfig(replicas=c.replicas))
        self._uploads = await ensure_kv(js, self.cluster.names.bucket("uploads"), ttl=UPLOADS_TTL_S, replicas=c.replicas)
        limits = (max_bytes, max_bytes_per_client, max_uploads_per_client, max_uploads)
        if any(limit is not None for limit in limits):
            quota = SharedByteQuota(*limits)
            await quota.open(js, self.cluster.names.bucket("blob_quota"), replicas=c.replicas,
                             max_bytes=c.blob_quota_bucket_bytes, sizing=reserved(c), stored=self._stored)
            self.quota = quota

    def _chunk_subject(self, nuid: str) -> str:
        return f"$O.{self.bucket}.C.{nuid}"

    def _meta_subject(self, key: str) -> str:
        return f"$O.{self.bucket}.M.{_b64(key.encode())}"

    async def check_room(self, owner: str | None, size: int, at: int | None = None) -> None:
        if self.quota is not None:
            await self.quota.check(owner, growth(at, size))

    async def _settle(self, reservation: Reservation, keep: int = 0, drop: list[int] | None = None) -> None:
        """Give back what `reservation` holds past `keep` (and delete the stream messages `drop`), in a task of its own
        that a cancelled request does not cut short (a request cancelled again at each await would leave its bytes
        counted for nobody). A failure (NATS gone) leaves them counted, said here: deleting the `blob_quota` bucket
        has them counted again from what is stored."""

        async def settle() -> None:
            if drop:
                await self._drop(drop)
            try:
                await reservation.settle(keep)
            except Exception as exc:  # noqa: BLE001 - counted too much is the safe side
                log.warning("blob quotas: %d bytes of %s not given back: %r", reservation.reserved - keep,
                            reservation.owner or "no client", exc)

        await self._shielded(settle())

    async def _shielded(self, work: Awaitable[None]) -> None:
        """Run `work` in a task of its own that a cancelled request does not cut short."""
        task = asyncio.ensure_future(work)
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)
        await asyncio.shield(task)

    async def _upload_ended(self, owner: str | None) -> None:
        """One upload of `owner` fewer open (its record deleted by this gateway, or never made). A failure (NATS gone,
        the count too busy) leaves it counted, said here: the next prune's recount sets it right."""
        quota = self.quota
        if quota is None or not quota.counts_uploads:
            return

        async def end() -> None:
            try:
                await quota.end_upload(owner)
            except Exception as exc:  # noqa: BLE001 - counted high until the next recount: the safe side
                log.warning("blob quotas: an upload of %s ended, its count not taken down: %r", owner or "no client",
                            exc)

        await self._shielded(end())

    # --- writing ------------------------------------------------------------------------
    async def _publish_all(self, subject: str, pieces: AsyncIterator[bytes], *, max_size: int | None,
                           what: str, reserve: Callable[[int], Awaitable[None]] | None = None
                           ) -> tuple[str, int, int]:
        """Publish every piece to `subject`, acks pipelined, each counted by `reserve` first; returns
        (sha256, size, chunks)."""
        js, h, size, n = self.js, hashlib.sha256(), 0, 0
        window: list[asyncio.Future[Any]] = []
        try:
            async for piece in pieces:
                size += len(piece)
                if max_size is not None and size > max_size:
                    raise PayloadTooLarge(f"{what} is larger than the limit of {max_size} bytes", field="body")
                if reserve is not None:
                    await reserve(len(piece))
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

    async def _last_info(self, key: str) -> tuple[dict[str, Any] | None, int]:
        """The object's info (deleted or not) and its stream sequence; (None, 0) for a name never stored."""
        check_key(key)
        try:
            msg = await self.js.get_msg(self.stream, subject=self._meta_subject(key))
        except NotFoundError:
            return None, 0
        info: dict[str, Any] = orjson.loads(msg.data)
        return info, int(msg.seq)

    async def _put_info(self, key: str, info: dict[str, Any], over: int) -> bool:
        """Publish `info` if the object's last info is still the one at sequence `over` (0: none); False when
        another gateway wrote it first."""
        headers = {api.Header.ROLLUP: "sub", api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE: str(over)}
        try:
            await self.js.publish(self._meta_subject(key), orjson.dumps(info), headers=headers)
        except APIError as exc:
            if exc.err_code in WRONG_LAST_SEQUENCE:
                return False
            raise
        return True

    async def _commit(self, nuid: str, key: str, size: int, chunks: int, media_type: str,
                      owner: str | None) -> tuple[BlobInfo, bool]:
        """Publish the object's info (its name is its digest): (the blob, whether it is new). Bytes already stored
        keep their first owner and media type (never rewritten by another), their age starts again, and the new
        chunks are dropped."""
        for _ in range(32):  # each turn lost to a write of another gateway on this very name
            now = datetime.now(timezone.utc).isoformat()
            first, seq = await self._last_info(key)
            if first is not None and not first.get("deleted"):
                again = {**first, "mtime": now,
                         "metadata": {**(first.get("metadata") or {}), FIRST: str(_first_seq(first, seq))}}
                if await self._put_info(key, again, seq):
                    await self.js.purge_stream(self.stream, subject=self._chunk_subject(nuid))
                    return BlobInfo(key, size, _media_type(first)), False
                continue
            info = {
                "name": key, "bucket": self.bucket, "nuid": nuid, "size": size, "chunks": chunks, "mtime": now,
                "digest": "SHA-256=" + _b64(bytes.fromhex(key)),
                "headers": {"Content-Type": [media_type]}, "options": {"max_chunk_size": CHUNK_SIZE},
            }
            if owner is not None:
                info["metadata"] = {OWNER: owner}
            if await self._put_info(key, info, seq):
                return BlobInfo(key, size, media_type), True
        raise ClusterError(f"blob {key}: its info kept changing under this gateway's write", field="key")

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
        held = Reservation(self.quota, owner)  # every chunk counted before it is published
        try:
            key, size, n = await self._publish_all(self._chunk_subject(nuid), _rechunk(chunks), max_size=max_size,
                                                   what="blob", reserve=held.take)
            await held.take(0)  # an empty blob's block (the first chunk of any other took it: `quota.footprint`)
            if expected is not None and key != expected:
                await self.js.purge_stream(self.stream, subject=self._chunk_subject(nuid))
                raise digest_mismatch("the body", key, expected)
            info, fresh = await self._commit(nuid, key, size, n, media_type, owner)
        except BaseException:
            await self._settle(held)
            raise
        # a new blob keeps its footprint counted; the same content stored already is counted for its first owner
        await self._settle(held, held.used if fresh else 0)
        return info

    # --- reading ------------------------------------------------------------------------
    async def _info(self, key: str) -> dict[str, Any]:
        info, _ = await self._last_info(key)
        if info is None or info.get("deleted"):
            raise PayloadNotFound(f"blob {key} not found", field="key")
        return info

    async def stat(self, key: str) -> BlobInfo:
        info = await self._info(key)
        return BlobInfo(key, int(info.get("size") or 0), _media_type(info))

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
        """Mark the blob deleted (only over the info read: of two gateways deleting it, one frees its bytes), drop
        its chunks, free its owner's quota."""
        for _ in range(32):
            info, seq = await self._last_info(key)
            if info is None or info.get("deleted"):
                raise PayloadNotFound(f"blob {key} not found", field="key")
            dead = {**info, "deleted": True, "size": 0, "chunks": 0, "digest": "",
                    "mtime": datetime.now(timezone.utc).isoformat()}
            if self.quota is not None:  # its bytes are taken back below: a recount under way counts them (`_stored`)
                dead["metadata"] = {**(info.get("metadata") or {}),
                                    FREED: f"{_first_seq(info, seq)} {footprint(int(info.get('size') or 0))}"}
            if await self._put_info(key, dead, seq):
                await self.js.purge_stream(self.stream, subject=self._chunk_subject(info["nuid"]))
                if self.quota is not None:
                    await self.quota.release(_owner(info), footprint(int(info.get("size") or 0)))
                return
        raise ClusterError(f"blob {key}: its info kept changing under this gateway's delete", field="key")

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
        record = {"mediaType": media_type, "offset": 0, "seqs": [], "owner": owner, "at": time.time()}
        held = Reservation(self.quota, owner)
        counted = False
        try:
            if self.quota is not None:  # counted before its record is made (429 at the limit), taken down if not made
                await self.quota.begin_upload(owner)
                counted = True
            await held.take(0)  # an upload is charged from its start (`quota.footprint(0)`; 413/507 when full)
            await self._uploads.create(upload_id, orjson.dumps(record))
        except BaseException:
            if counted:
                await self._upload_ended(owner)
            await self._settle(held)
            raise
        return upload_id

    async def upload_offset(self, upload_id: str) -> int:
        return int((await self._record(upload_id))[0]["offset"])

    def _lock(self, upload_id: str) -> asyncio.Lock:
        return self._locks.setdefault(upload_id, asyncio.Lock())

    async def _drop(self, seqs: list[int]) -> None:
        """Delete the pieces of a chunk that was not recorded (their bytes were given back)."""
        for seq in seqs:
            with contextlib.suppress(Exception):
                await self.js.delete_msg(self.stream, seq)

    async def append(
        self, upload_id: str, offset: int, chunks: AsyncIterator[bytes], *, max_size: int | None = None
    ) -> int:
        """Publish the chunk's pieces, each counted for the upload's client first, then record them; a chunk refused
        or cut off mid-way is not recorded (resend it), its pieces are dropped and their bytes given back."""
        async with self._lock(upload_id):
            rec, rev = await self._record(upload_id)
            current = int(rec["offset"])
            if offset != current:
                raise UploadOffsetMismatch(f"upload {upload_id}: chunk sent at offset {offset}, expected offset {current}",
                                           field="Upload-Offset", data={"expectedOffset": current})
            subject = self._chunk_subject("up" + upload_id)
            held = Reservation(self.quota, rec.get("owner"), at=current)
            seqs, size, mine = list(rec["seqs"]), current, []
            try:
                async for piece in _rechunk(chunks):
                    size += len(piece)
                    if max_size is not None and size > max_size:
                        raise PayloadTooLarge(f"upload {upload_id} is larger than the limit of {max_size} bytes",
                                              field="body")
                    await held.take(len(piece))
                    ack = await self.js.publish(subject, piece)
                    mine.append(ack.seq)
                try:
                    await self._uploads.update(upload_id, orjson.dumps(
                        {**rec, "offset": size, "seqs": seqs + mine, "at": time.time()}), last=rev)
                except KeyWrongLastSequenceError:
                    now = await self.upload_offset(upload_id)
                    raise UploadOffsetMismatch(f"upload {upload_id}: another chunk was stored at offset {offset} first",
                                               field="Upload-Offset", data={"expectedOffset": now}) from None
            except BaseException:
                await self._settle(held, drop=mine)
                raise
            await self._settle(held, held.used)
            return size

    async def finish(self, upload_id: str, sha256: str | None = None) -> BlobInfo:
        """Copy the upload's chunks into a blob. Of the gateways finishing, aborting or pruning one upload at once,
        the one that deletes its record (over the revision it read) owns its counted bytes: they stay with a new
        blob, go with one already stored; a finish that lost the record counts a new blob again."""
        expected = None if sha256 is None else check_sha256(sha256)
        async with self._lock(upload_id):
            rec, rev = await self._record(upload_id)
            up_subject, owner = self._chunk_subject("up" + upload_id), rec.get("owner")

            async def pieces() -> AsyncIterator[bytes]:
                for seq in rec["seqs"]:
                    try:
                        msg = await self.js.get_msg(self.stream, seq=seq)
                    except NotFoundError:  # finished or aborted on another gateway meanwhile
                        raise PayloadNotFound(f"upload {upload_id} not found", field="uploadId") from None
                    yield msg.data or b""

            nuid = secrets.token_hex(11)
            key, size, n = await self._publish_all(self._chunk_subject(nuid), pieces(), max_size=None, what="upload")
            if expected is not None and key != expected:
                await self.js.purge_stream(self.stream, subject=self._chunk_subject(nuid))
                raise digest_mismatch(f"upload {upload_id}", key, expected)
            info, fresh = await self._commit(nuid, key, size, n, rec.get("mediaType", DEFAULT_MEDIA_TYPE), owner)
            owned = await self._drop_record(upload_id, rev)  # False: aborted, pruned, finished or appended to elsewhere
            if owned:
                await self._upload_ended(owner)
                await self.js.purge_stream(self.stream, subject=up_subject)
            if self.quota is not None:
                if owned and not fresh:
                    await self.quota.release(owner, footprint(size))
                elif fresh and not owned:
                    await self.quota.add(owner, footprint(size))
        self._locks.pop(upload_id, None)
        return info

    async def _drop_record(self, upload_id: str, revision: int) -> bool:
        """Delete the upload's record if it is still at `revision`; False when another write came first (kv.delete
        raises JetStream's own error for that)."""
        try:
            await self._uploads.delete(upload_id, last=revision)
        except APIError as exc:
            if exc.err_code in WRONG_LAST_SEQUENCE:
                return False
            raise
        return True

    async def abort_upload(self, upload_id: str) -> None:
        async with self._lock(upload_id):
            await self._abort(upload_id)
        self._locks.pop(upload_id, None)

    async def _abort(self, upload_id: str, idle_s: float | None = None) -> bool:
        """Delete the upload's record (over the revision read: one gateway frees its bytes), its chunks, its count.
        With `idle_s`, only if it was last written longer ago than that; returns whether it was deleted."""
        for _ in range(MAX_SWAPS):
            rec, rev = await self._record(upload_id)
            at = rec.get("at")  # none in a record of a gateway from before: its TTL drops it
            if idle_s is not None and (not isinstance(at, (int, float)) or time.time() - at <= idle_s):
                return False
            if await self._drop_record(upload_id, rev):
                break  # else a chunk was recorded meanwhile, or another gateway deleted it: read again
        else:
            raise ClusterError(f"upload {upload_id}: its record was changed {MAX_SWAPS} times in a row while this "
                               "gateway aborted it (chunks are being sent to it); nothing was deleted, retry",
                               field="uploadId")
        await self._upload_ended(rec.get("owner"))
        await self.js.purge_stream(self.stream, subject=self._chunk_subject("up" + upload_id))
        if self.quota is not None:
            await self.quota.release(rec.get("owner"), footprint(int(rec.get("offset") or 0)))
        return True

    # --- age and counts -------------------------------------------------------------------
    async def _infos(self) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """Every object's info and its stream sequence (one per object: each is rolled up on its subject), streamed
        (`kv_keys.streamed_last`: the last message of each subject, pulled a batch at a time), as `nats object ls`
        lists them; an info rewritten meanwhile may come twice."""
        async for entry in streamed_last(self.js, self.stream, f"$O.{self.bucket}.M.", ">"):
            with contextlib.suppress(ValueError):
                info = orjson.loads(entry.value or b"")
                if isinstance(info, dict):
                    yield entry.revision, info

    async def _records(self, busy: set[str] | None = None) -> AsyncIterator[tuple[str, dict[str, Any], int]]:
        """Every upload's id, record and revision, each once, streamed from the records' stream (`streamed_entries`:
        no `get` each; what is held is the ids listed, ~100 bytes an upload, for a record rewritten during the listing
        comes again). `busy` collects the count keys (`uploads_key`) of the clients whose records were written during
        the listing (their count is not set from it: `SharedByteQuota.recount_uploads`), and `OPEN_TOTAL` when any was."""
        listed: set[str] = set()
        async for entry in streamed_entries(self.js, self.cluster.names.bucket("uploads")):
            if entry.value is None:
                continue  # a finished or aborted upload's marker
            try:
                rec = orjson.loads(entry.value)
                check_upload_id(entry.key)
            except (ValueError, PayloadError):
                continue
            if not isinstance(rec, dict):
                continue
            if entry.late and busy is not None:
                busy.add(OPEN_TOTAL)
                if isinstance(rec.get("owner"), str):
                    busy.add(uploads_key(rec["owner"]))
            if entry.key not in listed:
                listed.add(entry.key)
                yield entry.key, rec, entry.revision

    async def _stored(self) -> Callable[[], AsyncIterator[tuple[str | None, int]]]:
        """What is stored now: an iterator over each blob's and upload's owner and bytes (a new count's source). The
        uploads' offsets are read here; the blobs are those whose info is at or before the objects' stream's last
        sequence, read here (a blob stored again since, its info rewritten, by the sequence of its first info,
        `FIRST`: stored again, it was charged to nobody). What was written later is left out, as its gateway counted
        it. A blob of before that a gateway counting the quotas deleted since (its deleted info says so, `FREED`) is
        counted as it was: that gateway takes its bytes back from the count, in whichever order the two land (counts
        are not floored: `SharedByteQuota._swap`)."""
        last = (await self.js.stream_info(self.stream)).state.last_seq
        uploads: dict[str | None, int] = {}  # by owner: as many entries as clients, not as uploads
        async for _, rec, _ in self._records():
            owner = rec.get("owner") if isinstance(rec.get("owner"), str) else None
            uploads[owner] = uploads.get(owner, 0) + footprint(int(rec.get("offset") or 0))

        async def holdings() -> AsyncIterator[tuple[str | None, int]]:
            async for seq, info in self._infos():
                if not info.get("deleted"):
                    if _first_seq(info, seq) <= last:
                        yield _owner(info), footprint(int(info.get("size") or 0))
                elif seq > last:
                    freed = _freed(info)
                    if freed is not None and freed[0] <= last:
                        yield _owner(info), freed[1]
            for held in uploads.items():
                yield held

        return holdings

    def prune_every_s(self, max_age_s: float | None) -> float | None:
        return min(max_age_s / 4, 600.0) if max_age_s is not None else 600.0  # idle uploads, whatever the age limit

    async def prune(self, max_age_s: float | None, now: float | None = None) -> int:
        """Delete blobs stored (or stored again) more than `max_age_s` ago (`blob_max_age_s`; None: none), and uploads
        idle for longer than that or `UPLOAD_IDLE_S`, freeing their quota; returns how many were deleted. Every
        gateway calls it, one takes each turn (`SharedByteQuota.turn`: none lists the objects within 90% of an interval
        after another did); of two deleting one blob or upload anyway, one frees it."""
        at = time.time() if now is None else now
        every_s = self.prune_every_s(max_age_s)
        if self.quota is not None and every_s is not None and not await self.quota.turn(at, 0.9 * every_s):
            return 0  # another gateway pruned within this interval
        gone = 0
        if max_age_s is not None:
            cutoff = at - max_age_s
            old = [info["name"] async for _, info in self._infos()  # the old ones' names kept, not every info
                   if not info.get("deleted") and isinstance(info.get("name"), str) and _mtime(info) < cutoff]
            for key in old:
                with contextlib.suppress(PayloadNotFound, PayloadError):
                    await self.delete(key)
                    gone += 1
        idle_s = min(UPLOAD_IDLE_S, max_age_s if max_age_s is not None else UPLOAD_IDLE_S) + time.time() - at
        for upload_id in await self._idle_uploads(idle_s):
            with contextlib.suppress(PayloadNotFound):
                async with self._lock(upload_id):
                    gone += await self._abort(upload_id, idle_s)  # read again: appended to since, it is kept
                self._locks.pop(upload_id, None)
        return gone

    async def _idle_uploads(self, idle_s: float) -> list[str]:
        """The ids of the uploads last written more than `idle_s` ago (a record with no time, of a gateway from before,
        is left to its TTL), from one streamed listing of the records; counting open uploads, that listing also sets
        each client's count and the count of all right (`SharedByteQuota.recount_uploads`: the counts read before it)."""
        quota = self.quota if self.quota is not None and self.quota.counts_uploads else None
        before = await quota.upload_counts() if quota is not None else {}
        found: dict[str, int] = {}
        busy: set[str] = set()
        idle: list[str] = []
        async for upload_id, rec, _ in self._records(busy):
            owner, written = rec.get("owner"), rec.get("at")
            if quota is not None:
                for key in quota.counted_in(owner if isinstance(owner, str) else None):
                    found[key] = found.get(key, 0) + 1
            if isinstance(written, (int, float)) and time.time() - written > idle_s:
                idle.append(upload_id)
        if quota is not None:
            await quota.recount_uploads(before, found, busy)
        return idle


def _media_type(info: dict[str, Any]) -> str:
    return str(((info.get("headers") or {}).get("Content-Type") or [DEFAULT_MEDIA_TYPE])[0])


def _owner(info: dict[str, Any]) -> str | None:
    """The client a blob is counted for (None: none, or stored before owners were kept)."""
    owner = (info.get("metadata") or {}).get(OWNER)
    return owner if isinstance(owner, str) else None


def _first_seq(info: dict[str, Any], seq: int) -> int:
    """The sequence of a blob's first info, its info (at `seq`) being `info`: its `FIRST`, else `seq` (never stored
    again, or stored again by a gateway of before)."""
    try:
        return int((info.get("metadata") or {}).get(FIRST, seq))
    except (TypeError, ValueError):
        return seq


def _freed(info: dict[str, Any]) -> tuple[int, int] | None:
    """A deleted blob's `FREED`: (the sequence of its first info, the footprint taken back); None: not said (deleted by
    a gateway not counting the quotas, or of a version before)."""
    said = (info.get("metadata") or {}).get(FREED)
    try:
        seq, size = str(said).split(" ")
        return int(seq), int(size)
    except ValueError:
        return None


def _mtime(info: dict[str, Any]) -> float:
    """When the blob was stored (or stored again); 0 when its info says nothing readable (then it is old)."""
    try:
        return datetime.fromisoformat(str(info.get("mtime"))).timestamp()
    except ValueError:
        return 0.0


async def open_object_store(config: ClusterConfig, *, max_bytes: int | None = None,
                            max_bytes_per_client: int | None = None,
                            max_uploads_per_client: int | None = None,
                            max_uploads: int | None = None) -> tuple[ObjectBlobStore, ClusterLink]:
    """An `ObjectBlobStore` on its own connection (close the link when done); with a limit, counting for the
    cluster's quotas as its gateways do."""
    link = await ClusterLink(config).connect()
    store = ObjectBlobStore(link)
    await store.setup(max_bytes=max_bytes, max_bytes_per_client=max_bytes_per_client,
                      max_uploads_per_client=max_uploads_per_client, max_uploads=max_uploads)
    return store, link
