"""The request pipeline: view → route → adapt → dispatch → aggregate, each a small step.

Works on the A2A 1.0 JSON form only (parsed once with orjson at ingress); the ingress
bindings (fast JSON-RPC, the SDK's REST/SSE/v0.3 adapters) all call `Pipeline`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ContentTypeNotSupported, DispatchError, InvalidParams, InvalidRequest, MMA2AError, TaskNotFound
from ..ext import (
    EXTENSION_URI,
    MAX_HOPS,
    MessageExtension,
    downgrade_message,
    read_message,
    write_message,
)
from ..modality import ModalityRegistry
from ..routing import Load, RouteDecision, SessionPins, Snapshot, decide_pinned, decision_key
from ..view import MessageView, view_message
from .access import current_sender
from .adapt import Adaptation, PartAdapter
from .aggregate import FAILED, WORKING, LegResult, aggregate, artifacts_of, chain_route, failed_task, now_iso
from .directory import AgentDirectory, AgentEntry
from .enrich import FeatureStage, with_vectors
from .feed import DecisionFeed
from .history.record import DecisionRecord, HistorySink, PartSummary, refused_parts
from .hooks import ClusterHooks, Standalone
from .metrics import GatewayMetrics
from .offload import OffloadStage
from .outputs import adapt_outputs
from .state import RoutingState
from .tasks import DownstreamTask, TaskMap, TaskRecord
from .tracing import span
from .transport import AgentRPCError, Transport

if TYPE_CHECKING:
    from .faults import Deduper
    from .guard import MessageGuard

    FailOver = Callable[..., Awaitable[LegResult | None]]  # faults.fail_over

log = logging.getLogger("mma2a.decisions")
_MEMO_SIZE = 4096  # distinct message shapes remembered per snapshot


@dataclass
class Leg:
    """What one agent receives for one message: its parts (after transforms) and why."""

    agent: str
    parts: list[tuple[int, dict[str, Any]]]
    adapted: list[Adaptation] = dataclasses.field(default_factory=list)  # parts fitted to the agent's profiles
    skipped: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def sendable(legs: list[Leg], route: list[dict[str, Any]]) -> list[Leg]:
    """The legs with something left to send; each part a transform emptied is noted in `route`
    (`outcome`: the reason, the part dropped)."""
    for leg in legs:
        for note in leg.skipped:
            for entry in route:
                if entry["index"] == note["index"]:
                    entry.setdefault("outcome", []).append({"agent": leg.agent, **note})
    return [leg for leg in legs if leg.parts]


def route_summary(decision: RouteDecision) -> list[dict[str, Any]]:
    """The per-part route as recorded in task metadata and logs."""
    out = []
    for pr in decision.parts:
        out.append({
            "index": pr.index,
            "modality": pr.modality,
            "matched": list(pr.matched),
            "targets": [t.agent for t in pr.targets],
            "via": [[{"agent": s.agent, "from": s.from_modality, "to": s.to_modality} for s in t.via] for t in pr.targets],
            "actions": list(pr.actions),
            "dropped": pr.dropped,
            "bottleneck": pr.bottleneck,
        })
    return out


def record_adaptations(route: list[dict[str, Any]], legs: Sequence[Leg]) -> None:
    """Add each leg's recorded transforms to the route summary, under the part they changed."""
    for leg in legs:
        for a in leg.adapted:
            for entry in route:
                if entry["index"] == a.index:
                    entry.setdefault("adapted", []).append(a.to_json())


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
        failover: FailOver | None = None,
        cluster: ClusterHooks | None = None,
        feed: DecisionFeed | None = None,
        log_decisions: bool = True,
        history: HistorySink | None = None,
        gateway_id: str = "",
    ) -> None:
        self.gateway_id = gateway_id  # this gateway in `via` (federation: loops are refused by it)
        self.directory = directory
        self.state = state
        self.transport = transport
        self.metrics = metrics
        self.registry = registry
        self.tasks = tasks or TaskMap()
        self.features = features
        self.offload = offload
        self.adapter = adapter
        self.feed = feed or DecisionFeed()
        self.history = history  # every decision, kept (gateway/history); record() never blocks
        self.cluster: ClusterHooks = cluster if cluster is not None else Standalone()  # shared pins, durable delivery
        shared = self.cluster.pins
        self.pins = shared if shared is not None else SessionPins()
        self.log_decisions = log_decisions
        self._tick = 0
        self._memo: dict[Hashable, RouteDecision] = {}  # decisions that read no load, for this snapshot
        self._memo_snapshot: Snapshot | None = None
        self.guard = guard  # limits, modality lists, URLs, signatures
        self.dedupe = dedupe  # the same (sender, messageId) answered once
        self.failover = failover  # another pool member when an agent is gone

    # --- stage 1: the view ------------------------------------------------------------
    def view(self, message: dict[str, Any], configuration: Mapping[str, Any] | None, target: str | None) -> MessageView:
        accepted = tuple((configuration or {}).get("acceptedOutputModes") or ())
        view = view_message(message, accepted_output_modes=accepted, registry=self.registry)
        if view.hops >= MAX_HOPS:
            raise InvalidRequest(
                f"message.metadata[{EXTENSION_URI}].hops: {view.hops} hops, the limit is {MAX_HOPS} (routing loop?)",
                field="hops",
            )
        if self.gateway_id and self.gateway_id in view.via:
            path = " → ".join((*view.via, self.gateway_id))
            raise InvalidRequest(f"message.metadata[{EXTENSION_URI}].via: routing loop {path} (this gateway, "
                                 f"{self.gateway_id}, passed the message on already)", field="via", data={"via": [*view.via]})
        if target is not None:
            self.directory.get(target)
            view = dataclasses.replace(view, receivers=(target,))
        return view

    # --- stage 2: routing -------------------------------------------------------------
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
                self._memo_snapshot = snapshot
            known = self._memo.get(key)
            if known is not None:
                decision = dataclasses.replace(known, message_id=view.message_id)
                self.metrics.decision_seconds.observe(time.perf_counter() - t0)
                return decision
        inflight = {e.name: e.inflight for e in self.directory.entries()}
        decision = decide_pinned(view, snapshot, self.pins, load=Load(inflight=inflight, tick=self._tick))
        if key is not None and not decision.uses_load:
            if len(self._memo) >= _MEMO_SIZE:
                self._memo.clear()
            self._memo[key] = decision
        self.metrics.decision_seconds.observe(time.perf_counter() - t0)
        if decision.pinned:
            self.metrics.pinned.inc()
        return decision

    # --- stage 3: adapt (transforms, per-target messages) ---------------------------
    async def transform(self, part: dict[str, Any], route_via: Sequence[Any], message: dict[str, Any]) -> dict[str, Any]:
        """Run a part through its chain of transformer agents; returns the final part."""
        current = part
        for step in route_via:
            entry = self.directory.get(step.agent)
            msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [current]}
            if not _declares(entry):
                msg = downgrade_message(msg, input_modes=_input_modes(entry))
            t0 = time.perf_counter()
            with span("mma2a.transform", agent=step.agent, source=step.from_modality, goal=step.to_modality):
                result = await self._call(entry, "SendMessage", {"message": msg})
            self.metrics.transform_seconds.labels(step.agent).observe(time.perf_counter() - t0)
            out = _pick_part(result, step.to_modality)
            if out is None:
                raise DispatchError(
                    f"transformer {step.agent} returned no {step.to_modality} part for {step.from_modality}",
                    data={"agent": step.agent},
                )
            if _is_empty(out):
                reason = str((out.get("metadata") or {}).get("mma2a.noSpeech") or "empty output")
                raise EmptyTransformOutput(f"transformer {step.agent} made no {step.to_modality} from "
                                           f"{step.from_modality}: {reason}", data={"agent": step.agent})
            meta = dict(out.get("metadata") or {})
            ext = dict(meta.get(EXTENSION_URI) or {})
            ext.setdefault("modality", step.to_modality)
            ext["transformedFrom"] = {"modality": step.from_modality, "agent": step.agent}
            ext["featureSource"] = {"kind": "router", "extractor": f"transform:{step.agent}"}
            meta[EXTENSION_URI] = ext
            current = {**out, "metadata": meta}
        return current

    async def legs(self, message: dict[str, Any], decision: RouteDecision) -> list[Leg]:
        parts = message["parts"]
        by_agent: dict[str, Leg] = {}
        jobs = []
        for pr in decision.parts:
            for target in pr.targets:
                leg = by_agent.setdefault(target.agent, Leg(target.agent, []))
                if target.via:
                    jobs.append((leg, pr.index, self.transform(parts[pr.index], target.via, message)))
                else:
                    leg.parts.append((pr.index, parts[pr.index]))
        if jobs:
            results = await asyncio.gather(*(j[2] for j in jobs), return_exceptions=True)
            for (leg, index, _), part in zip(jobs, results):
                if isinstance(part, EmptyTransformOutput):  # an outcome, recorded: the part goes no further
                    leg.skipped.append({"index": index, "reason": part.message, "outcome": "dropped"})
                elif isinstance(part, BaseException):
                    raise part
                else:
                    leg.parts.append((index, part))
        for leg in by_agent.values():
            leg.parts.sort(key=lambda ip: ip[0])
        if self.adapter is not None:  # fit parts to receivers that have profiles (most have none: no task then)
            wanting = [(leg, e) for leg in by_agent.values() if self.adapter.profiles(e := self.directory.get(leg.agent))]
            if wanting:
                await asyncio.gather(*(self._fit(leg, e) for leg, e in wanting))
        return list(by_agent.values())

    async def _fit(self, leg: Leg, entry: AgentEntry) -> None:
        assert self.adapter is not None
        leg.parts, leg.adapted = await self.adapter.fit(entry, leg.parts)
        for a in leg.adapted:
            self.metrics.adaptations.labels("failed" if a.error else "reused" if a.cached else "adapted").inc()
            if a.error is None:
                self.metrics.adapted_bytes.labels("before").inc(a.bytes_before)
                self.metrics.adapted_bytes.labels("after").inc(a.bytes_after)

    def leg_message(self, message: dict[str, Any], leg: Leg, entry: AgentEntry) -> dict[str, Any]:
        """The message one agent receives: its parts only; the extension kept only if its card declares it."""
        out = {k: v for k, v in message.items() if k != "parts"}
        out["parts"] = [p for _, p in leg.parts]
        if "taskId" in out:  # a follow-up: each agent continues its own task, or starts one
            rec = self.tasks.find(out["taskId"])
            if rec is not None:
                mine = next((d for d in rec.legs if d.agent == leg.agent), None)
                if mine is None:
                    del out["taskId"]
                else:
                    out["taskId"] = mine.task_id
        if _declares(entry):
            mext = read_message(message) or MessageExtension()
            via = (*mext.via, self.gateway_id) if self.gateway_id else mext.via
            write_message(out, dataclasses.replace(mext, hops=mext.hops + 1, receivers=(), intent="auto", via=via))
            return out
        return downgrade_message(out, input_modes=_input_modes(entry))

    # --- stage 4: dispatch --------------------------------------------------------------
    async def _call(self, entry: AgentEntry, method: str, params: dict[str, Any]) -> Any:
        entry.inflight += 1
        t0 = time.perf_counter()
        try:
            result = await self.transport.call(
                entry.name, entry.rpc_url, method, params, extension=_declares(entry), token=entry.token,
                timeout_s=entry.config.timeout_s, coding=self.adapter.coding(entry) if self.adapter is not None else None,
            )
        except DispatchError as exc:
            self.directory.mark(entry.name, ok=False, error=exc.message)
            self.metrics.agent_errors.labels(entry.name).inc()
            raise
        finally:
            entry.inflight -= 1
            self.metrics.agent_seconds.labels(entry.name).observe(time.perf_counter() - t0)
        entry.sent += 1
        self.directory.mark(entry.name, ok=True)
        return result

    async def call_agent(self, entry: AgentEntry, method: str, params: dict[str, Any]) -> Any:
        """One JSON-RPC call to an agent, counted and health-marked like every dispatch."""
        return await self._call(entry, method, params)

    async def dispatch(
        self, leg: Leg, message: dict[str, Any], configuration: Mapping[str, Any] | None, decision: Any = None,
        *, passthrough: bool = False,
    ) -> LegResult:
        """One leg to its agent. With `passthrough` (the exchange is the agent's alone) an agent's JSON-RPC
        error is raised as it came, instead of becoming a failed leg of an aggregate."""
        entry = self.directory.get(leg.agent)
        params: dict[str, Any] = {"message": self.leg_message(message, leg, entry)}
        if configuration:
            params["configuration"] = dict(configuration)
        if self.cluster.durable_for(leg.agent):
            return await self.cluster.deliver(leg.agent, params)
        try:
            with span("mma2a.dispatch", kind="client", agent=leg.agent, parts=len(leg.parts)):
                result = await self._call(entry, "SendMessage", params)
        except AgentRPCError as exc:
            if passthrough:
                raise
            return LegResult(leg.agent, error=f"agent error {exc.code}: {exc.message}")
        except DispatchError as exc:
            if self.failover is not None and decision is not None:
                moved = await self.failover(self, leg, message, configuration, decision, exc)
                if moved is not None:
                    return moved
            return LegResult(leg.agent, error=exc.message)
        if not isinstance(result, dict) or not ({"task", "message"} & result.keys()):
            return LegResult(leg.agent, error="agent answered with neither a task nor a message")
        return LegResult(leg.agent, result=result)

    async def _route_shared(self, view: MessageView) -> RouteDecision:
        """Route a message of a session: its pin may come from another gateway; a new pin is shared before dispatch."""
        assert view.session is not None
        await self.cluster.before_route(view.session.id)
        decision = self.route(view)
        await self.cluster.after_route(view.session.id)
        return decision

    # --- the whole path -----------------------------------------------------------------
    async def prepare(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None, target: str | None,
        sender: str | None = None,
    ) -> tuple[dict[str, Any], MessageView, RouteDecision]:
        """Security checks, features, offload, view, route: the message as it will travel on, and where each part goes."""
        sender = sender if sender is not None else current_sender()
        if self.guard is not None:  # limits, modality lists, URLs; the verified signer becomes the features' sender
            sender = await self.guard.admit(message, configuration, target, sender)
        vectors = await self.features.apply(message, self.state.snapshot, sender=sender) if self.features else {}
        if self.offload is not None:
            message = await self.offload.apply(message)
        view = with_vectors(self.view(message, configuration, target), vectors)
        if message.get("taskId"):
            rec = self.tasks.find(message["taskId"])
            if rec is not None and not rec.fanned_out and len(rec.legs) == 1:
                # a follow-up on a task: it goes where the task lives
                view = dataclasses.replace(view, receivers=(rec.legs[0].agent,))
        try:
            decision = await self._route_shared(view) if view.session else self.route(view)
        except ContentTypeNotSupported:
            self.metrics.requests.labels("unroutable").inc()
            raise
        if self.guard is not None:
            self.guard.check_targets(decision)
        for pr in decision.parts:
            self.metrics.parts.labels(pr.modality.split(";")[0]).inc()
            for name in pr.matched:
                self.metrics.rule_hits.labels(name).inc()
        return message, view, decision

    async def send(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None = None, *, target: str | None = None
    ) -> dict[str, Any]:
        """SendMessage through the gateway; returns the JSON-RPC `result` (`{"task": ...}` or `{"message": ...}`)."""
        if self.dedupe is not None and isinstance(message.get("messageId"), str):
            return await self.dedupe.run(
                current_sender(), message["messageId"], lambda: self._send(message, configuration, target))
        return await self._send(message, configuration, target)

    async def _send(self, message: dict[str, Any], configuration: Mapping[str, Any] | None, target: str | None
                    ) -> dict[str, Any]:
        t0 = time.perf_counter()
        with span("mma2a.route", message_id=message.get("messageId"), parts=len(message.get("parts") or ())) as s:
            try:
                message, view, decision = await self.prepare(message, configuration, target)
            except MMA2AError as exc:
                self.feed.record(message, [], f"refused {exc.code}: {exc.message}", refused=True)
                self._remember_refusal(message, exc, t0)
                raise
            if s is not None:
                s.set_attribute("mma2a.modalities", [p.modality for p in decision.parts])
                s.set_attribute("mma2a.targets", list(decision.targets()))
                s.set_attribute("mma2a.rules", sorted({r for p in decision.parts for r in p.matched}))
        result = await self.execute(message, configuration, decision)
        self.metrics.request_seconds.observe(time.perf_counter() - t0)
        task = result.get("task")
        outcome = str((task.get("status") or {}).get("state", "")) if task is not None else "message"
        self.feed.record(message, route_summary(decision), outcome)
        self._remember(view, decision, outcome, t0)
        return result

    def _remember(self, view: MessageView, decision: RouteDecision, outcome: str, t0: float) -> None:
        """The decision and its outcome to the history (a no-op without one)."""
        if self.history is not None:
            self.history.record(DecisionRecord(view.message_id, time.time(), current_sender(), view.parts, decision.parts,
                                               outcome, time.perf_counter() - t0, view.receivers))

    def _remember_refusal(self, message: dict[str, Any], exc: MMA2AError, t0: float) -> None:
        if self.history is not None:
            self.history.record(DecisionRecord(str(message.get("messageId", "")), time.time(), current_sender(),
                                               refused_parts(message), (), f"refused {exc.code}: {exc.message}",
                                               time.perf_counter() - t0))

    async def execute(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None, decision: RouteDecision
    ) -> dict[str, Any]:
        """Adapt, dispatch and aggregate a decided message; then fit the reply to the accepted output modes."""
        result = await self._execute(message, configuration, decision)
        accepted = (configuration or {}).get("acceptedOutputModes") or []
        if accepted:
            await adapt_outputs(result, accepted, self.state.snapshot, lambda part, via: self.transform(part, via, message))
        return result

    async def _execute(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None, decision: RouteDecision
    ) -> dict[str, Any]:
        route = route_summary(decision)
        if self.log_decisions:
            log.info("decision", extra={"decision": {"messageId": decision.message_id, "route": route}})
        if all(pr.dropped for pr in decision.parts):
            reasons = "; ".join(f"part {pr.index}: {pr.dropped}" for pr in decision.parts)
            self.metrics.requests.labels("dropped").inc()
            return {"task": failed_task(f"dropped by rule: {reasons}", message=message, state="TASK_STATE_REJECTED", route=route)}
        try:
            legs = sendable(await self.legs(message, decision), route)
        except MMA2AError as exc:
            self.metrics.requests.labels("failed").inc()
            return {"task": failed_task(f"transform failed: {exc.message}", message=message, route=route)}
        if not legs:  # every part was emptied by its transform: nothing to answer, and nothing failed
            self.metrics.requests.labels("ok").inc()
            reasons = "; ".join(f"part {e['index']}: {o['reason']}" for e in route for o in e.get("outcome") or [])
            return {"task": failed_task(f"nothing left to send: {reasons}", message=message, state="TASK_STATE_COMPLETED",
                                        route=route)}
        record_adaptations(route, legs)
        passthrough = len(legs) == 1 and is_direct(decision)
        results: list[Any]
        if len(legs) == 1:  # no task to spawn for one leg
            results = [await self.dispatch(legs[0], message, configuration, decision, passthrough=passthrough)]
        else:
            results = await asyncio.gather(*(self.dispatch(leg, message, configuration, decision, passthrough=passthrough)
                                             for leg in legs))
        if len(results) == 1:
            res = results[0]
            if res.error is not None:
                self.metrics.requests.labels("failed").inc()
                failed = failed_task(res.error, message=message, route=route)
                self.tasks.put(TaskRecord(failed["id"], [], aggregate=failed, route=route))
                return {"task": failed}
            self.metrics.requests.labels("ok").inc()
            result = res.result or {}
            task = result.get("task")
            if task is not None:
                meta = task.setdefault("metadata", {})
                meta[EXTENSION_URI] = chain_route(meta.get(EXTENSION_URI), route, res.agent, self.gateway_id)
                for art in task.get("artifacts") or []:
                    ameta = art.setdefault("metadata", {})
                    ameta[EXTENSION_URI] = {**(ameta.get(EXTENSION_URI) or {}), "source": res.agent}
                self.tasks.put(TaskRecord(task["id"], [DownstreamTask(res.agent, task["id"], task.get("contextId"))], route=route))
            return result
        task = aggregate(results, message=message, route=route)
        state = task["status"]["state"]
        self.metrics.requests.labels("failed" if state == FAILED else "ok").inc()
        legs_ = [DownstreamTask(r.agent, r.task["id"], r.task.get("contextId")) for r in results if r.task]
        self.tasks.put(TaskRecord(task["id"], legs_, aggregate=task, route=route))
        return {"task": task}

    async def send_stream(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None = None, *, target: str | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """SendStreamingMessage: one target streams through as it is; a fan-out streams each leg's
        artifacts as the leg finishes, then the aggregate's final status."""
        t0 = time.perf_counter()
        try:
            message, view, decision = await self.prepare(message, configuration, target)
        except MMA2AError as exc:
            self._remember_refusal(message, exc, t0)
            raise
        route = route_summary(decision)
        targets = decision.targets()
        dropped = any(pr.dropped for pr in decision.parts)
        if len(targets) > 1 and not dropped and not (configuration or {}).get("acceptedOutputModes"):
            async for event in self._stream_fan_out(message, configuration, decision, route):
                yield event
            return
        single = len(targets) == 1 and not dropped and not any(t.via for pr in decision.parts for t in pr.targets)
        if not single or not ((self.directory.get(targets[0]).card.get("capabilities") or {}).get("streaming")):
            result = await self.execute(message, configuration, decision)
            self._remember(view, decision, _outcome(result), t0)
            yield result
            return
        legs = await self.legs(message, decision)
        record_adaptations(route, legs)
        leg = legs[0]
        entry = self.directory.get(leg.agent)
        params: dict[str, Any] = {"message": self.leg_message(message, leg, entry)}
        if configuration:
            params["configuration"] = dict(configuration)
        entry.inflight += 1
        recorded = sent = False
        tid: str | None = None
        outcome = "unknown"  # the last state the stream reported
        try:
            async for event in self.transport.stream(
                entry.name, entry.rpc_url, "SendStreamingMessage", params, extension=_declares(entry), token=entry.token,
                timeout_s=entry.config.timeout_s, coding=self.adapter.coding(entry) if self.adapter is not None else None,
            ):
                if not recorded and isinstance(event, dict):
                    tid = (event.get("task") or {}).get("id") or (event.get("statusUpdate") or {}).get("taskId")
                    if tid:
                        self.tasks.put(TaskRecord(tid, [DownstreamTask(leg.agent, tid)], route=route))
                        recorded = True
                sent = True
                outcome = _outcome(event) or outcome
                yield event
        except AgentRPCError:
            outcome = FAILED
            raise
        except DispatchError as exc:
            self.directory.mark(entry.name, ok=False, error=exc.message)
            if sent:  # the stream broke midway: say so on the task the client already has
                outcome = FAILED
                yield {"task": failed_task(exc.message, message=message, task_id=tid, route=route)}
            else:  # nothing reached the client yet: the non-streaming path, with its failover
                result = await self.execute(message, configuration, decision)
                outcome = _outcome(result) or outcome
                yield result
        finally:
            entry.inflight -= 1
            self._remember(view, decision, outcome, t0)

    async def _stream_fan_out(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None, decision: RouteDecision,
        route: list[dict[str, Any]],
    ) -> AsyncIterator[dict[str, Any]]:
        tid, ctx = f"gw-{uuid.uuid4()}", message.get("contextId") or str(uuid.uuid4())
        yield {"task": {"id": tid, "contextId": ctx, "status": {"state": WORKING, "timestamp": now_iso()},
                        "history": [message], "metadata": {EXTENSION_URI: {"route": route}}}}
        try:
            legs = sendable(await self.legs(message, decision), route)
        except MMA2AError as exc:
            failed = failed_task(f"transform failed: {exc.message}", message=message, task_id=tid, route=route)
            yield {"statusUpdate": {"taskId": tid, "contextId": ctx, "status": failed["status"]}}
            return
        record_adaptations(route, legs)
        results = []
        for done in asyncio.as_completed([self.dispatch(leg, message, configuration, decision) for leg in legs]):
            res = await done
            results.append(res)
            for art in artifacts_of(res):
                yield {"artifactUpdate": {"taskId": tid, "contextId": ctx, "artifact": art, "lastChunk": True}}
        task = aggregate(results, message=message, route=route)
        task["id"], task["contextId"] = tid, ctx
        for m in [task["status"].get("message")] if task["status"].get("message") else []:
            m["taskId"], m["contextId"] = tid, ctx
        self.tasks.put(TaskRecord(tid, [DownstreamTask(r.agent, r.task["id"], r.task.get("contextId"))
                                        for r in results if r.task], aggregate=task, route=route))
        self.feed.record(message, route, str(task["status"]["state"]))
        if self.history is not None:  # no view here: the modalities as routed
            self.history.record(DecisionRecord(decision.message_id, time.time(), current_sender(),
                                               [PartSummary(p.index, p.modality) for p in decision.parts], decision.parts,
                                               str(task["status"]["state"]), 0.0))
        yield {"statusUpdate": {"taskId": tid, "contextId": ctx, "status": task["status"],
                                "metadata": task["metadata"]}}

    # --- tasks --------------------------------------------------------------------------
    def task_record(self, task_id: str, target: str | None = None) -> TaskRecord:
        """The gateway's record of a task; on `/agents/{name}/` a task the gateway never saw is the agent's
        to answer for (it may know it, or answer its own TaskNotFound)."""
        rec = self.tasks.find(task_id)
        if rec is None and target is not None:
            self.directory.get(target)
            return TaskRecord(task_id, [DownstreamTask(target, task_id)])
        if rec is None:
            return self.tasks.get(task_id)  # raises TaskNotFound
        if target is not None and all(leg.agent != target for leg in rec.legs):
            raise TaskNotFound(f"task {task_id!r} not found", field="id")
        return rec

    async def get_task(self, task_id: str, history_length: int | None = None, *, target: str | None = None
                       ) -> dict[str, Any]:
        rec = self.task_record(task_id, target)
        if not rec.fanned_out:
            leg = rec.legs[0]
            params: dict[str, Any] = {"id": leg.task_id}
            if history_length is not None:
                params["historyLength"] = history_length
            task = await self._call(self.directory.get(leg.agent), "GetTask", params)
            if isinstance(task, dict):
                meta = task.setdefault("metadata", {})
                meta[EXTENSION_URI] = {**(meta.get(EXTENSION_URI) or {}), "route": rec.route}
            return task  # type: ignore[no-any-return]
        if history_length is not None and history_length < 0:
            raise InvalidParams("history length must be non-negative", field="params.historyLength")
        legs = []
        for leg in rec.legs:
            try:
                task = await self._call(self.directory.get(leg.agent), "GetTask", {"id": leg.task_id})
                legs.append(LegResult(leg.agent, result={"task": task}))
            except MMA2AError as exc:
                legs.append(LegResult(leg.agent, error=exc.message))
        if not legs:
            return cut_history(rec.aggregate or {}, history_length)
        fresh = aggregate(legs, message=(rec.aggregate or {}).get("history", [{}])[0], route=rec.route)
        fresh["id"], fresh["contextId"] = rec.task_id, (rec.aggregate or {}).get("contextId", fresh["contextId"])
        rec.aggregate = fresh
        self.tasks.update(rec)
        return cut_history(fresh, history_length)

    async def cancel_task(self, task_id: str, *, target: str | None = None) -> dict[str, Any]:
        rec = self.task_record(task_id, target)
        if not rec.fanned_out:  # one agent's task: its answer (or its error) is the answer
            leg = rec.legs[0]
            task = await self._call(self.directory.get(leg.agent), "CancelTask", {"id": leg.task_id})
            if isinstance(task, dict) and rec.route:
                meta = task.setdefault("metadata", {})
                meta[EXTENSION_URI] = {**(meta.get(EXTENSION_URI) or {}), "route": rec.route}
            return task  # type: ignore[no-any-return]
        errors = []
        for leg in rec.legs:
            try:
                await self._call(self.directory.get(leg.agent), "CancelTask", {"id": leg.task_id})
            except AgentRPCError as exc:
                errors.append(exc)
        if errors and len(errors) == len(rec.legs):
            raise errors[0]
        return await self.get_task(task_id)

    async def subscribe(self, task_id: str, *, target: str | None = None) -> AsyncIterator[dict[str, Any]]:
        rec = self.task_record(task_id, target)
        if rec.fanned_out or not rec.legs:
            yield {"task": await self.get_task(task_id)}
            return
        leg = rec.legs[0]
        entry = self.directory.get(leg.agent)
        async for event in self.transport.stream(
            entry.name, entry.rpc_url, "SubscribeToTask", {"id": leg.task_id}, extension=_declares(entry), token=entry.token
        ):
            yield event


def cut_history(task: dict[str, Any], history_length: int | None) -> dict[str, Any]:
    """A task with at most the last `history_length` messages of its history (0: none; None: all)."""
    history = task.get("history")
    if history_length is None or not isinstance(history, list) or len(history) <= history_length:
        return task
    out = {k: v for k, v in task.items() if k != "history"}
    if history_length > 0:
        out["history"] = history[-history_length:]
    return out


def is_direct(decision: RouteDecision) -> bool:
    """Every part goes as it is (no transform, nothing dropped): the exchange can be the agent's own."""
    return all(not pr.dropped and all(not t.via for t in pr.targets) for pr in decision.parts)


def _outcome(event: Mapping[str, Any]) -> str:
    """The task state a result or stream event reports ("message" for a message, "" when it says none)."""
    if "message" in event:
        return "message"
    status = (event.get("task") or event.get("statusUpdate") or {}).get("status") or {}
    return str(status.get("state") or "")


def _declares(entry: AgentEntry) -> bool:
    exts = (entry.card.get("capabilities") or {}).get("extensions") or []
    return any(isinstance(e, dict) and e.get("uri") == EXTENSION_URI for e in exts)


def _input_modes(entry: AgentEntry) -> list[str]:
    modes = list(entry.card.get("defaultInputModes") or [])
    for skill in entry.card.get("skills") or []:
        modes += [m for m in skill.get("inputModes") or [] if m not in modes]
    return modes


class EmptyTransformOutput(DispatchError):
    """A transformer answered with nothing (a recording without speech): the part is dropped and the
    reason recorded in the route; the task goes on with the other parts, never fails for it."""


def _is_empty(part: dict[str, Any]) -> bool:
    if "text" in part:
        return not str(part.get("text") or "").strip()
    if "raw" in part:
        return not part.get("raw")
    return False


def _pick_part(result: Any, modality: str) -> dict[str, Any] | None:
    """The first part of a transformer's answer whose modality is the one asked for."""
    from ..ext import read_part
    from ..modality import modality_matches

    candidates: list[dict[str, Any]] = []
    if isinstance(result, dict):
        if "task" in result:
            for art in result["task"].get("artifacts") or []:
                candidates.extend(art.get("parts") or [])
            status_msg = (result["task"].get("status") or {}).get("message")
            if status_msg:
                candidates.extend(status_msg.get("parts") or [])
        elif "message" in result:
            candidates.extend(result["message"].get("parts") or [])
    for part in candidates:
        try:
            ext = read_part(part)
        except MMA2AError:
            continue
        if ext.modality and modality_matches(ext.modality, modality.split(";")[0]):
            return part
    return None
