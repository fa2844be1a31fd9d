"""What a producer gets back: a `Reply` (the final task or message, its parts as typed views),
or a `ReplyStream` of `ReplyEvent`s as the agent works.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from a2a.types import Artifact, Message, Part, StreamResponse, Task, TaskState

from ..ext import EXTENSION_URI, normalize_json
from .parts import IncomingPart, PayloadReader, view_parts


def state_name(state: int) -> str:
    """`TASK_STATE_INPUT_REQUIRED` -> `input-required`."""
    name: str = TaskState.Name(state)
    return name.removeprefix("TASK_STATE_").lower().replace("_", "-")


def _texts(parts: Sequence[IncomingPart]) -> str:
    return "\n".join(p.text for p in parts if p.text is not None)


@dataclass
class Reply:
    """The answer to one `send`: a task (state, artifacts, status message) or a direct message."""

    state: str  # completed, failed, rejected, canceled, input-required, working, ... or "message"
    parts: list[IncomingPart]
    task: Task | None = None
    message: Message | None = None
    status_parts: list[IncomingPart] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.state in ("completed", "message")

    @property
    def text(self) -> str:
        """The text of the reply's parts (artifacts, else the status message)."""
        return _texts(self.parts) or _texts(self.status_parts)

    @property
    def status_text(self) -> str:
        return _texts(self.status_parts)

    @property
    def task_id(self) -> str | None:
        return self.task.id if self.task is not None else None

    @property
    def route(self) -> list[dict[str, Any]]:
        """The gateway's routing decision for the message (per part: modality, targets, rules), if it went through one."""
        if self.task is None or EXTENSION_URI not in self.task.metadata:
            return []
        from google.protobuf import json_format

        meta = normalize_json(json_format.MessageToDict(self.task.metadata))
        route = (meta.get(EXTENSION_URI) or {}).get("route") or []
        return list(route)


def _task_parts(task: Task) -> list[Part]:
    return [p for a in task.artifacts for p in a.parts]


def _build(task: Task | None, message: Message | None, reader: PayloadReader | None) -> Reply:
    if message is not None:
        return Reply("message", view_parts(message.parts, reader), message=message)
    assert task is not None
    status = view_parts(task.status.message.parts, reader) if task.status.HasField("message") else []
    return Reply(state_name(task.status.state), view_parts(_task_parts(task), reader), task=task, status_parts=status)


class _Accumulator:
    """Folds streamed events into the task they describe."""

    def __init__(self) -> None:
        self.task: Task | None = None
        self.message: Message | None = None

    def add(self, ev: StreamResponse) -> None:
        kind = ev.WhichOneof("payload")
        if kind == "task":
            self.task = Task()
            self.task.CopyFrom(ev.task)
        elif kind == "message":
            self.message = ev.message
        elif kind == "status_update":
            task = self._ensure(ev.status_update.task_id, ev.status_update.context_id)
            task.status.CopyFrom(ev.status_update.status)
        elif kind == "artifact_update":
            upd = ev.artifact_update
            task = self._ensure(upd.task_id, upd.context_id)
            for art in task.artifacts:
                if art.artifact_id == upd.artifact.artifact_id:
                    if upd.append:
                        art.parts.extend(upd.artifact.parts)
                    else:
                        art.CopyFrom(upd.artifact)
                    break
            else:
                new = Artifact()
                new.CopyFrom(upd.artifact)
                task.artifacts.append(new)

    def _ensure(self, task_id: str, context_id: str) -> Task:
        if self.task is None:
            self.task = Task(id=task_id, context_id=context_id)
        return self.task


def reply_from_events(events: Sequence[StreamResponse], reader: PayloadReader | None) -> Reply:
    acc = _Accumulator()
    for ev in events:
        acc.add(ev)
    return _build(acc.task, acc.message, reader)


@dataclass
class ReplyEvent:
    """One streamed step: a task snapshot, a status change, an artifact chunk, or a direct message."""

    kind: str  # task | status | artifact | message
    state: str
    parts: list[IncomingPart]
    final: bool = False

    @property
    def text(self) -> str:
        return _texts(self.parts)


_FINAL = {"completed", "failed", "rejected", "canceled", "input-required", "auth-required", "message"}


class ReplyStream:
    """`async for event in stream` as the agent works; `stream.reply` is the final `Reply` afterwards."""

    def __init__(self, events: AsyncIterator[StreamResponse], reader: PayloadReader | None) -> None:
        self._events = events
        self._reader = reader
        self._acc = _Accumulator()
        self.reply: Reply | None = None

    async def __aiter__(self) -> AsyncIterator[ReplyEvent]:
        async for ev in self._events:
            self._acc.add(ev)
            kind = ev.WhichOneof("payload")
            if kind == "task":
                state = state_name(ev.task.status.state)
                yield ReplyEvent("task", state, view_parts(_task_parts(ev.task), self._reader), state in _FINAL)
            elif kind == "status_update":
                state = state_name(ev.status_update.status.state)
                msg = ev.status_update.status.message
                yield ReplyEvent("status", state, view_parts(msg.parts, self._reader), state in _FINAL)
            elif kind == "artifact_update":
                state = state_name(self._acc.task.status.state) if self._acc.task else "working"
                yield ReplyEvent("artifact", state, view_parts(ev.artifact_update.artifact.parts, self._reader))
            elif kind == "message":
                yield ReplyEvent("message", "message", view_parts(ev.message.parts, self._reader), True)
        self.reply = _build(self._acc.task, self._acc.message, self._reader)

    async def final(self) -> Reply:
        """Drain the stream; the final reply."""
        async for _ in self:
            pass
        assert self.reply is not None
        return self.reply
