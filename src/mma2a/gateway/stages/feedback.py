"""Feedback: a client rates the answer of one of its tasks (per agent leg), for history and learned routing.

`POST /tasks/{id}:feedback` (also under `/agents/{name}/`) and the JSON-RPC method `FEEDBACK_METHOD`
take `{"score": 0..1, "agent"?: name, "comment"?: text}` (docs/extension.md). A task belongs to the
client that created it: another client's task, or one the gateway no longer remembers, is answered
as not found. The rating goes to the decision history (outcome `feedback`, the rated agent as the
part's target) and, when the task was routed by learning, to the learner (gateway/state/learning.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from ...errors import InvalidParams, MMA2AError
from ...ext import PROTOCOL_NAME
from ...routing import PartRoute, Target
from ..access.clients import current_sender
from ..access.peers import address_key
from ..history.record import DecisionRecord, HistorySink, PartSummary
from ..state.learning import Learner
from .task_ops import TaskOperations

FEEDBACK_METHOD = f"{PROTOCOL_NAME}/TaskFeedback"
"""The JSON-RPC method, in the extension's namespace (`a2a-multimodal/TaskFeedback`)."""
MAX_COMMENT_BYTES = 1024
FEEDBACK_KEYS = ("score", "agent", "comment")


def check_feedback(body: Any, where: str) -> tuple[float, str | None, str | None]:
    """(score, agent, comment) of a feedback body, or `InvalidParams` naming the field (`where`: its prefix)."""
    if not isinstance(body, Mapping):
        raise InvalidParams(f"{where}: must be an object with score (0..1), agent and comment (optional)", field=where)
    for key in body:
        if key not in FEEDBACK_KEYS and key not in ("id", "tenant"):
            raise InvalidParams(f"{where}.{key}: unknown field (expected score, agent, comment)", field=f"{where}.{key}")
    score = body.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score) or not 0 <= score <= 1:
        raise InvalidParams(f"{where}.score: required, a number from 0 to 1, got {score!r}"[:300], field=f"{where}.score")
    agent = body.get("agent")
    if agent is not None and (not isinstance(agent, str) or not agent or len(agent) > 128):
        raise InvalidParams(f"{where}.agent: must be the name of an agent of the task", field=f"{where}.agent")
    comment = body.get("comment")
    if comment is not None:
        if not isinstance(comment, str):
            raise InvalidParams(f"{where}.comment: must be a string", field=f"{where}.comment")
        if len(comment.encode("utf-8", "replace")) > MAX_COMMENT_BYTES:
            raise InvalidParams(f"{where}.comment: at most {MAX_COMMENT_BYTES} bytes", field=f"{where}.comment")
    return float(score), agent, comment


class FeedbackService:
    """Ratings of tasks by their owners: checked, limited per client, recorded, learned from."""

    def __init__(self, task_ops: TaskOperations, learner: Learner, history: HistorySink | None) -> None:
        self.task_ops = task_ops
        self.learner = learner
        self.history = history

    async def submit(self, task_id: str, body: Any, *, target: str | None = None, where: str = "body",
                     address: str | None = None) -> dict[str, Any]:
        """Take one rating; the answer says which agent was rated and how many parts routing learned it for.
        `address`: the caller's (as rate limits key a caller without a client), so anonymous callers do not share
        one budget of ratings."""
        score, agent, comment = check_feedback(body, where)
        owner = current_sender()
        # before any lookup: a flood of ratings (of tasks real or not) costs no NATS read
        self.learner.admit(owner or address_key(address or "?"))
        await self.task_ops.tasks.fetch(task_id)  # in a cluster: a task made by another gateway
        rec = self.task_ops.task_record(task_id, target)  # another client's task: TaskNotFound
        agents = list(dict.fromkeys(leg.agent for leg in rec.legs))
        if agent is None:
            if len(agents) != 1:
                raise InvalidParams(f"{where}.agent: required, the task has {len(agents)} agents "
                                    f"({', '.join(agents)})", field=f"{where}.agent")
            agent = agents[0]
        elif agent not in agents:
            raise InvalidParams(f"{where}.agent: {agent!r} is not an agent of this task ({', '.join(agents)})",
                                field=f"{where}.agent")
        learned = self.learner.rate(task_id, owner, agent, score)
        if self.history is not None:
            found = self.learner.task(task_id)
            detail = f"task {task_id}: {agent} rated {score:g}" + (f" ({comment})" if comment else "")
            self.history.record(DecisionRecord(
                found.message_id if found is not None else f"feedback:{task_id}", time.time(), owner,
                (PartSummary(0, "application/x-a2a-feedback"),),
                (PartRoute(0, "application/x-a2a-feedback", (), (Target(agent, (), "feedback"),), ("feedback",)),),
                f"feedback: {detail}", 0.0))
        out: dict[str, Any] = {"taskId": task_id, "agent": agent, "score": score, "learnedParts": learned}
        forwarded = await self._forward(rec.legs, agent, score, comment)
        if forwarded is not None:
            out["forwarded"] = forwarded
        return out

    async def _forward(self, legs: Any, agent: str, score: float, comment: str | None) -> dict[str, Any] | None:
        """A rating of a leg that went to a peer gateway (its card says `gateway: true`), passed on to that gateway as
        a rating of its own task, for the same client (the call carries the signed client assertion when this gateway
        has a federation key): the peer's learned routing learns it too. None: not a peer; else what the peer said."""
        try:
            entry = self.task_ops.directory.get(agent)
        except MMA2AError:
            return None
        leg = next((leg for leg in legs if leg.agent == agent), None)
        if leg is None or not entry.is_gateway():
            return None
        params: dict[str, Any] = {"id": leg.task_id, "score": score} | ({"comment": comment} if comment else {})
        try:
            answer = await self.task_ops.caller.call(entry, FEEDBACK_METHOD, params)
        except MMA2AError as exc:  # the local rating stands; the answer says the peer did not take it
            return {"agent": agent, "error": exc.message}
        parts = answer.get("learnedParts") if isinstance(answer, dict) else None
        return {"agent": agent, "learnedParts": parts if isinstance(parts, int) else 0}
