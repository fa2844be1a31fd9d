"""Push notifications in a cluster: the clients' configs and the pending deliveries in JetStream KV
(`gateway.push.journal`), so a gateway killed with deliveries pending has them delivered after its
restart (or by another gateway once it stops heartbeating), each once or more, to the client whose
config it is.

Two buckets: `push_configs` (every gateway loads them at start and follows others' changes) and
`push_deliveries` (a record per pending (client, task, config), holding its gateway's id; the whole
notification, a task as `GetTask` shows it, is in the record, so it is self-contained). A gateway takes a
delivery over by a compare-and-set of its record (`update` with the revision read), so two never both
take the same one from a dead gateway. Both buckets are listed streamed (`kv_keys.streamed_entries`: one batch held,
no `get` a key, however many configs and deliveries the clients have).

A client's config methods read what it did through any gateway (as through one): a change is in the bucket before
its answer leaves (`written`), and a config method first applies every change the bucket holds (`caught_up`: one
`stream_info` and, when this gateway's watch is behind, a wait for it), each wait bounded by `SYNC_S` (NATS away:
the gateway answers from what it has, as before).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Any

import orjson
from nats.js.errors import KeyWrongLastSequenceError

from ..gateway.state.push_journal import OnConfig, OnDelivery
from ..serving import cancel_tasks
from .kv_keys import Streamed, streamed_entries
from .link import Member, ensure_kv

log = logging.getLogger("mma2a.cluster.push")

_Op = tuple[str, str, str, bytes | None]  # (bucket kind, op, key, value)
SYNC_S = 2.0  # the longest a config method waits for its change to be written, or for other gateways' to be applied
RETIRE_S = 10.0
"""A deleted config's record (what tells the other gateways' watches it went) is purged this long after it is written,
leaving no message: kept until the bucket's TTL, a client creating and deleting configs of new ids (its live ones
within `push.max_configs_per_client`) filled the bucket, which then dropped its oldest records — other clients' live
configs, missing from then on for a gateway that starts (docs/security.md S17-7). A watch that misses it (NATS away)
keeps the config until it ages out (`push.config_ttl_s`), as one the bucket aged out."""


class PushJournalKV:
    """`PushJournal` on JetStream KV for one cluster member."""

    def __init__(self, member: Member, *, takeover_s: float | None = None) -> None:
        self.member = member
        self.takeover_s = takeover_s
        self.kv: dict[str, Any] = {}
        self._writes: asyncio.Queue[_Op | asyncio.Future[None] | None] = asyncio.Queue()  # a future: `written`
        self._applied = 0  # the configs bucket's last revision this gateway's watch has applied
        self._advanced = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self._held: set[str] = set()  # delivery keys this gateway holds
        self._on_delivery: OnDelivery | None = None

    @property
    def gateway(self) -> str:
        return self.member.id

    async def open(self, on_config: OnConfig, on_delivery: OnDelivery) -> None:
        c, names, js = self.member.config, self.member.names, self.member.js
        push = self.member.gw.config.push
        # every config ever set (or deleted: a marker) left a key forever, read one by one at every start; a config
        # lives `config_ttl_s`, or while its task is followed (at most `follow_max_s`): the bucket forgets it after both
        self.kv["configs"] = await ensure_kv(js, names.bucket("push_configs"), replicas=c.replicas,
                                             ttl=push.config_ttl_s + push.follow_max_s, enforce_ttl=True,
                                             max_bytes=c.push_bucket_bytes, setting="cluster.push_bucket_bytes",
                                             sizing=self.member.sizing)
        self.kv["deliveries"] = await ensure_kv(js, names.bucket("push_deliveries"), replicas=c.replicas)
        self._on_delivery = on_delivery
        self._tasks.append(asyncio.create_task(self._writer()))
        await self._load_configs(on_config)
        await self._take_over(own=True)
        self._tasks.append(asyncio.create_task(self._watch_configs(on_config)))
        self._tasks.append(asyncio.create_task(self._takeover_loop()))

    async def _entries(self, kind: str, skip: set[str] | frozenset[str] = frozenset()) -> AsyncGenerator[Streamed, None]:
        """The last entry of each key of `push_<kind>` but those in `skip` (at the moment it comes), in the stream's
        order, streamed (`kv_keys.streamed_entries`: a consumer of this listing's own, one batch of `STREAM_BATCH` held,
        no `get` a key, whatever the bucket holds: each client's configs and deliveries); a key rewritten meanwhile may
        come twice, its value of before first (`late` the second). A delivery's marker (a KV delete's, by a gateway
        from before `_forget`) is purged, not yielded. NATS away: the listing ends where it is, said in the log (the
        next round reads again)."""
        try:
            async for entry in streamed_entries(self.member.js, self.member.names.bucket("push_" + kind)):
                if entry.key in skip:
                    continue
                if entry.value is None:
                    if kind == "deliveries":
                        with contextlib.suppress(Exception):  # up to the marker only: a record written since stays
                            await self._forget(entry.key, upto=entry.revision)
                    continue
                yield entry
        except Exception as exc:  # noqa: BLE001 - NATS away
            log.info("push %s: not read: %s", kind, exc or type(exc).__name__)

    async def _forget(self, key: str, *, upto: int | None = None) -> None:
        """A delivery's record removed, leaving no marker (a KV delete's stays: this bucket has no TTL, and every
        takeover round read each of them, one request a marker); with `upto`, its messages up to that revision only."""
        bucket = self.member.names.bucket("push_deliveries")
        await self.member.js.purge_stream(f"KV_{bucket}", subject=f"$KV.{bucket}.{key}",
                                          seq=upto + 1 if upto is not None else None)

    async def _load_configs(self, on_config: OnConfig) -> None:
        """Every config the bucket holds, applied in the stream's order; a deleted one's record too when it was written
        during the listing (its config, listed before, is dropped then)."""
        async with contextlib.aclosing(self._entries("configs")) as entries:
            async for entry in entries:
                with contextlib.suppress(Exception):
                    rec = orjson.loads(entry.value or b"{}")
                    if entry.late or not rec.get("deleted"):
                        on_config(rec)

    async def _watch_configs(self, on_config: OnConfig) -> None:
        """Other gateways' config changes, applied here (this gateway's own are skipped: it applied them first)."""
        while True:
            try:
                watcher = await self.kv["configs"].watchall(include_history=False)
                async for entry in watcher:
                    if entry is None:
                        continue
                    if entry.value:
                        rec = orjson.loads(entry.value)
                        if rec.get("gateway") != self.gateway:
                            on_config(rec)  # a deleted one too: the service drops it
                    if entry.revision and entry.revision > self._applied:
                        async with self._advanced:
                            self._applied = entry.revision
                            self._advanced.notify_all()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - NATS away: watch again
                log.info("push configs watch: %s; watching again", exc or type(exc).__name__)
                await asyncio.sleep(1.0)

    async def _take_over(self, *, own: bool) -> None:
        """Claim the deliveries of gateways that stopped (and, at start, this gateway's own from before)."""
        kv = self.kv["deliveries"]
        async with contextlib.aclosing(self._entries("deliveries", skip=self._held)) as entries:
            async for entry in entries:
                key = entry.key
                if key in self._held:  # taken by this gateway meanwhile
                    continue
                try:
                    rec = orjson.loads(entry.value or b"{}")
                except orjson.JSONDecodeError:
                    continue
                holder = str(rec.get("gateway") or "")
                if not ((own and holder == self.gateway) or (holder != self.gateway and not await self.member.is_alive(holder))):
                    continue
                rec["gateway"] = self.gateway
                try:
                    await kv.update(key, orjson.dumps(rec), last=entry.revision)
                except KeyWrongLastSequenceError:
                    continue  # another gateway took it, or its holder wrote it again: alive after all
                self._held.add(key)
                if holder != self.gateway:
                    log.warning("push: delivery %s of gateway %s (stopped) taken over", key, holder)
                assert self._on_delivery is not None
                self._on_delivery(key, rec)

    async def _takeover_loop(self) -> None:
        every = self.takeover_s or self.member.config.member_ttl_s
        while True:
            await asyncio.sleep(every)
            try:
                await self._take_over(own=False)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - NATS away: next round
                log.info("push takeover: %s", exc or type(exc).__name__)

    async def written(self) -> None:
        """Until the changes queued so far are in the bucket (at most `SYNC_S`)."""
        done = asyncio.get_running_loop().create_future()
        self._writes.put_nowait(done)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(done), SYNC_S)

    async def caught_up(self) -> None:
        """Until every config change the bucket holds now is applied here (at most `SYNC_S`)."""
        try:
            async with asyncio.timeout(SYNC_S):
                info = await self.member.js.stream_info(f"KV_{self.member.names.bucket('push_configs')}")
                last = int(info.state.last_seq or 0) if info.state.messages else 0
                async with self._advanced:
                    await self._advanced.wait_for(lambda: self._applied >= last)
        except TimeoutError:
            return
        except Exception as exc:  # noqa: BLE001 - NATS away: answer from what this gateway has
            log.info("push configs: not caught up: %s", exc or type(exc).__name__)

    def put_config(self, key: str, record: dict[str, object]) -> None:
        self._writes.put_nowait(("configs", "put", key, orjson.dumps({**record, "gateway": self.gateway})))

    def delete_config(self, key: str, record: dict[str, object]) -> None:
        self._writes.put_nowait(("configs", "retire", key, orjson.dumps({**record, "deleted": True,
                                                                         "gateway": self.gateway})))

    def put_delivery(self, key: str, record: dict[str, object]) -> None:
        self._held.add(key)
        self._writes.put_nowait(("deliveries", "put", key, orjson.dumps({**record, "gateway": self.gateway})))

    def delete_delivery(self, key: str) -> None:
        self._held.discard(key)
        self._writes.put_nowait(("deliveries", "delete", key, None))

    async def _writer(self) -> None:
        """Writes in the order they were made; NATS trouble is retried for a while, then the write is logged lost."""
        while True:
            op = await self._writes.get()
            if op is None:
                return
            if isinstance(op, asyncio.Future):  # `written`: what was queued before it is written
                if not op.done():
                    op.set_result(None)
                continue
            kind, what, key, value = op
            for attempt in range(20):
                try:
                    if what == "put":
                        assert value is not None
                        await self.kv[kind].put(key, value)
                    elif what == "retire":  # a config deleted: marked so for the watches, purged after RETIRE_S
                        assert value is not None
                        seq = await self.kv[kind].put(key, value)
                        asyncio.get_running_loop().call_later(
                            RETIRE_S, self._writes.put_nowait, (kind, "purge", key, b"%d" % seq))
                    elif what == "purge":  # up to the deleted record only: a config of that id set since stays
                        bucket = self.member.names.bucket("push_" + kind)
                        await self.member.js.purge_stream(f"KV_{bucket}", subject=f"$KV.{bucket}.{key}",
                                                          seq=int(value or b"0") + 1)
                    else:  # a delivery's outcome
                        await self._forget(key)
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001
                    if attempt == 19:
                        log.warning("push: %s of %s record %s not written: %s", what, kind, key, exc)
                    await asyncio.sleep(min(2.0, 0.05 * 2 ** attempt))

    async def close(self) -> None:
        self._writes.put_nowait(None)
        writer, rest = (self._tasks[0], self._tasks[1:]) if self._tasks else (None, [])
        await cancel_tasks(rest)
        if writer is not None:
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError, Exception):
                await asyncio.wait_for(writer, 5.0)
        self._tasks.clear()
