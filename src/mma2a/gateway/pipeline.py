"""The request pipeline: admission (guard → features → offload → view → route) → legs (transforms,
fitting) → dispatch (with failover) → aggregate; streaming and task operations over the same stages.

Works on the A2A 1.0 JSON form only (parsed once with orjson at ingress); the ingress bindings
(fast JSON-RPC, the SDK's REST/SSE/v0.3 adapters, gRPC) all call `Pipeline`, which builds the
stages once and hands each request to the one that answers it:

    calls ← legs ← dispatch ← exchange ← streaming      admission ← dispatch, exchange
    calls ← task_ops                                    all of them ← pipeline

May import: `access`, `config`, `downstream`, `faults`, `history`, `observe`, `push`, `stages`, `state`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import TYPE_CHECKING, Any

from ..modality import ModalityRegistry
from ..routing import RouteDecision, SessionPins
from ..view import MessageView
from .access.federation import Federation
from .config import PushSettings
from .downstream.directory import AgentDirectory, AgentEntry
from .downstream.overload import AgentSlotTable
from .downstream.transport import Transport
from .history.record import HistorySink
from .observe.feed import DecisionFeed
from .observe.metrics import GatewayMetrics
from .push.service import PushService
from .stages.adapt import PartAdapter
from .stages.admission import Admission
from .stages.calls import AgentCaller
from .stages.dispatch import Dispatcher
from .stages.enrich import FeatureStage
from .stages.exchange import Exchange
from .stages.feedback import FeedbackService
from .stages.legs import LegPlanner
from .stages.offload import OffloadStage
from .stages.streaming import Streaming
from .stages.task_ops import TaskOperations
from .state.hooks import ClusterHooks, Standalone
from .state.learning import Learner
from .state.routing import RoutingState
from .state.tasks import TaskMap

if TYPE_CHECKING:
    from .faults import Deduper
    from .access.guard import MessageGuard


class Pipeline:
    """The gateway's request path over one directory, one routing state, one transport."""

    def __init__(
        self,
        *,
        directory: AgentDirectory,
        state: RoutingState,
        transport: Transport,
        metrics: GatewayMetrics,
        registry: ModalityRegistry,
        tasks: TaskMap | None = None,
        features: FeatureStage | None = None,
        offload: OffloadStage | None = None,
        adapter: PartAdapter | None = None,
        guard: MessageGuard | None = None,
        dedupe: Deduper | None = None,
        failover: bool = False,
        cluster: ClusterHooks | None = None,
        feed: DecisionFeed | None = None,
        log_decisions: bool = True,
        history: HistorySink | None = None,
        gateway_id: str = "",
        federation: Federation | None = None,
        push: PushSettings | None = None,
        public_url: str | None = None,
        slots: AgentSlotTable | None = None,
        anonymous_max_priority: int = 5,
        learner: Learner | None = None,
        session_pins: int = 100_000,
    ) -> None:
        """`push`: the push notification settings (default: on, default bounds); `public_url`: the address agents
        call the gateway's push webhook at (None: agents' tasks are followed, never given a webhook)."""
        self.directory = directory
        self.metrics = metrics
        self.tasks = tasks if tasks is not None else TaskMap()  # (an empty map is falsy)
        self.feed = feed or DecisionFeed()
        self.guard = guard
        hooks: ClusterHooks = cluster if cluster is not None else Standalone()  # shared pins, durable delivery
        self.slots = slots if slots is not None else AgentSlotTable(adaptive=False)  # per-agent limits and queues
        self.caller = AgentCaller(directory, transport, metrics, adapter, federation, self.slots)
        self.learner = learner if learner is not None else Learner()
        self.admission = Admission(directory=directory, state=state, metrics=metrics, registry=registry, tasks=self.tasks,
                                   cluster=hooks, features=features, offload=offload, guard=guard, gateway_id=gateway_id,
                                   learner=self.learner, session_pins=session_pins)
        planner = LegPlanner(directory=directory, caller=self.caller, metrics=metrics, tasks=self.tasks, adapter=adapter,
                             gateway_id=gateway_id)
        dispatcher = Dispatcher(directory=directory, caller=self.caller, planner=planner, admission=self.admission,
                                metrics=metrics, cluster=hooks, failover=failover)
        self.exchange = Exchange(admission=self.admission, planner=planner, dispatcher=dispatcher, state=state,
                                 metrics=metrics, tasks=self.tasks, feed=self.feed, history=history, dedupe=dedupe,
                                 log_decisions=log_decisions, gateway_id=gateway_id,
                                 anonymous_max_priority=anonymous_max_priority)
        self.streaming = Streaming(self.exchange, detached_per_client=guard.limits.max_response_streams_per_client
                                   if guard is not None else 64)
        self.task_ops = TaskOperations(self.tasks, self.caller)
        self.feedback = FeedbackService(self.task_ops, self.learner, history)
        self.push = PushService(push or PushSettings(), tasks=self.tasks, task_ops=self.task_ops, caller=self.caller,
                                guard=guard, webhook_base=public_url, history=history, metrics=metrics)

    @property
    def pins(self) -> SessionPins:
        """Session pins (shared with the other gateways of a cluster)."""
        return self.admission.pins

    def view(self, message: dict[str, Any], configuration: Mapping[str, Any] | None, target: str | None) -> MessageView:
        return self.admission.view(message, configuration, target)

    def route(self, view: MessageView) -> RouteDecision:
        return self.admission.route(view)

    def send(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None = None, *, target: str | None = None
    ) -> Awaitable[dict[str, Any]]:
        """SendMessage through the gateway; awaits to the JSON-RPC `result` (`{"task": ...}` or `{"message": ...}`).
        (The exchange's own coroutine: no second frame on the hot path, unless push notifications are involved.)"""
        if self.push.wants(configuration):
            return self.push.send(self.exchange.send, message, configuration, target)
        return self.exchange.send(message, configuration, target=target)

    def send_stream(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None = None, *, target: str | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """SendStreamingMessage through the gateway: the events to stream back."""
        if self.push.wants(configuration):
            return self.push.send_stream(self.streaming.send_stream, message, configuration, target)
        return self.streaming.send_stream(message, configuration, target=target)

    async def get_task(self, task_id: str, history_length: int | None = None, *, target: str | None = None
                       ) -> dict[str, Any]:
        return await self.task_ops.get_task(task_id, history_length, target=target)

    async def cancel_task(self, task_id: str, *, target: str | None = None) -> dict[str, Any]:
        return await self.task_ops.cancel_task(task_id, target=target)

    def subscribe(self, task_id: str, *, target: str | None = None) -> AsyncIterator[dict[str, Any]]:
        return self.task_ops.subscribe(task_id, target=target)

    async def call_agent(self, entry: AgentEntry, method: str, params: dict[str, Any], *,
                         principal: str | None = None) -> Any:
        """One JSON-RPC call to an agent, counted and health-marked like every dispatch; `principal`: the client it
        is made for, where that is not the current request's (a durable delivery, sent by a dispatcher)."""
        return await self.caller.call(entry, method, params, principal=principal)
