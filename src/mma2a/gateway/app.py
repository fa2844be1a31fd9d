"""The gateway: an A2A 1.0 server in front of many agents (ASGI app + lifecycle).

`Gateway(config)` wires the directory, routing state, pipeline, ingress bindings, admin
API and metrics; `await gateway.start()` registers the agents; `gateway.app` is the
ASGI application to serve (`front.FrontDoor` before a Starlette app) (see `mma2a.gateway.server`).

May import: `access`, `bindings`, `config`, `downstream`, `faults`, `history`, `observe`, `pipeline`, `push`, `stages`, `state`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import secrets
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from urllib.parse import urlsplit
from importlib import resources
from typing import TYPE_CHECKING, Any

import orjson
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..compression import ContentCoding
from ..errors import MMA2AError, ParseError, RateLimited
from ..features.base import Limits
from ..features.budget import DecodeBudget
from ..features.pipeline import FeaturePipeline
from ..features.policy import FeaturePolicy
from ..features.probe import check_media
from ..features.sentence import SentenceEncoder
from ..features.text_models import INSTALL, sentence_embedder
from ..modality import DEFAULT_REGISTRY, ModalityRegistry
from ..payload import SIGNED_ROUTES, BlobStore, LocalBlobStore, StreamHub, URLSigner, payload_routes
from ..request_body import read_body
from ..responses import error_response, json_response
from ..routing import parse_rules
from ..routing.semantic import CachedEmbedder
from ..serving import cancel_tasks
from .access.authz import AccessClass, ErrorShape, RouteAccess, RouteIndex, Unrouted, check_classified, guard_routes
from .access.budgets import SharedBudgets
from .access.clients import current_client, current_sender
from .access.federation import Federation
from .access.guard import MessageGuard, media_limits
from .access.security import access_control, error_body
from .bindings.admin import admin_routes
from .bindings.cards import CardCache, agent_card_through, gateway_card, security_declaration
from .bindings.front import FrontDoor
from .bindings.body_parser import JSONBodyParser
from .bindings.jsonrpc import MAX_JSON_DEPTH, JsonRpcIngress
from .bindings.sdk_routes import JSONRPC_METHODS, SdkBindings, rest_routes
from .config import ConfigError, GatewayConfig
from .downstream.directory import AgentDirectory
from .downstream.overload import AgentSlotTable, SlotsCollector
from .downstream.transport import Transport
from .faults import Deduper, Drain
from .history import HistoryRecorder, HistoryStore
from .observe.feed import DecisionFeed
from .observe.metrics import GatewayMetrics
from .observe.tracing import TracingMiddleware
from .observe.tracing import enabled as tracing_enabled
from .pipeline import Pipeline
from .push.follow import WEBHOOK_PATH
from .stages.adapt import PartAdapter
from .stages.enrich import FeatureStage
from .stages.offload import OffloadStage
from .stages.vectors import TextVectors
from .state.hooks import ClusterHooks, Standalone
from .state.learning import Learner
from .state.routing import RoutingState

if TYPE_CHECKING:
    from .bindings.grpc_service import GrpcIngress

STARTUP_WAIT_S = 8.0
FEEDBACK_BODY_BYTES = 8192  # a rating: a score, an agent name, a comment of at most 1 KiB
"""How long `start` retries configured agents it could not reach before it checks the rules against them."""

log = logging.getLogger("mma2a.gateway")


CONSOLE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_CONSOLE_TYPES = {"index.html": "text/html; charset=utf-8", "console.js": "text/javascript; charset=utf-8",
                  "console.css": "text/css; charset=utf-8"}


def console_endpoints() -> dict[str, Any]:
    """The console's files (package data, read once) as endpoints, under a CSP with no inline script or style."""
    files = resources.files("mma2a.gateway").joinpath("console")
    out = {}
    for name, media_type in _CONSOLE_TYPES.items():
        body = files.joinpath(name).read_bytes()
        headers = {"Content-Security-Policy": CONSOLE_CSP, "X-Content-Type-Options": "nosniff",
                   "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}

        async def endpoint(request: Request, body: bytes = body, media_type: str = media_type,
                           headers: dict[str, str] = headers) -> Response:
            return Response(body, media_type=media_type, headers=headers)

        out[name] = endpoint
    return out


def _name(route: BaseRoute) -> str | None:
    return getattr(route, "name", None)


def _is_stream(route: BaseRoute) -> bool:
    """A REST route that answers with a stream (SSE): `message:stream`, `tasks/{id}:subscribe`."""
    return isinstance(route, Route) and route.path.endswith((":stream", ":subscribe"))


def _is_card(route: BaseRoute) -> bool:
    return isinstance(route, Route) and route.path.endswith("/v1/card")


class Gateway:
    """One gateway process's worth of state and its ASGI app."""

    def __init__(
        self, config: GatewayConfig, *, registry: ModalityRegistry | None = None, cluster: ClusterHooks | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`cluster`: the cluster side (`mma2a.cluster.cluster_state(config)`), required when the config has a
        `cluster:` section; a gateway on its own does without. `clock`: the wall clock client JWTs are judged by."""
        if config.cluster is not None and cluster is None:
            raise ConfigError("cluster: this config is for cluster mode; build the gateway with "
                              "Gateway(config, cluster=mma2a.cluster.cluster_state(config)) (as `mma2a serve` does)",
                              field="cluster")
        config.check_configured_agents()  # as parse_config does, for a config built in code
        self.config = config
        self.clock = clock
        self.registry = registry or DEFAULT_REGISTRY
        self.metrics = GatewayMetrics()
        self.transport = Transport(timeout_s=config.timeout_s, retries=config.retries,
                                   pool_size=config.limits.max_connections_per_agent,
                                   compress_min_bytes=config.adapt.compress_min_bytes, base_dir=config.base_dir)
        self.directory = AgentDirectory(self.transport, on_change=self._agents_changed, clock=clock)
        self.embedder = sentence_embedder(config.features.text_model,  # None without its packages: no semantic routing
                                          cache_dir=config.data_path("models"))
        self.coming_embedder = self._while_built(self.embedder)  # a model whose table is built after the start
        if self.embedder is None and config.features.text_model != "minilm":
            raise ConfigError(f"features.text_model: {config.features.text_model!r} is not installed "
                              f"({INSTALL[config.features.text_model]})", field="features.text_model")
        self.state = RoutingState(self.directory, mode=config.mode,
                                  embedder=CachedEmbedder(self.embedder) if self.embedder is not None else None,
                                  restricted=config.auth.restricted)
        # every decode of the gateway (features, thumbnails, fitting) holds its bytes of one budget (features.budget)
        self.decode_budget = DecodeBudget(config.limits.max_decode_bytes_in_flight, name=config.limits.decode_budget_name,
                                          who=current_sender)  # a client's decodes: at most half of it
        self.features = self._feature_stage(config)
        scheme = "https" if config.tls else "http"
        self.public_url = (config.public_url or f"{scheme}://{config.listen}").rstrip("/")
        self.cluster: ClusterHooks = cluster if cluster is not None else Standalone()
        self._blob_tmp: tempfile.TemporaryDirectory[str] | None = None
        self.store = self.cluster.store or self._local_store(config)
        secret = os.environ.get(config.url_secret_env) if config.url_secret_env else None
        self.signer = URLSigner(secret.encode() if secret else secrets.token_bytes(32), default_expires_in=config.url_expires_s)
        self.streams = StreamHub()
        self.history = self._history(config)
        self.federation = Federation.from_config(config.federation, config.name or self.public_url,
                                                 ledger=self.cluster.nonces)
        self.pipeline = Pipeline(
            directory=self.directory, state=self.state, transport=self.transport, metrics=self.metrics,
            registry=self.registry, features=self.features, log_decisions=config.log_decisions,
            feed=DecisionFeed(max_bytes=config.feed_max_bytes),
            offload=OffloadStage(self.store, self.signer, threshold=config.offload_threshold, base_url=self.public_url),
            adapter=self._adapter(config),
            history=self.cluster.history_sink(self.history, config.history) if self.history else None,
            guard=MessageGuard(config.limits, config.urls, config.signing, own_url=self.public_url,
                               nonces=self.cluster.nonces),
            dedupe=Deduper(ttl_s=config.faults.dedupe_ttl_s, max_bytes=config.faults.dedupe_max_bytes)
            if config.faults.dedupe_ttl_s > 0 else None,
            failover=config.faults.failover,
            cluster=self.cluster,
            gateway_id=config.name or self.public_url,
            federation=self.federation,
            tasks=self.cluster.task_map(max_bytes=config.limits.task_bytes,
                                        max_bytes_per_owner=config.limits.task_bytes_per_client),
            push=config.push,
            public_url=self.public_url,
            slots=self._slots(config),
            anonymous_max_priority=config.auth.anonymous_max_priority,
            learner=Learner(rate_per_s=config.limits.feedback_per_s, burst=config.limits.feedback_burst,
                            journal=self.cluster.learning_journal()),
            session_pins=config.limits.session_pins,
        )
        self.metrics.count_task_sharing(self.cluster.task_sharing)  # read at scrape time
        self._tasks: list[asyncio.Task[Any]] = []
        self.grpc: GrpcIngress | None = None
        self.startup_errors: list[str] = []
        self.drain = Drain()
        self.app = self._build_app()

    def _share_budgets(self) -> None:
        """In a cluster, the clients' budgets hold across its gateways (access/budgets.py): their use is exchanged.
        A lone gateway keeps its own, at no cost."""
        heard, elsewhere = self.metrics.budget_heard, self.metrics.budget_elsewhere
        budgets = SharedBudgets(on_heard=lambda budget, units: heard.labels(budget).inc(units),
                                on_elsewhere=lambda budget, held: elsewhere.labels(budget).set(held))
        if not self.cluster.share_budgets(budgets):
            return
        if self.access.limiter is not None:
            budgets.rate("requests", self.access.limiter)
        if self.access.failures is not None:  # failed credentials per address: a guesser's budget once, not per gateway
            budgets.rate("failures", self.access.failures.buckets)
            budgets.known("served", self.access.failures)  # the clients an address over its budget still gets
        budgets.rate("ratings", self.pipeline.learner.ratings)
        budgets.count("streams", self.access.streams)
        budgets.count("detached", self.pipeline.streaming.detached)
        budgets.count("follows", self.pipeline.push.follower.by_owner)

    def _slots(self, config: GatewayConfig) -> AgentSlotTable:
        """Each agent's concurrency limit and priority queue (`limits`, `agents[].max_concurrency`), counted in the
        metrics (shed legs, waits; queue depths read at scrape time)."""
        lc = config.limits
        shed, wait = self.metrics.agent_shed, self.metrics.agent_queue_wait
        table = AgentSlotTable(adaptive=lc.agent_concurrency == "adaptive", initial=lc.initial_agent_concurrency,
                               maximum=lc.max_agent_concurrency, max_queue=lc.max_queue_per_agent,
                               queue_timeout_s=lc.queue_timeout_s, routine_timeout_s=lc.routine_queue_timeout_s,
                               on_shed=lambda agent, p, why: shed.labels(agent, str(p), why).inc(),
                               on_wait=lambda agent, p, s: wait.labels(agent, str(p)).observe(s))
        self.metrics.registry.register(SlotsCollector(table))
        return table

    def _local_store(self, config: GatewayConfig) -> BlobStore:
        """Payloads in `blob_dir`, else in a temporary directory removed at stop."""
        limits = {"min_free_bytes": config.blob_min_free_bytes, "min_free_inodes": config.blob_min_free_inodes,
                  "max_bytes": config.blob_max_bytes,
                  "max_bytes_per_client": config.blob_max_bytes_per_client,
                  "max_uploads_per_client": config.blob_max_uploads_per_client,
                  "max_uploads": config.blob_max_uploads}
        if config.blob_dir:
            return LocalBlobStore(config.blob_dir, **limits)
        self._blob_tmp = tempfile.TemporaryDirectory(prefix="mma2a-blobs-")
        return LocalBlobStore(self._blob_tmp.name, **limits)

    def _while_built(self, embedder: SentenceEncoder | None) -> SentenceEncoder | None:
        """The static model whose table is not stored yet (about 30 s of CPU to build): MiniLM, from which it is
        derived, answers meanwhile (`self.embedder`), and `start` adopts the static model once its table is built."""
        from ..features.static import StaticEmbedder

        if not isinstance(embedder, StaticEmbedder) or embedder.stored():
            return None
        self.embedder = sentence_embedder("minilm")
        return embedder

    async def _adopt(self, embedder: SentenceEncoder) -> None:
        """Build `embedder`'s table off the event loop, then route with it: the snapshot is rebuilt with its
        vectors, and requests are embedded by the model of the snapshot they are routed with."""
        try:
            await asyncio.to_thread(embedder.warm_up)
            if self.features is not None:
                self.features.add_vectors(self._text_vectors(embedder))
            await asyncio.to_thread(self.state.use_embedder, CachedEmbedder(embedder))
        except Exception as exc:  # noqa: BLE001 - the gateway keeps routing with the model it has
            log.warning("features.text_model: %s is not used, %s goes on answering: %r", embedder.model,
                        self.embedder.model if self.embedder is not None else "no model", exc)
            return
        self.embedder, self.coming_embedder = embedder, None
        log.info("features.text_model: %s now embeds texts", embedder.model)

    def _text_vectors(self, embedder: SentenceEncoder) -> TextVectors:
        fc = self.config.features
        cache = CachedEmbedder(embedder, max_entries=fc.vector_cache_entries, max_bytes=int(fc.vector_cache_mb * 1024 * 1024))
        counter = self.metrics.text_vectors
        return TextVectors(cache, max_batch=fc.vector_batch, count=lambda result: counter.labels(result).inc())

    def _feature_stage(self, config: GatewayConfig) -> FeatureStage | None:
        fc = config.features
        if not fc.enabled:
            return None
        policy = FeaturePolicy(trusted_senders=frozenset(fc.trusted_senders), untrusted=fc.untrusted,
                               fill_missing=fc.fill_missing, budget_s=fc.budget_s)
        limits = self._media_limits(fc)
        vectors = self._text_vectors(self.embedder) if self.embedder is not None else None
        return FeatureStage(FeaturePipeline(registry=self.registry, limits=limits, budgets=fc.model_budget_s,
                                            decode_budget=self.decode_budget), policy,
                            vectors)

    def _adapter(self, config: GatewayConfig) -> PartAdapter | None:
        ac, fc = config.adapt, config.features
        if not ac.enabled:
            return None
        limits = self._media_limits(fc)
        return PartAdapter(self.store, self.signer, base_url=self.public_url, limits=limits, budget_s=ac.budget_s,
                           inline_max=config.offload_threshold, cache_entries=ac.cache_entries,
                           decode_budget=self.decode_budget)

    @staticmethod
    def _media_limits(fc: Any) -> Limits:
        """What features and fitting agree to decode (the `features` section's limits)."""
        return Limits(max_bytes=fc.max_media_bytes, max_pixels=fc.max_pixels, max_audio_seconds=fc.max_audio_seconds,
                      max_audio_samples=fc.max_audio_samples, max_video_seconds=fc.max_video_seconds,
                      max_mesh_elements=fc.max_mesh_elements)

    def _media_check(self, head: bytes, media_type: str, complete: bool) -> None:
        """Uploaded images, audio, video: refused from their headers past `limits`, or when an image's header is not
        in the bytes read (features.probe)."""
        check_media(head, media_type, media_limits(self.config.limits), "body", complete=complete)

    def _history(self, config: GatewayConfig) -> HistoryRecorder | None:
        hc = config.history
        if not hc.enabled:
            return None
        path = config.data_path(hc.file)
        try:
            store = HistoryStore(path, max_age_s=hc.max_age_s, max_bytes=hc.max_bytes,
                                 max_bytes_per_client=hc.max_bytes_per_client)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"data_dir: cannot open the decision history at {path}: {exc}", field="data_dir") from None
        fate = self.metrics.history
        return HistoryRecorder(store, capacity=hc.queue, batch=hc.batch, interval_s=hc.flush_interval_s,
                               prune_interval_s=hc.prune_interval_s, on_drop=fate.labels("dropped").inc,
                               on_write=fate.labels("written").inc)

    @property
    def learner(self) -> Learner:
        """What learned routing has learned (the pipeline's; a cluster feeds it the other gateways' events)."""
        return self.pipeline.learner

    @property
    def admin_token(self) -> str | None:
        return self.config.admin.resolve_token()

    def _agents_changed(self) -> None:
        if hasattr(self, "state"):
            self._rebuild_snapshot()
            self.pipeline.pins.clear()
        self._count_agents()

    async def rebuild_off_loop(self) -> None:
        """After agent changes made with `notify=False` (the admin API, the cluster's watch): the snapshot rebuilt in
        a thread (a large rule set takes seconds to build), then pins cleared and agents counted on the loop."""
        await asyncio.to_thread(self._rebuild_snapshot)
        self.pipeline.pins.clear()
        self._count_agents()

    def _rebuild_snapshot(self) -> None:
        try:
            self.state.rebuild()
        except MMA2AError as exc:  # rules name an agent that just left: keep routing on the old snapshot
            log.error("routing snapshot not rebuilt after an agent change (old routes stay in force): %s", exc.message)

    def _count_agents(self) -> None:
        healthy = sum(1 for e in self.directory.entries() if e.healthy)
        self.metrics.agents.labels("healthy").set(healthy)
        self.metrics.agents.labels("unhealthy").set(len(self.directory.entries()) - healthy)

    async def start(self) -> None:
        """Register the configured agents, load the rules, start health checks."""
        check_classified(self.app.routes)  # a route added after the build has no access class either
        if self.history is not None:
            self.history.start()
        self.startup_errors = await self.directory.add_many(self.config.agents)
        if self.access.auth.jwt is not None:  # the JWT issuers' key sets, read before the first request
            self.startup_errors += await self.access.auth.jwt.start()
        if self.startup_errors:  # started together with its agents (`mma2a agent … & mma2a serve`): a moment for them
            # to listen before the rules, which may name them, are checked against the registered agents
            await self._register_missing(for_s=STARTUP_WAIT_S)
        source = self.config.rules_source()
        if source is not None:
            rules = parse_rules(source, source=self.config.rules_name())
            await asyncio.to_thread(self.state.set_rules, rules, source)  # embeds semantic examples and skills
        if self.features is not None:  # load the models the rules need, and language profiles, before the first request
            await asyncio.to_thread(self.features.warm, self.state.snapshot)
        await self.cluster.start(self)  # clustered: share (or adopt) rules, agents, modalities; pins, blobs, deliveries
        await self.pipeline.push.start(self.cluster.push_journal)  # clustered: push configs, pending deliveries
        if self.config.grpc_listen is not None:  # A2A's gRPC binding (the grpc extra), same handler, same pipeline
            from .bindings.grpc_service import GrpcIngress

            self.grpc = GrpcIngress(self.config, self.access, self.sdk.load(), self.jsonrpc_access, self.directory.get,
                                    bodies=self._body_parser)
            await self.grpc.start()
        self._tasks.append(asyncio.create_task(self._health_loop()))
        if (every_s := self.store.prune_every_s(self.config.blob_max_age_s)) is not None:
            self._tasks.append(asyncio.create_task(self._prune_loop(self.store, self.config.blob_max_age_s, every_s)))
        if self.coming_embedder is not None:
            self._tasks.append(asyncio.create_task(self._adopt(self.coming_embedder)))
        if any(c.name not in self.directory for c in self.config.agents):  # still not up: keep trying in the background
            self._tasks.append(asyncio.create_task(self._register_missing()))

    async def _register_missing(self, for_s: float | None = None) -> None:
        """Retry the configured agents that could not be registered at start (0.25 s doubling to the health interval),
        until all are in, or for `for_s` seconds at most."""
        delay = 0.25
        deadline = None if for_s is None else asyncio.get_running_loop().time() + for_s
        while missing := [c for c in self.config.agents if c.name not in self.directory]:
            if deadline is not None and asyncio.get_running_loop().time() + delay > deadline:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.config.health_interval_s)
            for c in missing:
                with contextlib.suppress(Exception):  # still down: next round
                    await self.directory.add(c)
                    log.info("agent %s registered (it was not reachable at start)", c.name)

    @property
    def grpc_url(self) -> str | None:
        """The gRPC address cards advertise (HOST:PORT), once the gRPC binding runs: `public_grpc`, else the public URL's
        host and the binding's port."""
        if self.grpc is None:
            return None
        return self.config.public_grpc or f"{urlsplit(self.public_url).hostname}:{self.grpc.port}"

    async def stop(self) -> None:
        if self.grpc is not None:
            await self.grpc.stop()
            self.grpc = None
        await self.pipeline.push.close()  # before the cluster's connection closes: its journal writes what is queued
        await self.cluster.stop()
        await cancel_tasks(self._tasks)
        if self.access.auth.jwt is not None:
            await self.access.auth.jwt.close()
        await self.transport.close()
        await self._body_parser.close()
        if self.history is not None:
            await asyncio.to_thread(self.history.stop)  # writes what is queued
        if self._blob_tmp is not None:
            self._blob_tmp.cleanup()

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            try:
                await self.directory.check_all()
            except Exception:  # never let the loop die
                log.exception("health check failed")

    @staticmethod
    async def _prune_loop(store: BlobStore, max_age_s: float | None, every_s: float) -> None:
        """Delete what is older than `blob_max_age_s` (and, in a cluster, uploads left idle) at start, then every
        `every_s` (`BlobStore.prune_every_s`)."""
        while True:
            try:
                if gone := await store.prune(max_age_s):
                    if max_age_s is None:
                        log.info("blob store: %d uploads left idle deleted", gone)
                    else:
                        log.info("blob_max_age_s: %d blobs and uploads older than %g s deleted", gone, max_age_s)
            except Exception:  # never let the loop die
                log.exception("blob pruning failed")
            await asyncio.sleep(every_s)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    def _build_app(self) -> FrontDoor:
        # the SDK's stack (REST, SSE, v0.3, JSON-RPC past the fast path): imported by the first request needing it
        # large JSON bodies (JSON-RPC's, REST's at the gate and in SendMessage) are read in one worker process
        limits = self.config.limits  # its workers (if started) stop with the gateway
        bodies = self._body_parser = JSONBodyParser(MAX_JSON_DEPTH, lanes=limits.body_worker_lanes,
                                                    jobs_per_caller=limits.body_worker_jobs_per_client,
                                                    bytes_per_caller=limits.body_worker_bytes_per_client,
                                                    bytes_total=body_worker_total(self.config))
        self.metrics.count_at_scrape([  # read at scrape time
            ("mma2a_body_worker_jobs", "Large bodies and answers of many values queued for the JSON body worker",
             lambda: bodies.taken),
            ("mma2a_body_worker_refused", "Jobs for the JSON body worker refused 429 past their caller's bounds "
             "(limits.body_worker_jobs_per_client, body_worker_bytes_per_client) or its total "
             "(body_worker_bytes_total)", lambda: bodies.refused)])
        sdk = self.sdk = SdkBindings(self.pipeline, card_fn=lambda: gateway_card(self.directory, self.public_url),
                                     bodies=bodies)
        # the gRPC binding passes the same gate (grpc_admission)
        control = self.access = access_control(self, body_check=bodies.check)
        self._share_budgets()
        rpc = JsonRpcIngress(self.pipeline, sdk, max_body_bytes=self.config.max_body_bytes, metrics=self.metrics,
                             control=control, parser=bodies)

        cards = CardCache()
        security = security_declaration(self.config.auth, self.config.tls)

        async def root_card(request: Request) -> Response:
            return cards.respond(request, gateway_card(self.directory, self.public_url, grpc_url=self.grpc_url,
                                                       security=security, push=self.config.push.enabled))

        async def agent_card(request: Request) -> Response:
            try:
                entry = self.directory.get(request.path_params["agent"])
            except MMA2AError as exc:
                return error_response(exc)
            return cards.respond(request, agent_card_through(entry, self.public_url, grpc_url=self.grpc_url,
                                                             security=security, push=self.config.push.enabled))

        console = console_endpoints()

        async def metrics(request: Request) -> Response:
            client = current_client.get()  # a client limited to some agents sees only theirs (docs/security.md)
            return Response(self.metrics.render(client.agents if client is not None else None),
                            media_type="text/plain; version=0.0.4")

        async def health(request: Request) -> Response:
            entries = self.directory.entries()
            problems = {e.name: p for e in entries if (p := e.to_json()["problems"])}
            doc: dict[str, Any] = {
                "status": "degraded" if problems or self.state.rebuild_error else "ok", "agents": len(entries),
                "healthy": sum(1 for e in entries if e.healthy), "configuredAgents": len(self.config.agents),
                "rulesVersion": self.state.rules_version, "mode": self.state.mode,
            }
            if missing := [c.name for c in self.config.agents if c.name not in self.directory]:
                doc["missingAgents"] = missing  # configured, not registered yet (down, or still starting): retried
            if problems:
                doc["agentProblems"] = problems
            if self.state.rebuild_error:
                doc["routingError"] = self.state.rebuild_error
            return json_response(doc)

        async def feedback(request: Request) -> Response:
            """`POST /tasks/{id}:feedback` (and under /agents/{agent}/): a client rates its task's answer."""
            try:
                body = await read_body(request.receive, FEEDBACK_BODY_BYTES)
                if body is None:
                    return Response(status_code=400)
                try:
                    doc = orjson.loads(body)
                except orjson.JSONDecodeError as exc:
                    raise ParseError(f"body: not valid JSON: {exc}", field="body") from None
                result = await self.pipeline.feedback.submit(request.path_params["id"], doc,
                                                             target=request.path_params.get("agent"),
                                                             address=request.client.host if request.client else None)
            except MMA2AError as exc:
                headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after)))} if isinstance(exc, RateLimited) else None
                return json_response(exc.to_rest(), exc.http_status, headers)
            return json_response(result)

        feedback_routes = [Route(path, feedback, methods=["POST"]) for path in
                           ("/tasks/{id}:feedback", "/agents/{agent}/tasks/{id}:feedback")]

        # Every route gets one access class here (authz); an unclassified route stops the start.
        public, client = RouteAccess(AccessClass.PUBLIC, ErrorShape.REST), RouteAccess(AccessClass.CLIENT, ErrorShape.REST)
        rpc_access = RouteAccess(AccessClass.CLIENT, ErrorShape.JSONRPC)
        client_stream = RouteAccess(AccessClass.CLIENT, ErrorShape.REST, stream=True)  # a stream slot while open
        signed = RouteAccess(AccessClass.SIGNED, ErrorShape.PAYLOAD)
        client_payload = RouteAccess(AccessClass.CLIENT, ErrorShape.PAYLOAD)
        metrics_access = (RouteAccess(AccessClass.CLIENT, ErrorShape.REST, admin_also=True)
                          if self.config.auth.protect_metrics else public)
        payload = [*payload_routes(self.store, self.signer, public_base_url_fn=lambda conn: self.public_url,
                                   max_upload_bytes=self.config.max_upload_bytes, hub=self.streams,
                                   url_expires_in=self.config.url_expires_s, media_check=self._media_check,
                                   owner_fn=current_sender,
                                   blob_refused=lambda setting: self.metrics.blob_refused.labels(setting).inc())]
        # REST (HTTP+JSON): root routes, then /agents/{agent}/…, then the A2A 1.0 tenant form /{tenant}/… where the
        # gateway's tenants are its agents (as `tenant` on gRPC); in place of the SDK's catch-all tenant mount, the
        # same routes with the tenant as `agent`, so the access gate and the target read it as on /agents/{agent}
        rest: list[BaseRoute] = [*rest_routes(sdk)]
        for prefix, v03 in (("/agents/{agent}", True), ("/{agent}", False)):
            rest += rest_routes(sdk, path_prefix=prefix, v03=v03, agent_of=self.directory.get)
        table: list[tuple[RouteAccess, Sequence[BaseRoute]]] = [
            (rpc_access, [Route("/", rpc, methods=["POST"])]),  # first: the hot path matches at once
            (public, [Route("/.well-known/agent-card.json", root_card, methods=["GET"]),
                      Route("/agents/{agent}/.well-known/agent-card.json", agent_card, methods=["GET"]),
                      Route("/console", console["index.html"], methods=["GET"]),  # static files; data APIs: admin
                      Route("/console/console.js", console["console.js"], methods=["GET"]),
                      Route("/console/console.css", console["console.css"], methods=["GET"]),
                      Route("/healthz", health, methods=["GET"])]),
            (metrics_access, [Route("/metrics", metrics, methods=["GET"])]),
            # agents' push notifications: each call checked by its leg's secret (push.follow)
            (RouteAccess(AccessClass.WEBHOOK, ErrorShape.REST), [Route(WEBHOOK_PATH, self.pipeline.push.webhook,
                                                                       methods=["POST"])]),
            (RouteAccess(AccessClass.ADMIN, ErrorShape.ADMIN), admin_routes(self)),
            *((signed if _name(r) in SIGNED_ROUTES else client_payload, [r]) for r in payload),  # order kept
            (rpc_access, [Route("/agents/{agent}/", rpc, methods=["POST"]),
                          Route("/agents/{agent}", rpc, methods=["POST"])]),
            (client, feedback_routes),  # before the SDK's /tasks/{id} routes
            *((public if _is_card(r) else client_stream if _is_stream(r) else client, [r])
              for r in rest),  # public: the v0.3 /v1/card
        ]
        # each JSON-RPC method has the JSON-RPC route's class; a gRPC method takes its JSON-RPC twin's
        self.jsonrpc_access = {method: rpc_access for method in JSONRPC_METHODS}
        coding = None
        if self.config.adapt.enabled:  # Content-Encoding on requests, compressed JSON replies: after access is granted
            def coding(app: Any, access: RouteAccess) -> Any:
                return ContentCoding(
                    app, max_body_bytes=self.config.max_body_bytes,
                    min_size=self.config.adapt.compress_min_bytes if self.config.adapt.compress_responses else None,
                    error_body=lambda exc, scope: error_body(exc, access.shape, exc.http_status))
        routes = [*guard_routes(table, control, wrap=coding), Unrouted(control)]  # unrouted: 401 before 404
        middleware = [Middleware(RouteIndex, routes=routes, enforcer=control)]
        if tracing_enabled():
            middleware.insert(0, Middleware(TracingMiddleware))
        app = Starlette(routes=routes, lifespan=self.lifespan, middleware=middleware)
        check_classified(app.routes)
        # JSON-RPC POSTs go straight to their routes: their access gates are on the routes themselves
        return FrontDoor(app)


def body_worker_total(config: GatewayConfig) -> int:
    """`limits.body_worker_bytes_total`, or by default the body budget's total (`max_body_bytes_in_flight`: 8 x
    `max_body_bytes` unless set) — what the gateway holds of request bodies at once, so its large JSON in all (bodies,
    and answers converted in the worker) is at most about twice that — and never under `limits.task_bytes` (the task
    records one answer may carry: a ListTasks page of them must fit)."""
    limits = config.limits
    if limits.body_worker_bytes_total is not None:
        return limits.body_worker_bytes_total
    return max(config.max_body_bytes_in_flight or 8 * config.max_body_bytes, limits.task_bytes)
