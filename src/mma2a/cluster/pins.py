"""Session pins shared by every gateway of a cluster (a KV bucket with a TTL).

`ClusterSessionPins` is the gateway's `SessionPins` with a write-through to KV: a pin
made on one gateway is written before the message is dispatched, so the next chunk of
the session, whichever gateway it reaches, finds it. A pin from elsewhere is adopted only
if it was made under the same cluster config (`ClusterState.epoch`) and every agent it
names is registered, healthy and not draining here; otherwise the chunk is routed afresh
(and re-pinned). A pin replaced or released elsewhere drops the local copy (KV watch).

The bucket is shared by every client and drops its oldest writes first when full (`cluster.sessions_bucket_bytes`),
so each client's pins are held to a share of it (`cluster.sessions_bytes_per_client`, a quarter by default):
`PinShares` counts what each client's keys take of the bucket, from this gateway's writes and the watch's (every
gateway's), and a client past its share has its oldest keys removed — purged, leaving no marker — by the gateway that
wrote them, never another client's (docs/security.md S16-5). A session whose pin went so is routed afresh at its next
message on a gateway holding no copy of it.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import hashlib
import logging
import re
import time
from array import array
from collections import OrderedDict
from typing import Any

import orjson
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KV_DEL, KV_OP, KV_PURGE

from ..routing import SessionPins
from ..routing.decision import PartRoute, Target, TransformStep
from ..routing.sessions import owner_of

from .link import Member

log = logging.getLogger("mma2a.cluster.pins")


OWNER_DIGEST = 20  # hex digits of a client's digest that start its pins' keys (80 bits: no client picks another's)


def session_key(session_id: str) -> str:
    """The pin's key in the `sessions` bucket: for a client's session (`CLIENT\x1fID`) its client's digest, a dot and
    the session's (so every gateway tells whose a key is from the key alone); without a client (a gateway without
    authentication, where all sessions are one's), the session's digest alone."""
    digest = hashlib.sha256(session_id.encode()).hexdigest()[:40]
    owner = owner_of(session_id)
    if owner is None:
        return digest
    return f"{hashlib.sha256(owner.encode()).hexdigest()[:OWNER_DIGEST]}.{digest}"


def routes_to_json(routes: tuple[PartRoute, ...]) -> list[Any]:
    return [
        [r.index, r.modality, list(r.matched), [[t.agent, [list(s) for s in t.via], t.reason] for t in r.targets],
         list(r.actions), r.dropped, r.bottleneck, r.pin_session]
        for r in routes
    ]


def routes_from_json(data: list[Any]) -> tuple[PartRoute, ...]:
    return tuple(
        PartRoute(int(i), str(m), tuple(matched),
                  tuple(Target(a, tuple(TransformStep(*s) for s in via), reason) for a, via, reason in targets),
                  tuple(actions), dropped, bool(bottleneck), bool(pin))
        for i, m, matched, targets, actions, dropped, bottleneck, pin in data
    )


def stored_bytes(subject: str, value: int, headers: int = 0) -> int:
    """What a message takes of a file-backed stream's bytes (its `max_bytes`), as nats-server counts it: a 22-byte
    record header, the subject, the headers (with their 4-byte length), the value and an 8-byte checksum."""
    return 22 + len(subject) + (4 + headers if headers else 0) + value + 8


DELETE_HEADERS = len(b"NATS/1.0\r\nKV-Operation: DEL\r\n\r\n")  # what `KeyValue.delete` writes (the marker)


def _key_id(rest: str) -> int | str:
    """What a key is held by after its client's digest: the session's digest (40 hex digits) as an int (48 B, where
    the key's string took 110), anything else as it is."""
    if len(rest) == 40 and _HEX40.fullmatch(rest):
        return int(rest, 16)
    return rest


def _key_of(owner: str, kid: int | str) -> str:
    return f"{owner}.{kid:040x}" if isinstance(kid, int) else f"{owner}.{kid}"


_HEX40 = re.compile("[0-9a-f]{40}")


class _ClientKeys:
    """One client's counted keys: each key's id (`_key_id`) to its message's sequence, and the messages in the bucket's
    order in parallel arrays (sequence, size and whether this gateway wrote it, when counted, the key's id), from
    `head` on. An entry whose key was rewritten since stays until it reaches `head` (`stale` of them)."""

    __slots__ = ("seq_of", "seqs", "sizes", "ats", "ids", "head", "stale", "held")

    def __init__(self) -> None:
        self.seq_of: dict[int | str, int] = {}
        self.seqs = array("Q")
        self.sizes = array("q")  # size << 1 | mine
        self.ats = array("d")
        self.ids: list[int | str] = []
        self.head = self.stale = self.held = 0

    def at(self, seq: int) -> int:
        """The index of the counted message `seq` (one in `seq_of`)."""
        return bisect.bisect_left(self.seqs, seq, self.head)

    def add(self, kid: int | str, seq: int, packed: int, now: float) -> None:
        self.seq_of[kid] = seq
        i = len(self.seqs)
        if i > self.head and self.seqs[i - 1] > seq:  # heard out of the bucket's order
            i = bisect.bisect_left(self.seqs, seq, self.head)
        self.seqs.insert(i, seq)
        self.sizes.insert(i, packed)
        self.ats.insert(i, now)
        self.ids.insert(i, kid)

    def live(self, i: int) -> bool:
        return self.seq_of.get(self.ids[i]) == self.seqs[i]

    def compact(self) -> None:
        """Drop what is before `head`, and the stale entries when they outnumber the live ones."""
        n = len(self.seqs)
        if self.stale > (n - self.head - self.stale) + 16:
            keep = [i for i in range(self.head, n) if self.live(i)]
            self.seqs = array("Q", (self.seqs[i] for i in keep))
            self.sizes = array("q", (self.sizes[i] for i in keep))
            self.ats = array("d", (self.ats[i] for i in keep))
            self.ids = [self.ids[i] for i in keep]
            self.head = self.stale = 0
        elif self.head > 64 and self.head * 2 > n:
            del self.seqs[:self.head], self.sizes[:self.head], self.ats[:self.head], self.ids[:self.head]
            self.head = 0


class PinShares:
    """What each client's keys take of the `sessions` bucket, in the bucket's order (its stream sequence): each key's
    last message (a pin, or a release's marker) counted as the bucket counts its bytes, this gateway's own once stored
    (their sequence known), the others' as the watch brings them. Past `share` bytes a client's oldest keys leave the
    count: those this gateway wrote are for it to purge (`wrote` returns them), the others' their writer purges. Every
    gateway counts the same messages in the same order, so a key leaves every count at the same point, its writer's
    included, whatever order the watch brought them in; a gateway that has not heard a message yet counts fewer and
    purges later, never more. Keys written longer ago than `ttl_s` have left the bucket and the count; at most
    `max_keys` are counted (the oldest forgotten past it, unpurged: the bucket drops them first anyway).

    Every gateway counts every client's keys, so a key is held compactly (`_ClientKeys`: its session's digest as an
    int and four array slots, no string nor tuple of its own): ~150 B a key, was ~316 (`bench/pin_share_cost.py`)."""

    def __init__(self, share: int, ttl_s: float, max_keys: int) -> None:
        self.share = share
        self.ttl_s = ttl_s
        self.max_keys = max_keys
        self._clients: dict[str, _ClientKeys] = {}  # owner -> its keys
        self._recent: OrderedDict[str, float] = OrderedDict()  # owner -> when it last wrote, least recent first
        self._count = 0
        self.purged = 0  # keys this gateway gave to purge (of clients past their share)

    def __len__(self) -> int:
        return self._count

    def held(self, owner: str) -> int:
        """Bytes `owner`'s keys take, as counted (owner: the key's prefix, `OWNER_DIGEST` hex digits)."""
        client = self._clients.get(owner)
        return 0 if client is None else client.held

    def seq(self, key: str) -> int | None:
        """The stream sequence of `key`'s message as counted (None: not counted)."""
        owner, _, rest = key.partition(".")
        client = self._clients.get(owner)
        return None if client is None else client.seq_of.get(_key_id(rest))

    def wrote(self, key: str, seq: int, size: int, mine: bool, now: float) -> tuple[list[tuple[str, int]], list[str]]:
        """`key`'s message `seq` takes `size` bytes, written by this gateway (`mine`) or another: (the messages to purge
        — this gateway's, past their client's share: key and sequence —, every key that left the count). A key without
        a client is not counted, nor a message older than the key's one counted."""
        owner, dot, rest = key.partition(".")
        if not dot:
            return [], []
        client = self._clients.get(owner)
        if client is None:
            client = self._clients[owner] = _ClientKeys()
        kid = _key_id(rest)
        old = client.seq_of.get(kid)
        if old is not None:
            i = client.at(old)
            if old == seq and mine:  # this gateway's own, heard before its write was acknowledged
                client.sizes[i] |= 1
            if old >= seq:
                return [], []
            client.held -= client.sizes[i] >> 1
            client.stale += 1
            self._count -= 1
        client.add(kid, seq, size << 1 | mine, now)
        client.held += size
        self._count += 1
        self._recent[owner] = now
        self._recent.move_to_end(owner)
        purge: list[tuple[str, int]] = []
        gone: list[str] = []
        seqs, sizes, ats, ids = client.seqs, client.sizes, client.ats, client.ids
        while client.head < len(seqs):
            i = client.head
            if not client.live(i):  # rewritten since, or gone
                client.head += 1
                client.stale -= 1
                continue
            aged = ats[i] < now - self.ttl_s
            if not aged and (client.held <= self.share or len(client.seq_of) == 1):
                break
            client.head += 1
            first = _key_of(owner, ids[i])
            del client.seq_of[ids[i]]
            client.held -= sizes[i] >> 1
            self._count -= 1
            gone.append(first)
            if sizes[i] & 1 and not aged:
                purge.append((first, seqs[i]))
        client.compact()
        self._expire(now, gone)
        self.purged += len(purge)
        return purge, gone

    def _expire(self, now: float, gone: list[str]) -> None:
        """Forget the clients that wrote nothing for `ttl_s` (their keys aged out of the bucket), then, past `max_keys`,
        the oldest keys of the clients that wrote least recently."""
        while self._recent:
            owner, at = next(iter(self._recent.items()))
            client = self._clients[owner]
            if at >= now - self.ttl_s:
                if self._count <= self.max_keys:
                    return
                while client.head < len(client.seqs) and self._count > self.max_keys:
                    i = client.head
                    client.head += 1
                    if client.live(i):
                        del client.seq_of[client.ids[i]]
                        client.held -= client.sizes[i] >> 1
                        self._count -= 1
                        gone.append(_key_of(owner, client.ids[i]))
                    else:
                        client.stale -= 1
                client.compact()
                if client.seq_of:
                    return
            del self._recent[owner], self._clients[owner]
            self._count -= len(client.seq_of)
            gone.extend(_key_of(owner, kid) for kid in client.seq_of)


class ClusterSessionPins(SessionPins):
    """Local pins (as `SessionPins`) plus the cluster's: written through, fetched on a local miss."""

    def __init__(self, cluster: Member, max_sessions: int = 100_000) -> None:
        super().__init__(max_sessions)
        self.cluster = cluster
        self._remote: OrderedDict[str, tuple[str, tuple[PartRoute, ...]]] = OrderedDict()
        self._by_key: dict[str, str] = {}  # session_key -> session id, of every pin in `_remote`: a removal read in O(1)
        self._remote_parts = 0  # parts of the routes in `_remote`
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self._purging: set[asyncio.Future[Any]] = set()
        c = cluster.config
        bucket = cluster.names.bucket("sessions")
        self._stream, self._subject = f"KV_{bucket}", f"$KV.{bucket}."
        # as many keys as the bucket can hold (a delete's marker, the least a key takes, ~120 bytes)
        self.shares = PinShares(c.sessions_share, c.session_ttl_s,
                                c.sessions_bucket_bytes // stored_bytes(self._subject + "k" * 61, 0, DELETE_HEADERS))
        self.adopted = 0
        self.heard = 0  # the bucket's last message this gateway has heard of (watch or fetch), its stream sequence

    # --- SessionPins, with the cluster behind it --------------------------------------
    def pin(self, session_id: str, version: int, routes: tuple[PartRoute, ...]) -> None:
        super().pin(session_id, version, routes)
        epoch = self.cluster.epoch()
        doc = {"session": session_id, "epoch": epoch, "routes": routes_to_json(routes), "origin": self.cluster.id}
        key = session_key(session_id)
        data = orjson.dumps(doc)
        self._remember(session_id, epoch, routes, key)
        self._write(session_id, key, self.cluster.kv["sessions"].put(key, data),
                    stored_bytes(self._subject + key, len(data)))

    def lookup(self, session_id: str, version: int) -> tuple[PartRoute, ...] | None:
        routes = super().lookup(session_id, version)
        if routes is not None:
            return routes
        remote = self._remote.get(session_id)
        if remote is None or remote[0] != self.cluster.epoch() or not self._usable(remote[1]):
            return None
        super().pin(session_id, version, remote[1])
        self.adopted += 1
        return remote[1]

    def release(self, session_id: str) -> None:
        super().release(session_id)
        if self._forget(session_id) or session_id in self._pending:
            key = session_key(session_id)
            # (`KeyValue.delete`'s marker, published here for its sequence)
            self._write(session_id, key, self._delete(key), stored_bytes(self._subject + key, 0, DELETE_HEADERS))

    # --- the KV side --------------------------------------------------------------------
    async def _delete(self, key: str) -> int:
        ack = await self.cluster.js.publish(self._subject + key, headers={KV_OP: KV_DEL})
        return int(ack.seq)

    def _counted(self, key: str, seq: int, size: int, mine: bool) -> None:
        """`key`'s message `seq` (a pin, or a release's marker) takes `size` bytes of the bucket: its client's keys
        past its share leave this gateway's copies, and those this gateway wrote leave the bucket (purged: no
        marker)."""
        purge, gone = self.shares.wrote(key, seq, size, mine, time.monotonic())
        for k, at in purge:  # that message alone: a later one on the key (the session pinned again) stays
            fut = asyncio.ensure_future(self.cluster.js.purge_stream(self._stream, seq=at + 1,
                                                                     subject=self._subject + k))
            self._purging.add(fut)
            fut.add_done_callback(self._purged)
        for k in gone:
            sid = self._by_key.get(k)
            if sid is not None:
                self._forget(sid)

    def _purged(self, fut: asyncio.Future[Any]) -> None:
        self._purging.discard(fut)
        if not fut.cancelled() and fut.exception() is not None:
            log.warning("a session pin past its client's share not purged: %s", fut.exception())

    async def settle(self) -> None:
        """Wait until every pin, release and purge this gateway began is done in the cluster."""
        while self._pending or self._purging:
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._pending.values(), *self._purging, return_exceptions=True)

    def _remember(self, session_id: str, epoch: str, routes: tuple[PartRoute, ...], key: str) -> None:
        """Keep the cluster's pin of `session_id`; the least recently pinned leave past `max_sessions` pins or
        `max_parts` parts, as the local pins do (S19-2)."""
        self._forget(session_id)
        self._by_key[key] = session_id
        self._remote[session_id] = (epoch, routes)
        self._remote_parts += len(routes)
        while len(self._remote) > 1 and (len(self._remote) > self._max or self._remote_parts > self.max_parts):
            self._forget(next(iter(self._remote)))

    def _forget(self, session_id: str) -> bool:
        """Drop a session's cluster pin from `_remote`; whether it was there."""
        entry = self._remote.pop(session_id, None)
        if entry is None:
            return False
        self._remote_parts -= len(entry[1])
        self._by_key.pop(session_key(session_id), None)
        return True

    def _write(self, session_id: str, key: str, op: Any, size: int) -> None:
        """Write a pin or a release (`op`, which returns the message's sequence), `size` bytes of the bucket."""
        fut = asyncio.ensure_future(op)
        self._pending[session_id] = fut
        fut.add_done_callback(lambda f: self._written(session_id, key, size, f))

    def _written(self, session_id: str, key: str, size: int, fut: asyncio.Future[Any]) -> None:
        if self._pending.get(session_id) is fut:
            del self._pending[session_id]
        if fut.cancelled():
            return
        if fut.exception() is not None:
            log.warning("session pin %s not shared: %s", session_id, fut.exception())
            return
        self._counted(key, int(fut.result()), size, True)

    async def flush(self, session_id: str) -> None:
        """Wait until this session's pin (or release) is stored in the cluster."""
        fut = self._pending.get(session_id)
        if fut is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(fut)

    async def fetch(self, session_id: str) -> None:
        """Before routing a chunk this gateway has no pin for: read the cluster's pin, if any."""
        if session_id in self or session_id in self._remote:
            return
        try:
            entry = await self.cluster.kv["sessions"].get(session_key(session_id))
        except KeyNotFoundError:
            return
        except Exception as exc:  # NATS unavailable: route afresh
            log.debug("session pin lookup failed: %s", exc)
            return
        self.on_entry(entry.key, entry.value, entry.operation, entry.revision)

    def on_entry(self, key: str, value: bytes | None, op: str | None, revision: int | None = None) -> None:
        """A pin stored or removed by any gateway (from the KV watch or a fetch)."""
        if revision is not None and revision > self.heard:
            self.heard = revision
        if op in (KV_DEL, KV_PURGE) or not value:
            if revision is not None and revision != self.shares.seq(key):  # (this gateway's own: counted when stored)
                self._counted(key, revision, stored_bytes(self._subject + key, 0, DELETE_HEADERS), False)
            # by the key's own entry: a scan hashing every remote pin held the event loop ~0.3 s a removal at 100,000
            # pins, and any client removes its pin with `session.final` (docs/security.md S16-1)
            sid = self._by_key.get(key)
            if sid is not None:
                self._forget(sid)
                SessionPins.release(self, sid)
            return
        doc = orjson.loads(value)
        sid = doc["session"]
        if doc.get("origin") == self.cluster.id:  # counted when stored
            return
        if revision is not None:
            self._counted(key, revision, stored_bytes(self._subject + key, len(value)), False)
        routes = routes_from_json(doc["routes"])
        current = self._remote.get(sid)
        if current is not None and current[1] != routes:
            SessionPins.release(self, sid)  # re-pinned elsewhere: drop our stale copy
        self._remember(sid, doc["epoch"], routes, key)

    def _usable(self, routes: tuple[PartRoute, ...]) -> bool:
        directory = self.cluster.gw.directory
        for r in routes:
            for t in r.targets:
                for name in (t.agent, *(s.agent for s in t.via)):
                    if name not in directory:
                        return False
                    entry = directory.get(name)
                    if not entry.healthy or entry.draining:
                        return False
        return True
