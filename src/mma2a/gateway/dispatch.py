"""Dispatch: one leg to its agent — through durable delivery when the cluster keeps it, else one
call, and on an unreachable agent another member of its pool (`faults.fail_over`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..errors import DispatchError
from ..routing import RouteDecision
from .admission import Admission
from .aggregate import LegResult
from .calls import AgentCaller
from .directory import AgentDirectory
from .hooks import ClusterHooks
from .legs import Leg, LegPlanner
from .metrics import GatewayMetrics
from .tracing import span
from .transport import AgentRPCError

FailOver = Callable[
    ["Dispatcher", Leg, dict[str, Any], Mapping[str, Any] | None, RouteDecision, DispatchError],
    Awaitable[LegResult | None],
]
"""Another pool member for a leg whose agent is gone (`faults.fail_over`), or None."""


class Dispatcher:
    """Sends legs to agents and turns each answer into a `LegResult`."""

    def __init__(self, *, directory: AgentDirectory, caller: AgentCaller, planner: LegPlanner, admission: Admission,
                 metrics: GatewayMetrics, cluster: ClusterHooks, failover: FailOver | None = None) -> None:
        self.directory = directory
        self.caller = caller
        self.planner = planner
        self.admission = admission
        self.metrics = metrics
        self.cluster = cluster
        self.failover = failover  # another pool member when an agent is gone

    def reroute(self, message: dict[str, Any], configuration: Mapping[str, Any] | None) -> RouteDecision:
        """Route `message` afresh (the directory as it is now, no receiver named)."""
        return self.admission.route(self.admission.view(message, configuration, None))

    async def dispatch(
        self, leg: Leg, message: dict[str, Any], configuration: Mapping[str, Any] | None,
        decision: RouteDecision | None = None, *, passthrough: bool = False,
    ) -> LegResult:
        """One leg to its agent. With `passthrough` (the exchange is the agent's alone) an agent's JSON-RPC
        error is raised as it came, instead of becoming a failed leg of an aggregate."""
        entry = self.directory.get(leg.agent)
        params: dict[str, Any] = {"message": self.planner.leg_message(message, leg, entry)}
        if configuration:
            params["configuration"] = dict(configuration)
        if self.cluster.durable_for(leg.agent):
            return await self.cluster.deliver(leg.agent, params)
        try:
            with span("mma2a.dispatch", kind="client", agent=leg.agent, parts=len(leg.parts)):
                result = await self.caller.call(entry, "SendMessage", params)
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
