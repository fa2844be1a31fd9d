"""Byte quotas of a blob store: what it holds in total and per client, against two limits.

What is counted is each blob's and upload's footprint (`footprint`), not its content alone: its bytes rounded up to
whole blocks of `CHARGE_UNIT` plus one block for the object itself, so many tiny blobs cost what they take on a disk
(session 15: 1,000 blobs of 8 bytes were counted 8,000 bytes and took 8,996 KiB and 2,000 inodes). Both stores (this
one, the cluster's Object Store) charge alike, so a quota means the same on a gateway and across a cluster.
Bytes are counted as they are written (blobs, resumable uploads and single-shot bodies still coming), so two
uploads of one client running at once cannot pass its quota together. A client is the name its credential
gives (`owner`); bytes with no owner (auth off, the gateway's own offloaded parts) count in the total only.
A client's resumable uploads open at once are bounded too (`blob_max_uploads_per_client`, `check_uploads`): an upload
begun is charged one block only, so the byte quota alone let one client keep 262,144 of them open for a day, each a
record every prune and recount of a cluster reads (docs/security.md, S17-5). The uploads open in the whole store are
bounded as well (`blob_max_uploads`, `check_store_uploads`), whoever holds them: with auth off uploads have no client
and this is their only bound besides the bytes (docs/security.md, LO1).
The counts live in memory; the store that owns them rebuilds them from its directory at start. (A cluster's Object
Store counts in NATS, for all its gateways: `mma2a.cluster.blob_quota`, in the words of `check_limits`.)
"""

from __future__ import annotations

from ..errors import ClientQuotaExceeded, StoreQuotaExceeded, TooManyUploads

CHARGE_UNIT = 4096
"""The block a blob's bytes are charged in (a filesystem's usual block): a blob of 1 to 4096 bytes is charged one,
plus one for the object (`footprint`)."""


def footprint(size: int) -> int:
    """What a blob or upload of `size` bytes is charged against the quotas: its bytes rounded up to whole blocks of
    `CHARGE_UNIT`, plus one block for the object itself (in the local store its `<key>.json` sidecar, and the two
    files' inodes; in the Object Store its info message): 8 bytes are charged 8192, 4096 bytes 8192, 4097 bytes
    12288, an empty upload 4096."""
    return (-(-size // CHARGE_UNIT) + 1) * CHARGE_UNIT


def growth(at: int | None, size: int) -> int:
    """What writing `size` more bytes adds to the charge: to an upload (or a blob being written) holding `at` bytes,
    or, `at` None, as a new object (its block included)."""
    return footprint(size) if at is None else footprint(at + size) - footprint(at)


def check_limits(owner: str | None, held: int, total: int, more: int, max_bytes: int | None,
                 max_bytes_per_client: int | None) -> None:
    """`ClientQuotaExceeded` (413) or `StoreQuotaExceeded` (507) when `more` bytes would pass a limit, `owner` holding
    `held` bytes and the store `total`: the client's own quota first, as it is the one the client can act on. Every
    store with quotas (this one in memory, the cluster's Object Store) answers in these words."""
    limit = max_bytes_per_client
    if owner is not None and limit is not None and held + more > limit:
        raise ClientQuotaExceeded(
            f"blob quota exceeded: {'this client' if ' via ' in owner else f'client {owner!r}'} holds {held} bytes in blobs and uploads, {more} more would "
            f"pass its quota of {limit} bytes (blob_max_bytes_per_client); abort its unfinished uploads, "
            "delete blobs it no longer needs (URLs signed for DELETE) or send a smaller payload",
            field="body", data={"setting": "blob_max_bytes_per_client", "limit": limit, "held": held})
    if max_bytes is not None and total + more > max_bytes:
        raise StoreQuotaExceeded(
            f"the blob store is full: it holds {total} bytes, {more} more would pass its quota of "
            f"{max_bytes} bytes (blob_max_bytes); retry later or send a smaller payload",
            field="body", data={"setting": "blob_max_bytes", "limit": max_bytes, "held": total})


DEFAULT_MAX_UPLOADS = 256
"""`blob_max_uploads_per_client`'s default: four times the response streams a client may hold at once, room for a
client sending many files at once and for the uploads of a few crashed runs of it left open (each ends once idle for a
day), while one client's records stay a few hundred for every prune and recount to read, not 262,144."""


def check_uploads(owner: str | None, open_: int, limit: int | None) -> None:
    """`TooManyUploads` (429) when `owner`, holding `open_` uploads, may not begin another (limit None, or no owner:
    no bound). Every store (this one in memory, the cluster's Object Store) answers in these words."""
    if owner is not None and limit is not None and open_ >= limit:
        who = "this client" if " via " in owner else f"client {owner!r}"
        raise TooManyUploads(
            f"too many uploads open: {who} has {open_} resumable uploads open, its limit is {limit} "
            "(blob_max_uploads_per_client); finish or abort one (DELETE /blobs/uploads/{id}) before beginning another",
            data={"setting": "blob_max_uploads_per_client", "limit": limit, "open": open_})


DEFAULT_MAX_UPLOADS_TOTAL = 4096
"""`blob_max_uploads`' default: the uploads open at once in a whole store (a gateway's, a cluster's), whoever holds them:
sixteen clients at `DEFAULT_MAX_UPLOADS`. With auth off, where no upload has a client, it is their one bound but the
bytes (which let one caller open 2 M uploads at 4 KiB each in the default 8 GiB); with auth on, it keeps the records a
prune reads a few thousand however many clients there are (35 us each, S17-5: ~0.15 s of CPU a round)."""


def check_store_uploads(open_: int, limit: int | None) -> None:
    """`TooManyUploads` (429) when the store, holding `open_` uploads, may not take another (limit None: no bound).
    Every store answers in these words."""
    if limit is not None and open_ >= limit:
        raise TooManyUploads(
            f"too many uploads open: the blob store has {open_} resumable uploads open, its limit is {limit} "
            "(blob_max_uploads); finish or abort one (DELETE /blobs/uploads/{id}) or retry later",
            data={"setting": "blob_max_uploads", "limit": limit, "open": open_})


class ByteQuota:
    """Bytes held in one store, in total and per owner; `charge` refuses what would pass a limit (None: no limit)."""

    def __init__(self, max_bytes: int | None = None, max_bytes_per_client: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.max_bytes_per_client = max_bytes_per_client
        self.total = 0
        self._by_owner: dict[str, int] = {}  # only owners holding bytes: bounded by the clients the config names

    def held(self, owner: str | None) -> int:
        """Bytes `owner`'s blobs and uploads hold (0 for no owner)."""
        return 0 if owner is None else self._by_owner.get(owner, 0)

    def check(self, owner: str | None, more: int) -> None:
        """`ClientQuotaExceeded` (413) or `StoreQuotaExceeded` (507) when `more` bytes would pass a limit (`check_limits`)."""
        check_limits(owner, self.held(owner), self.total, more, self.max_bytes, self.max_bytes_per_client)

    def charge(self, owner: str | None, n: int) -> None:
        """Count `n` more bytes for `owner`, or raise as `check` does (nothing counted then)."""
        self.check(owner, n)
        self.add(owner, n)

    def add(self, owner: str | None, n: int) -> None:
        """Count `n` bytes already on disk (the rebuild at start): no limit is checked."""
        self.total += n
        if owner is not None and n:
            self._by_owner[owner] = self._by_owner.get(owner, 0) + n

    def release(self, owner: str | None, n: int) -> None:
        """`n` bytes of `owner` are gone (deleted, refused, or the same content was already stored)."""
        self.total = max(0, self.total - n)
        if owner is not None and owner in self._by_owner:
            left = self._by_owner[owner] - n
            if left > 0:
                self._by_owner[owner] = left
            else:
                del self._by_owner[owner]

    def reset(self) -> None:
        self.total = 0
        self._by_owner.clear()
