"""Admission: a message is checked (guard), enriched (features), offloaded, viewed and routed —
what it will travel as, and where each part goes. Nothing is sent to an agent here."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from ...errors import ContentTypeNotSupported, Forbidden, InvalidParams, InvalidRequest, RoutingRefusal, TaskNotFound
from ...ext import EXTENSION_URI, MAX_HOPS
from ...modality import ModalityRegistry
from ...routing import Load, RouteDecision, SessionPins, Snapshot, decide_pinned, decision_key
from ...routing.sessions import OWNER_SEP
from ...view import Caller, MessageView, view_message
from ..access.clients import Client, current_client, current_sender, shown
from ..downstream.directory import AgentDirectory
from ..observe.metrics import GatewayMetrics
from ..state.hooks import RouteHooks
from ..state.learning import Learner
from ..state.routing import RoutingState
from ..state.tasks import TaskMap
from .enrich import FeatureStage, with_vectors
from .offload import OffloadStage

if TYPE_CHECKING:
    from ..access.guard import MessageGuard

_MEMO_SIZE = 4096  # distinct message shapes remembered per snapshot
_MEMO_PARTS = 16_384  # ... holding this many parts at most (a decision of 64 parts of a client's own media types holds
# ~100 KB with its explanation: 4,096 of them were ~0.4 GB a gateway; docs/security.md S17-3)


class Admission:
    """The stages before dispatch: guard → features → offload → view → route."""

    def __init__(
        self, *, directory: AgentDirectory, state: RoutingState, metrics: GatewayMetrics, registry: ModalityRegistry,
        tasks: TaskMap, cluster: RouteHooks, features: FeatureStage | None = None, offload: OffloadStage | None = None,
        guard: MessageGuard | None = None, gateway_id: str = "", learner: Learner | None = None,
        session_pins: int = 100_000,
    ) -> None:
        self.directory = directory
        self.state = state
        self.metrics = metrics
        self.registry = registry
        self.tasks = tasks
        self.cluster = cluster  # shared pins, before/after routing a session's message
        self.features = features
        self.offload = offload
        self.guard = guard  # limits, modality lists, URLs, signatures
        self.gateway_id = gateway_id  # this gateway in `via` (federation: loops are refused by it)
        self.learner = learner  # what learned routing has learned (its evidence goes to each decision)
        shared = cluster.pins
        self.pins = shared if shared is not None else SessionPins(session_pins)  # limits.session_pins
        self._tick = 0
        self._memo: dict[Hashable, RouteDecision] = {}  # decisions that read no load, for this snapshot
        self._memo_snapshot: Snapshot | None = None
        self._memo_parts = 0  # the parts of the decisions `_memo` holds

    def view(self, message: dict[str, Any], configuration: Mapping[str, Any] | None, target: str | None) -> MessageView:
        """The message as routing sees it; refuses routing loops (hops, this gateway already in `via`)."""
        accepted = tuple((configuration or {}).get("acceptedOutputModes") or ())
        view = view_message(message, accepted_output_modes=accepted, registry=self.registry)
        if view.hops >= MAX_HOPS:
            raise InvalidRequest(
                f"message.metadata[{EXTENSION_URI}].hops: {view.hops} hops, the limit is {MAX_HOPS} (routing loop?)",
                field="hops",
            )
        if len(view.via) > MAX_HOPS:  # a gateway adds itself as it adds a hop: a longer list was written by hand
            raise InvalidRequest(f"message.metadata[{EXTENSION_URI}].via: {len(view.via)} gateways, more than a message "
                                 f"passes ({MAX_HOPS} hops)", field="via")
        if self.gateway_id and self.gateway_id in view.via:
            path = " → ".join((*view.via, self.gateway_id))
            raise InvalidRequest(f"message.metadata[{EXTENSION_URI}].via: routing loop {path} (this gateway, "
                                 f"{self.gateway_id}, passed the message on already)", field="via", data={"via": [*view.via]})
        if target is not None:
            self.directory.get(target)
            view = dataclasses.replace(view, receivers=(target,))
        return view

    def route(self, view: MessageView) -> RouteDecision:
        """Decide (or reuse a session's pinned route, or an equal earlier decision); the time goes to metrics.

        Routing is pure: a view with the same shape (`decision_key`) under the same snapshot gets
        the same decision, unless the decision read the load (pools, ties) — those are decided afresh.
        """
        snapshot = self.state.snapshot
        self._tick += 1
        t0 = time.perf_counter()
        key = decision_key(view)
        if key is not None:
            if self._memo_snapshot is not snapshot:
                self._memo.clear()
                self._memo_parts = 0
                self._memo_snapshot = snapshot
            known = self._memo.get(key)
            if known is not None:
                decision = RouteDecision(view.message_id, known.parts, known.explanation, known.version, known.pinned,
                                         known.uses_load)  # `dataclasses.replace` costs several times this
                self.metrics.decision_seconds.observe(time.perf_counter() - t0)
                return decision
        inflight = {e.name: e.inflight for e in self.directory.entries()}
        evidence = self.learner.evidence if self.learner is not None and snapshot.learns else None
        decision = decide_pinned(view, snapshot, self.pins, load=Load(inflight=inflight, tick=self._tick),
                                 evidence=evidence)
        if key is not None and not decision.uses_load:
            if len(self._memo) >= _MEMO_SIZE or self._memo_parts + len(decision.parts) > _MEMO_PARTS:
                self._memo.clear()
                self._memo_parts = 0
            self._memo[key] = decision
            self._memo_parts += len(decision.parts)
        self.metrics.decision_seconds.observe(time.perf_counter() - t0)
        if decision.pinned:
            self.metrics.pinned.inc()
        return decision

    def _for_client(self, view: MessageView, caller: str | None, client: Client | None) -> MessageView:
        """The view as routed for its client: its session the client's own, its claims, the agents it may use."""
        if view.session is not None and caller is not None:  # a session's pin is its client's: another client
            # naming the same session id neither takes the pinned route nor releases it
            own = f"{caller}{OWNER_SEP}{view.session.id}"  # (its pins are its own too: routing/sessions.py)
            view = dataclasses.replace(view, session=dataclasses.replace(view.session, id=own))
        wanted = self.state.snapshot.caller_claims
        if wanted is not None and client is not None:  # `client:` conditions read who is calling
            view = dataclasses.replace(view, caller=caller_of(client, wanted))
        if client is not None and client.agents is not None:  # capability routing chooses among the client's agents
            view = dataclasses.replace(view, allowed=client.agents)
        return view

    def reroute(self, message: dict[str, Any], configuration: Mapping[str, Any] | None) -> RouteDecision:
        """Route a message `prepare` made again, after an agent of its route was ejected (failover), for the same
        client as `prepare` routed it: a session's new pin is that client's own (a session pinned to the ejected
        agent lost its pin with the snapshot the ejection made), and the client's agents alone."""
        client = current_client.get()
        decision = self.route(self._for_client(self.view(message, configuration, None), current_sender(), client))
        if client is not None and client.agents is not None:
            check_client_agents(client, decision)
        return decision

    async def _route_shared(self, view: MessageView) -> RouteDecision:
        """Route a message of a session: its pin may come from another gateway; a new pin is shared before dispatch."""
        assert view.session is not None
        await self.cluster.before_route(view.session.id)
        decision = self.route(view)
        await self.cluster.after_route(view.session.id)
        return decision

    async def prepare(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None, target: str | None,
        sender: str | None = None,
    ) -> tuple[dict[str, Any], MessageView, RouteDecision]:
        """Security checks, features, offload, view, route: the message as it will travel on, and where each part goes."""
        caller: str | None
        if sender is not None:
            caller = sender
        else:  # the principal owns what the request makes; the features are judged by who sent them: a peer
            # gateway's client's by that gateway (`features.trusted_senders: [gw-a]`)
            caller = current_sender()
            who = current_client.get()
            sender = who.name if who is not None else None
        if message.get("taskId") or message.get("contextId"):
            if message.get("taskId"):
                await self.tasks.fetch(str(message["taskId"]))  # in a cluster: a task made by another gateway
            if message.get("contextId"):
                await self.tasks.fetch_context(str(message["contextId"]))  # in a cluster: another gateway's context
            check_owner(self.tasks, message, caller)
        if self.guard is not None:  # limits, modality lists, URLs; the verified signer becomes the features' sender
            rest = self.guard.admit(message, configuration, target, sender)
            if rest is not None:  # (checks that wait: media to probe, URLs, a signature)
                sender = await rest
        vectors = await self.features.apply(message, self.state.snapshot, sender=sender) if self.features else {}
        if self.offload is not None and self.offload.needed(message):
            message = await self.offload.apply(message, owner=caller)  # counted in the caller's blob quota
        view = self.view(message, configuration, target)
        if vectors:  # (none: the view as it is, no call)
            view = with_vectors(view, vectors)
        if message.get("taskId"):
            rec = self.tasks.find(message["taskId"])
            if rec is not None and not rec.fanned_out and len(rec.legs) == 1:
                # a follow-up on a task: it goes where the task lives
                view = dataclasses.replace(view, receivers=(rec.legs[0].agent,))
        client = current_client.get()
        view = self._for_client(view, caller, client)
        try:
            decision = await self._route_shared(view) if view.session else self.route(view)
        except RoutingRefusal as exc:
            if isinstance(exc, ContentTypeNotSupported):
                self.metrics.requests.labels("unroutable").inc()
            if client is not None and client.agents is not None:  # the hint names agents this client may not use
                raise exc.without_hint() from None
            raise
        if self.guard is not None:
            self.guard.check_targets(decision)
        if client is not None and client.agents is not None:  # `auth.clients[].agents` holds at the root too
            check_client_agents(client, decision)
        for pr in decision.parts:
            self.metrics.parts.labels(pr.modality.split(";")[0]).inc()
            for name in pr.matched:
                self.metrics.rule_hits.labels(name).inc()
        return message, view, decision


def caller_of(client: Client, claims: frozenset[str]) -> Caller:
    """What `client:` conditions read of `client`: its id (the principal) and the `claims` they name that it has."""
    return Caller(client.key, {name: client.claims[name] for name in claims if name in client.claims})


def check_owner(tasks: TaskMap, message: Mapping[str, Any], caller: str | None) -> None:
    """A follow-up (`taskId`) or a message in a context (`contextId`) of another client is refused as an unknown
    task; with an identified caller, so is a `taskId` the gateway does not remember (it cannot tell whose it is)."""
    task_id, context_id = message.get("taskId"), message.get("contextId")
    if task_id:
        known, owner = tasks.owner_of(str(task_id))
        if owner != caller or (not known and caller is not None):
            raise TaskNotFound(f"task {task_id!r} not found", field="params.message.taskId")
    if context_id:
        known, owner = tasks.context_owner(str(context_id))
        if known and owner != caller:
            raise InvalidParams(f"params.message.contextId: context {context_id!r} belongs to another client",
                                field="params.message.contextId")


def check_client_agents(client: Client, decision: RouteDecision) -> None:
    """`Forbidden` when routing sent a part to (or through, as a transformer) an agent the client may not use."""
    allowed = client.agents or frozenset()
    for pr in decision.parts:
        for t in pr.targets:
            for name in (*(step.agent for step in t.via), t.agent):
                if name not in allowed:
                    where = f"params.message.parts[{pr.index}]"
                    raise Forbidden(f"{where}: routed to agent {name}, which {shown(client.key)} may not use "
                                    f"(auth.clients: {', '.join(sorted(allowed))})", field=where)
