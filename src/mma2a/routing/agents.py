"""What the router knows of an agent: the modes its Agent Card accepts and produces.

`AgentInfo` is read from an A2A 1.0 card (JSON form) by `agent_info_from_card`; the
gateway adds operator facts (groups, weight, transformer, health). An agent accepts a
modality when one of its skills' `inputModes` (or, for a skill that lists none, the card's
`defaultInputModes`) accepts it; a card without skills uses its default modes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidParams, InvalidModality
from ..ext import EXTENSION_URI
from ..modality import Modality, parse_modality


@dataclass(frozen=True, slots=True)
class SkillInfo:
    """One skill's modes (empty = the card's defaults)."""

    id: str
    input_modes: tuple[str, ...] = ()
    output_modes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """An agent as the router sees it."""

    name: str
    input_modes: tuple[str, ...] = ()
    output_modes: tuple[str, ...] = ()
    skills: tuple[SkillInfo, ...] = ()
    groups: tuple[str, ...] = ()
    weight: float = 1.0
    transformer: bool = False
    extension: bool = False
    healthy: bool = True
    draining: bool = False

    @property
    def available(self) -> bool:
        """Healthy and not draining: may take new work."""
        return self.healthy and not self.draining


def _modes(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise InvalidParams(f"{where}: must be a list of media types", field=where)
    for i, mode in enumerate(value):
        try:
            parse_modality(mode, field=f"{where}[{i}]")
        except InvalidModality as exc:
            raise InvalidParams(exc.message, field=f"{where}[{i}]") from None
    return tuple(value)


def agent_info_from_card(
    name: str,
    card_json: Mapping[str, Any],
    *,
    groups: Iterable[str] = (),
    weight: float = 1.0,
    transformer: bool = False,
) -> AgentInfo:
    """Read an A2A 1.0 Agent Card (JSON form) into an `AgentInfo`; bad fields raise `InvalidParams` naming them."""
    where = f"card '{name}'"
    if not isinstance(card_json, Mapping):
        raise InvalidParams(f"{where}: must be a JSON object", field="card")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
        raise InvalidParams(f"{where}: weight must be a positive number, got {weight!r}", field="weight")
    inputs = _modes(card_json.get("defaultInputModes"), f"{where}.defaultInputModes")
    outputs = _modes(card_json.get("defaultOutputModes"), f"{where}.defaultOutputModes")
    raw_skills = card_json.get("skills") or []
    if not isinstance(raw_skills, list):
        raise InvalidParams(f"{where}.skills: must be a list", field="skills")
    skills: list[SkillInfo] = []
    for i, s in enumerate(raw_skills):
        if not isinstance(s, Mapping):
            raise InvalidParams(f"{where}.skills[{i}]: must be an object", field=f"skills[{i}]")
        sid = s.get("id", f"skill-{i}")
        skills.append(
            SkillInfo(
                str(sid),
                _modes(s.get("inputModes"), f"{where}.skills[{i}].inputModes"),
                _modes(s.get("outputModes"), f"{where}.skills[{i}].outputModes"),
            )
        )
    caps = card_json.get("capabilities") or {}
    exts = caps.get("extensions") if isinstance(caps, Mapping) else None
    extension = isinstance(exts, list) and any(isinstance(e, Mapping) and e.get("uri") == EXTENSION_URI for e in exts)
    return AgentInfo(
        name=name,
        input_modes=inputs,
        output_modes=outputs,
        skills=tuple(skills),
        groups=tuple(dict.fromkeys(groups)),
        weight=float(weight),
        transformer=transformer,
        extension=extension,
    )


@dataclass(frozen=True, slots=True)
class SkillModes:
    """A skill's effective modes, parsed: inputs (patterns) and outputs, defaults filled in."""

    skill: str
    inputs: tuple[Modality, ...]
    outputs: tuple[Modality, ...]


def effective_skills(agent: AgentInfo) -> tuple[SkillModes, ...]:
    """Each skill with the card defaults filled in; a card without skills is one implicit skill."""
    skills = agent.skills or (SkillInfo("default"),)
    out = []
    for s in skills:
        ins = s.input_modes or agent.input_modes
        outs = s.output_modes or agent.output_modes
        out.append(SkillModes(s.id, _parse_all(ins), _parse_all(outs)))
    return tuple(out)


def _parse_all(modes: Iterable[str]) -> tuple[Modality, ...]:
    parsed = []
    for m in modes:
        try:
            parsed.append(parse_modality(m, field="inputModes"))
        except InvalidModality:
            continue  # a card we did not validate ourselves: ignore what does not parse
    return tuple(parsed)


def specificity(pattern: Modality) -> int:
    """How precisely a pattern names a modality: 2 exact, 1 `type/*`, 0 `*/*`."""
    if pattern.type == "*":
        return 0
    if pattern.subtype == "*":
        return 1
    return 2


def fits(a: Modality, b: Modality) -> bool:
    """Two modes are compatible when either accepts the other (wildcards on either side)."""
    return a.matches(b) or b.matches(a)
