"""The keyword reasoner: the ablation. It matches keywords in the text it is given and nothing
else — no coordinates, no numbers read off images, no pixels, no sound (its card declares
text only, so a gateway captions its photos and transcribes its voice notes, in either routing
mode), no combining of clues beyond "the word next to that word".

It reads every text part it gets: the report, and whatever other agents put into text
(transcripts, OCR lines, captions). For each kind of question it has a vocabulary (places,
numbers, colour words, requests, parts, serial numbers, the subsystems and meanings a manual
lists) and answers with what it finds; the report is searched only for what a report can hold
(the manual, the ordered colour), the evidence parts for the rest. A slot it finds nothing
for is "unknown" — that is the only fixed word it answers.
"""

from __future__ import annotations

import re
from typing import Any

from a2a.types import AgentCard

from . import questions as q
from .runtime import ReceivedPart, make_card

NAME = "keyword"

_NUMBER_WORDS = {w: str(n) for w, n in q.NUMBERS.items() if w not in ("a", "an", "single", "several")}
_DAMAGE_SEEN = ("crack", "cracks", "dent", "dents", "mark", "marks", "scratch", "scratches", "damage", "damaged",
                "defect", "defects", "broken")
"""Words a description of a photo uses for damage (the report and the spoken complaint use others)."""
_PARTS = tuple(f"{s} {t}" for s in q.SIDES for t in q.THINGS) + q.THINGS
_COLOURS = tuple(q.NAMED_COLOURS)
_SIGNAL_WORDS: dict[str, dict[str, str]] = {
    "urgency": {"urgent": "urgent", "urgently": "urgent", "immediately": "urgent", "calm": "calm"},
    "question_rise": {},
    "alarm": {"siren": "siren", "beep": "beep", "beeping": "beep"},
    "whine": {"whine": "yes", "whining": "yes"},
    "silence": {},
    "shade": {},
    "texture": {"rough": "rough", "textured": "rough", "smooth": "smooth"},
    "label_side": {},
}
"""Words that answer a question whose answer lives in the signal, where a text could hold one (none for a question
rise, a silence's length, an exact shade or a label's side)."""


def card() -> AgentCard:
    return make_card(NAME, "Answers customer-service questions by keyword matching over text (the ablation): "
                     "reads text only, so photos and voice notes reach it as captions and transcripts.",
                     input_modes=["text/plain", "text/markdown"],
                     output_modes=["text/plain", "application/json"], skill="match-keywords")


def _ordered_colour(report: str) -> str | None:
    """The colour word of what was ordered: "I ordered the kettle in ocean blue (#325fc8)" → "blue"."""
    m = re.search(r"\bordered\b[^.(]*?\bin ([a-z ]+?)(?: \(|[.,;]|$)", report.lower())
    return q.find_phrase(m.group(1), _COLOURS) if m else None


def solve(kind: str, texts: list[str]) -> str:
    """The answer from keywords alone; `texts` in the order the parts came (the report first, then the evidence)."""
    report = texts[0] if texts else ""
    evidence = "\n".join(texts[1:])
    joined = "\n".join(texts)

    def first(vocab: tuple[str, ...] | list[str], text: str = joined) -> str | None:
        return q.find_phrase(text, vocab)

    serials = q.SERIAL.findall(evidence)
    if kind == "location":
        return first(q.GRID) or "unknown"
    if kind == "count":
        found = first(tuple(_NUMBER_WORDS) + tuple(_NUMBER_WORDS.values()), evidence)
        return _NUMBER_WORDS.get(found, found) if found else "unknown"
    if kind == "colour_match":
        ordered, seen = _ordered_colour(report), first(_COLOURS, evidence)
        if ordered is None or seen is None:
            return "unknown"
        return "yes" if seen == ordered else "no"
    if kind == "status_light":
        return first(q.manual_order(report), evidence) or "unknown"
    if kind == "severity":
        meanings = q.manual_colours(report)
        colour = first(tuple(meanings), evidence)
        return meanings[colour] if colour else "unknown"
    if kind == "request":
        return first(q.REQUESTS) or "unknown"
    if kind == "part":
        return first(_PARTS) or "unknown"
    if kind == "label_action":
        return f"{first(q.REQUESTS) or 'unknown'} {serials[0] if serials else 'unknown'}"
    if kind == "damaged_unit":
        return _serial_near_damage(evidence) or "unknown"
    if kind == "confirm":
        return f"{first(_PARTS) or 'unknown'} {'yes' if first(_DAMAGE_SEEN, evidence) else 'no'}"
    if kind in _SIGNAL_WORDS:
        found = first(tuple(_SIGNAL_WORDS[kind]), evidence)
        return _SIGNAL_WORDS[kind][found] if found else "unknown"
    raise ValueError(f"question: unknown kind {kind!r}")


def _serial_near_damage(text: str) -> str | None:
    """The serial number written closest to a damage word (by word distance), or the only one there is."""
    tokens = q.words(text)
    at_serial = [(i, t.upper()) for i, t in enumerate(tokens) if q.SERIAL.fullmatch(t.upper())]
    if len(at_serial) == 1:
        return at_serial[0][1]
    at_damage = [i for i, t in enumerate(tokens) if t in _DAMAGE_SEEN]
    if not at_serial or not at_damage:
        return None
    return min(at_serial, key=lambda s: min(abs(s[0] - d) for d in at_damage))[1]


async def reply(parts: list[ReceivedPart]) -> list[dict[str, Any]]:
    texts = [p.text for p in parts if p.text is not None]
    if not texts:
        raise ValueError("no text part to read")
    kind = q.classify(q.question_of(texts[0]))
    if kind is None:
        found = sorted({w for w in q.words("\n".join(texts)) if w in _DAMAGE_SEEN})
        answer = f"keywords: {', '.join(found)}" if found else "no keyword found"
    else:
        answer = solve(kind, texts)
    return [{"text": answer, "mediaType": "text/plain"},
            {"data": {"answer": answer, "question": kind, "usedPixels": False}, "mediaType": "application/json"}]
