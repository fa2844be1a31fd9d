"""Capability scores: which agent is best for a part, from named components anyone can read.

Every agent a capability choice looks at is `Considered`: accepted with its components and
total, or left out with the reason (its card's modes, health, draining, the client may not
use it). The components, each in [0, 1], weighed into one total (docs/rules.md, "Capability
routing", defends the order):

- *output* (weight 2, only when the request gives `acceptedOutputModes`): the agent's output
  modes for this part fit one of them;
- *skills* (weight 2, only when the request's words have a sentence vector): the cosine of the
  words with the agent's skill texts, as `capability: skills` scores it (below 0 counts as 0);
- *specialisation* (weight 1): how much of the card is about the part's family — per skill,
  1 / the families it accepts when one is the part's (`*/*` is nobody's specialist: 0), averaged
  over the card's skills;
- *fit* (weight 0.2): how the accepting pattern names the part — exact 1, `type/*` 0.5, `*/*` 0.

Transformers come after every other agent whatever their total (they are for chains). Equal
totals go to the agent with fewer requests in flight, then by name. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ..modality import Modality
from .agents import SkillModes, specificity

W_OUTPUT = 2.0
W_SKILLS = 2.0
W_SPECIALISATION = 1.0
W_FIT = 0.2
FIT_BY_SPECIFICITY = (0.0, 0.5, 1.0)  # `*/*`, `type/*`, exact essence
COMPONENTS = ("output", "skills", "specialisation", "fit")


class Considered(NamedTuple):
    """One agent a capability choice looked at for a part: accepted with its score, or `why_not`."""

    agent: str
    accepted: bool
    why_not: str = ""
    specialisation: float = 0.0
    fit: float = 0.0
    skills: float | None = None  # None: the request had no words with a vector, or the agent no skill text
    output: float | None = None  # None: the request named no acceptedOutputModes
    transformer: bool = False
    total: float = 0.0

    def to_json(self) -> dict[str, Any]:
        if not self.accepted:
            return {"agent": self.agent, "accepted": False, "whyNot": self.why_not}
        out: dict[str, Any] = {"agent": self.agent, "accepted": True, "total": self.total,
                               "specialisation": self.specialisation, "fit": self.fit}
        if self.skills is not None:
            out["skills"] = self.skills
        if self.output is not None:
            out["output"] = self.output
        if self.transformer:
            out["transformer"] = True
        return out

    def components(self) -> str:
        """`spec 1.00, fit 0.50, skills 0.31`: the components this agent was scored on."""
        shown = [f"spec {self.specialisation:.2f}", f"fit {self.fit:.2f}"]
        if self.skills is not None:
            shown.append(f"skills {self.skills:.2f}")
        if self.output is not None:
            shown.append(f"output {self.output:.0f}")
        return ", ".join(shown) + (", transformer" if self.transformer else "")


class CapabilityChoice(NamedTuple):
    """A capability choice for one part: the modality and group it was made for, every agent considered
    (accepted ones ranked best first, then the others by name) and the agent chosen ("" when none)."""

    modality: str
    group: str | None
    considered: tuple[Considered, ...]
    chosen: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"modality": self.modality, "group": self.group, "chosen": self.chosen or None,
                "agents": [c.to_json() for c in self.considered]}

    def runner_up(self) -> str | None:
        """One line: the best accepted agent after the chosen one and why it lost (None when there is none)."""
        ranked = [c for c in self.considered if c.accepted]
        chosen = next((c for c in ranked if c.agent == self.chosen), None)
        other = next((c for c in ranked if c.agent != self.chosen), None)
        if chosen is None or other is None:
            return None
        return f"runner-up {other.agent} ({other.total:.2f}) lost to {chosen.agent} ({chosen.total:.2f}): {lost_on(chosen, other)}"


def lost_on(winner: Considered, loser: Considered) -> str:
    """Why `loser` ranks below `winner`, in words: the component that counted most against it."""
    if loser.transformer and not winner.transformer:
        return "a transformer (ranked after every other agent)"
    if round(winner.total, 4) == round(loser.total, 4):
        return "equal score: fewer requests in flight, then name"
    gaps = []
    for name, weight in (("output", W_OUTPUT), ("skills", W_SKILLS), ("specialisation", W_SPECIALISATION), ("fit", W_FIT)):
        a, b = getattr(winner, name), getattr(loser, name)
        if a is None or b is None:
            continue
        gaps.append(((a - b) * weight, name, a, b))
    gap, name, a, b = max(gaps)
    return f"{name} {b:.2f} vs {a:.2f}"


def family_shares(skills: Iterable[SkillModes]) -> dict[str, float]:
    """Specialisation per media type family: each skill gives 1/len(its families) to each family it accepts
    (a skill accepting `*/*` gives nothing), averaged over the skills. `{"image": 1.0}` for an image-only card."""
    listed = list(skills)
    shares: dict[str, float] = {}
    if not listed:
        return shares
    for skill in listed:
        families = {p.type for p in skill.inputs}
        if not families or "*" in families:
            continue
        for family in families:
            shares[family] = shares.get(family, 0.0) + 1.0 / len(families)
    return {f: round(v / len(listed), 4) for f, v in shares.items()}


def best_specificity(skills: Iterable[SkillModes], modality: Modality) -> int:
    """How precisely the card names `modality` at best: -1 not at all, 0 `*/*`, 1 `type/*`, 2 exact."""
    best = -1
    for skill in skills:
        for pattern in skill.inputs:
            if modality.matches(pattern):
                spec = specificity(pattern)
                if spec > best:
                    best = spec
    return best


def score(agent: str, specialisation: float, spec: int, output: float | None, transformer: bool) -> Considered:
    """An accepted agent's score without words (skills are added per request by `with_skills`)."""
    fit = FIT_BY_SPECIFICITY[spec]
    total = W_SPECIALISATION * specialisation + W_FIT * fit + (W_OUTPUT * output if output is not None else 0.0)
    return Considered(agent, True, "", specialisation, fit, None, output, transformer, round(total, 4))


def ranked(considered: Iterable[Considered]) -> tuple[Considered, ...]:
    """Accepted agents best first (non-transformers first, then by total, then name), then the others by name."""
    items = list(considered)
    accepted = sorted((c for c in items if c.accepted), key=lambda c: (c.transformer, -c.total, c.agent))
    refused = sorted((c for c in items if not c.accepted), key=lambda c: c.agent)
    return (*accepted, *refused)


def with_skills(considered: tuple[Considered, ...], skills: Mapping[str, float]) -> tuple[Considered, ...]:
    """The table with each accepted agent's skills cosine (from `skills`, by agent; below 0 counts as 0) added."""
    out = []
    for c in considered:
        if not c.accepted:
            out.append(c)
            continue
        cosine = skills.get(c.agent)
        if cosine is None:
            out.append(c)
            continue
        k = round(max(0.0, cosine), 4)
        out.append(c._replace(skills=k, total=round(c.total + W_SKILLS * k, 4)))
    return ranked(out)


def best_tier(considered: tuple[Considered, ...]) -> tuple[str, ...]:
    """The accepted agents that tie for first (same transformer rank and total), by name; () when none accepted."""
    if not considered or not considered[0].accepted:
        return ()
    head = considered[0]
    return tuple(c.agent for c in considered
                 if c.accepted and c.transformer == head.transformer and c.total == head.total)
