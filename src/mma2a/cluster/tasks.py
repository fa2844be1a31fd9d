"""The task map shared by every gateway of a cluster (a KV bucket with a TTL).

`ClusterTaskMap` is the gateway's `TaskMap` (the local cache every lookup reads, synchronously, as on one
gateway) whose records go to the bucket in batches: every record made or changed while a batch is being stored
waits for the next one, so under load one KV write (one acknowledgement) carries the records of many requests,
where it carried one (session 9: that write per request cost a two-worker host 3x the CPU per request of one
gateway). A request still answers only once the batch holding its
record is stored (`flush`): a follow-up reaching any other gateway next finds it.

A gateway reads the others' records, updates and removals into its cache only when it needs them (`sync`: a task it
does not know, or a fan-out still in progress; a context it does not know; a listing, for ListTasks' owners and
totals), from where it last stopped up to what the bucket held at the time of asking, so a record stored before the
follow-up was sent is found; nothing reaches a gateway per batch of another (every gateway used to mirror every
batch by watch: each record was parsed and adopted by every other gateway whether anyone asked for it or not). A
task outlives the process that made it: a gateway reads the bucket back when it starts.

A record keeps its owner exactly as the gateway that made it keyed it (the principal: a federated client's
too), so a task is answered only to its owner on every gateway. The bucket's TTL is the map's age limit;
each owner's byte budget holds on the cluster's records: a gateway that forgets an owner's oldest records for
the budget removes them on every gateway (a removal is an entry of the next batch).

A batch is one KV entry `b.<origin>.<n>` (`origin`: this process; the key is never written again, so the TTL
removes it, or the bucket's byte bound `cluster.task_bucket_bytes`, oldest first) holding `{"origin", "put": [records], "del": [task ids]}`; entries keyed by a task id alone
(one record each, written by gateways before batching) are still read.

The workers of one `serve --workers N` over the nats-server it starts are the whole cluster: they share the same
records through files on the host instead (`files_dir`, cluster/task_files.py). Each record is appended as it
is made (stored when the append returns: nothing to wait for before answering), and a worker reads the others'
records only when it needs them (`sync`: a task it does not know, or a fan-out still in progress; a context it
does not know; a listing): nothing reaches a worker per request of another, and nothing crosses NATS. A file's
document is one record as a JSON array, `[id, legs, route, at, size, owner, context]` (and the aggregate, if any,
eighth), or a removal, `[id]`: the record is made on every request a worker answers, and an array without keys
costs half of what the bucket's object does (files are read only by the workers of one `serve`, of one version).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import secrets
import time
from typing import Any

import orjson
from nats.js import api
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from ..gateway.state.tasks import TaskMap
from ..serving import cancel_tasks
from .link import Member, ensure_kv
from .task_files import RETAIN, TaskFiles

log = logging.getLogger("mma2a.cluster.tasks")

BATCH_BYTES = 256 << 10  # a batch entry's records at most (NATS refuses messages over max_payload, 1 MiB by default)
CATCH_UP_S = 5.0  # how long a lookup waits for the bucket's next entry while it reads on (NATS slow or away)
INLINE_READ = 256 << 10  # a catch-up on the files reading more than this reads in a thread


def task_key(task_id: str) -> str:
    """A KV key for a task id: base64url of it (the records of gateways before batching); reversible."""
    return base64.urlsafe_b64encode(task_id.encode()).decode()


def task_of_key(key: str) -> str | None:
    try:
        return base64.urlsafe_b64decode(key.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


class ClusterTaskMap(TaskMap):
    """A `TaskMap` whose records are shared through the cluster's `tasks` bucket."""

    def __init__(self, member: Member, *, files_dir: str | None = None, **limits: Any) -> None:
        super().__init__(**limits)
        self.member = member
        self.kv: KeyValue | None = None
        self.origin = f"{member.id}.{secrets.token_hex(4)}"  # this process: its batches are never adopted back
        self._head = b'{"origin":' + orjson.dumps(self.origin) + b',"put":['  # every batch document's start
        self.files = None if files_dir is None else TaskFiles(
            files_dir, self.origin, max_age_s=self.max_age_s, retain_bytes=RETAIN * self.max_bytes,
            held_since=self._held_since)
        self._opened = False  # records are shared once open (before: this gateway's cache only)
        self._sync_lock = asyncio.Lock()
        self._queued: asyncio.Task[None] | None = None  # the bucket read that starts once the current one ends
        self._ops: dict[str, bytes | None] = {}  # task id -> its newest record (None: removed), for the next batch
        self._batch: asyncio.Future[None] | None = None  # resolved once the records in `_ops` are stored
        self._pending: dict[str, asyncio.Future[None]] = {}  # task id -> the batch storing its newest record
        self._writer: asyncio.Task[None] | None = None
        self._written = 0  # batches this process has stored
        self._unshared = 0  # records in a row not shared (refused by the files: a full disk; a failed batch: NATS away)
        self.unshared = 0  # records never shared: refused by the files, or their batch's put failed (NATS away)
        self._seen = 0  # the bucket's last sequence this gateway has read
        self._adopting = False
        self.adopted = 0
        self.reads = 0  # reads of the bucket's entries (on a miss, or at the start)
        self.batches = 0  # batch entries written, and the records in them (the batching's measure; on files, one a record)
        self.records = 0

    @property
    def stream(self) -> str:
        return f"KV_{self.member.names.bucket('tasks')}"

    def _held_since(self) -> float:
        """When this map's oldest record was made (its clock, `time.monotonic` on a gateway): none older is held."""
        for row in self._rows.values():
            return row[3]
        return float("inf")

    async def open(self) -> None:
        """Open (or create) the bucket, mirror what it holds, and follow the other gateways' changes (on files:
        read what the other workers, and this one before a restart, stored)."""
        if self.files is not None:
            await self.sync()
            self._opened = True
            return
        c = self.member.config
        self.kv = await ensure_kv(self.member.js, self.member.names.bucket("tasks"), ttl=self.max_age_s,
                                  replicas=c.replicas, max_bytes=c.task_bucket_bytes, setting="cluster.task_bucket_bytes",
                                  sizing=self.member.sizing)
        await self.sync()  # what the bucket holds (a restarted gateway's own records too)
        self._opened = True

    async def close(self) -> None:
        if self.files is not None:
            self.files.close()
        if self._queued is not None:
            await cancel_tasks([self._queued])
        if self._writer is not None:  # what is gathered is stored (NATS away: the put times out)
            with contextlib.suppress(Exception):
                await asyncio.shield(self._writer)

    # --- TaskMap, written through in batches ----------------------------------------------------------------
    def _store(self, task_id: str, legs: tuple[str, ...], route_doc: list[dict[str, Any]] | bytes, agg: bytes | None,
               size: int, owner: str | None, context: str | None, at: float | None = None) -> None:
        super()._store(task_id, legs, route_doc, agg, size, owner, context, at)
        if not self._adopting:
            self._write_row(task_id)

    def update(self, record: Any) -> None:
        super().update(record)
        self._write_row(record.task_id)

    def _expire_owner(self, owner: str) -> list[str]:
        gone = super()._expire_owner(owner)
        for task_id in gone:  # past the owner's budget: gone everywhere (an owner's whole set compared before and
            # after each record used to cost ~1 ms a request once a client was at its budget)
            self._send(task_id, None)
        return gone

    def stats(self) -> dict[str, Any]:
        """What this gateway shared of its task records (`mma2a cluster status`, each gateway's `tasks`): batches and
        records stored, records never shared (and of them those not shared in a row now: a full disk, NATS away), records
        adopted from the others and the reads that took them."""
        return {"via": "files" if self.files is not None else "bucket", "batches": self.batches,
                "records": self.records, "unshared": self.unshared, "unsharedNow": self._unshared, "adopted": self.adopted,
                "reads": self.reads}

    async def fetch(self, task_id: str) -> None:
        """A task this gateway's cache does not hold (made by another gateway, or by this one before a restart), or
        a fan-out still in progress (its legs come later): read on what the cluster holds (`sync`)."""
        row = self._rows.get(task_id)
        if row is not None and (row[2] is None or row[0]):
            return
        await self.sync()

    async def fetch_context(self, context_id: str) -> None:
        """A message in a context this gateway does not know: read on what the other gateways stored (`sync`)."""
        if context_id not in self._contexts:
            await self.sync()

    async def sync(self) -> None:
        """Everything the cluster held when this was called is in the cache once it returns: the other gateways'
        records read on from where this gateway stopped (on files, the other workers'; on the bucket, its entries up
        to its last sequence at the time of asking). One reader at a time: a lookup that waited for another's read
        finds most of what it needs read already."""
        if self.files is not None:
            await self._read_files()
        elif self.kv is not None:
            await self._read_bucket()

    async def _read_bucket(self) -> None:
        """Every lookup that misses while a read runs shares the one read queued after it (which starts after they
        asked, so it covers them): concurrent misses cost two reads, not one each in turn (a round trip each, where
        every message in a context new to the cluster misses)."""
        if self._queued is None:
            self._queued = asyncio.get_running_loop().create_task(self._queued_read())
        await asyncio.shield(self._queued)  # a caller that leaves does not stop the read the others wait for

    async def _queued_read(self) -> None:
        assert self.kv is not None
        async with self._sync_lock:
            self._queued = None  # a lookup from now on queues the next read
            try:
                state = (await self.member.js.stream_info(self.stream)).state
            except Exception as exc:  # noqa: BLE001 - NATS away: answered from the cache alone
                log.debug("task lookup failed: %s", exc)
                return
            if state.messages == 0 or self._seen >= state.last_seq:  # all expired (TTL), or all read already
                return
            # an ordered consumer for this read only (flow-controlled, gone once it is unsubscribed), from where this
            # gateway stopped; entries leave the bucket oldest first, so its last sequence is there to be read up to
            self.reads += 1
            bucket = self.member.names.bucket("tasks")
            prefix = f"$KV.{bucket}."
            sub = None
            try:
                sub = await self.member.js.subscribe(
                    prefix + ">", stream=self.stream, ordered_consumer=True,
                    deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                    config=api.ConsumerConfig(opt_start_seq=max(self._seen + 1, state.first_seq)))
                while self._seen < state.last_seq:
                    msg = await sub.next_msg(timeout=CATCH_UP_S)
                    key = msg.subject[len(prefix):]
                    op = (msg.headers or {}).get("KV-Operation")
                    if key.startswith("b."):
                        if msg.data and op not in (KV_DEL, KV_PURGE):
                            self.on_batch(key, msg.data)
                    else:
                        self.on_entry(key, msg.data, op)
                    self._seen = max(self._seen, msg.metadata.sequence.stream)
            except (asyncio.TimeoutError, TimeoutError) as exc:
                log.info("task lookup: the tasks bucket read stopped at %d of %d: %s", self._seen, state.last_seq,
                         exc or type(exc).__name__)
            except Exception as exc:  # noqa: BLE001 - NATS away: answered from the cache alone
                log.info("task lookup: the tasks bucket read stopped at %d of %d: %s", self._seen, state.last_seq, exc)
            finally:
                if sub is not None:
                    with contextlib.suppress(Exception):
                        await sub.unsubscribe()

    async def _read_files(self) -> None:
        assert self.files is not None
        async with self._sync_lock:  # one reader of the files at a time (each read takes on from the last)
            pending = self.files.pending()
            if not pending:
                return
            if sum(size - taken for _, taken, size in pending) > INLINE_READ:  # a restart's read, or a long while
                docs = await asyncio.to_thread(self.files.read, pending)
            else:
                docs = self.files.read(pending)
            for doc in docs:
                self._apply_file_record(doc)

    async def flush(self, task_id: str) -> None:
        """Wait until this task's record is stored in the cluster (a follow-up may reach another gateway next)."""
        fut = self._pending.get(task_id)
        if fut is not None:
            await asyncio.shield(fut)

    # --- the KV side --------------------------------------------------------------------------------------
    def _write_row(self, task_id: str) -> None:
        row = self._rows.get(task_id)
        if row is None:
            return
        legs, route, agg, at, size, owner, context = row
        wall = time.time() - (self.clock() - at)
        if self.files is not None:  # positional (the module's docstring)
            fields = (task_id, legs, orjson.Fragment(route), wall, size, owner, context)
            self._send(task_id, orjson.dumps(fields if agg is None else (*fields, orjson.Fragment(agg))))
            return
        doc = {"id": task_id, "legs": legs, "route": orjson.Fragment(route), "at": wall,
               "size": size, "owner": owner, "context": context}
        if agg is not None:  # absent: none (a reader takes a missing aggregate as none)
            doc["agg"] = orjson.Fragment(agg)
        self._send(task_id, orjson.dumps(doc))

    def _send(self, task_id: str, record: bytes | None) -> None:
        """Gather a record (None: its removal) for the next batch; a writer task stores batches one at a time (on
        files: stored now)."""
        if not self._opened:  # the gateway has not started: this gateway's cache only
            return
        if self.files is not None:  # one record (or removal): one document
            try:
                self.files.append(record if record is not None else orjson.dumps((task_id,)))
                self.batches += 1
                self.records += 1
                if self._unshared:
                    self._shared_again()
            except OSError as exc:  # the disk full: this record stays this worker's own (said once an outage)
                if not self._unshared:
                    log.warning("task records not shared with the other workers (each stays this worker's own until "
                                "an append succeeds again): %s", exc)
                self._unshared += 1
                self.unshared += 1
            return
        if self._batch is None:
            self._batch = asyncio.get_running_loop().create_future()
        self._ops[task_id] = record  # a record changed twice before its batch leaves: stored once, as it is now
        self._pending[task_id] = self._batch
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        try:
            while self._ops:
                ops, done = self._ops, self._batch
                self._ops, self._batch = {}, None
                try:
                    await self._put_batch(ops)
                except Exception as exc:  # noqa: BLE001 - NATS away: these records stay this gateway's own
                    if not self._unshared:  # said once an outage, as on the files
                        log.warning("task records not shared with the other gateways (each stays this gateway's own "
                                    "until a batch is stored again): %d in this batch: %s", len(ops), exc)
                    self._unshared += len(ops)
                    self.unshared += len(ops)
                else:
                    if self._unshared:
                        self._shared_again()
                finally:
                    for task_id in ops:
                        if self._pending.get(task_id) is done:
                            del self._pending[task_id]
                    if done is not None and not done.done():
                        done.set_result(None)
        finally:
            self._writer = None

    def _shared_again(self) -> None:
        log.warning("task records shared again (%d were kept this gateway's own in the outage)", self._unshared)
        self._unshared = 0

    async def _put_batch(self, ops: dict[str, bytes | None]) -> None:
        for doc, n in self._docs(ops):
            await self._put(doc, n)

    def _docs(self, ops: dict[str, bytes | None]) -> list[tuple[bytes, int]]:
        """The batch documents holding `ops` (each under BATCH_BYTES of records but one), with their record counts."""
        head = self._head
        removed = [task_id for task_id, record in ops.items() if record is None]
        chunk: list[bytes] = []
        size = 0
        docs = []
        records = [record for record in ops.values() if record is not None]
        for i, record in enumerate(records):
            chunk.append(record)
            size += len(record)
            if size >= BATCH_BYTES or i == len(records) - 1:
                last = i == len(records) - 1
                docs.append((head + b",".join(chunk) + b'],"del":' + orjson.dumps(removed if last else []) + b"}",
                             len(chunk)))
                chunk, size = [], 0
        if not records:
            docs.append((head + b'],"del":' + orjson.dumps(removed) + b"}", len(removed)))
        return docs

    async def _put(self, data: bytes, n: int) -> None:
        assert self.kv is not None
        self._written += 1
        await self.kv.put(f"b.{self.origin}.{self._written}", data)
        self.batches += 1
        self.records += n

    def on_batch(self, key: str, value: bytes) -> None:
        """A batch of records stored by another gateway (read from the bucket)."""
        if key.startswith(f"b.{self.origin}."):  # this process's own (read back: perhaps of records it has
            # since forgotten for its owner's budget, never adopted back)
            return
        self._apply(value)

    def _apply(self, value: bytes) -> None:
        """A batch document of another gateway: its records adopted, its removals applied."""
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            return
        if not isinstance(doc, dict):
            return
        for record in doc.get("put") or ():
            if isinstance(record, dict):
                self._adopt(record)
        for task_id in doc.get("del") or ():
            if isinstance(task_id, str) and task_id not in self._pending:  # not one this gateway writes again
                self.discard(task_id)

    def _apply_file_record(self, value: bytes) -> None:
        """A document of another worker's file: a record adopted, or a removal applied (the module's docstring)."""
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            return
        if not isinstance(doc, list) or not doc or not isinstance(doc[0], str):
            return
        if len(doc) == 1:
            if doc[0] not in self._pending:
                self.discard(doc[0])
        elif len(doc) in (7, 8):
            self._adopt({"id": doc[0], "legs": doc[1], "route": doc[2], "at": doc[3], "size": doc[4], "owner": doc[5],
                         "context": doc[6], "agg": doc[7] if len(doc) == 8 else None})

    def on_entry(self, key: str, value: bytes | None, op: str | None) -> None:
        """A record stored or removed by a gateway writing one entry per task (before batching)."""
        task_id = task_of_key(key)
        if task_id is None:
            return
        if op in (KV_DEL, KV_PURGE) or not value:
            if task_id not in self._pending:
                self.discard(task_id)
            return
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            return
        if isinstance(doc, dict) and doc.get("id") == task_id:
            self._adopt(doc)

    def _adopt(self, doc: dict[str, Any]) -> None:
        task_id = doc.get("id")
        if not isinstance(task_id, str):
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
