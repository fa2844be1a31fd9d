"""SendStreamingMessage: one target that streams is streamed through as it is; a fan-out streams
each leg's artifacts as the leg finishes, then the aggregate's final status; anything else is
answered as one result. A stream that breaks before its first event falls back to SendMessage."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from ... import client_link
from ...errors import AgentRPCError, DispatchError, MMA2AError, Overloaded, UnsupportedOperation
from ...ext import EXTENSION_URI
from ...routing import RouteDecision
from ...view import MessageView
from ..access.budgets import ClientCounts
from ..access.clients import current_sender
from ..access.federation import check_bound
from ..downstream.directory import AgentEntry
from ..downstream.overload import AgentSlots
from ..history.record import DecisionRecord, PartSummary
from ..state.aggregate import CANCELED, FAILED, WORKING, LegResult, aggregate, agent_text_message, artifacts_of, failed_task, now_iso
from ..state.tasks import DownstreamTask, TaskRecord
from .exchange import Exchange, outcome_of
from .legs import Leg, record_adaptations, sendable

log = logging.getLogger("mma2a.gateway.stages.streaming")


def _streams(card: Mapping[str, Any]) -> bool:
    return bool((card.get("capabilities") or {}).get("streaming"))


class Streaming:
    """The streaming form of an exchange, over the same stages."""

    def __init__(self, exchange: Exchange, *, detached_per_client: int = 64) -> None:
        self.exchange = exchange
        # fan-outs a client left running (its stream closed before the legs answered), at most this many per client;
        # past it, the one its client leaves is cancelled (as streams are bounded by the client's stream slots)
        self.detached_per_client = detached_per_client
        self.detached = ClientCounts()  # in a cluster with the other gateways' (detached_per_client is on the sum)
        self.admission = exchange.admission
        self.planner = exchange.planner
        self.dispatcher = exchange.dispatcher
        self.caller = exchange.dispatcher.caller
        self.tasks = exchange.tasks
        self._fanning: set[asyncio.Task[None]] = set()  # fan-outs whose legs run on (their client may have gone)

    async def send_stream(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None = None, *, target: str | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """SendStreamingMessage: one target streams through as it is; a fan-out streams each leg's
        artifacts as the leg finishes, then the aggregate's final status."""
        t0 = time.perf_counter()
        try:
            check_bound("message", message.get("messageId"))  # a peer gateway's assertion names this message
            message, view, decision = await self.admission.prepare(message, configuration, target)
            if target is not None and not _streams(self.caller.directory.get(target).card):
                # `/agents/{name}` publishes the agent's card, whose `streaming` is false: refused as the agent refuses it
                raise UnsupportedOperation(f"agent {target} does not declare capabilities.streaming: send SendMessage, "
                                           "or stream through the gateway's root", data={"agent": target})
        except MMA2AError as exc:
            self.exchange.remember_refusal(message, exc, t0)
            raise
        route = self.exchange.routes.of(decision)
        priority = self.exchange.priority(view)
        targets = decision.targets()
        dropped = any(pr.dropped for pr in decision.parts)
        if len(targets) > 1 and not dropped and not (configuration or {}).get("acceptedOutputModes"):
            async for event in self._fan_out(message, configuration, view, decision, route, priority):
                yield event
            return
        directory = self.caller.directory
        single = len(targets) == 1 and not dropped and not any(t.via for pr in decision.parts for t in pr.targets)
        if not single or not _streams(directory.get(targets[0]).card):
            try:
                result = await self.exchange.execute(message, configuration, decision, route, priority)
            except Overloaded as exc:
                self.exchange.remember_shed(message, view, decision, route, exc, t0)
                raise
            except asyncio.CancelledError:  # (cancelled by its server as its client goes)
                self.exchange.remember_gone(message, view, decision, route, t0)
                raise
            except (AgentRPCError, DispatchError):  # the agent failed the call: a bad outcome for a learned choice
                self.exchange.learned_failure(view, decision)
                raise
            self.exchange.remember(view, decision, outcome_of(result), t0)
            if self.exchange.learner is not None and self.exchange.state.snapshot.learns:
                self._learned(view, decision, result)
            yield result
            return
        legs = await self.planner.legs(message, decision, priority)
        route = record_adaptations(route, legs)
        leg = legs[0]
        entry = directory.get(leg.agent)
        params: dict[str, Any] = {"message": self.planner.leg_message(message, leg, entry, priority)}
        if configuration:
            params["configuration"] = dict(configuration)
        try:  # a stream holds one of the agent's slots while it is open, as a call does while it is answered
            slots, waiting = self.caller.slot(entry, priority)
            if waiting is not None:
                await waiting
        except Overloaded as exc:
            self.exchange.remember_shed(message, view, decision, route, exc, t0)
            raise
        except asyncio.CancelledError:  # (cancelled by its server as its client goes)
            self.exchange.remember_gone(message, view, decision, route, t0)
            raise
        async for event in self._through(message, configuration, decision, route, leg, entry, params, t0, view,
                                         priority, slots):
            yield event

    async def _through(self, message: dict[str, Any], configuration: Mapping[str, Any] | None, decision: RouteDecision,
                       route: list[dict[str, Any]], leg: Leg, entry: AgentEntry, params: dict[str, Any], t0: float,
                       view: MessageView, priority: int, slots: AgentSlots | None) -> AsyncIterator[dict[str, Any]]:
        """The one agent's stream, passed through as it comes, holding the agent's slot `slots` (given back when it
        ends, or before the fallback to SendMessage, which takes its own)."""
        directory = self.caller.directory
        recorded = sent = False
        tid: str | None = None
        outcome = "unknown"  # the last state the stream reported
        with entry.in_flight():
            try:
                async for event in self.caller.stream(entry, "SendStreamingMessage", params,
                                                      coding=self.caller.coding(entry)):
                    if not recorded and isinstance(event, dict):
                        first = event.get("task") or event.get("statusUpdate") or {}
                        tid = first.get("id") if "task" in event else first.get("taskId")
                        if tid:
                            self.tasks.put(TaskRecord(tid, [DownstreamTask(leg.agent, tid, first.get("contextId"))],
                                                      route=route, owner=current_sender()))
                            await self.tasks.flush(tid)  # in a cluster: stored before the client sees the id
                            self.exchange.learned_task(view, decision, tid)  # before the client can rate it
                            recorded = True
                    sent = True
                    outcome = outcome_of(event) or outcome
                    yield event
            except AgentRPCError:
                outcome = FAILED
                if tid is None:  # refused before any task: no task to rate, a bad outcome all the same
                    self.exchange.learned_failure(view, decision)
                raise
            except DispatchError as exc:
                directory.mark(entry.name, ok=False, error=exc.described)
                if sent:  # the stream broke midway: say so on the task the client already has
                    outcome = FAILED
                    yield {"task": failed_task(exc.message, message=message, task_id=tid, route=route)}
                else:  # nothing reached the client yet: the non-streaming path, with its failover
                    if slots is not None:
                        slots.release()
                        slots = None
                    try:
                        result = await self.exchange.execute(message, configuration, decision, priority=priority)
                    except (AgentRPCError, DispatchError):
                        outcome = FAILED
                        self.exchange.learned_failure(view, decision)
                        raise
                    outcome = outcome_of(result) or outcome
                    self._learned(view, decision, result)
                    yield result
            finally:
                if slots is not None:
                    slots.release()
                self.exchange.remember(view, decision, outcome, t0)
                if tid is not None:  # the stream's last state as the learned task's outcome (failed: rated 0)
                    self.exchange.learned_outcome({"id": tid, "status": {"state": outcome}})

    async def _fan_out(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None, view: MessageView, decision: RouteDecision,
        route: list[dict[str, Any]], priority: int,
    ) -> AsyncIterator[dict[str, Any]]:
        """The task is recorded (working, no legs yet) before its id reaches the client, and its legs run in a task of
        their own: a client whose stream drops finds the task with GetTask, CancelTask or SubscribeToTask on any
        gateway, and its outcome is recorded all the same."""
        tid, ctx = f"gw-{uuid.uuid4()}", message.get("contextId") or str(uuid.uuid4())
        working = {"id": tid, "contextId": ctx, "status": {"state": WORKING, "timestamp": now_iso()},
                   "history": [message], "metadata": {EXTENSION_URI: {"route": route}}}
        self.tasks.put(TaskRecord(tid, [], aggregate=working, route=route, owner=current_sender()))
        await self.tasks.flush(tid)  # in a cluster: stored before the client sees the id
        self.exchange.learned_task(view, decision, tid)  # before the client can rate it
        events: asyncio.Queue[dict[str, Any] | Exception | None] = asyncio.Queue()
        legs = asyncio.create_task(self._fan_out_legs(message, configuration, decision, route, priority, tid, ctx,
                                                      events.put_nowait))
        self._fanning.add(legs)
        legs.add_done_callback(self._fanning.discard)
        try:
            yield {"task": working}
            while (event := await events.get()) is not None:
                if isinstance(event, Exception):
                    raise event
                yield event
        finally:
            if not legs.done():  # the client is gone: the legs run on, within the client's bound
                self._detach(legs, working, decision, route)

    def _learned(self, view: MessageView, decision: RouteDecision, result: Mapping[str, Any]) -> None:
        """A learned decision answered as one result: its task noted for ratings, its outcome counted."""
        task = result.get("task")
        if isinstance(task, Mapping):
            self.exchange.learned_task(view, decision, str(task.get("id", "")))
            self.exchange.learned_outcome(task)

    def _detach(self, legs: asyncio.Task[None], working: dict[str, Any], decision: RouteDecision,
                route: list[dict[str, Any]]) -> None:
        """Leave a fan-out's legs running for a client that closed its stream, if it has fewer than
        `detached_per_client` such fan-outs; otherwise cancel them and record the task as canceled, saying why."""
        owner = current_sender()
        sender = owner or ""  # (no client known: one count for all of them)
        over = self.detached.claim(sender, self.detached_per_client)
        if over is None:
            legs.add_done_callback(lambda _: self.detached.remove(sender))
            return
        held = sum(over)
        legs.cancel()
        why = (f"canceled: the client closed its stream with {held} fan-outs of its own still running "
               f"(limits.max_response_streams_per_client: {self.detached_per_client})")
        canceled = {**working, "status": {"state": CANCELED, "timestamp": now_iso(),
                                          "message": agent_text_message(why, task_id=working["id"],
                                                                        context_id=working["contextId"])}}
        self.tasks.put(TaskRecord(working["id"], [], aggregate=canceled, route=route, owner=owner))
        self.exchange.metrics.requests.labels("canceled").inc()
        self._remember_fan_out(decision, CANCELED)
        log.warning("fan-out %s of %s %s", working["id"], sender, why)

    def _remember_fan_out(self, decision: RouteDecision, outcome: str) -> None:
        """A fan-out's end to the history (no view here: the modalities as routed)."""
        history = self.exchange.history
        if history is not None:
            history.record(DecisionRecord(decision.message_id, time.time(), current_sender(),
                                          [PartSummary(p.index, p.modality) for p in decision.parts], decision.parts,
                                          outcome, 0.0, (), decision.explanation.parts))

    async def _fan_out_legs(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None, decision: RouteDecision,
        route: list[dict[str, Any]], priority: int, tid: str, ctx: str,
        emit: Callable[[dict[str, Any] | Exception | None], None],
    ) -> None:
        """A fan-out's legs, each leg's artifacts emitted as it finishes, then the aggregate recorded and its final
        status emitted (None: the end; an exception: the stream's error), whether or not anyone still reads it.
        Its legs are the task's, whose id the client was given, not the request's: they are not let go when the
        client's connection is (`client_link`; this task's own context)."""
        client_link.current.set(None)
        try:
            await self._legs_to_aggregate(message, configuration, decision, route, priority, tid, ctx, emit)
        except Exception as exc:  # noqa: BLE001 - the client's stream raises it (if it is still read)
            log.warning("fan-out %s failed: %s", tid, exc)
            emit(exc)
        finally:
            emit(None)

    async def _legs_to_aggregate(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None, decision: RouteDecision,
        route: list[dict[str, Any]], priority: int, tid: str, ctx: str,
        emit: Callable[[dict[str, Any] | Exception | None], None],
    ) -> None:
        try:
            legs, route = sendable(await self.planner.legs(message, decision, priority), route)
        except MMA2AError as exc:
            failed = failed_task(f"transform failed: {exc.message}", message=message, task_id=tid, route=route)
            failed["contextId"] = ctx
            self.tasks.put(TaskRecord(tid, [], aggregate=failed, route=route, owner=current_sender()))
            await self.tasks.flush(tid)
            self.exchange.learned_outcome(failed)  # as SendMessage rates a failed transform
            emit({"statusUpdate": {"taskId": tid, "contextId": ctx, "status": failed["status"]}})
            return
        route = record_adaptations(route, legs)
        results: list[LegResult] = []
        shed: list[Overloaded] = []  # each leg takes its agent's slot; a shed leg fails alone
        for done in asyncio.as_completed([self.exchange.shed_as_failed(leg, message, configuration, decision, priority,
                                                                       shed) for leg in legs]):
            res = await done
            results.append(res)
            for art in artifacts_of(res):
                emit({"artifactUpdate": {"taskId": tid, "contextId": ctx, "artifact": art, "lastChunk": True}})
        task = aggregate(results, message=message, route=route)
        task["id"], task["contextId"] = tid, ctx
        for m in [task["status"].get("message")] if task["status"].get("message") else []:
            m["taskId"], m["contextId"] = tid, ctx
        self.tasks.put(TaskRecord(tid, [DownstreamTask(r.agent, r.task["id"], r.task.get("contextId"))
                                        for r in results if r.task], aggregate=task, route=route, owner=current_sender()))
        await self.tasks.flush(tid)
        self.exchange.feed.record(message, route, str(task["status"]["state"]))
        self.exchange.learned_outcome(task)  # each failed leg of a learned fan-out: rated 0
        self._remember_fan_out(decision, str(task["status"]["state"]))
        emit({"statusUpdate": {"taskId": tid, "contextId": ctx, "status": task["status"],
                               "metadata": task["metadata"]}})
