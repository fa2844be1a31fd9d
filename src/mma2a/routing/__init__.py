"""The routing engine: rules, Agent Card capabilities and the transform planner decide where each part goes.

Pure logic: no I/O, no clock, no globals. The gateway loads rules (`load_rules_file`, `parse_rules`), builds a
`Snapshot` of rules and agents (`build_snapshot`), and calls `decide(view, snapshot)` for
each message. `decide_linear` is the reference evaluator the compiled engine is tested
against. See docs/rules.md for the rule language.
"""

from __future__ import annotations

from .agents import AgentInfo, SkillInfo, agent_info_from_card
from .balance import Load, pick_least_inflight, pick_round_robin, pick_weighted
from .decision import (
    CandidateCheck,
    Explanation,
    Failure,
    PartExplanation,
    PartRoute,
    RouteDecision,
    Target,
    TransformStep,
)
from .engine import decide, decide_linear, decision_key, explain_capability, explain_rules
from .learned import NO_EVIDENCE, Evidence, EvidenceIndex
from .loader import load_rules_file, parse_rules
from .planner import plan_transforms
from .rules import (
    Action,
    BroadcastTo,
    Capability,
    Clause,
    CloneAndRouteTo,
    Condition,
    Drop,
    Learn,
    LoadBalance,
    RouteTo,
    Rule,
    RuleSet,
    Transform,
)
from .sessions import SessionPins, decide_pinned
from .snapshot import MODES, Snapshot, build_snapshot

__all__ = [
    "MODES",
    "NO_EVIDENCE",
    "Action",
    "AgentInfo",
    "BroadcastTo",
    "CandidateCheck",
    "Capability",
    "Clause",
    "CloneAndRouteTo",
    "Condition",
    "Drop",
    "Evidence",
    "EvidenceIndex",
    "Explanation",
    "Failure",
    "Learn",
    "Load",
    "LoadBalance",
    "PartExplanation",
    "PartRoute",
    "RouteDecision",
    "RouteTo",
    "Rule",
    "RuleSet",
    "SessionPins",
    "SkillInfo",
    "Snapshot",
    "Target",
    "Transform",
    "TransformStep",
    "agent_info_from_card",
    "build_snapshot",
    "decide",
    "decide_linear",
    "decide_pinned",
    "decision_key",
    "explain_capability",
    "explain_rules",
    "load_rules_file",
    "parse_rules",
    "pick_least_inflight",
    "pick_round_robin",
    "pick_weighted",
    "plan_transforms",
]
