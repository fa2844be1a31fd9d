"""Pipeline stage: honour the client's `acceptedOutputModes` on the way back.

A reply part the client cannot take is run through the shortest chain of transformer
agents to a mode it accepts (an audio answer transcribed for a text-only client); when no
chain exists the part is kept and the task's (or message's) metadata says why it was not
converted (`unconvertedOutputs`, beside the route). A client limited to some agents
(`auth.clients[].agents`) gets chains of those agents only: `acceptedOutputModes` is no way
to use another agent (security round 4 #2).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ...errors import MMA2AError
from ...ext import EXTENSION_URI, read_part
from ...modality import accepts, parse_modality
from ...routing import Snapshot, TransformStep, plan_transforms

Transform = Callable[[dict[str, Any], Sequence[TransformStep]], Awaitable[dict[str, Any]]]


def _reply_parts(result: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(where, parts list) for every part list in a SendMessage result that the client will read."""
    out: list[tuple[str, list[dict[str, Any]]]] = []
    if "message" in result:
        out.append(("message", result["message"].setdefault("parts", [])))
    task = result.get("task")
    if task is not None:
        for i, art in enumerate(task.get("artifacts") or []):
            out.append((f"artifacts[{i}]", art.setdefault("parts", [])))
    return out


async def adapt_outputs(result: dict[str, Any], accepted: Sequence[str], snapshot: Snapshot, transform: Transform,
                        agents: frozenset[str] | None = None) -> None:
    """Convert, in place, every reply part whose modality `accepted` does not cover, through chains of `agents`
    only (None: any transformer)."""
    if not accepted:
        return
    goal_key = ("accepted-output", tuple(accepted))
    notes: list[dict[str, Any]] = []
    for where, parts in _reply_parts(result):
        for i, part in enumerate(parts):
            try:
                modality = parse_modality(read_part(part).modality or "application/octet-stream")
            except MMA2AError:
                continue
            if accepts(accepted, modality):
                continue
            plan = plan_transforms(snapshot, modality, lambda m: accepts(accepted, m), goal_key, agents)
            if plan is None:
                among = "" if agents is None else " among the agents this client may use (auth.clients[].agents)"
                notes.append({"part": f"{where}.parts[{i}]", "modality": str(modality),
                              "reason": f"no transformer chain from {modality} to any of {list(accepted)}{among}"})
                continue
            try:
                parts[i] = await transform(part, plan[0])
            except MMA2AError as exc:
                notes.append({"part": f"{where}.parts[{i}]", "modality": str(modality), "reason": exc.message})
    holder = result.get("task") if "task" in result else result.get("message")
    if notes and isinstance(holder, dict):
        meta = holder.setdefault("metadata", {})
        meta[EXTENSION_URI] = {**(meta.get(EXTENSION_URI) or {}), "unconvertedOutputs": notes}
