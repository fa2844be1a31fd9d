"""`ClusterState`: one gateway's link to the cluster's shared state in NATS JetStream KV.

Rules (and the mode), agents and modalities live in three KV buckets. Every gateway
watches them and applies each entry through the same code the admin API uses
(`RoutingState.set_rules`, `AgentDirectory.add/remove/drain`, `ModalityRegistry.register`),
so a change made through any gateway takes effect on all. Applying is idempotent: an
entry already in force (the one this gateway just wrote) is only recorded, not re-applied.
A rule set that does not build yet (it names an agent whose entry has not arrived) is
kept pending and retried after the next agent change. Membership is a KV bucket with a
TTL refreshed by a heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from typing import TYPE_CHECKING, Any, Literal

import nats
import orjson
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from .._version import __version__
from ..errors import ClusterError, InvalidParams, MMA2AError
from ..gateway.access.budgets import SharedBudgets
from ..gateway.cluster_config import ClusterConfig
from ..gateway.state.hooks import GatewayParts
from ..routing import parse_rules
from ..serving import cancel_tasks
from .budgets import BudgetExchange
from .delivery import DurableDelivery
from .kv_keys import current, held_keys
from .learning import ClusterLearning
from .push import PushJournalKV
from .link import Names, connect, ensure_kv, reserved
from .nats_urls import without_credentials
from .nonces import ClusterNonces
from .objects import ObjectBlobStore
from .pins import ClusterSessionPins
from .tasks import ClusterTaskMap

if TYPE_CHECKING:
    from ..gateway.state.aggregate import LegResult
    from ..gateway.downstream.directory import AgentEntry
    from ..gateway.history import HistoryConfig, HistoryRecorder, HistorySink
    from .history import JetStreamHistory

log = logging.getLogger("mma2a.cluster")

CONFIG_BUCKETS = ("rules", "agents", "modalities")
HistoryMode = Literal["stream", "publish", "file"]
"""Where a member's decisions go: the cluster's stream, which it indexes into its file (`stream`) or another process
indexes into the file they share (`publish`); or straight into a file the host's workers share, when they are
the whole cluster (`file`: `serve --workers N` over the nats-server it starts)."""


class ClusterState:
    """Connects a `Gateway` to the cluster: shared config, session pins, blobs, durable delivery, membership.

    It implements the gateway's `ClusterHooks`: built by `cluster_state` (as `mma2a serve` does) and
    handed to `Gateway(config, cluster=...)`, which calls `start(gateway)` when it starts.
    """

    def __init__(self, config: ClusterConfig, *, history: HistoryMode = "stream", task_dir: str | None = None) -> None:
        self._gw: GatewayParts | None = None
        self.config = config
        self.history_mode: HistoryMode = history
        self.task_dir = task_dir  # the workers of one host, the whole cluster: their tasks through files there
        self.id = config.id or f"{socket.gethostname().split('.')[0]}-{os.getpid()}-{secrets.token_hex(3)}"
        self.names = Names(config.name)
        self.nc: Any = None
        self.js: Any = None
        self.kv: dict[str, KeyValue] = {}
        self.applied: dict[str, int] = {b: 0 for b in CONFIG_BUCKETS}
        self.rules_revision = 0
        self.last_error: str | None = None
        self.pins = ClusterSessionPins(self)
        self.store = ObjectBlobStore(self)
        self.delivery = DurableDelivery(self)
        self.nonces = ClusterNonces(self)
        self.learning = ClusterLearning(self)  # the learner's journal: learned tasks and ratings, shared
        self.push_journal = PushJournalKV(self)  # opened by the gateway's push service once this member has started
        self.tasks: ClusterTaskMap | None = None  # set by task_map() when the gateway is built
        self.history: JetStreamHistory | None = None  # set by history_sink() when the gateway keeps a history
        self.budgets: BudgetExchange | None = None  # set by share_budgets() when the gateway is built
        self._pending_rules: Any = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._watchers: list[Any] = []
        self._apply_lock = asyncio.Lock()
        self._ready = asyncio.Event()
        self.started_at = time.time()
        self.reconnects = 0
        self._leaving = False  # `stop` closes the connection

    @property
    def gw(self) -> GatewayParts:
        """The gateway this cluster member serves (set by `start`)."""
        if self._gw is None:
            raise ClusterError("cluster: not started (Gateway.start calls ClusterState.start)")
        return self._gw

    def history_sink(self, local: HistoryRecorder, config: HistoryConfig) -> HistorySink:
        """Decisions through the cluster's stream, indexed back into `local` (every gateway's file holds them all;
        the workers of one `serve --workers N` share a file, which the first of them indexes); or, for the workers
        of one host with no other gateway (`history="file"`), straight into the file they share."""
        if self.history_mode == "file":
            return local
        from .history import JetStreamHistory

        self.history = JetStreamHistory(self, local, capacity=config.queue, max_age_s=config.max_age_s,
                                        max_bytes=config.max_bytes, max_bytes_per_client=config.max_bytes_per_client,
                                        follow=self.history_mode == "stream")
        return self.history

    @property
    def sizing(self) -> dict[str, tuple[int, str]]:
        """What this gateway's bound buckets and streams reserve of JetStream's store (`link.reserved`)."""
        return reserved(self.config, history_bytes=self.history.max_bytes if self.history is not None else None,
                        task_bucket=self.task_dir is None)

    def learning_journal(self) -> ClusterLearning:
        """Where the gateway's learner shares what it notes and takes (a stream every gateway follows from its start)."""
        return self.learning

    def share_budgets(self, budgets: SharedBudgets) -> bool:
        """The clients' budgets hold across the cluster: their use is exchanged with the other gateways (started by
        `start`)."""
        self.budgets = BudgetExchange(self, budgets)
        return True

    def task_map(self, *, max_bytes: int, max_bytes_per_owner: int | None) -> ClusterTaskMap:
        """The gateway's task map, shared with the other gateways (`tasks` bucket, or the workers' files in
        `task_dir`; opened by `start`)."""
        self.tasks = ClusterTaskMap(self, files_dir=self.task_dir, max_bytes=max_bytes,
                                    max_bytes_per_owner=max_bytes_per_owner)
        return self.tasks

    def task_sharing(self) -> dict[str, Any] | None:
        """What this gateway shared of its task records (its member document's `tasks`, and `/metrics`)."""
        return self.tasks.stats() if self.tasks is not None else None

    # --- lifecycle ------------------------------------------------------------------
    async def start(self, gateway: GatewayParts) -> None:
        """Connect, open buckets, seed them from this gateway's config if empty, then adopt and watch them."""
        self._gw = gateway
        self.nc = await connect(self.config, name=f"mma2a-{self.id}", reconnected_cb=self._reconnected,
                                disconnected_cb=self._disconnected, error_cb=self._error)
        self.js = self.nc.jetstream(timeout=5.0)
        c = self.config
        for kind in CONFIG_BUCKETS:
            self.kv[kind] = await ensure_kv(self.js, self.names.bucket(kind), history=5, replicas=c.replicas)
        self.kv["sessions"] = await ensure_kv(self.js, self.names.bucket("sessions"), ttl=c.session_ttl_s, replicas=c.replicas,
                                              max_bytes=c.sessions_bucket_bytes, setting="cluster.sessions_bucket_bytes",
                                              sizing=self.sizing)
        self.kv["members"] = await ensure_kv(self.js, self.names.bucket("members"), ttl=c.member_ttl_s, replicas=c.replicas)
        await self.store.setup(max_bytes=gateway.config.blob_max_bytes,
                               max_bytes_per_client=gateway.config.blob_max_bytes_per_client,
                               max_uploads_per_client=gateway.config.blob_max_uploads_per_client,
                               max_uploads=gateway.config.blob_max_uploads)
        if gateway.config.signing.active or gateway.config.federation.trusted_gateways:  # (a peer's assertions too)
            await self.nonces.setup(max(gateway.config.signing.window_s, gateway.config.federation.window_s))
        await self._seed()
        for kind in CONFIG_BUCKETS:
            await self._catch_up(kind)
        await self._watch_all()
        await self.delivery.setup()
        if self.tasks is not None:
            await self.tasks.open()
        if self.history is not None:
            await self.history.setup()
        await self.learning.setup()
        if self.budgets is not None:
            await self.budgets.start()
        await self.heartbeat()
        self._tasks.append(asyncio.create_task(self._heartbeat_loop()))
        log.info("joined cluster %s as %s", c.name, self.id)

    async def stop(self) -> None:
        if self.history is not None:
            await self.history.stop()
        await self.learning.stop()
        if self.budgets is not None:
            await self.budgets.stop()
        await self.delivery.stop()
        if self.tasks is not None:
            await self.tasks.close()
        await cancel_tasks(self._tasks)
        await self._unwatch()
        if self.nc is not None and self.nc.is_connected:
            with contextlib.suppress(Exception):
                await self.kv["members"].delete(self.id)
            self._leaving = True  # nats-py says a drain's close as a disconnection: not one to warn of
            with contextlib.suppress(Exception):
                await self.nc.drain()
        self.nc = None

    async def _disconnected(self) -> None:
        if self._leaving:
            return
        log.warning("cluster %s: disconnected from NATS, reconnecting", self.config.name)

    async def _reconnected(self) -> None:
        """After NATS comes back, restart the watches from what was applied (ordered consumers may be gone)."""
        self.reconnects += 1
        where = without_credentials(self.nc.connected_url.netloc) if self.nc else "?"  # a URL may hold credentials
        log.info("cluster %s: reconnected to %s", self.config.name, where)
        self._tasks.append(asyncio.create_task(self._rewatch()))

    async def _rewatch(self) -> None:
        await self._unwatch()
        for _ in range(100):
            try:
                for kind in CONFIG_BUCKETS:
                    await self._catch_up(kind)
                await self._watch_all()
                return
            except Exception as exc:  # JetStream may still be recovering its streams
                log.info("cluster: re-watch after reconnect failed (%s), retrying", exc)
                await asyncio.sleep(0.2)

    async def _error(self, exc: Exception) -> None:
        log.debug("nats: %s", exc)

    # --- seeding and applying -------------------------------------------------------
    async def _seed(self) -> None:
        """First gateway of a cluster: its configured rules, mode and agents become the cluster's (create = only if absent)."""
        rules_kv, agents_kv = self.kv["rules"], self.kv["agents"]
        st = self.gw.state
        if st.rules_source is not None:
            with contextlib.suppress(Exception):
                await rules_kv.create("rules", self._doc(source=st.rules_source))
        with contextlib.suppress(Exception):
            await rules_kv.create("mode", self._doc(mode=st.mode))
        for entry in self.gw.directory.entries():
            with contextlib.suppress(Exception):
                await agents_kv.create(entry.name, self._agent_doc(entry))

    def _doc(self, **fields: Any) -> bytes:
        return orjson.dumps({**fields, "origin": self.id, "at": time.time()})

    def _agent_doc(self, entry: AgentEntry) -> bytes:
        return self._doc(config=entry.config.model_dump(), card=entry.card, draining=entry.draining)

    async def _catch_up(self, kind: str) -> None:
        """Apply the current entry of every key of a config bucket (at start and after a reconnect), a key deleted
        meanwhile too (an agent removed while this gateway was away is removed here). The keys are read from the
        bucket's stream, not by a watch (kv_keys.py: a watch's listing missed keys other gateways were rewriting)."""
        entries = await current(self.kv[kind], await held_keys(self.js, self.names.bucket(kind)), deleted=True)
        # agents first within rules order: apply in stream order
        # (entries read by `get` always carry their stream sequence as revision)
        for entry in sorted(entries, key=lambda e: e.revision or 0):
            await self.apply(kind, entry.key, entry.value, entry.revision or 0, entry.operation)

    async def _watch_all(self) -> None:
        for kind in (*CONFIG_BUCKETS, "sessions"):
            watcher = await self.kv[kind].watchall(include_history=False)
            self._watchers.append(watcher)
            self._tasks.append(asyncio.create_task(self._follow(kind, watcher)))

    async def _unwatch(self) -> None:
        watchers, self._watchers = self._watchers, []
        for w in watchers:
            with contextlib.suppress(Exception):
                await w.stop()

    async def _follow(self, kind: str, watcher: Any) -> None:
        while True:
            try:
                entry = await watcher.updates(timeout=3600)
            except (asyncio.TimeoutError, TimeoutError, nats.errors.TimeoutError):
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the watcher's subscription went away (reconnect restarts it)
                log.debug("cluster watch %s ended: %s", kind, exc)
                return
            if entry is None:  # end of the initial values
                continue
            try:
                if kind == "sessions":
                    self.pins.on_entry(entry.key, entry.value, entry.operation, entry.revision)
                else:
                    await self.apply(kind, entry.key, entry.value, entry.revision, entry.operation)
            except Exception:
                log.exception("cluster: applying %s/%s failed", kind, entry.key)

    async def apply(self, kind: str, key: str, value: bytes | None, revision: int, op: str | None) -> None:
        """Apply one config entry unless already applied (by revision) or already in force (by value)."""
        async with self._apply_lock:
            if revision <= self.applied[kind]:
                return
            self.applied[kind] = revision
            deleted = op in (KV_DEL, KV_PURGE)
            doc = {} if deleted or not value else orjson.loads(value)
            try:
                if kind == "rules":
                    await self._apply_rules(key, doc, revision, deleted)
                elif kind == "agents":
                    await self._apply_agent(key, doc, deleted)
                    if self._pending_rules is not None:
                        pending, self._pending_rules = self._pending_rules, None
                        await self._apply_rules("rules", pending[0], pending[1], False)
                elif kind == "modalities" and not deleted:
                    await self._apply_modality(doc)
            except MMA2AError as exc:
                self.last_error = f"{kind}/{key} (revision {revision}): {exc.message}"
                log.warning("cluster: not applied: %s", self.last_error)

    async def _apply_rules(self, key: str, doc: dict[str, Any], revision: int, deleted: bool) -> None:
        st = self.gw.state
        if key == "mode":
            if not deleted and doc.get("mode") and doc["mode"] != st.mode:
                await asyncio.to_thread(st.set_mode, doc["mode"])  # a snapshot build: off the loop
                self.pins.clear()
            return
        if key != "rules" or deleted:
            return
        source = doc.get("source")
        if source == st.rules_source:
            self.rules_revision = revision
            return
        # parsed and built off the event loop, as the admin API does (7,000 rules take seconds: every peer stalled)
        rules = await asyncio.to_thread(parse_rules, source if isinstance(source, (str, dict)) else None, source="cluster")
        try:
            await asyncio.to_thread(st.set_rules, rules, source)
        except MMA2AError:
            self._pending_rules = (doc, revision)  # retried after the next agent change
            raise
        self.rules_revision = revision
        self.last_error = None
        self.pins.clear()

    async def _apply_agent(self, name: str, doc: dict[str, Any], deleted: bool) -> None:
        directory = self.gw.directory
        if deleted:
            if name in directory:
                directory.remove(name, notify=False)
                await self.gw.rebuild_off_loop()
            return
        cfg = self.gw.config.agent_entry(doc.get("config"))  # as the admin API validates it: refused, never adopted
        if cfg.name != name:
            raise InvalidParams(f"name: {cfg.name!r} under the key {name!r}", field="name")
        card = doc.get("card")
        current = directory.get(name) if name in directory else None
        changed = False
        if current is None or current.config != cfg or (card is not None and current.card != card):
            await directory.add(cfg, card=card, notify=False)
            changed = True
        if bool(doc.get("draining")) != directory.get(name).draining:
            directory.drain(name, bool(doc.get("draining")), notify=False)
            changed = True
        if changed:  # the routing snapshot rebuilt off the event loop
            await self.gw.rebuild_off_loop()

    async def _apply_modality(self, doc: dict[str, Any]) -> None:
        reg = self.gw.registry
        modality = doc.get("modality")
        if not isinstance(modality, str):  # as the admin API refuses it
            raise InvalidParams("modality: required, a media type string such as application/x-lidar", field="modality")
        existing = reg.lookup(modality) if "/" in modality else None
        if existing is not None and not existing.builtin and existing.version == doc.get("version", 1) and \
                dict(existing.schema) == (doc.get("schema") or {"type": "object"}):
            return
        # its feature schema compiled off the event loop, as the admin API does
        await asyncio.to_thread(reg.register, modality, schema=doc.get("schema"), version=doc.get("version", 1),
                                description=doc.get("description", ""))

    # --- publishing changes made through this gateway's admin API ---------------------
    async def _put(self, kind: str, key: str, data: bytes) -> int:
        try:
            return int(await self.kv[kind].put(key, data))
        except Exception as exc:
            raise ClusterError(f"cluster: the change was applied here but not shared ({kind}/{key}): {exc}",
                               field=kind) from None

    async def publish_rules(self, source: Any) -> None:
        rev = await self._put("rules", "rules", self._doc(source=source))
        self.rules_revision = max(self.rules_revision, rev)

    async def publish_mode(self, mode: str) -> None:
        await self._put("rules", "mode", self._doc(mode=mode))

    async def publish_agent(self, name: str) -> None:
        await self._put("agents", name, self._agent_doc(self.gw.directory.get(name)))

    async def publish_agent_removed(self, name: str) -> None:
        try:
            await self.kv["agents"].delete(name)
        except Exception as exc:
            raise ClusterError(f"cluster: agent {name} removed here but not shared: {exc}", field="agents") from None

    async def publish_modality(self, modality: str, *, schema: Any, version: int, description: str) -> None:
        key = modality_key(modality)
        await self._put("modalities", key, self._doc(modality=modality, schema=schema, version=version,
                                                             description=description))

    # --- hooks called by the pipeline -------------------------------------------------
    def epoch(self) -> str:
        """The cluster config this gateway runs: equal on two gateways that applied the same changes."""
        return f"{self.applied['rules']}.{self.applied['agents']}.{self.applied['modalities']}"

    async def before_route(self, session_id: str) -> None:
        """A message of a session: its pin may come from another gateway."""
        await self.pins.fetch(session_id)

    async def after_route(self, session_id: str) -> None:
        """A new pin is shared before dispatch."""
        await self.pins.flush(session_id)

    def durable_for(self, agent: str) -> bool:
        return self.config.durable_for(agent)

    async def deliver(self, agent: str, params: dict[str, Any], client: str | None) -> LegResult:
        return await self.delivery.deliver(agent, params, client)

    # --- membership -------------------------------------------------------------------
    async def lag(self) -> int:
        """Config changes in the buckets this gateway has not applied yet."""
        total = 0
        for kind in CONFIG_BUCKETS:
            info = await self.js.stream_info(f"KV_{self.names.bucket(kind)}")
            total += max(0, int(info.state.last_seq) - self.applied[kind])
        return total

    async def member_doc(self) -> dict[str, Any]:
        return {
            "id": self.id, "url": self.gw.public_url, "version": __version__, "pid": os.getpid(),
            "rulesRevision": self.rules_revision, "snapshotVersion": self.gw.state.snapshot.version,
            "epoch": self.epoch(), "lag": await self.lag(), "agents": len(self.gw.directory.entries()),
            "dispatch": self.config.dispatch, "delivery": self.delivery.stats(), "lastError": self.last_error,
            "started": self.started_at, "at": time.time(), "reconnects": self.reconnects,
            "tasks": self.task_sharing(),
        }

    async def heartbeat(self) -> None:
        await self.kv["members"].put(self.id, orjson.dumps(await self.member_doc()))

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            try:
                await self.heartbeat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS down: the next beat retries
                log.debug("heartbeat failed: %s", exc)

    async def is_alive(self, member: str) -> bool:
        """A member is alive while its heartbeat entry is fresh."""
        if member == self.id:
            return True
        try:
            entry = await self.kv["members"].get(member)
        except KeyNotFoundError:
            return False
        doc = orjson.loads(entry.value or b"{}")
        return time.time() - float(doc.get("at", 0)) < self.config.member_ttl_s


def modality_key(modality: str) -> str:
    """A KV key for a media type: base64url of it (KV keys allow only `-_=./` and alphanumerics)."""
    import base64

    return base64.urlsafe_b64encode(modality.encode()).decode()
