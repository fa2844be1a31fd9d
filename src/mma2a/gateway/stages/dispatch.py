"""Dispatch: one leg to its agent — through durable delivery when the cluster keeps it, else one
call — and, when the agent is gone, failover to another member of its pool."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ...errors import AgentRPCError, DispatchError, MMA2AError
from ...routing import RouteDecision
from ..access.clients import current_sender
from ..downstream.directory import AgentDirectory
from ..observe.metrics import GatewayMetrics
from ..observe.tracing import active as tracing_active
from ..observe.tracing import span
from ..state.aggregate import LegResult
from ..state.hooks import RouteHooks
from .admission import Admission
from .calls import AgentCaller
from .legs import Leg, LegPlanner

log = logging.getLogger("mma2a.gateway.faults")


def is_unreachable(exc: DispatchError) -> bool:
    """A failure that says the agent is gone (refused, reset, disconnected mid-request), not slow or wrong."""
    said = exc.described
    return " unreachable: " in said or "ClientOSError" in said or "Connection reset" in said


def failover_parts(decision: RouteDecision, agent: str) -> list[int] | None:
    """Indexes of the parts sent to `agent` when every one of them may go to another pool member, else None
    (the route came from `load_balance` or capability routing, never a broadcast, which already reached
    every member)."""
    indexes = []
    for pr in decision.parts:
        if agent not in pr.agents():
            continue
        if not any(a.startswith(("load_balance:", "capability")) for a in pr.actions) or len(pr.targets) != 1:
            return None
        if pr.targets[0].via:
            return None
        indexes.append(pr.index)
    return indexes or None


class Dispatcher:
    """Sends legs to agents and turns each answer into a `LegResult`."""

    def __init__(self, *, directory: AgentDirectory, caller: AgentCaller, planner: LegPlanner, admission: Admission,
                 metrics: GatewayMetrics, cluster: RouteHooks, failover: bool = False) -> None:
        self.directory = directory
        self.caller = caller
        self.planner = planner
        self.admission = admission
        self.metrics = metrics
        self.cluster = cluster  # durable delivery for the agents the cluster keeps it for
        self.failover = failover  # another pool member when an agent is gone

    async def dispatch(
        self, leg: Leg, message: dict[str, Any], configuration: Mapping[str, Any] | None,
        decision: RouteDecision | None = None, *, passthrough: bool = False, priority: int = 5,
    ) -> LegResult:
        """One leg to its agent, with one of its slots (`priority`: the message's, capped for its client; a leg
        that cannot have one raises `Overloaded`). With `passthrough` (the exchange is the agent's alone) an agent's
        JSON-RPC error is raised as it came, instead of becoming a failed leg of an aggregate."""
        entry = self.directory.get(leg.agent)
        params: dict[str, Any] = {"message": self.planner.leg_message(message, leg, entry, priority)}
        if configuration:
            params["configuration"] = dict(configuration)
        if self.cluster.durable_for(leg.agent):
            return await self.cluster.deliver(leg.agent, params, current_sender())
        try:
            if tracing_active():  # else no span to enter and leave
                with span("mma2a.dispatch", kind="client", agent=leg.agent, parts=len(leg.parts)):
                    result = await self.caller.call(entry, "SendMessage", params, priority=priority)
            else:
                result = await self.caller.call(entry, "SendMessage", params, priority=priority)
        except AgentRPCError as exc:
            if passthrough:
                raise
            return LegResult(leg.agent, error=f"agent error {exc.code}: {exc.message}")
        except DispatchError as exc:
            if self.failover and decision is not None:
                moved = await self.fail_over(leg, message, configuration, decision, exc, priority)
                if moved is not None:
                    return moved
            return LegResult(leg.agent, error=exc.message)
        if not isinstance(result, dict) or not ({"task", "message"} & result.keys()):
            return LegResult(leg.agent, error="agent answered with neither a task nor a message")
        return LegResult(leg.agent, result=result)

    async def fail_over(
        self, leg: Leg, message: dict[str, Any], configuration: Mapping[str, Any] | None, decision: RouteDecision,
        exc: DispatchError, priority: int = 5,
    ) -> LegResult | None:
        """Send a gone agent's leg to another member of its pool; None when that is not possible.

        The agent is ejected at once (the health check re-admits it when its card answers
        again), the message is routed afresh without it, and the leg's parts go to the one
        agent the new decision names. Repeats while members remain.
        """
        if not is_unreachable(exc):
            return None
        indexes = failover_parts(decision, leg.agent)
        if indexes is None:
            return None
        self.directory.mark(leg.agent, ok=False, error=exc.described, eject=True)
        try:
            new = self.admission.reroute(message, configuration)
        except MMA2AError:
            return None
        by_index = {pr.index: pr for pr in new.parts}
        agents = {t.agent for i in indexes if i in by_index for t in by_index[i].targets}
        if len(agents) != 1 or leg.agent in agents:
            return None
        other = agents.pop()
        log.warning("failover: %s is unreachable (%s); parts %s go to %s", leg.agent, exc.described, indexes, other)
        self.metrics.agent_errors.labels(leg.agent).inc()
        return await self.dispatch(Leg(other, leg.parts), message, configuration, new, priority=priority)
