"""Task operations through the gateway: GetTask, CancelTask and SubscribeToTask on the gateway's
task map — one agent's task answered by that agent, a fan-out's aggregate rebuilt from its legs.

A task belongs to the client that created it: another client gets the answer an unknown id gets
(`TaskNotFound`), so ids cannot even be probed. With an identified caller, an id the gateway does not
remember is not passed on to `/agents/{name}/` either (the agent cannot tell its callers apart)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from ...errors import AgentRPCError, DispatchError, InvalidParams, MMA2AError, TaskNotCancelable, TaskNotFound
from ...ext import EXTENSION_URI
from ..access.clients import current_sender
from ..access.federation import check_bound
from ..state.aggregate import TERMINAL, LegResult, aggregate
from ..state.tasks import DownstreamTask, TaskMap, TaskRecord
from .calls import AgentCaller

FOLLOW_S = 300.0  # SubscribeToTask on a fan-out in progress follows it this long at most (then ends; subscribe again)
FOLLOW_POLL_S = 0.1


def cut_history(task: dict[str, Any], history_length: int | None) -> dict[str, Any]:
    """A task with at most the last `history_length` messages of its history (0: none; None: all)."""
    history = task.get("history")
    if history_length is None or not isinstance(history, list) or len(history) <= history_length:
        return task
    out = {k: v for k, v in task.items() if k != "history"}
    if history_length > 0:
        out["history"] = history[-history_length:]
    return out


class TaskOperations:
    """Get, cancel and subscribe to tasks the gateway handed out (or, on `/agents/{name}/`, an agent's own)."""

    def __init__(self, tasks: TaskMap, caller: AgentCaller) -> None:
        self.tasks = tasks
        self.caller = caller
        self.directory = caller.directory

    def task_record(self, task_id: str, target: str | None = None) -> TaskRecord:
        """The gateway's record of a task the caller owns; on `/agents/{name}/`, when the caller has no identity
        (auth off), a task the gateway never saw is the agent's to answer for (it may know it, or answer its own
        TaskNotFound)."""
        check_bound("task", task_id)  # a peer gateway's assertion names this task
        caller = current_sender()
        rec = self.tasks.find(task_id)
        if rec is None and target is not None and caller is None:
            self.directory.get(target)
            return TaskRecord(task_id, [DownstreamTask(target, task_id)])
        if rec is None or rec.owner != caller:  # another client's task is answered as an unknown one
            raise TaskNotFound(f"task {task_id!r} not found", field="id")
        if target is not None and all(leg.agent != target for leg in rec.legs):
            raise TaskNotFound(f"task {task_id!r} not found", field="id")
        return rec

    async def _agent_task(self, leg: DownstreamTask, method: str, params: dict[str, Any],
                          route: list[dict[str, Any]], *, empty_route: bool) -> dict[str, Any]:
        """One agent's answer to a task call, with the gateway's route added to its metadata
        (an empty route too when `empty_route`)."""
        task = await self.caller.call(self.directory.get(leg.agent), method, params)
        if not isinstance(task, dict):
            raise DispatchError(f"agent {leg.agent} answered {method} with {type(task).__name__}, not a task",
                                data={"agent": leg.agent})
        if route or empty_route:
            meta = task.setdefault("metadata", {})
            meta[EXTENSION_URI] = {**(meta.get(EXTENSION_URI) or {}), "route": route}
        return task

    async def get_task(self, task_id: str, history_length: int | None = None, *, target: str | None = None
                       ) -> dict[str, Any]:
        await self.tasks.fetch(task_id)  # in a cluster: a task made by another gateway
        if history_length is not None and history_length < 0 and (target is None or current_sender() is not None) \
                and self.tasks.find(task_id) is None:
            # params are checked before the task is looked up, as an agent checks them, wherever the gateway answers
            # for a task it does not remember itself (at the root; on /agents/{name}/ to an identified caller)
            raise InvalidParams("history length must be non-negative", field="params.historyLength")
        rec = self.task_record(task_id, target)
        if rec.fanned_out and history_length is not None and history_length < 0:
            raise InvalidParams("history length must be non-negative", field="params.historyLength")
        return await self.current(rec, history_length)

    async def current(self, rec: TaskRecord, history_length: int | None = None) -> dict[str, Any]:
        """The task as the gateway shows it now: one agent's task from that agent, a fan-out's aggregate rebuilt from
        its legs (no ownership check: the caller has made it; push notifications use this too)."""
        if not rec.fanned_out:
            leg = rec.legs[0]
            params: dict[str, Any] = {"id": leg.task_id}
            if history_length is not None:
                params["historyLength"] = history_length
            return await self._agent_task(leg, "GetTask", params, rec.route, empty_route=True)
        legs = []
        for leg in rec.legs:
            try:
                task = await self.caller.call(self.directory.get(leg.agent), "GetTask", {"id": leg.task_id})
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
        await self.tasks.fetch(task_id)
        rec = self.task_record(task_id, target)
        if rec.fanned_out and not rec.legs:  # a fan-out whose legs are not all answered yet (their ids unknown)
            state = ((rec.aggregate or {}).get("status") or {}).get("state")
            raise TaskNotCancelable(f"task {task_id!r} is {state}: a fan-out can be canceled once its agents have "
                                    "taken it (their task ids are not known yet)", field="id")
        if not rec.fanned_out:  # one agent's task: its answer (or its error) is the answer
            return await self._agent_task(rec.legs[0], "CancelTask", {"id": rec.legs[0].task_id}, rec.route,
                                          empty_route=False)
        errors = []
        for leg in rec.legs:
            try:
                await self.caller.call(self.directory.get(leg.agent), "CancelTask", {"id": leg.task_id})
            except AgentRPCError as exc:
                errors.append(exc)
        if errors and len(errors) == len(rec.legs):
            raise errors[0]
        return await self.get_task(task_id)

    async def _follow_fan_out(self, task_id: str, task: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """A fan-out in progress (on this gateway or another of the cluster, whose record this one's map reads on
        from the cluster at each look): its final task once recorded, read from the map every `FOLLOW_POLL_S` for at most `FOLLOW_S`."""
        deadline = time.monotonic() + FOLLOW_S
        while time.monotonic() < deadline:
            await asyncio.sleep(FOLLOW_POLL_S)
            await self.tasks.fetch(task_id)  # in a cluster: its outcome recorded by the gateway running it
            rec = self.tasks.find(task_id)
            if rec is None:
                return
            if rec.legs or ((rec.aggregate or {}).get("status") or {}).get("state") in TERMINAL:
                yield {"task": cut_history(rec.aggregate or task, None)}
                return

    async def subscribe(self, task_id: str, *, target: str | None = None) -> AsyncIterator[dict[str, Any]]:
        await self.tasks.fetch(task_id)
        rec = self.task_record(task_id, target)
        if rec.fanned_out or not rec.legs:
            task = await self.get_task(task_id)
            yield {"task": task}
            if rec.fanned_out and not rec.legs:  # in progress: its outcome, once the gateway running it records it
                async for event in self._follow_fan_out(task_id, task):
                    yield event
            return
        leg = rec.legs[0]
        async for event in self.caller.stream(self.directory.get(leg.agent), "SubscribeToTask", {"id": leg.task_id}):
            yield event
