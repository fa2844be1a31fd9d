"""What the router knows of an agent: the modes its Agent Card accepts and produces.

`AgentInfo` is read from an A2A 1.0 card (JSON form) by `agent_info_from_card`; the
gateway adds operator facts (groups, weight, transformer, health). An agent accepts a
modality when one of its skills' `inputModes` (or, for a skill that lists none, the card's
`defaultInputModes`) accepts it; a card without skills uses its default modes.
"""

from __future__ import annotations

import re

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidParams, InvalidModality
from ..ext import EXTENSION_URI
from ..modality import Modality, parse_modality


# Informal mode names (A2A samples, v0.3 part kinds) read as MIME types. An input mode names what an agent
# accepts, so it reads as the family; an output mode names what it produces, so it reads as the usual type.
INFORMAL_INPUT_MODES: Mapping[str, str] = {
    "text": "text/*", "image": "image/*", "audio": "audio/*", "video": "video/*",
    "file": "*/*", "data": "application/json", "json": "application/json",
}
INFORMAL_OUTPUT_MODES: Mapping[str, str] = {
    "text": "text/plain", "image": "image/*", "audio": "audio/*", "video": "video/*",
    "file": "application/octet-stream", "data": "application/json", "json": "application/json",
}


# Words by which a card's free text names a kind of content (a description saying "images of invoices"):
# such a description is a skills text (routing/semantic.py `skill_texts`).
CONTENT_WORDS = frozenset(
    "image images photo photos photograph photographs picture pictures screenshot screenshots scan scans scanned "
    "audio voice speech sound sounds recording recordings podcast music video videos clip clips footage "
    "pdf pdfs document documents invoice invoices receipt receipts form forms contract contracts spreadsheet "
    "spreadsheets csv json table tables chart charts diagram diagrams map maps file files text texts email emails "
    "transcript transcripts code 3d mesh meshes model models".split()
)
_WORDS = re.compile(r"[a-z0-9]+")


def names_content(text: str) -> bool:
    """Does `text` name a kind of content (`CONTENT_WORDS`)?"""
    return any(w in CONTENT_WORDS for w in _WORDS.findall(text.lower()))


@dataclass(frozen=True, slots=True)
class SkillInfo:
    """One skill's modes (empty = the card's defaults)."""

    id: str
    input_modes: tuple[str, ...] = ()
    output_modes: tuple[str, ...] = ()
    name: str = ""
    description: str = ""
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()  # name, description, tags and examples: what `skills` routing compares


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
    problems: tuple[str, ...] = ()  # card fields left out because they could not be read
    description: str = ""  # the card's own description: a skills text (it often names the content it is about)

    @property
    def available(self) -> bool:
        """Healthy and not draining: may take new work."""
        return self.healthy and not self.draining


def read_mode(mode: str, *, output: bool = False) -> str:
    """A card's mode as a media type: informal names (`text`, `image`, …) become their MIME type."""
    informal = (INFORMAL_OUTPUT_MODES if output else INFORMAL_INPUT_MODES).get(mode.strip().lower())
    return informal if informal is not None else mode


def _modes(value: Any, where: str, problems: list[str] | None, *, output: bool = False) -> tuple[str, ...]:
    """The modes of one card field, read; with `problems`, what cannot be read is recorded there and left out."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        err = InvalidParams(f"{where}: must be a list of media types", field=where)
        if problems is None:
            raise err
        problems.append(err.message)
        return ()
    out: list[str] = []
    for i, raw in enumerate(value):
        mode = read_mode(raw, output=output)
        try:
            parse_modality(mode, field=f"{where}[{i}]")
        except InvalidModality as exc:
            if problems is None:
                raise InvalidParams(exc.message, field=f"{where}[{i}]") from None
            problems.append(exc.message)
            continue
        out.append(mode)
    return tuple(out)


def agent_info_from_card(
    name: str,
    card_json: Mapping[str, Any],
    *,
    groups: Iterable[str] = (),
    weight: float = 1.0,
    transformer: bool = False,
    lenient: bool = False,
) -> AgentInfo:
    """Read an A2A 1.0 Agent Card (JSON form) into an `AgentInfo`; bad fields raise `InvalidParams` naming them.

    With `lenient` (a live agent's card), unreadable modes and skills are left out and named in
    `AgentInfo.problems` instead, so one bad field never makes the whole agent unroutable.
    """
    where = f"card '{name}'"
    if not isinstance(card_json, Mapping):
        raise InvalidParams(f"{where}: must be a JSON object", field="card")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
        raise InvalidParams(f"{where}: weight must be a positive number, got {weight!r}", field="weight")
    problems: list[str] | None = [] if lenient else None
    inputs = _modes(card_json.get("defaultInputModes"), f"{where}.defaultInputModes", problems)
    outputs = _modes(card_json.get("defaultOutputModes"), f"{where}.defaultOutputModes", problems, output=True)
    raw_skills = card_json.get("skills") or []
    if not isinstance(raw_skills, list):
        _problem(problems, f"{where}.skills: must be a list", "skills")
        raw_skills = []
    skills: list[SkillInfo] = []
    for i, s in enumerate(raw_skills):
        if not isinstance(s, Mapping):
            _problem(problems, f"{where}.skills[{i}]: must be an object", f"skills[{i}]")
            continue
        sid = s.get("id", f"skill-{i}")
        skills.append(
            SkillInfo(
                str(sid),
                _modes(s.get("inputModes"), f"{where}.skills[{i}].inputModes", problems),
                _modes(s.get("outputModes"), f"{where}.skills[{i}].outputModes", problems, output=True),
                _text(s.get("name")),
                _text(s.get("description")),
                _texts(s.get("tags")),
                _texts(s.get("examples")),
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
        problems=tuple(problems or ()),
        description=_text(card_json.get("description")),
    )


def _text(value: Any) -> str:
    """A card's free-text field (skills are read leniently: a wrong type is no text)."""
    return " ".join(value.split())[:2000] if isinstance(value, str) else ""


def _texts(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(t for t in (_text(v) for v in value[:50]) if t)


def _problem(problems: list[str] | None, message: str, field: str) -> None:
    if problems is None:
        raise InvalidParams(message, field=field)
    problems.append(message)


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
