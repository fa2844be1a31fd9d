"""The exchange of one SendMessage: admit, build the legs, dispatch them, aggregate the answers into
one task (or pass one agent's answer through), fit it to the accepted output modes, and record
the decision with its outcome (feed, history, decision log)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any

from ...errors import AgentRPCError, DispatchError, MMA2AError, Overloaded
from ...ext import EXTENSION_URI
from ...routing import RouteDecision
from ...view import MessageView
from ..access.clients import current_client, current_sender, honoured_priority
from ..access.federation import check_bound
from ..downstream.overload import gone_leg, gone_unsent, note_shed
from ..history.record import DecisionRecord, HistorySink, refused_parts
from ..observe.feed import DecisionFeed
from ..observe.metrics import GatewayMetrics
from ..observe.tracing import active as tracing_active
from ..observe.tracing import span
from ..state.aggregate import FAILED, LegResult, aggregate, chain_route, failed_task
from ..state.learning import FAILED_STATES
from ..state.routing import RoutingState
from ..state.tasks import DownstreamTask, TaskMap, TaskRecord
from .admission import Admission
from .dispatch import Dispatcher
from .legs import Leg, LegPlanner, RouteSummaries, is_direct, record_adaptations, sendable
from .outputs import adapt_outputs

if TYPE_CHECKING:
    from ..faults import Deduper

log = logging.getLogger("mma2a.decisions")


def outcome_of(event: Mapping[str, Any]) -> str:
    """The task state a result or stream event reports ("message" for a message, "" when it says none)."""
    if "message" in event:
        return "message"
    status = (event.get("task") or event.get("statusUpdate") or {}).get("status") or {}
    return str(status.get("state") or "")


class Exchange:
    """SendMessage end to end over the admission, leg and dispatch stages."""

    def __init__(
        self, *, admission: Admission, planner: LegPlanner, dispatcher: Dispatcher, state: RoutingState,
        metrics: GatewayMetrics, tasks: TaskMap, feed: DecisionFeed, history: HistorySink | None = None,
        dedupe: Deduper | None = None, log_decisions: bool = True, gateway_id: str = "", anonymous_max_priority: int = 5,
    ) -> None:
        self.admission = admission
        self.planner = planner
        self.dispatcher = dispatcher
        self.state = state
        self.metrics = metrics
        self.tasks = tasks
        self.feed = feed
        self.history = history  # every decision, kept (gateway/history); record() never blocks
        self.dedupe = dedupe  # the same (sender, messageId) answered once
        self.log_decisions = log_decisions
        self.gateway_id = gateway_id
        self.routes = RouteSummaries()  # each decision's route summary, made once per remembered decision
        self.anonymous_max_priority = anonymous_max_priority  # callers without a client (auth off)
        self.learner = admission.learner  # learned decisions by task, for their ratings (gateway/state/learning.py)

    def priority(self, view: MessageView) -> int:
        """The priority the message's legs take slots at: the message's, capped for its client."""
        return honoured_priority(view.priority, current_client.get(), self.anonymous_max_priority)

    def send(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None = None, *, target: str | None = None
    ) -> Awaitable[dict[str, Any]]:
        """SendMessage through the gateway; awaits to the JSON-RPC `result` (`{"task": ...}` or `{"message": ...}`)."""
        check_bound("message", message.get("messageId"))  # a peer gateway's assertion names this message
        if self.dedupe is not None and isinstance(message.get("messageId"), str):
            return self.dedupe.run(
                current_sender(), message["messageId"], lambda: self._send(message, configuration, target))
        return self._send(message, configuration, target)

    async def _send(self, message: dict[str, Any], configuration: Mapping[str, Any] | None, target: str | None
                    ) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            if tracing_active():  # else no span to enter and leave
                with span("mma2a.route", message_id=message.get("messageId"), parts=len(message.get("parts") or ())) as s:
                    message, view, decision = await self.admission.prepare(message, configuration, target)
                    if s is not None:
                        s.set_attribute("mma2a.modalities", [p.modality for p in decision.parts])
                        s.set_attribute("mma2a.targets", list(decision.targets()))
                        s.set_attribute("mma2a.rules", sorted({r for p in decision.parts for r in p.matched}))
            else:
                message, view, decision = await self.admission.prepare(message, configuration, target)
        except MMA2AError as exc:
            self.feed.record(message, [], f"refused {exc.code}: {exc.message}", refused=True)
            self.remember_refusal(message, exc, t0)
            raise
        route = self.routes.of(decision)  # one per request: the answer, the task record and the feed share it
        try:
            result = await self.execute(message, configuration, decision, route, self.priority(view))
        except Overloaded as exc:
            self.remember_shed(message, view, decision, route, exc, t0)
            raise
        except asyncio.CancelledError:  # (a gRPC call's task, cancelled as its client goes)
            self.remember_gone(message, view, decision, route, t0)
            raise
        except (AgentRPCError, DispatchError):  # the agent failed the call: a bad outcome for a learned choice
            self.learned_failure(view, decision)
            raise
        self.metrics.request_seconds.observe(time.perf_counter() - t0)
        task = result.get("task")
        outcome = str((task.get("status") or {}).get("state", "")) if task is not None else "message"
        encoded = self.routes.encoded(route)
        self.feed.record(message, route, outcome, route_json=encoded if encoded.__class__ is bytes else None)
        self.remember(view, decision, outcome, t0)
        if task is not None and self.learner is not None and self.state.snapshot.learns:  # for its ratings
            self.learned_task(view, decision, str(task.get("id", "")))
            self.learned_outcome(task)
        return result

    def learned_task(self, view: MessageView, decision: RouteDecision, task_id: str) -> None:
        """A task of a decision that learned routing made, noted under its id for the ratings its client may give
        (a no-op when the rules do not learn or no part was learned). Call it before the client can see the id."""
        if self.learner is not None and self.state.snapshot.learns:
            self.learner.note(task_id, view, decision, current_sender())

    def learned_outcome(self, task: Mapping[str, Any]) -> None:
        """A noted task's answer as an outcome: failed or rejected (an agent's error, a timeout, a refusal), each
        agent whose leg failed is rated 0, with no call from its client (a no-op for any other state)."""
        if self.learner is not None and (task.get("status") or {}).get("state") in FAILED_STATES:
            self.learner.outcome(str(task.get("id", "")), task, current_sender())

    def learned_failure(self, view: MessageView, decision: RouteDecision) -> None:
        """A learned decision whose call failed with no task (an agent's JSON-RPC error, an agent down or timed out):
        each agent of its learned parts rated 0."""
        if self.learner is not None and self.state.snapshot.learns:
            self.learner.failed(view, decision, current_sender())

    def remember(self, view: MessageView, decision: RouteDecision, outcome: str, t0: float) -> None:
        """The decision and its outcome to the history (a no-op without one)."""
        if self.history is not None:
            self.history.record(DecisionRecord(view.message_id, time.time(), current_sender(), view.parts, decision.parts,
                                               outcome, time.perf_counter() - t0, view.receivers,
                                               decision.explanation.parts))

    def remember_shed(self, message: dict[str, Any], view: MessageView, decision: RouteDecision,
                      route: list[dict[str, Any]], exc: Overloaded, t0: float) -> None:
        """A message shed under overload: counted, to the feed and the history (outcome `shed`), and noted for the
        binding that answers it (503 + Retry-After)."""
        note_shed(exc)
        self._shed_recorded(message, view, decision, route, exc, t0)

    def remember_gone(self, message: dict[str, Any], view: MessageView, decision: RouteDecision,
                      route: list[dict[str, Any]], t0: float) -> None:
        """The request's task was cancelled: a leg of it let go unsent because its client went (an SSE stream's task
        and a gRPC call's are cancelled by their servers as their clients go) is recorded as shed, as JSON-RPC's and
        REST's are (once the client's link says it went: a gRPC call's says so as the cancel leaves the call)."""
        gone = gone_unsent()
        if gone is not None:
            link, exc = gone
            link.if_gone(lambda: self._shed_recorded(message, view, decision, route, exc, t0))

    def _shed_recorded(self, message: dict[str, Any], view: MessageView, decision: RouteDecision,
                       route: list[dict[str, Any]], exc: Overloaded, t0: float) -> None:
        self.metrics.requests.labels("shed").inc()
        self.feed.record(message, route, f"shed: {exc.message}")
        self.remember(view, decision, f"shed {exc.why}: {exc.message}", t0)

    def remember_refusal(self, message: dict[str, Any], exc: MMA2AError, t0: float) -> None:
        """A refused message to the history, with the parts it declared."""
        if self.history is not None:
            self.history.record(DecisionRecord(str(message.get("messageId", "")), time.time(), current_sender(),
                                               refused_parts(message), (), f"refused {exc.code}: {exc.message}",
                                               time.perf_counter() - t0))

    def execute(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None, decision: RouteDecision,
        route: list[dict[str, Any]] | None = None, priority: int = 5,
    ) -> Awaitable[dict[str, Any]]:
        """Adapt, dispatch and aggregate a decided message; then fit the reply to the accepted output modes.
        `route`: the decision's `route_summary` if the caller has made it (the exchange notes what the legs
        did in it: parts adapted, parts a transform emptied); `priority`: the one its legs take slots at.
        Raises `Overloaded` when its only leg, or every leg of a fan-out, was shed."""
        route = route if route is not None else self.routes.of(decision)
        accepted = (configuration or {}).get("acceptedOutputModes") or []
        if not accepted:  # nothing to fit: the legs' own coroutine, no frame around it
            return self._execute(message, configuration, decision, route, priority)
        return self._fitted(message, configuration, decision, route, accepted, priority)

    async def _fitted(self, message: dict[str, Any], configuration: Mapping[str, Any] | None, decision: RouteDecision,
                      route: list[dict[str, Any]], accepted: list[str], priority: int) -> dict[str, Any]:
        result = await self._execute(message, configuration, decision, route, priority)
        client = current_client.get()
        await adapt_outputs(result, accepted, self.state.snapshot,
                            lambda part, via: self.planner.transform(part, via, message, priority),
                            client.agents if client is not None else None)
        return result

    async def shed_as_failed(self, leg: Leg, message: dict[str, Any], configuration: Mapping[str, Any] | None,
                              decision: RouteDecision, priority: int, shed: list[Overloaded]) -> LegResult:
        """One leg of a fan-out: a shed leg fails alone (noted in `shed`), the others go on. Cancelled (a gRPC call's
        fan-out, as its client goes): a leg its client's leaving let go unsent is noted in `shed` too, for the request
        to record (each leg runs in a task of its own, whose context the request never sees)."""
        try:
            return await self.dispatcher.dispatch(leg, message, configuration, decision, priority=priority)
        except Overloaded as exc:
            shed.append(exc)
            return LegResult(leg.agent, error=exc.message)
        except asyncio.CancelledError:
            if (gone := gone_leg.get()) is not None:
                shed.append(gone)
            raise

    async def _execute(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None, decision: RouteDecision,
        route: list[dict[str, Any]], priority: int = 5,
    ) -> dict[str, Any]:
        if self.log_decisions:
            log.info("decision", extra={"decision": {"messageId": decision.message_id, "route": route}})
        if all(pr.dropped for pr in decision.parts):
            reasons = "; ".join(f"part {pr.index}: {pr.dropped}" for pr in decision.parts)
            self.metrics.requests.labels("dropped").inc()
            return {"task": failed_task(f"dropped by rule: {reasons}", message=message, state="TASK_STATE_REJECTED", route=route)}
        try:
            legs, route = sendable(await self.planner.legs(message, decision, priority), route)
        except Overloaded:
            raise
        except MMA2AError as exc:
            self.metrics.requests.labels("failed").inc()
            return {"task": failed_task(f"transform failed: {exc.message}", message=message, route=route)}
        if not legs:  # every part was emptied by its transform: nothing to answer, and nothing failed
            self.metrics.requests.labels("ok").inc()
            reasons = "; ".join(f"part {e['index']}: {o['reason']}" for e in route for o in e.get("outcome") or [])
            return {"task": failed_task(f"nothing left to send: {reasons}", message=message, state="TASK_STATE_COMPLETED",
                                        route=route)}
        route = record_adaptations(route, legs)
        passthrough = len(legs) == 1 and is_direct(decision)
        dispatch = self.dispatcher.dispatch
        if len(legs) == 1:  # no task to spawn for one leg
            results = [await dispatch(legs[0], message, configuration, decision, passthrough=passthrough,
                                      priority=priority)]
        else:
            shed: list[Overloaded] = []
            try:
                results = list(await asyncio.gather(*(self.shed_as_failed(leg, message, configuration, decision,
                                                                           priority, shed) for leg in legs)))
            except asyncio.CancelledError:  # (a gRPC call's, as its client goes): `remember_gone` records the message
                if gone := [exc for exc in shed if exc.why == "client_gone"]:  # shed, as one leg's would be
                    gone_leg.set(gone[0])
                raise
            if len(shed) == len(legs):  # every leg shed: the message is, answered 503 as one leg's would be
                raise shed[0]
        if len(results) == 1:
            res = results[0]
            if res.error is not None:
                self.metrics.requests.labels("failed").inc()
                failed = failed_task(res.error, message=message, route=route)
                self.tasks.put(TaskRecord(failed["id"], [], aggregate=failed, route=route, owner=current_sender()))
                await self.tasks.flush(failed["id"])  # in a cluster: stored before the client can ask another gateway
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
                self.tasks.put_leg(task["id"], res.agent, task.get("contextId"), self.routes.encoded(route),
                                   current_sender())
                await self.tasks.flush(task["id"])
            return result
        task = aggregate(results, message=message, route=route)
        state = task["status"]["state"]
        self.metrics.requests.labels("failed" if state == FAILED else "ok").inc()
        legs_ = [DownstreamTask(r.agent, r.task["id"], r.task.get("contextId")) for r in results if r.task]
        self.tasks.put(TaskRecord(task["id"], legs_, aggregate=task, route=route, owner=current_sender()))
        await self.tasks.flush(task["id"])
        return {"task": task}
