"""Aggregation: several agents' results for one message become one A2A task.

Artifacts are named by their source agent; the task fails when any leg failed (its
reason in the status message), so nothing is lost silently.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ...ext import EXTENSION_URI

COMPLETED, FAILED, REJECTED = "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED"
INPUT_REQUIRED, WORKING, CANCELED = "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING", "TASK_STATE_CANCELED"
TERMINAL = frozenset({COMPLETED, FAILED, REJECTED, CANCELED})
_RANK = {FAILED: 0, REJECTED: 1, "TASK_STATE_AUTH_REQUIRED": 2, INPUT_REQUIRED: 3, WORKING: 4, "TASK_STATE_SUBMITTED": 5,
         CANCELED: 6, COMPLETED: 7}


@dataclass
class LegResult:
    """One agent's answer (a `{"task"|"message": ...}` result) or the reason it has none."""

    agent: str
    result: dict[str, Any] | None = None
    error: str | None = None

    @property
    def task(self) -> dict[str, Any] | None:
        return (self.result or {}).get("task")

    @property
    def state(self) -> str:
        if self.error is not None:
            return FAILED
        task = self.task
        if task is not None:
            return str((task.get("status") or {}).get("state", WORKING))
        return COMPLETED  # a direct Message answer is final


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def agent_text_message(text: str, *, task_id: str | None = None, context_id: str | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_AGENT", "parts": [{"text": text}]}
    if task_id:
        msg["taskId"] = task_id
    if context_id:
        msg["contextId"] = context_id
    return msg


def failed_task(reason: str, *, message: dict[str, Any] | None, task_id: str | None = None, state: str = FAILED,
                route: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A task that ended before or at dispatch (target down, all parts dropped), with the reason."""
    tid = task_id or f"gw-{uuid.uuid4()}"
    ctx = (message or {}).get("contextId") or str(uuid.uuid4())
    task: dict[str, Any] = {
        "id": tid,
        "contextId": ctx,
        "status": {"state": state, "message": agent_text_message(reason, task_id=tid, context_id=ctx), "timestamp": now_iso()},
    }
    if message is not None:
        task["history"] = [message]
    if route is not None:
        task["metadata"] = {EXTENSION_URI: {"route": route}}
    return task


def artifacts_of(leg: LegResult) -> list[dict[str, Any]]:
    """One leg's artifacts, named `agent/name` and marked with their source (a direct reply becomes one)."""
    out: list[dict[str, Any]] = []
    if leg.task is not None:
        status_msg = (leg.task.get("status") or {}).get("message")
        if not leg.task.get("artifacts") and status_msg and leg.state == COMPLETED:
            out.append({"artifactId": status_msg.get("messageId") or str(uuid.uuid4()), "name": f"{leg.agent}/reply",
                        "parts": status_msg.get("parts", []), "metadata": {EXTENSION_URI: {"source": leg.agent}}})
        for art in leg.task.get("artifacts") or []:
            art = dict(art)
            art["name"] = f"{leg.agent}/{art.get('name') or art.get('artifactId', 'artifact')}"
            meta = dict(art.get("metadata") or {})
            meta[EXTENSION_URI] = {**(meta.get(EXTENSION_URI) or {}), "source": leg.agent}
            art["metadata"] = meta
            out.append(art)
    elif leg.result and "message" in leg.result:
        msg = leg.result["message"]
        out.append({"artifactId": msg.get("messageId") or str(uuid.uuid4()), "name": f"{leg.agent}/reply",
                    "parts": msg.get("parts", []), "metadata": {EXTENSION_URI: {"source": leg.agent}}})
    return out


def aggregate(legs: Sequence[LegResult], *, message: dict[str, Any], route: list[dict[str, Any]]) -> dict[str, Any]:
    """One task from several legs: artifacts by source, the worst state, every failure's reason."""
    tid = f"gw-{uuid.uuid4()}"
    ctx = message.get("contextId") or str(uuid.uuid4())
    state = min((leg.state for leg in legs), key=lambda s: _RANK.get(s, 4)) if legs else COMPLETED
    reasons = [f"{leg.agent}: {leg.error}" for leg in legs if leg.error]
    for leg in legs:
        if leg.error is None and leg.state in (FAILED, REJECTED):
            status_msg = ((leg.task or {}).get("status") or {}).get("message") or {}
            text = " ".join(p.get("text", "") for p in status_msg.get("parts", []) if "text" in p).strip()
            reasons.append(f"{leg.agent}: {leg.state.removeprefix('TASK_STATE_').lower()}" + (f" ({text})" if text else ""))
    status: dict[str, Any] = {"state": state, "timestamp": now_iso()}
    if reasons:
        status["message"] = agent_text_message("; ".join(reasons), task_id=tid, context_id=ctx)
    artifacts = [a for leg in legs for a in artifacts_of(leg)]
    downstream = [
        {"agent": leg.agent, "taskId": (leg.task or {}).get("id"), "state": leg.state, **({"error": leg.error} if leg.error else {})}
        for leg in legs
    ]
    task: dict[str, Any] = {
        "id": tid,
        "contextId": ctx,
        "status": status,
        "artifacts": artifacts,
        "history": [message],
        "metadata": {EXTENSION_URI: {"route": route, "downstream": downstream}},
    }
    return task


def chain_route(ext_meta: Any, route: list[dict[str, Any]], agent: str, gateway: str = "") -> dict[str, Any]:
    """A task's extension metadata with this gateway's `route`; a route a downstream gateway already
    wrote there (federation) is kept under `downstream` with the agent it came through, so the
    explanation shows the whole chain, outermost gateway first."""
    meta = dict(ext_meta) if isinstance(ext_meta, dict) else {}
    earlier = meta.get("route")
    if isinstance(earlier, list):
        below: dict[str, Any] = {"agent": agent, "route": earlier}
        for key in ("gateway", "downstream"):
            if key in meta:
                below[key] = meta.pop(key)
        meta["downstream"] = below
    meta["route"] = route
    if gateway:
        meta["gateway"] = gateway
    return meta
