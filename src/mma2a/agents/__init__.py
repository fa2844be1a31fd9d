"""Reference agents: real a2a-sdk servers with honest cards, for the demo and the evaluation."""

from __future__ import annotations

from .catalog import CATALOG, ReferenceAgent
from .runtime import SkillExecutor, agent_app, run_agent

__all__ = ["CATALOG", "ReferenceAgent", "SkillExecutor", "agent_app", "run_agent"]
