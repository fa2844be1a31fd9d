"""Legs: what each agent receives for one message — its parts, run through their transformer
chains and fitted to its profiles — and the route summary that records why."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ..._kept import kept
from ...errors import DispatchError, MMA2AError
from ...ext import EXTENSION_URI, MessageExtension, downgrade_message, read_message, read_part, write_message
from ...modality import modality_matches
from ...routing import PartRoute, RouteDecision
from ...signing import ROUTED, pass_on_route
from ..downstream.directory import AgentDirectory, AgentEntry
from ..observe.metrics import GatewayMetrics
from ..observe.tracing import span
from ..state.tasks import TaskMap
from .adapt import Adaptation, PartAdapter
from .calls import AgentCaller, declares, input_modes


@dataclass
class Leg:
    """What one agent receives for one message: its parts (after transforms) and why."""

    agent: str
    parts: list[tuple[int, dict[str, Any]]]
    adapted: list[Adaptation] = dataclasses.field(default_factory=list)  # parts fitted to the agent's profiles
    skipped: list[dict[str, Any]] = dataclasses.field(default_factory=list)


class EmptyTransformOutput(DispatchError):
    """A transformer answered with nothing (a recording without speech): the part is dropped and the
    reason recorded in the route; the task goes on with the other parts, never fails for it."""


def route_summary(decision: RouteDecision) -> list[dict[str, Any]]:
    """The per-part route as recorded in task metadata and logs."""
    out = []
    for pr, why in zip(decision.parts, decision.explanation.parts):
        entry: dict[str, Any] = {
            "index": pr.index,
            "modality": pr.modality,
            "matched": list(pr.matched),
            "targets": [t.agent for t in pr.targets],
            "via": [[{"agent": s.agent, "from": s.from_modality, "to": s.to_modality} for s in t.via] for t in pr.targets],
            "actions": list(pr.actions),
            "dropped": pr.dropped,
            "bottleneck": pr.bottleneck,
        }
        if why.capability:  # a capability choice: the runner-up and why it lost (both agents the client may use)
            runner_up = why.capability[-1].runner_up()
            if runner_up is not None:
                entry["runnerUp"] = runner_up
        out.append(entry)
    return out


class RouteSummaries:
    """`route_summary` per decision, made once for decisions that share their parts (the admission's remembered
    decisions do) and handed out as that one list to every request of them: read it, never change it in place
    (`sendable` and `record_adaptations` note what the legs did in a copy; the task map and the feed take its JSON
    from `encoded`, made once too). Keyed by the parts tuple itself: an entry holds it."""

    def __init__(self, capacity: int = 1024, max_parts: int = 4096) -> None:
        self.capacity = capacity
        self.max_parts = max_parts  # parts held in all: a summary of 64 parts is ~100 KB (docs/security.md S17-3)
        self._parts = 0
        self._known: dict[int, tuple[tuple[PartRoute, ...], list[dict[str, Any]], bytes]] = {}
        self._bytes: dict[int, tuple[list[dict[str, Any]], bytes]] = {}  # by the id of a list handed out

    def of(self, decision: RouteDecision) -> list[dict[str, Any]]:
        parts = decision.parts
        known = self._known.get(id(parts))
        if known is not None and known[0] is parts:
            return known[1]
        route = route_summary(decision)
        if len(self._bytes) >= self.capacity or self._parts + len(parts) > self.max_parts:
            self._known.clear()  # decisions made afresh (pools, sessions) never repeat: start again
            self._bytes.clear()
            self._parts = 0
        self._parts += len(parts)
        encoded = kept(orjson.dumps(route))  # kept while its decision is remembered: right-sized (`_kept`)
        self._known[id(parts)] = (parts, route, encoded)
        self._bytes[id(route)] = (route, encoded)
        return route

    def encoded(self, route: list[dict[str, Any]]) -> list[dict[str, Any]] | bytes:
        """`route` as JSON when it is a summary handed out by `of` (as made: never changed in place), else itself."""
        known = self._bytes.get(id(route))
        return known[1] if known is not None and known[0] is route else route


def _noted(route: list[dict[str, Any]], index: int, key: str, note: dict[str, Any]) -> list[dict[str, Any]]:
    """`route` with `note` added under `key` of part `index`'s entry: a copy of the list and of that entry (the
    summary handed out by `RouteSummaries.of` is shared by every request of its decision)."""
    out = list(route)
    for i, entry in enumerate(out):
        if entry["index"] == index:
            entry = out[i] = dict(entry)
            entry[key] = [*entry.get(key, ()), note]
    return out


def sendable(legs: list[Leg], route: list[dict[str, Any]]) -> tuple[list[Leg], list[dict[str, Any]]]:
    """The legs with something left to send, and `route` with each part a transform emptied noted in it (`outcome`:
    the reason, the part dropped; a new list when there is any to note, `route` itself is not changed)."""
    for leg in legs:
        for note in leg.skipped:
            route = _noted(route, note["index"], "outcome", {"agent": leg.agent, **note})
    return [leg for leg in legs if leg.parts], route


def record_adaptations(route: list[dict[str, Any]], legs: Sequence[Leg]) -> list[dict[str, Any]]:
    """`route` with each leg's recorded transforms added under the part they changed (a new list when there is any;
    `route` itself is not changed)."""
    for leg in legs:
        for a in leg.adapted:
            route = _noted(route, a.index, "adapted", a.to_json())
    return route


def is_direct(decision: RouteDecision) -> bool:
    """Every part goes as it is (no transform, nothing dropped): the exchange can be the agent's own."""
    for pr in decision.parts:  # (loops: no generators to make and resume, once a request)
        if pr.dropped:
            return False
        for target in pr.targets:
            if target.via:
                return False
    return True


class LegPlanner:
    """Turns a decided message into legs: transforms run, parts fitted, each agent's message written."""

    def __init__(self, *, directory: AgentDirectory, caller: AgentCaller, metrics: GatewayMetrics, tasks: TaskMap,
                 adapter: PartAdapter | None, gateway_id: str) -> None:
        self.directory = directory
        self.caller = caller
        self.metrics = metrics
        self.tasks = tasks
        self.adapter = adapter
        self.gateway_id = gateway_id

    async def transform(self, part: dict[str, Any], route_via: Sequence[Any], message: dict[str, Any],
                        priority: int = 5) -> dict[str, Any]:
        """Run a part through its chain of transformer agents, each step with a slot of the transformer's at the
        message's `priority`; returns the final part."""
        current = part
        for step in route_via:
            entry = self.directory.get(step.agent)
            msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [current]}
            if not declares(entry):
                msg = downgrade_message(msg, input_modes=input_modes(entry))
            t0 = time.perf_counter()
            with span("mma2a.transform", agent=step.agent, source=step.from_modality, goal=step.to_modality):
                result = await self.caller.call(entry, "SendMessage", {"message": msg}, priority=priority)
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

    async def legs(self, message: dict[str, Any], decision: RouteDecision, priority: int = 5) -> list[Leg]:
        """One leg per target agent, its parts in message order (transformed, at `priority`, and fitted)."""
        parts = message["parts"]
        by_agent: dict[str, Leg] = {}
        jobs = []
        for pr in decision.parts:
            for target in pr.targets:
                leg = by_agent.setdefault(target.agent, Leg(target.agent, []))
                if target.via:
                    jobs.append((leg, pr.index, self.transform(parts[pr.index], target.via, message, priority)))
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
            if len(leg.parts) > 1:  # (one part: in order, no key function to call)
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

    def leg_message(self, message: dict[str, Any], leg: Leg, entry: AgentEntry, priority: int = 9) -> dict[str, Any]:
        """The message one agent receives: its parts only; the extension kept only if its card declares it, its
        priority at most `priority` (the one the gateway honoured for the client)."""
        parts = [p for _, p in leg.parts]
        if not declares(entry):  # a plain message, made in one copy (the extension's fields left out)
            out = downgrade_message({**message, "parts": parts}, input_modes=input_modes(entry))
            self._own_task(out, leg)
            return out
        out = {k: v for k, v in message.items() if k != "parts"}
        out["parts"] = parts
        out["metadata"] = dict(message.get("metadata") or {})  # the leg's extension written in its own: the message's
        # kept as it came (another leg, or a failover's new route, reads it: it said this gateway had passed it on)
        self._own_task(out, leg)
        mext = read_message(message) or MessageExtension()
        via = (*mext.via, self.gateway_id) if self.gateway_id else mext.via
        routed = pass_on_route(message)  # a signed message: the intent consumed here stays verifiable downstream
        write_message(out, dataclasses.replace(mext, hops=mext.hops + 1, receivers=(), intent="auto", via=via,
                                               priority=min(mext.priority, priority)))
        if routed is not None:
            out["metadata"][EXTENSION_URI][ROUTED] = routed
        return out

    def _own_task(self, out: dict[str, Any], leg: Leg) -> None:
        """A follow-up (`taskId`): each agent continues its own task, or starts one."""
        if "taskId" in out:
            rec = self.tasks.find(out["taskId"])
            if rec is not None:
                mine = next((d for d in rec.legs if d.agent == leg.agent), None)
                if mine is None:
                    del out["taskId"]
                else:
                    out["taskId"] = mine.task_id


def _is_empty(part: dict[str, Any]) -> bool:
    if "text" in part:
        return not str(part.get("text") or "").strip()
    if "raw" in part:
        return not part.get("raw")
    return False


def _pick_part(result: Any, modality: str) -> dict[str, Any] | None:
    """The first part of a transformer's answer whose modality is the one asked for."""
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
