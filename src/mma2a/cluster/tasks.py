"""The task map shared by every gateway of a cluster (a KV bucket with a TTL).

`ClusterTaskMap` is the gateway's `TaskMap` (the local cache every lookup reads, synchronously, as on one
gateway) with a write-through to KV: a task recorded on one gateway is stored before the gateway answers
(`flush`), so a follow-up reaching any other gateway finds it (`fetch` reads the bucket on a local miss), and a
KV watch mirrors the others' records, updates and removals into the cache (ListTasks' owners and totals). A
task outlives the process that made it: a restarted gateway reads the bucket back.

A record keeps its owner exactly as the gateway that made it keyed it (the principal: a federated client's
too), so a task is answered only to its owner on every gateway. The bucket's TTL is the map's age limit;
each owner's byte budget holds on the cluster's records: a gateway that forgets an owner's oldest records for
the budget removes them from the bucket too.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import time
from typing import Any

import orjson
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from ..gateway.tasks import TaskMap
from .link import Member, ensure_kv

log = logging.getLogger("mma2a.cluster.tasks")


def task_key(task_id: str) -> str:
    """A KV key for a task id: base64url of it (KV keys allow only `-_=./` and alphanumerics); reversible."""
    return base64.urlsafe_b64encode(task_id.encode()).decode()


def task_of_key(key: str) -> str | None:
    try:
        return base64.urlsafe_b64decode(key.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


class ClusterTaskMap(TaskMap):
    """A `TaskMap` whose records are shared through the cluster's `tasks` bucket."""

    def __init__(self, member: Member, **limits: Any) -> None:
        super().__init__(**limits)
        self.member = member
        self.kv: KeyValue | None = None
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self._adopting = False
        self._watch: asyncio.Task[None] | None = None
        self.adopted = 0

    async def open(self) -> None:
        """Open (or create) the bucket, mirror what it holds, and follow the other gateways' changes."""
        c = self.member.config
        self.kv = await ensure_kv(self.member.js, self.member.names.bucket("tasks"), ttl=self.max_age_s,
                                  replicas=c.replicas)
        loaded = asyncio.get_running_loop().create_future()
        self._watch = asyncio.create_task(self._follow(loaded))
        await asyncio.wait({loaded, self._watch}, return_when=asyncio.FIRST_COMPLETED)  # the bucket's records read

    async def close(self) -> None:
        for fut in list(self._pending.values()):
            with contextlib.suppress(Exception):
                await asyncio.shield(fut)
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch
            self._watch = None

    # --- TaskMap, written through -------------------------------------------------------------------------
    def _store(self, task_id: str, legs: tuple[str, ...], route_doc: list[dict[str, Any]] | bytes, agg: bytes | None,
               size: int, owner: str | None, context: str | None, at: float | None = None) -> None:
        super()._store(task_id, legs, route_doc, agg, size, owner, context, at)
        if not self._adopting:
            self._write_row(task_id)

    def update(self, record: Any) -> None:
        super().update(record)
        self._write_row(record.task_id)

    def _expire_owner(self, owner: str) -> None:
        before = set(self._by_owner.get(owner) or ())
        super()._expire_owner(owner)
        for task_id in before - set(self._by_owner.get(owner) or ()):  # past the owner's budget: gone everywhere
            self._send(task_id, "delete", None)

    async def fetch(self, task_id: str) -> None:
        """A task this gateway's cache does not hold: read it from the bucket (made by another gateway, or by this
        one before a restart)."""
        if task_id in self._rows or self.kv is None:
            return
        try:
            entry = await self.kv.get(task_key(task_id))
        except KeyNotFoundError:
            return
        except Exception as exc:  # noqa: BLE001 - NATS away: answered from the cache alone
            log.debug("task lookup failed: %s", exc)
            return
        self.on_entry(entry.key, entry.value, entry.operation)

    async def flush(self, task_id: str) -> None:
        """Wait until this task's record is stored in the cluster (a follow-up may reach another gateway next)."""
        fut = self._pending.get(task_id)
        if fut is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(fut)

    # --- the KV side --------------------------------------------------------------------------------------
    def _write_row(self, task_id: str) -> None:
        row = self._rows.get(task_id)
        if row is None:
            return
        legs, route, agg, at, size, owner, context = row
        doc = {"id": task_id, "legs": list(legs), "route": orjson.Fragment(route),
               "agg": orjson.Fragment(agg) if agg is not None else None, "at": time.time() - (self.clock() - at),
               "size": size, "owner": owner, "context": context, "origin": self.member.id}
        self._send(task_id, "put", orjson.dumps(doc))

    def _send(self, task_id: str, op: str, value: bytes | None) -> None:
        if self.kv is None:  # not opened (the gateway has not started): this gateway's cache only
            return
        key = task_key(task_id)
        fut = asyncio.ensure_future(self.kv.put(key, value) if op == "put" and value is not None else self.kv.delete(key))
        self._pending[task_id] = fut
        fut.add_done_callback(lambda f: self._written(task_id, f))

    def _written(self, task_id: str, fut: asyncio.Future[Any]) -> None:
        if self._pending.get(task_id) is fut:
            del self._pending[task_id]
        if not fut.cancelled() and fut.exception() is not None:
            log.warning("task %s not shared: %s", task_id, fut.exception())

    def on_entry(self, key: str, value: bytes | None, op: str | None) -> None:
        """A record stored or removed by any gateway (from the watch or a fetch)."""
        task_id = task_of_key(key)
        if task_id is None:
            return
        if op in (KV_DEL, KV_PURGE) or not value:
            if task_id not in self._pending:  # not one this gateway is writing again meanwhile
                self.discard(task_id)
            return
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            return
        if doc.get("id") != task_id or doc.get("origin") == self.member.id:  # this process's own (the watch's echo,
            # perhaps of a record it has since forgotten for its owner's budget: never adopted back)
            return
        legs = tuple(str(x) for x in doc.get("legs") or ())
        agg = orjson.dumps(doc["agg"]) if doc.get("agg") is not None else None
        route = orjson.dumps(doc.get("route") or [])
        # the record's size as its gateway counted it, less what `_store` adds again for the route and aggregate:
        # every gateway counts an owner's records alike, so all forget the same ones past the owner's budget
        size = int(doc.get("size") or 0) - (len(route) // 8 if agg is None else len(agg) + len(route))
        at = self.clock() - max(0.0, time.time() - float(doc.get("at") or time.time()))
        self._adopting = True
        try:
            super()._store(task_id, legs, route, agg, max(0, size), doc.get("owner"), doc.get("context"), at)
        finally:
            self._adopting = False
        self.adopted += 1

    async def _follow(self, loaded: asyncio.Future[None]) -> None:
        """Mirror the bucket: its current records first (then `loaded` is set), then every change."""
        assert self.kv is not None
        while True:
            try:
                watcher = await self.kv.watchall()
                async for entry in watcher:
                    if entry is None:  # the records held when the watch began are all delivered
                        if not loaded.done():
                            loaded.set_result(None)
                        continue
                    self.on_entry(entry.key, entry.value, entry.operation)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - NATS away: watch again
                log.info("tasks watch: %s; watching again", exc or type(exc).__name__)
                if not loaded.done():
                    loaded.set_result(None)
                await asyncio.sleep(1.0)
