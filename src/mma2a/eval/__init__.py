"""The CrossModal evaluation: native routing vs the text bottleneck, capable vs keyword reasoning."""

from __future__ import annotations

from .tasks import CATEGORIES, CrossModalTask, generate_tasks

__all__ = ["CATEGORIES", "CrossModalTask", "generate_tasks"]
