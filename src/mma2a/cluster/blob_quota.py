"""`SharedByteQuota`: the blob quotas of the cluster's Object Store, counted once for the whole cluster.

What a client's blobs and uploads hold (`blob_max_bytes_per_client`) and what the store holds (`blob_max_bytes`) are
counts of bytes in a small KV bucket (`<cluster>_blob_quota`: a key per client, `c.<base64url(name)>`, and `total`),
each changed by a compare-and-set on its revision, so a client spreading its uploads over the gateways (or the
workers of `serve --workers N`) gets its quota once, not once per gateway. Only blob writes and deletes touch it
(one write of the client's key and one of the total per change, each over the revision this gateway saw last; a
read first only when another gateway wrote meanwhile); nothing on the path of an ordinary message does. Bytes are
counted before they are stored (`Reservation`), in growing blocks, so two uploads of one client on two gateways
cannot pass its quota together; the words of a refusal are the local store's (`payload.quota.check_limits`), and
so is what a blob or upload is charged (`payload.quota.footprint`: its bytes in whole 4 KiB blocks, plus one).

A client's resumable uploads open at once (`blob_max_uploads_per_client`) are a count of the same bucket (`OPEN`),
changed alike: one more as an upload begins (over the revision read, refused at the limit: 429), one fewer by the
gateway that deletes its record (finished, aborted, pruned); so is the count of all uploads open (`OPEN_TOTAL`,
`blob_max_uploads`), whoever holds them, the one bound of uploads without a client (auth off). A count a gateway left high (it died between the two
writes; a record that aged out unseen) or low (a cluster made before the bound) is set right by the prune that lists
the records (`recount_uploads`).

Counts missing (a cluster made before the quotas, the bucket deleted, or a bucket of session 14's counts of content
bytes) are counted again from the objects' own info (their owner is in their metadata) and the upload records as
they were before the count was claimed, by the one gateway that claims it (creating the store's total). The counts
are keyed under `FORM` (`f.`): the content bytes of a bucket made before session 15 (keys `total`, `counted`,
`c.…`, `h.…`) are left out of every count and purged once the footprints are counted, so an upgrade needs no step.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError

from ..errors import ClientQuotaExceeded, ClusterError, StoreQuotaExceeded, TooManyUploads
from ..payload.quota import check_limits, check_store_uploads, check_uploads, growth
from .kv_keys import streamed_entries
from .link import ensure_kv

log = logging.getLogger("mma2a.cluster")

FORM = "f."
"""The prefix of every count's key: footprints (`payload.quota.footprint`, session 15). A bucket made before held
content bytes under keys without it (`OLD_FORM`), which no gateway reads any more: its counts are missing, so they are
counted from the objects (`SharedByteQuota.open`)."""
TOTAL = FORM + "total"  # created by the gateway that counts the objects (its claim), then changed by every write
OLD_FORM = ("total", "counted", "c.>", "h.>")
"""The keys of session 14's counts of content bytes, purged by the gateway that counts the footprints."""
OPEN = "o."
"""Under `FORM`, the prefix of a client's count of resumable uploads open (`blob_max_uploads_per_client`)."""
OPEN_TOTAL = FORM + "open"
"""The count of every resumable upload open, with a client or without (`blob_max_uploads`); outside `OPEN`'s keys, so a
listing of the clients' counts never takes it for one."""
PRUNED = "pruned"  # when the store was last pruned (by whichever gateway took that turn)
SEEN_MAX = 4096
"""Counts (value, revision) remembered from this gateway's last reads and writes: a stale one costs a refused write
and a read, never a wrong count (every write is over the revision it was computed from)."""
MAX_BLOCK = 4 << 20
"""The most bytes a write reserves ahead of what it has stored (blocks double from its first chunk up to this)."""
MAX_SWAPS = 64
"""Compare-and-set attempts on one count before a change gives up (`QuotaBusy`, 503). Each lost attempt means another
gateway's write to that count landed, so the cluster progresses; the bound keeps one request from looping on a count
that many gateways write at once (the total, under a storm of uploads) for as long as they do."""


class QuotaBusy(ClusterError):
    """A count of the blob quotas kept changing under this gateway for `MAX_SWAPS` attempts: the change is not made
    (503, retry), and nothing of it stays counted."""

    def __init__(self, what: str) -> None:
        super().__init__(f"the blob quota is busy: {what} was changed by other gateways {MAX_SWAPS} times in a row "
                         "while this gateway tried to count its bytes; nothing was stored or counted, retry",
                         field="blob_quota")


async def _backoff(attempt: int) -> None:
    """After a few lost swaps, a short random pause (at most 20 ms), so the writers of one count spread out."""
    if attempt >= 4:
        await asyncio.sleep(random.uniform(0, min(0.02, 0.0005 * attempt)))


def _what(key: str) -> str:
    return "the store's total" if key == TOTAL else "a client's count"


LONG_OWNER = 384  # an owner's bytes past which its count is keyed by a digest (a NATS subject is one protocol line)


def _key(owner: str, kind: str = "") -> str:
    """The count's key: `c.` + the owner in base64url, or for a long one `h.` + its SHA-256: nats-server takes a
    subject of at most its max_control_line (4 KiB) and, past it, closes the connection (the gateway's cluster
    connection, for good: session 15, S15-5). Client ids are shorter today (a federated one ~600 bytes at most). Both
    under `FORM`."""
    raw = owner.encode()
    if len(raw) > LONG_OWNER:
        return FORM + kind + "h." + hashlib.sha256(raw).hexdigest()
    return FORM + kind + "c." + base64.urlsafe_b64encode(raw).decode()


def uploads_key(owner: str) -> str:
    """The key of `owner`'s count of open uploads."""
    return _key(owner, OPEN)


class SharedByteQuota:
    """Bytes held in the cluster's Object Store, in total and per owner, in a KV bucket every gateway changes."""

    def __init__(self, max_bytes: int | None, max_bytes_per_client: int | None,
                 max_uploads_per_client: int | None = None, max_uploads: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.max_bytes_per_client = max_bytes_per_client
        self.max_uploads_per_client = max_uploads_per_client
        self.max_uploads = max_uploads
        self.kv: Any = None
        self.js: Any = None
        self.bucket = ""
        self._seen: dict[str, tuple[int, int]] = {}
        self._high: dict[str, int] = {}  # counts of open uploads the last recount found high: key -> their revision

    async def open(self, js: Any, bucket: str, *, replicas: int, max_bytes: int, sizing: dict[str, tuple[int, str]],
                   stored: Callable[[], Awaitable[Callable[[], AsyncIterator[tuple[str | None, int]]]]]) -> None:
        """Open the counts (bounded at `max_bytes`, `cluster.blob_quota_bucket_bytes`). Counts that are not there yet
        (no bucket, or no `TOTAL` in it: a bucket of content bytes made before session 15) are counted by the gateway
        that claims them first (creating `TOTAL`), from `stored()`, called before the claim: what is stored at that
        moment (an iterator over each blob's and upload's owner and bytes), added to what other gateways count
        meanwhile. A gateway writes counts only once `TOTAL` is there, so what is written after the claim is counted
        by the gateway writing it and nothing is counted twice (a blob stored in between by a gateway of the version
        before is counted by neither: the safe side)."""
        self.js, self.bucket = js, bucket
        try:
            await (await js.key_value(bucket)).get(TOTAL)
            holdings = None
        except (BucketNotFoundError, KeyNotFoundError):
            holdings = await stored()
        self.kv = await ensure_kv(js, bucket, replicas=replicas, max_bytes=max_bytes,
                                  setting="cluster.blob_quota_bucket_bytes", sizing=sizing)
        if holdings is None:
            return
        try:
            self._remember(TOTAL, (0, int(await self.kv.create(TOTAL, b"0"))))
        except KeyWrongLastSequenceError:
            return  # another gateway claimed the count at the same moment
        by_owner: dict[str | None, int] = {}
        async for owner, size in holdings():
            by_owner[owner] = by_owner.get(owner, 0) + size
        for owner, size in by_owner.items():
            await self.add(owner, size)
        if by_owner:
            log.info("blob quotas: counted %d bytes of %d clients from the object store",
                     sum(by_owner.values()), sum(1 for o in by_owner if o is not None))
        await self._purge_old_form(js, bucket)

    @staticmethod
    async def _purge_old_form(js: Any, bucket: str) -> None:
        """Remove the counts of content bytes a bucket made before session 15 holds (`OLD_FORM`; one purge of the
        bucket's stream a key or prefix, nothing left of them): they are not read any more and would hold the bucket's
        bytes. A failure is logged, not raised: the counts are right without it."""
        try:
            for key in OLD_FORM:
                await js.purge_stream(f"KV_{bucket}", subject=f"$KV.{bucket}.{key}")
        except Exception as exc:  # noqa: BLE001 - left over, never read
            log.warning("blob quotas: the counts of content bytes made before session 15 were not purged: %r", exc)

    async def _read(self, key: str, fresh: bool = True) -> tuple[int, int]:
        """(the count, its revision; 0 when the key was never written); not `fresh`: as this gateway saw it last."""
        if not fresh and key in self._seen:
            return self._seen[key]
        try:
            entry = await self.kv.get(key)
            seen = int(entry.value or b"0"), int(entry.revision or 0)
        except KeyNotFoundError:
            seen = 0, 0
        self._remember(key, seen)
        return seen

    def _remember(self, key: str, seen: tuple[int, int]) -> None:
        if len(self._seen) >= SEEN_MAX:
            self._seen.clear()
        self._seen[key] = seen

    async def _put_over(self, key: str, data: bytes, revision: int) -> int | None:
        """Write `key` if it is still at `revision` (0: never written): its new revision, None when another write came
        first."""
        try:
            if revision:
                return int(await self.kv.update(key, data, last=revision))
            return int(await self.kv.create(key, data))
        except KeyWrongLastSequenceError:
            return None

    async def _swap(self, key: str, value: int, revision: int) -> bool:
        """Set `key` to `value` if it is still at `revision` (0: never written); False when another write came first.
        Not floored at 0: while a count is made again (`open`), a blob of before deleted by another gateway is taken
        back before or after the count adds it, and only unfloored do the two agree in either order (floored, its
        owner was counted low by it for good). A count lost (the bucket past its bound) may so go below 0 by what its
        client then deletes: the client holds no more than it could with the count at 0 (its blobs of before, plus
        its quota)."""
        now = await self._put_over(key, str(value).encode(), revision)
        if now is None:
            self._seen.pop(key, None)  # read again next time
            return False
        self._remember(key, (value, now))
        return True

    async def turn(self, at: float, every_s: float) -> bool:
        """Whether this gateway prunes the store now (at time `at`): the first to find the last turn `every_s` or more
        ago takes it, so the cluster's gateways do not each list every object."""
        for attempt in range(MAX_SWAPS):
            await _backoff(attempt)
            try:
                entry = await self.kv.get(PRUNED)
                last, revision = float(entry.value or b"0"), int(entry.revision or 0)
            except (KeyNotFoundError, ValueError):
                last, revision = 0.0, 0
            if at - last < every_s:
                return False
            if await self._put_over(PRUNED, repr(at).encode(), revision) is not None:
                return True
        return False  # other gateways keep taking turns: this one prunes at its next

    async def _add_to(self, key: str, n: int) -> None:
        for attempt in range(MAX_SWAPS):
            await _backoff(attempt)
            value, revision = await self._read(key, fresh=False)
            if await self._swap(key, value + n, revision):
                return
        raise QuotaBusy(_what(key))

    async def held(self, owner: str | None) -> int:
        """Bytes `owner`'s blobs and uploads hold across the cluster (0 for no owner)."""
        return 0 if owner is None else (await self._read(_key(owner)))[0]

    async def total(self) -> int:
        return (await self._read(TOTAL))[0]

    async def _checked(self, owner: str | None, okey: str | None, more: int) -> tuple[int, int, int, int]:
        """(held, its revision, total, its revision) once `more` bytes fit, read as last seen, and read again before a
        refusal (another gateway may have freed bytes since)."""
        for fresh in (False, True):
            held, orev = (0, 0) if okey is None else await self._read(okey, fresh)
            total, trev = await self._read(TOTAL, fresh)
            try:
                check_limits(owner, held, total, more, self.max_bytes, self.max_bytes_per_client)
            except (ClientQuotaExceeded, StoreQuotaExceeded):
                if fresh:
                    raise
                continue
            break
        return held, orev, total, trev

    async def check(self, owner: str | None, more: int) -> None:
        """Refuse (413, 507) what `more` bytes would pass, as the local store words it; nothing is counted."""
        await self._checked(owner, None if owner is None else _key(owner), more)

    async def charge(self, owner: str | None, n: int) -> None:
        """Count `n` more bytes for `owner`, or raise as `check` does (nothing counted then). The client's count first,
        then the total; a total past its quota, or too busy to change (`QuotaBusy`), takes the client's back."""
        okey = None if owner is None else _key(owner)
        for attempt in range(MAX_SWAPS):
            await _backoff(attempt)
            held, orev, total, trev = await self._checked(owner, okey, n)
            if okey is None or await self._swap(okey, held + n, orev):
                break
        else:
            raise QuotaBusy(_what(okey or TOTAL))
        try:
            for attempt in range(MAX_SWAPS):
                if attempt:
                    await _backoff(attempt)
                    total, trev = await self._read(TOTAL)
                    check_limits(None, 0, total, n, self.max_bytes, None)
                if await self._swap(TOTAL, total + n, trev):
                    return
            raise QuotaBusy(_what(TOTAL))
        except (StoreQuotaExceeded, QuotaBusy):
            if okey is not None:
                try:
                    await self._add_to(okey, -n)
                except QuotaBusy:  # counted high until the count is made again (operations.md, "Sizing")
                    log.error("blob quotas: %d bytes of %s stay counted: its count was too busy to take them back",
                              n, owner)
            raise

    async def add(self, owner: str | None, n: int) -> None:
        """Count `n` bytes already stored (the count of a new bucket): no limit is checked."""
        if owner is not None and n:
            await self._add_to(_key(owner), n)
        await self._add_to(TOTAL, n)

    async def release(self, owner: str | None, n: int) -> None:
        """`n` bytes of `owner` are gone (deleted, refused, or the same content was already stored)."""
        if n:
            await self.add(owner, -n)


    # --- open uploads (`blob_max_uploads_per_client`, `blob_max_uploads`) -------------------------------------------
    @property
    def counts_uploads(self) -> bool:
        return self.max_uploads_per_client is not None or self.max_uploads is not None

    def counted_in(self, owner: str | None) -> list[str]:
        """The counts an upload of `owner` is one of: its client's (with a bound per client), then all uploads'."""
        keys = [] if owner is None or self.max_uploads_per_client is None else [uploads_key(owner)]
        return keys if self.max_uploads is None else [*keys, OPEN_TOTAL]

    async def open_uploads(self, owner: str | None) -> int:
        """How many resumable uploads `owner` holds open across the cluster (0 for no owner, or no bound)."""
        return 0 if owner is None or self.max_uploads_per_client is None else (await self._read(uploads_key(owner)))[0]

    async def all_open_uploads(self) -> int:
        """How many resumable uploads are open across the cluster, whoever holds them (0 with no bound)."""
        return 0 if self.max_uploads is None else (await self._read(OPEN_TOTAL))[0]

    async def _count_up(self, key: str, owner: str | None) -> None:
        """One more on `key`, or `TooManyUploads` at its bound (nothing counted then); the count read as last seen, and
        read again before a refusal."""
        for attempt in range(MAX_SWAPS):
            await _backoff(attempt)
            for fresh in (False, True):
                value, revision = await self._read(key, fresh)
                try:
                    if key == OPEN_TOTAL:
                        check_store_uploads(value, self.max_uploads)
                    else:
                        check_uploads(owner, value, self.max_uploads_per_client)
                except TooManyUploads:
                    if fresh:
                        raise
                    continue
                break
            if await self._swap(key, value + 1, revision):
                return
        raise QuotaBusy("a client's open uploads" if key != OPEN_TOTAL else "the count of open uploads")

    async def _count_down(self, key: str) -> None:
        """One fewer on `key`, floored at 0 (a count made low is raised by the next recount)."""
        for attempt in range(MAX_SWAPS):
            await _backoff(attempt)
            value, revision = await self._read(key, fresh=False)
            if await self._swap(key, max(0, value - 1), revision):
                return
        raise QuotaBusy("a client's open uploads" if key != OPEN_TOTAL else "the count of open uploads")

    async def begin_upload(self, owner: str | None) -> None:
        """Count one more upload open for `owner` and in all, or `TooManyUploads` (429) at either bound (the client's
        checked first: the one it can act on); nothing stays counted then."""
        done: list[str] = []
        try:
            for key in self.counted_in(owner):
                await self._count_up(key, owner)
                done.append(key)
        except BaseException:
            for key in done:
                try:
                    await self._count_down(key)
                except QuotaBusy:  # counted high until the next recount (the safe side)
                    log.error("blob quotas: an upload refused stays counted: its count was too busy to take it back")
            raise

    async def end_upload(self, owner: str | None) -> None:
        """One upload of `owner` is gone (finished, aborted, pruned, or never made): by the gateway that deleted its
        record. Floored at 0 (a count made low is raised by the next recount)."""
        for key in self.counted_in(owner):
            await self._count_down(key)

    async def upload_counts(self) -> dict[str, tuple[int, int]]:
        """Every client's count of open uploads as it stands, and the count of all (`OPEN_TOTAL`, with that bound):
        key -> (count, revision), streamed from the bucket (one small entry per client that held an upload)."""
        counts: dict[str, tuple[int, int]] = {}
        if self.max_uploads is not None:
            counts[OPEN_TOTAL] = await self._read(OPEN_TOTAL)
        async for entry in streamed_entries(self.js, self.bucket, FORM + OPEN + ">"):
            try:
                counts[entry.key] = (int(entry.value or b"0"), entry.revision)
            except ValueError:
                counts[entry.key] = (0, entry.revision)
        return counts

    async def recount_uploads(self, before: dict[str, tuple[int, int]], records: dict[str, int],
                              busy: set[str]) -> int:
        """Set each client's count of open uploads to the records found (`records`: key -> how many), for clients no
        upload began or ended of since `before` (`upload_counts`, read before the records were listed: a count still
        at that revision, written over it) and none of whose records was written during the listing (`busy`). A
        count below its records is raised at once (no write in flight makes one so: a count goes up before its record
        is made and down after it is deleted). One above them is lowered only when the previous recount of this
        gateway found it high at the same revision: a gateway that deleted a record and is about to take its count
        down would otherwise have it taken down twice; a count left high by a gateway that died stays at its
        revision. Returns how many counts were set."""
        high, fixed = {}, 0
        for key in before.keys() | records.keys():
            count, revision = before.get(key, (0, 0))
            found = records.get(key, 0)
            if key in busy or found == count:
                continue
            if found < count and self._high.get(key) != revision:
                high[key] = revision
                continue
            if await self._swap(key, found, revision):
                fixed += 1
                log.info("blob quotas: a client's count of open uploads set from %d to %d, as its records are",
                         count, found)
        self._high = high
        return fixed


class Reservation:
    """What one write (a blob, or a chunk of an upload) is charged as it stores its bytes: `take(n)` before `n` more
    bytes are stored counts what they add to the footprint (`payload.quota.growth`: for a new object, from its first
    `take`, its own block too), reserved in blocks that double from the first chunk up to `MAX_BLOCK`, so a large
    write is a few KV round trips; at the quota's edge only what the bytes need is asked for, so the limit holds to
    the byte charged. `used` is what the bytes taken are charged; `settle(keep)` gives back what was reserved past
    `keep`."""

    def __init__(self, quota: SharedByteQuota | None, owner: str | None, at: int | None = None) -> None:
        """`at`: the bytes the upload written to holds already (charged already); None: a new object."""
        self.quota, self.owner, self.at = quota, owner, at
        self.size = self.used = self.reserved = 0

    async def take(self, n: int) -> None:
        before = self.used
        self.size += n
        self.used = growth(self.at, self.size)
        if self.quota is None or self.used <= self.reserved:
            return
        need = self.used - self.reserved
        block = max(need, min(MAX_BLOCK, self.reserved))
        try:
            try:
                await self.quota.charge(self.owner, block)
            except (ClientQuotaExceeded, StoreQuotaExceeded):
                if block == need:
                    raise
                block = need
                await self.quota.charge(self.owner, block)
        except BaseException:
            self.size -= n
            self.used = before
            raise
        self.reserved += block

    async def settle(self, keep: int = 0) -> None:
        """Keep `keep` bytes counted (a new blob's, an upload's stored chunk), give back the rest."""
        if self.quota is not None and self.reserved > keep:
            await self.quota.release(self.owner, self.reserved - keep)
        self.reserved = min(self.reserved, keep)
