"""Blob stores: content-addressed by SHA-256, streamed in chunks, never whole in memory.

`BlobStore` is the interface the gateway and the offloader talk to; `LocalBlobStore` is the
embedded default, a directory on disk. Writes go to a temporary file and are renamed into
place atomically once their digest is known, so a reader never sees a half-written blob.
Resumable uploads keep their bytes in `uploads/` until `finish`.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import (
    ClientQuotaExceeded,
    InsufficientStorage,
    PayloadError,
    PayloadNotFound,
    PayloadTooLarge,
    RangeNotSatisfiable,
    StoreQuotaExceeded,
    UploadOffsetMismatch,
)
from .quota import ByteQuota, check_store_uploads, check_uploads, footprint, growth

CHUNK_SIZE = 256 * 1024
"""Bytes read from disk per chunk; also the size of each write batch."""
OBJECT_FILES = 2
"""Files a new blob or upload takes on the local store's disk (its bytes and its `.json` sidecar): the inodes checked
against `min_free_inodes` before it is written."""

DEFAULT_MEDIA_TYPE = "application/octet-stream"
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
_UPLOAD_RE = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """A stored blob: its key (the SHA-256 of its bytes, lower-case hex), size and media type."""

    key: str
    size: int
    media_type: str

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.key, "size": self.size, "mediaType": self.media_type}


def check_key(key: str) -> str:
    """A blob key must be 64 lower-case hex digits; anything else (a path, `..`) is refused."""
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise PayloadError(f"blob key {key!r} is not a SHA-256 hex digest (64 lower-case hex digits)", field="key")
    return key


def check_sha256(value: str, field: str = "sha256") -> str:
    """A client-supplied digest: hex, either case; returned lower-case."""
    low = value.strip().lower() if isinstance(value, str) else value
    if not isinstance(low, str) or not _KEY_RE.match(low):
        raise PayloadError(f"{field}: {value!r} is not a SHA-256 hex digest (64 hex digits)", field=field)
    return low


def digest_mismatch(what: str, actual: str, expected: str) -> PayloadError:
    """The error every blob store raises when the bytes do not hash to what the client declared."""
    return PayloadError(f"sha256 mismatch: {what} hashes to {actual}, the client said {expected}", field="sha256")


def check_upload_id(upload_id: str) -> str:
    if not isinstance(upload_id, str) or not _UPLOAD_RE.match(upload_id):
        raise PayloadError(f"upload id {upload_id!r} is not valid (32 lower-case hex digits)", field="uploadId")
    return upload_id


class BlobStore(abc.ABC):
    """Where payloads sent by reference live. Every method streams; none holds a whole blob."""

    @abc.abstractmethod
    async def put_stream(
        self,
        chunks: AsyncIterator[bytes],
        media_type: str = DEFAULT_MEDIA_TYPE,
        *,
        sha256: str | None = None,
        max_size: int | None = None,
        owner: str | None = None,
    ) -> BlobInfo:
        """Store the bytes `chunks` yields; check them against `sha256` and `max_size` if given. `owner`: the client
        the bytes are counted for (stores with quotas)."""

    @abc.abstractmethod
    def open_range(self, key: str, start: int = 0, end: int | None = None) -> AsyncIterator[bytes]:
        """Bytes `start` (inclusive) to `end` (exclusive; None = to the end) of a blob, in chunks."""

    @abc.abstractmethod
    async def stat(self, key: str) -> BlobInfo:
        """The blob's info; `PayloadNotFound` if there is none."""

    @abc.abstractmethod
    async def delete(self, key: str) -> None:
        """Remove a blob; `PayloadNotFound` if there is none."""

    @abc.abstractmethod
    async def begin_upload(self, media_type: str = DEFAULT_MEDIA_TYPE, *, owner: str | None = None) -> str:
        """Start a resumable upload for `owner`; returns its id."""

    @abc.abstractmethod
    async def upload_offset(self, upload_id: str) -> int:
        """How many bytes of an upload are stored (where the next `append` must start)."""

    @abc.abstractmethod
    async def append(
        self, upload_id: str, offset: int, chunks: AsyncIterator[bytes], *, max_size: int | None = None
    ) -> int:
        """Append bytes at `offset`, which must be the upload's current end; returns the new end."""

    @abc.abstractmethod
    async def finish(self, upload_id: str, sha256: str | None = None) -> BlobInfo:
        """Turn a finished upload into a blob; check its digest against `sha256` if given."""

    @abc.abstractmethod
    async def abort_upload(self, upload_id: str) -> None:
        """Drop an upload and its bytes."""

    async def check_room(self, owner: str | None, size: int, at: int | None = None) -> None:
        """Refuse, before any byte is read, a write of `size` bytes (a declared Content-Length) the store cannot
        take: a new blob, or (`at`) a chunk of an upload holding `at` bytes, charged as `quota.growth` counts it;
        stores without quotas or reserve take anything."""

    async def prune(self, max_age_s: float | None, now: float | None = None) -> int:
        """Delete what is older than `max_age_s` (`blob_max_age_s`; None: nothing is old), freeing its quota; returns
        how many blobs and uploads were deleted. Stores that keep nothing of their own delete nothing."""
        return 0

    def prune_every_s(self, max_age_s: float | None) -> float | None:
        """How often the gateway calls `prune` (None: never): every quarter of `max_age_s`, at most every 10 min."""
        return None if max_age_s is None else min(max_age_s / 4, 600.0)

    async def read_all(self, key: str) -> bytes:
        """The whole blob in memory: for small blobs and tests only."""
        return b"".join([c async for c in self.open_range(key)])

    async def put_bytes(self, data: bytes, media_type: str = DEFAULT_MEDIA_TYPE) -> BlobInfo:
        """Store bytes already in memory."""

        async def one() -> AsyncIterator[bytes]:
            yield data

        return await self.put_stream(one(), media_type)


class _Sink:
    """A file being written with a running SHA-256; writes batched to `CHUNK_SIZE` and done off the loop."""

    def __init__(self, fh: BinaryIO, hasher: Any = None):
        self.fh = fh
        self.hasher = hasher if hasher is not None else hashlib.sha256()
        self.size = 0
        self._buf: list[bytes] = []
        self._buffered = 0

    def _write(self, blobs: list[bytes]) -> None:
        for b in blobs:
            self.fh.write(b)
            self.hasher.update(b)

    async def add(self, chunk: bytes) -> None:
        if not chunk:
            return
        self._buf.append(chunk)
        self._buffered += len(chunk)
        self.size += len(chunk)
        if self._buffered >= CHUNK_SIZE:
            await self.flush()

    async def flush(self) -> None:
        if self._buf:
            blobs, self._buf, self._buffered = self._buf, [], 0
            await asyncio.to_thread(self._write, blobs)


def _owner_of(meta_path: Path) -> str | None:
    """The client a blob or upload is counted for, from its sidecar (None: no owner, or written before owners)."""
    try:
        owner = json.loads(meta_path.read_text()).get("owner")
    except (OSError, ValueError, AttributeError):
        return None
    return owner if isinstance(owner, str) else None


LEFT_OVER_S = 3600.0
"""How long a file a crash may have left in the local store (a temporary file, a sidecar without its blob or upload)
stays untouched before the store's start removes it: none is uncounted and never freed, while one a process sharing
the directory against the rules is still writing (touched at each chunk) is left alone."""


def _left_over(entry: os.DirEntry[str]) -> None:
    """Remove what a cut write or delete left, untouched for `LEFT_OVER_S`: it holds a file (an inode) and, in `tmp/`,
    up to a whole body's bytes, counted in no quota."""
    with contextlib.suppress(OSError):
        stale = entry.stat(follow_symlinks=False).st_mtime < time.time() - LEFT_OVER_S
        if stale and entry.is_file(follow_symlinks=False):
            os.unlink(entry.path)


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1024 * 1024):
            h.update(block)
    return h.hexdigest()


class LocalBlobStore(BlobStore):
    """Blobs in a local directory: `objects/ab/<key>` with a `<key>.json` sidecar for the media type and owner."""

    def __init__(self, root: str | os.PathLike[str], *, min_free_bytes: int = 0, min_free_inodes: int = 0,
                 max_bytes: int | None = None, max_bytes_per_client: int | None = None,
                 max_uploads_per_client: int | None = None, max_uploads: int | None = None):
        """`min_free_bytes`: the disk space kept free; a write that would go below it is refused (507).
        `min_free_inodes`: the disk's files (inodes) kept free, alike: a blob or an upload begun takes two. `max_bytes`,
        `max_bytes_per_client`: what the store and each client may hold (507, 413); `max_uploads_per_client`: the
        resumable uploads a client may hold open at once (429); `max_uploads`: those the store holds open at once, whoever
        holds them (429: with auth off, their one bound but the bytes); the counts are rebuilt from the directory here. One
        process per directory: the counts are this process's."""
        self.root = Path(root)
        self.min_free_bytes = min_free_bytes
        self.min_free_inodes = min_free_inodes
        self._objects = self.root / "objects"
        self._tmp = self.root / "tmp"
        self._uploads = self.root / "uploads"
        for d in (self._objects, self._tmp, self._uploads):  # the clients' payloads: this user's alone (0700)
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            d.chmod(0o700)
        self._upload_locks: dict[str, asyncio.Lock] = {}
        # Running digests of uploads written by this process: upload id -> (offset, hasher).
        self._upload_hashes: dict[str, tuple[int, Any]] = {}
        self.quota = ByteQuota(max_bytes, max_bytes_per_client)
        self._upload_owners: dict[str, str | None] = {}  # every upload on disk -> the client it is counted for
        self.max_uploads_per_client = max_uploads_per_client
        self._open_uploads: dict[str, int] = {}  # owners holding uploads -> how many (`quota.check_uploads`)
        self.max_uploads = max_uploads
        self.uploads_open = 0  # every upload open, with a client or without (`quota.check_store_uploads`)
        self._count_held()

    def _count_held(self) -> None:
        """Count what the directory holds (blobs, uploads) per owner: one `scandir` per directory and one small
        sidecar read per blob or upload. What a write or delete cut by a crash left (`_left_over`) is removed."""
        for sub in os.scandir(self._objects):
            if not sub.is_dir():
                continue
            entries = list(os.scandir(sub.path))
            names = {entry.name for entry in entries}
            for entry in entries:
                if _KEY_RE.match(entry.name):
                    owner = _owner_of(Path(entry.path).with_suffix(".json"))
                    self.quota.add(owner, footprint(entry.stat().st_size))
                elif entry.name.endswith(".json") and entry.name[:-5] not in names:
                    _left_over(entry)  # the sidecar of a blob whose delete was cut between its two files
        entries = list(os.scandir(self._uploads))
        names = {entry.name for entry in entries}
        for entry in entries:
            if entry.name.endswith(".part") and _UPLOAD_RE.match(entry.name[:-5]):
                owner = _owner_of(Path(entry.path).with_suffix(".json"))
                self._upload_owners[entry.name[:-5]] = owner
                self._opened(owner, 1)
                self.quota.add(owner, footprint(entry.stat().st_size))
            elif entry.name.endswith(".json") and f"{entry.name[:-5]}.part" not in names:
                _left_over(entry)  # an upload whose begin or abort was cut between its two files
        for entry in os.scandir(self._tmp):
            _left_over(entry)  # a body being written, or a sidecar being made, when the process stopped

    def _opened(self, owner: str | None, n: int) -> None:
        """`n` more (or, negative, fewer) uploads open for `owner`."""
        self.uploads_open = max(0, self.uploads_open + n)
        if owner is not None:
            left = self._open_uploads.get(owner, 0) + n
            if left > 0:
                self._open_uploads[owner] = left
            else:
                self._open_uploads.pop(owner, None)

    def open_uploads(self, owner: str | None) -> int:
        """The resumable uploads `owner` holds open (0 for no owner)."""
        return 0 if owner is None else self._open_uploads.get(owner, 0)

    async def check_room(self, owner: str | None, size: int, at: int | None = None) -> None:
        self.quota.check(owner, growth(at, size))
        self._check_space(size, OBJECT_FILES if at is None else 0)

    def _check_space(self, more: int, files: int = 0) -> None:
        """`InsufficientStorage` when writing `more` (> 0) bytes would leave less than `min_free_bytes` on the disk, or
        making `files` new files less than `min_free_inodes` of its inodes (one `statvfs` per chunk, and per blob or
        upload begun; nothing when no reserve is set). A filesystem that reports no inodes (`f_files` 0: btrfs, some
        network ones) has no fixed number to run out of: only its bytes are checked."""
        if not (self.min_free_bytes or self.min_free_inodes):
            return
        st = os.statvfs(self.root)
        free = st.f_bavail * st.f_frsize
        if self.min_free_bytes and more and free - more < self.min_free_bytes:
            raise InsufficientStorage(
                f"the blob store is full: {free} bytes free on its disk, {self.min_free_bytes} kept in reserve "
                "(blob_min_free_bytes); retry later or send a smaller payload", field="body",
                data={"setting": "blob_min_free_bytes"})
        if self.min_free_inodes and st.f_files and st.f_favail - files < self.min_free_inodes:
            raise InsufficientStorage(
                f"the blob store is full: {st.f_favail} files (inodes) free on its disk, {self.min_free_inodes} kept "
                "in reserve (blob_min_free_inodes); retry later", field="body", data={"setting": "blob_min_free_inodes"})

    # --- paths ----------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        check_key(key)
        return self._objects / key[:2] / key

    def _meta_path(self, key: str) -> Path:
        return self._path(key).with_suffix(".json")

    def _upload_path(self, upload_id: str) -> Path:
        return self._uploads / f"{check_upload_id(upload_id)}.part"

    # --- blobs ----------------------------------------------------------------------

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
        tmp = self._tmp / f"{secrets.token_hex(16)}.tmp"
        fh = await asyncio.to_thread(tmp.open, "wb")
        charged = 0  # bytes counted for `owner` (the footprint of what came) and not (yet) kept in a blob
        try:
            sink = _Sink(fh)
            async for chunk in chunks:
                self._check_space(len(chunk), OBJECT_FILES - 1)  # its temporary file is there: its sidecar to come
                more = footprint(sink.size + len(chunk)) - charged  # the first chunk: the object's own block too
                self.quota.charge(owner, more)
                charged += more
                await sink.add(chunk)
                if max_size is not None and sink.size > max_size:
                    raise PayloadTooLarge(f"blob is larger than the limit of {max_size} bytes", field="body")
            if not charged:  # an empty blob: its block, its sidecar
                self._check_space(0, OBJECT_FILES - 1)
                self.quota.charge(owner, footprint(0))
                charged = footprint(0)
            await sink.flush()
            await asyncio.to_thread(fh.close)
            key = sink.hasher.hexdigest()
            if expected is not None and key != expected:
                raise digest_mismatch("the body", key, expected)
            fresh, media_type = await self._commit(tmp, key, sink.size, media_type, owner)
            if fresh:
                charged = 0  # a new blob: its bytes stay counted for `owner`
            return BlobInfo(key, sink.size, media_type)
        finally:
            fh.close()
            tmp.unlink(missing_ok=True)
            self.quota.release(owner, charged)

    async def _commit(self, tmp: Path, key: str, size: int, media_type: str, owner: str | None) -> tuple[bool, str]:
        """Rename a fully written temp file into place (atomic) and write its sidecar: (whether the blob is new, its
        media type). The same content already stored keeps its first owner and its first media type (a re-upload
        as `text/html` never changes what another client's URL serves); the new file is dropped."""

        def commit() -> tuple[bool, str]:
            dest = self._path(key)
            dest.parent.mkdir(exist_ok=True)
            fresh = not dest.exists()
            if fresh:
                meta_tmp = tmp.with_suffix(".meta")
                meta_tmp.write_text(json.dumps({"size": size, "mediaType": media_type, "owner": owner}))
                os.replace(meta_tmp, self._meta_path(key))
                os.replace(tmp, dest)
                return True, media_type
            # same content already stored: keep the old file and its sidecar (its age starts again), drop the new one
            tmp.unlink(missing_ok=True)
            os.utime(dest)
            try:
                first = json.loads(self._meta_path(key).read_text()).get("mediaType", DEFAULT_MEDIA_TYPE)
            except (OSError, ValueError):
                first = DEFAULT_MEDIA_TYPE
            return False, str(first)

        return await asyncio.to_thread(commit)

    async def stat(self, key: str) -> BlobInfo:
        path = self._path(key)

        def read() -> BlobInfo:
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                raise PayloadNotFound(f"blob {key} not found", field="key") from None
            media_type = DEFAULT_MEDIA_TYPE
            try:
                media_type = json.loads(self._meta_path(key).read_text()).get("mediaType", media_type)
            except (OSError, ValueError):
                pass
            return BlobInfo(key, size, media_type)

        return await asyncio.to_thread(read)

    async def open_range(self, key: str, start: int = 0, end: int | None = None) -> AsyncIterator[bytes]:
        info = await self.stat(key)
        stop = info.size if end is None else end
        if start < 0 or stop > info.size or start > stop:
            raise RangeNotSatisfiable(
                f"range {start}-{stop} is outside blob {key} of {info.size} bytes", field="range"
            )
        fh = await asyncio.to_thread(self._path(key).open, "rb")
        try:
            await asyncio.to_thread(fh.seek, start)
            left = stop - start
            while left > 0:
                block = await asyncio.to_thread(fh.read, min(CHUNK_SIZE, left))
                if not block:
                    raise PayloadError(f"blob {key} ended early (truncated on disk)", field="key")
                left -= len(block)
                yield block
        finally:
            fh.close()

    async def delete(self, key: str) -> None:
        path = self._path(key)

        def remove() -> tuple[str | None, int]:
            size = footprint(path.stat().st_size)
            owner = _owner_of(self._meta_path(key))
            path.unlink()
            return owner, size

        try:
            owner, size = await asyncio.to_thread(remove)
        except FileNotFoundError:
            raise PayloadNotFound(f"blob {key} not found", field="key") from None
        self._meta_path(key).unlink(missing_ok=True)
        self.quota.release(owner, size)

    # --- resumable uploads ----------------------------------------------------------

    async def begin_upload(self, media_type: str = DEFAULT_MEDIA_TYPE, *, owner: str | None = None) -> str:
        upload_id = secrets.token_hex(16)
        path = self._upload_path(upload_id)

        def create() -> None:
            try:
                path.with_suffix(".json").write_text(json.dumps({"mediaType": media_type, "owner": owner}))
                path.touch()
            except OSError:  # e.g. the disk's last inode taken meanwhile: nothing of the upload stays
                path.with_suffix(".json").unlink(missing_ok=True)
                raise

        check_uploads(owner, self.open_uploads(owner), self.max_uploads_per_client)  # 429 past its open uploads
        check_store_uploads(self.uploads_open, self.max_uploads)  # 429 past the store's
        self._check_space(0, OBJECT_FILES)
        self.quota.charge(owner, footprint(0))  # an upload's files are held from its start (413/507 when full)
        self._opened(owner, 1)  # counted before the first await: two begins at once cannot both take the last one
        try:
            await asyncio.to_thread(create)
        except BaseException:
            self._opened(owner, -1)
            self.quota.release(owner, footprint(0))
            raise
        self._upload_owners[upload_id] = owner
        self._upload_hashes[upload_id] = (0, hashlib.sha256())
        return upload_id

    async def upload_offset(self, upload_id: str) -> int:
        path = self._upload_path(upload_id)
        try:
            return (await asyncio.to_thread(path.stat)).st_size
        except FileNotFoundError:
            raise PayloadNotFound(f"upload {upload_id} not found", field="uploadId") from None

    def _lock(self, upload_id: str) -> asyncio.Lock:
        return self._upload_locks.setdefault(upload_id, asyncio.Lock())

    async def append(
        self, upload_id: str, offset: int, chunks: AsyncIterator[bytes], *, max_size: int | None = None
    ) -> int:
        path = self._upload_path(upload_id)
        async with self._lock(upload_id):
            current = await self.upload_offset(upload_id)
            if offset != current:
                raise UploadOffsetMismatch(
                    f"upload {upload_id}: chunk sent at offset {offset}, expected offset {current}",
                    field="Upload-Offset",
                    data={"expectedOffset": current},
                )
            known = self._upload_hashes.pop(upload_id, None)
            hasher = known[1] if known is not None and known[0] == current else None
            owner = self._upload_owners.get(upload_id)
            fh = await asyncio.to_thread(path.open, "ab")
            sink = _Sink(fh, hasher)
            charged = 0
            try:
                async for chunk in chunks:
                    self._check_space(len(chunk))
                    more = growth(current + sink.size, len(chunk))
                    self.quota.charge(owner, more)
                    charged += more
                    await sink.add(chunk)
                    if max_size is not None and current + sink.size > max_size:
                        raise PayloadTooLarge(
                            f"upload {upload_id} is larger than the limit of {max_size} bytes", field="body"
                        )
                await sink.flush()
            except (PayloadTooLarge, ClientQuotaExceeded, StoreQuotaExceeded):
                await asyncio.to_thread(fh.truncate, current)  # the whole chunk is refused
                self.quota.release(owner, charged)
                raise
            except BaseException:
                # The client went away mid-chunk: keep what arrived so it resumes from `upload_offset`;
                # the running digest no longer matches, so `finish` rehashes the file.
                hasher = None
                sink.hasher = hashlib.sha256()
                await asyncio.shield(sink.flush())
                raise
            finally:
                fh.close()
            new_offset = current + sink.size
            if hasher is not None:
                self._upload_hashes[upload_id] = (new_offset, hasher)
            return new_offset

    async def finish(self, upload_id: str, sha256: str | None = None) -> BlobInfo:
        path = self._upload_path(upload_id)
        expected = None if sha256 is None else check_sha256(sha256)
        async with self._lock(upload_id):
            size = await self.upload_offset(upload_id)
            known = self._upload_hashes.get(upload_id)
            if known is not None and known[0] == size:
                key = known[1].hexdigest()
            else:
                key = await asyncio.to_thread(_hash_file, path)
            if expected is not None and key != expected:
                raise digest_mismatch(f"upload {upload_id}", key, expected)
            meta_path = path.with_suffix(".json")
            try:
                media_type = json.loads(meta_path.read_text()).get("mediaType", DEFAULT_MEDIA_TYPE)
            except (OSError, ValueError):
                media_type = DEFAULT_MEDIA_TYPE
            owner = self._upload_owners.get(upload_id)
            fresh, media_type = await self._commit(path, key, size, media_type, owner)
            if not fresh:
                self.quota.release(owner, footprint(size))  # the content was stored already: the upload is gone
            meta_path.unlink(missing_ok=True)
            path.unlink(missing_ok=True)
            self._upload_hashes.pop(upload_id, None)
            self._opened(self._upload_owners.pop(upload_id, None), -1)
        self._upload_locks.pop(upload_id, None)
        return BlobInfo(key, size, media_type)

    async def abort_upload(self, upload_id: str) -> None:
        path = self._upload_path(upload_id)
        async with self._lock(upload_id):
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                raise PayloadNotFound(f"upload {upload_id} not found", field="uploadId") from None
            path.unlink(missing_ok=True)
            path.with_suffix(".json").unlink(missing_ok=True)
            self._upload_hashes.pop(upload_id, None)
            owner = self._upload_owners.pop(upload_id, None)
            self._opened(owner, -1)
            self.quota.release(owner, footprint(size))
        self._upload_locks.pop(upload_id, None)

    async def prune(self, max_age_s: float | None, now: float | None = None) -> int:
        """Delete blobs stored (or stored again) and uploads last written more than `max_age_s` ago, freeing their
        quota (`blob_max_age_s`); returns how many were deleted. `now`: the time to count from (default: now)."""
        if max_age_s is None:
            return 0
        cutoff = (time.time() if now is None else now) - max_age_s

        def stale() -> tuple[list[str], list[str]]:
            keys = [e.name for sub in os.scandir(self._objects) if sub.is_dir() for e in os.scandir(sub.path)
                    if _KEY_RE.match(e.name) and e.stat().st_mtime < cutoff]
            uploads = [e.name[:-5] for e in os.scandir(self._uploads)
                       if e.name.endswith(".part") and _UPLOAD_RE.match(e.name[:-5]) and e.stat().st_mtime < cutoff]
            return keys, uploads

        keys, uploads = await asyncio.to_thread(stale)
        gone = 0
        for key in keys:
            with contextlib.suppress(PayloadNotFound):
                await self.delete(key)
                gone += 1
        for upload_id in uploads:
            with contextlib.suppress(PayloadNotFound):
                await self.abort_upload(upload_id)
                gone += 1
        return gone

    def clear(self) -> None:
        """Remove every blob and upload (for tests and `mma2a` maintenance commands)."""
        shutil.rmtree(self.root, ignore_errors=True)
        for d in (self._objects, self._tmp, self._uploads):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.quota.reset()
        self._upload_owners.clear()
        self._open_uploads.clear()
        self.uploads_open = 0

