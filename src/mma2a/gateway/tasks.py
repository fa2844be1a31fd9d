"""Task id mapping: the gateway's task ids to the downstream agents' tasks.

A message that went to one agent keeps that agent's task id (nothing to rewrite on the
hot path); a message fanned out to several gets a gateway id `gw-…` whose task is the
aggregate. `GetTask`, `CancelTask` and `SubscribeToTask` look the id up here.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ..errors import TaskNotFound


@dataclass(frozen=True, slots=True)
class DownstreamTask:
    agent: str
    task_id: str
    context_id: str | None = None


@dataclass
class TaskRecord:
    """What the gateway remembers of one of its tasks."""

    task_id: str
    legs: list[DownstreamTask]
    aggregate: dict[str, Any] | None = None  # the aggregated task, for fan-out tasks
    route: list[dict[str, Any]] = field(default_factory=list)

    @property
    def fanned_out(self) -> bool:
        return self.aggregate is not None


class TaskMap:
    """Bounded LRU of task records (oldest forgotten first)."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._records: OrderedDict[str, TaskRecord] = OrderedDict()

    def put(self, record: TaskRecord) -> None:
        self._records[record.task_id] = record
        self._records.move_to_end(record.task_id)
        while len(self._records) > self.capacity:
            self._records.popitem(last=False)

    def get(self, task_id: str) -> TaskRecord:
        rec = self._records.get(task_id)
        if rec is None:
            raise TaskNotFound(f"task {task_id!r} not found", field="id")
        return rec

    def find(self, task_id: str) -> TaskRecord | None:
        return self._records.get(task_id)

    def __len__(self) -> int:
        return len(self._records)
