"""What the router decided for a message, per part, and why.

Values here are immutable and compare by value, so the compiled engine and the linear
reference can be checked for equal decisions (timings excluded). They are NamedTuples
where the hot path builds many of them, for speed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .._frozen import quick_init
from ..modality import Modality
from .rules import Condition
from .scoring import CapabilityChoice


class TransformStep(NamedTuple):
    """One hop of a transform chain: `agent` turns `from_modality` into `to_modality`."""

    agent: str
    from_modality: str
    to_modality: str

    def to_json(self) -> dict[str, str]:
        return {"agent": self.agent, "from": self.from_modality, "to": self.to_modality}


class Target(NamedTuple):
    """Where a part goes: the agent, the transformer chain it passes through first, and why."""

    agent: str
    via: tuple[TransformStep, ...] = ()
    reason: str = "capability"

    def to_json(self) -> dict[str, Any]:
        return {"agent": self.agent, "via": [s.to_json() for s in self.via], "reason": self.reason}


class PartRoute(NamedTuple):
    """The route of one part."""

    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose: the field the API names
    modality: str
    matched: tuple[str, ...]
    targets: tuple[Target, ...]
    actions: tuple[str, ...]
    dropped: str | None = None
    bottleneck: bool = False
    pin_session: bool = False

    def agents(self) -> tuple[str, ...]:
        """The distinct final target agents, in order."""
        return tuple(dict.fromkeys(t.agent for t in self.targets))

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "modality": self.modality,
            "matched": list(self.matched),
            "targets": list(self.agents()),
            "actions": list(self.actions),
            "dropped": self.dropped,
        }

    def to_detail_json(self) -> dict[str, Any]:
        out = self.to_json()
        out["routes"] = [t.to_json() for t in self.targets]
        out["bottleneck"] = self.bottleneck
        out["pin_session"] = self.pin_session
        return out


class Failure(NamedTuple):
    """The first condition of one clause that failed: the modality pattern or a feature condition."""

    clause: int
    test: Condition | Modality
    actual: Any

    def describe(self) -> str:
        if isinstance(self.test, Modality):
            return f"modality {self.actual} is not {self.test}"
        cond = self.test
        where = cond.feature if cond.feature.startswith("client.") else f"features.{cond.feature}"  # the caller's
        if self.actual is None:
            if cond.op == "exists" and cond.value is False:
                return f"{where}: missing"  # cannot fail this way; kept for completeness
            return f"{where}: missing (wanted {cond.describe()})"
        return f"{where}: {self.actual!r} fails {cond.describe()}"


class CandidateCheck(NamedTuple):
    """A candidate rule for a part: matched, or the first failing condition of each of its clauses."""

    rule: str
    matched: bool
    failures: tuple[Failure, ...] = ()
    any_of: bool = False

    @property
    def reason(self) -> str | None:
        """Why the rule did not match, in words (None when it matched)."""
        if self.matched:
            return None
        if not self.any_of:
            return self.failures[0].describe()
        return "; ".join(f"any[{f.clause}]: {f.describe()}" for f in self.failures)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "matched": self.matched, "reason": self.reason}


class PartExplanation(NamedTuple):
    """How one part was routed: candidate rules in evaluation order, rules skipped, actions, notes, and the table of
    each capability choice."""

    index: int  # type: ignore[assignment]
    modality: str
    candidates: tuple[CandidateCheck, ...]
    skipped: int
    actions: tuple[str, ...]
    notes: tuple[str, ...] = ()
    capability: tuple[CapabilityChoice, ...] = ()  # each capability choice: every agent considered, scored or why not

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "modality": self.modality,
            "candidates": [c.to_json() for c in self.candidates],
            "skipped": self.skipped,
            "actions": list(self.actions),
            "notes": list(self.notes),
            "capability": [c.to_json() for c in self.capability],
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    """Per part explanations; `timings` (seconds per step) only when the caller passed a clock."""

    parts: tuple[PartExplanation, ...]
    timings: Mapping[str, float] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"parts": [p.to_json() for p in self.parts]}
        if self.timings:
            out["timings_us"] = {k: round(v * 1e6, 2) for k, v in self.timings.items()}
        return out


@quick_init
@dataclass(frozen=True, slots=True)
class RouteDecision:
    """The route of every part of one message, with its explanation."""

    message_id: str
    parts: tuple[PartRoute, ...]
    explanation: Explanation
    version: int = 0
    pinned: bool = False
    uses_load: bool = False  # a choice read the load (a pool, or a tie between equally fit agents)

    def targets(self) -> tuple[str, ...]:
        """The distinct final target agents over all parts, in order of first use."""
        return tuple(dict.fromkeys(t.agent for p in self.parts for t in p.targets))

    def agents_involved(self) -> tuple[str, ...]:
        """Targets and every transformer agent on the way."""
        names: dict[str, None] = {}
        for p in self.parts:
            for t in p.targets:
                for step in t.via:
                    names[step.agent] = None
                names[t.agent] = None
        return tuple(names)

    def to_json(self, *, detail: bool = False) -> dict[str, Any]:
        """The `rules explain --json` form; `detail=True` adds routes, flags and the explanation."""
        if not detail:
            return {"message_id": self.message_id, "parts": [p.to_json() for p in self.parts]}
        return {
            "message_id": self.message_id,
            "version": self.version,
            "pinned": self.pinned,
            "parts": [p.to_detail_json() for p in self.parts],
            "explanation": self.explanation.to_json(),
        }
