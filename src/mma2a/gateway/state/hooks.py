"""What the gateway asks of a cluster, as a Protocol, and the do-nothing default of a lone gateway.

`mma2a.cluster.ClusterState` implements `ClusterHooks` (NATS JetStream: shared config, session
pins, payloads and durable delivery); `mma2a serve` builds it and hands it to `Gateway(...,
cluster=...)`. The gateway never imports the cluster package.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...modality import ModalityRegistry
from ...payload import BlobStore
from ...routing import SessionPins
from ..access.budgets import SharedBudgets
from ..access.guard import NonceLedger
from ..config import GatewayConfig
from ..downstream.directory import AgentDirectory, AgentEntry
from ..history import HistoryConfig, HistoryRecorder, HistorySink
from ..observe.metrics import GatewayMetrics
from .aggregate import LegResult
from .learning import Learner, LearnJournal
from .push_journal import PushJournal
from .routing import RoutingState
from .tasks import TaskMap


class AgentCalls(Protocol):
    """The one request-path call a cluster makes itself (a durable delivery taken from the stream)."""

    async def call_agent(self, entry: AgentEntry, method: str, params: dict[str, Any], *,
                         principal: str | None = None) -> Any:
        """One JSON-RPC call to an agent, counted and health-marked like every dispatch (`principal`: the client it
        is made for, where that is not the current request's)."""


class GatewayParts(Protocol):
    """What a cluster reaches of the gateway it joins (`mma2a.gateway.Gateway` has all of it)."""

    @property
    def config(self) -> GatewayConfig: ...

    @property
    def directory(self) -> AgentDirectory: ...

    @property
    def state(self) -> RoutingState: ...

    @property
    def registry(self) -> ModalityRegistry: ...

    @property
    def metrics(self) -> GatewayMetrics: ...

    @property
    def pipeline(self) -> AgentCalls: ...

    @property
    def public_url(self) -> str: ...

    @property
    def learner(self) -> Learner:
        """What learned routing has learned here (a cluster feeds it the other gateways' notes and ratings)."""

    async def rebuild_off_loop(self) -> None:
        """After agent changes made with `notify=False`: the routing snapshot rebuilt off the event loop."""


class RouteHooks(Protocol):
    """The cluster as the request path sees it: shared session pins, durable delivery."""

    @property
    def pins(self) -> SessionPins | None:
        """Session pins shared with the other gateways (None: the gateway keeps its own)."""

    async def before_route(self, session_id: str) -> None:
        """Before routing a message of a session: fetch another gateway's pin for it."""

    async def after_route(self, session_id: str) -> None:
        """After routing it: wait until a new pin is shared, before dispatch."""

    def durable_for(self, agent: str) -> bool:
        """Whether legs to this agent go through durable delivery (`deliver`)."""

    async def deliver(self, agent: str, params: dict[str, Any], client: str | None) -> LegResult:
        """A leg of `client` through durable delivery (deduplicated per (client, agent, messageId))."""


class ClusterHooks(RouteHooks, Protocol):
    """The cluster side of a gateway: called at start/stop, around session routing, per leg, on admin changes."""

    @property
    def store(self) -> BlobStore | None:
        """The blob store shared with the other gateways (None: a local directory)."""

    @property
    def nonces(self) -> NonceLedger | None:
        """Signed messages' nonces shared with the other gateways (None: this gateway's own replay guard only)."""

    @property
    def push_journal(self) -> PushJournal | None:
        """Push configs and pending deliveries kept for the cluster (None: in this gateway's memory only)."""

    def task_map(self, *, max_bytes: int, max_bytes_per_owner: int | None) -> TaskMap:
        """The gateway's task map: its own on a lone gateway; shared with the other gateways in a cluster."""

    def task_sharing(self) -> dict[str, Any] | None:
        """What this gateway shared of its task records so far (`ClusterTaskMap.stats`: via, batches, records,
        unshared, unsharedNow, adopted, reads), read when `/metrics` is scraped (None: a lone gateway shares none)."""

    def learning_journal(self) -> LearnJournal | None:
        """Where learned tasks and ratings go for the other gateways (None: a lone gateway learns alone)."""

    def share_budgets(self, budgets: SharedBudgets) -> bool:
        """Exchange the clients' budget use with the other gateways through `budgets` (False: a lone gateway, whose
        budgets are its own; nothing of `budgets` is used)."""

    async def start(self, gateway: GatewayParts) -> None:
        """Join: share or adopt rules, agents and modalities; open pins, blobs, deliveries, tasks."""

    async def stop(self) -> None: ...

    def history_sink(self, local: HistoryRecorder, config: HistoryConfig) -> HistorySink:
        """Where decisions go: `local` on a lone gateway; a shared stream indexed back into it in a cluster."""

    async def publish_rules(self, source: Any) -> None: ...

    async def publish_mode(self, mode: str) -> None: ...

    async def publish_agent(self, name: str) -> None: ...

    async def publish_agent_removed(self, name: str) -> None: ...

    async def publish_modality(self, modality: str, *, schema: Any, version: int, description: str) -> None: ...


class Standalone:
    """A gateway on its own: no shared state, nothing to publish, every leg dispatched directly."""

    pins: SessionPins | None = None
    store: BlobStore | None = None
    nonces: NonceLedger | None = None
    push_journal: PushJournal | None = None

    def task_map(self, *, max_bytes: int, max_bytes_per_owner: int | None) -> TaskMap:
        return TaskMap(max_bytes=max_bytes, max_bytes_per_owner=max_bytes_per_owner)

    def task_sharing(self) -> dict[str, Any] | None:
        return None

    def learning_journal(self) -> LearnJournal | None:
        return None

    def share_budgets(self, budgets: SharedBudgets) -> bool:
        return False

    async def start(self, gateway: GatewayParts) -> None:
        return None

    async def stop(self) -> None:
        return None

    def history_sink(self, local: HistoryRecorder, config: HistoryConfig) -> HistorySink:
        return local

    async def before_route(self, session_id: str) -> None:
        return None

    async def after_route(self, session_id: str) -> None:
        return None

    def durable_for(self, agent: str) -> bool:
        return False

    async def deliver(self, agent: str, params: dict[str, Any], client: str | None) -> LegResult:
        raise AssertionError("a standalone gateway has no durable delivery (durable_for is always False)")

    async def publish_rules(self, source: Any) -> None:
        return None

    async def publish_mode(self, mode: str) -> None:
        return None

    async def publish_agent(self, name: str) -> None:
        return None

    async def publish_agent_removed(self, name: str) -> None:
        return None

    async def publish_modality(self, modality: str, *, schema: Any, version: int, description: str) -> None:
        return None
