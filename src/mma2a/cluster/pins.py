"""Session pins shared by every gateway of a cluster (a KV bucket with a TTL).

`ClusterSessionPins` is the gateway's `SessionPins` with a write-through to KV: a pin
made on one gateway is written before the message is dispatched, so the next chunk of
the session, whichever gateway it reaches, finds it. A pin from elsewhere is adopted only
if it was made under the same cluster config (`ClusterState.epoch`) and every agent it
names is registered, healthy and not draining here; otherwise the chunk is routed afresh
(and re-pinned). A pin replaced or released elsewhere drops the local copy (KV watch).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import OrderedDict
from typing import Any

import orjson
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE

from ..routing import SessionPins
from ..routing.decision import PartRoute, Target, TransformStep

from .link import Member

log = logging.getLogger("mma2a.cluster.pins")


def session_key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()[:40]


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


class ClusterSessionPins(SessionPins):
    """Local pins (as `SessionPins`) plus the cluster's: written through, fetched on a local miss."""

    def __init__(self, cluster: Member, max_sessions: int = 100_000) -> None:
        super().__init__(max_sessions)
        self.cluster = cluster
        self._remote: OrderedDict[str, tuple[str, tuple[PartRoute, ...]]] = OrderedDict()
        self._by_key: dict[str, str] = {}  # session_key -> session id, of every pin in `_remote`: a removal read in O(1)
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self.adopted = 0

    # --- SessionPins, with the cluster behind it --------------------------------------
    def pin(self, session_id: str, version: int, routes: tuple[PartRoute, ...]) -> None:
        super().pin(session_id, version, routes)
        epoch = self.cluster.epoch()
        doc = {"session": session_id, "epoch": epoch, "routes": routes_to_json(routes), "origin": self.cluster.id}
        key = session_key(session_id)
        self._remember(session_id, epoch, routes, key)
        self._write(session_id, self.cluster.kv["sessions"].put(key, orjson.dumps(doc)))

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
            self._write(session_id, self.cluster.kv["sessions"].delete(session_key(session_id)))

    # --- the KV side --------------------------------------------------------------------
    def _remember(self, session_id: str, epoch: str, routes: tuple[PartRoute, ...], key: str) -> None:
        if session_id not in self._remote:
            self._by_key[key] = session_id
        self._remote[session_id] = (epoch, routes)
        self._remote.move_to_end(session_id)
        while len(self._remote) > self._max:
            self._by_key.pop(session_key(self._remote.popitem(last=False)[0]), None)

    def _forget(self, session_id: str) -> bool:
        """Drop a session's cluster pin from `_remote`; whether it was there."""
        if self._remote.pop(session_id, None) is None:
            return False
        self._by_key.pop(session_key(session_id), None)
        return True

    def _write(self, session_id: str, op: Any) -> None:
        fut = asyncio.ensure_future(op)
        self._pending[session_id] = fut
        fut.add_done_callback(lambda f: self._written(session_id, f))

    def _written(self, session_id: str, fut: asyncio.Future[Any]) -> None:
        if self._pending.get(session_id) is fut:
            del self._pending[session_id]
        if not fut.cancelled() and fut.exception() is not None:
            log.warning("session pin %s not shared: %s", session_id, fut.exception())

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
        self.on_entry(entry.key, entry.value, entry.operation)

    def on_entry(self, key: str, value: bytes | None, op: str | None) -> None:
        """A pin stored or removed by any gateway (from the KV watch or a fetch)."""
        if op in (KV_DEL, KV_PURGE) or not value:
            # by the key's own entry: a scan hashing every remote pin held the event loop ~0.3 s a removal at 100,000
            # pins, and any client removes its pin with `session.final` (docs/security.md S16-1)
            sid = self._by_key.get(key)
            if sid is not None:
                self._forget(sid)
                SessionPins.release(self, sid)
            return
        doc = orjson.loads(value)
        sid = doc["session"]
        if doc.get("origin") == self.cluster.id:
            return
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
