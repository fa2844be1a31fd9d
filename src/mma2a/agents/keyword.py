"""The keyword reasoner: the ablation. It matches keywords in the text it is given and nothing
else — no coordinates, no numbers read off images, no pixels (a photo that reaches it is
accepted and ignored), no combining of clues.

For each kind of question it has a vocabulary (places, numbers, requests, parts, the
subsystems and meanings a manual lists) and answers with the first word of that vocabulary
found in its texts, in the order the parts came; a slot it finds nothing for is "unknown".
"""

from __future__ import annotations

from typing import Any

from a2a.types import AgentCard

from . import questions as q
from .runtime import ReceivedPart, make_card

NAME = "keyword"

_NUMBER_WORDS = {w: str(n) for w, n in q.NUMBERS.items() if w not in ("a", "an", "single", "several")}
_NEGATIVE = ("wrong", "not", "different", "mismatch", "faded", "off")
_DAMAGE = ("crack", "cracked", "broken", "dent", "dented", "scratched", "mark", "marks", "damage", "damaged")
_PARTS = tuple(f"{s} {t}" for s in q.SIDES for t in q.THINGS) + q.THINGS


def card() -> AgentCard:
    return make_card(NAME, "Answers customer-service questions by keyword matching over text (the ablation): "
                     "accepts photos but cannot read pixels.",
                     input_modes=["text/plain", "text/markdown", "image/png", "image/jpeg", "image/webp"],
                     output_modes=["text/plain", "application/json"], skill="match-keywords")


def solve(kind: str, texts: list[str]) -> str:
    """The answer from keywords alone; `texts` in the order the parts came (the report first)."""
    joined = "\n".join(texts)
    report = texts[0] if texts else ""

    def first(vocab: tuple[str, ...] | list[str]) -> str | None:
        return q.find_phrase(joined, vocab)

    if kind == "location":
        return first(q.GRID) or "unknown"
    if kind == "count":
        found = first(tuple(_NUMBER_WORDS) + tuple(_NUMBER_WORDS.values()))
        return _NUMBER_WORDS.get(found, found) if found else "unknown"
    if kind == "colour_match":
        return "no" if first(_NEGATIVE) else "yes"
    if kind == "status_light":
        return first(q.manual_order(report)) or "unknown"
    if kind == "severity":
        return first(list(q.manual_colours(report).values())) or "unknown"
    if kind == "request":
        return first(q.REQUESTS) or "unknown"
    if kind == "part":
        return first(_PARTS) or "unknown"
    if kind == "label_action":
        return f"{first(q.REQUESTS) or 'unknown'} unknown"  # a serial number is not a keyword
    if kind == "damaged_unit":
        return "unknown"
    if kind == "confirm":
        return f"{first(_PARTS) or 'unknown'} {'yes' if first(_DAMAGE) else 'no'}"
    raise ValueError(f"question: unknown kind {kind!r}")


async def reply(parts: list[ReceivedPart]) -> list[dict[str, Any]]:
    texts = [p.text for p in parts if p.text is not None]
    if not texts:
        raise ValueError("no text part to read")
    kind = q.classify(q.question_of(texts[0]))
    if kind is None:
        found = sorted({w for w in q.words("\n".join(texts)) if w in _DAMAGE})
        answer = f"keywords: {', '.join(found)}" if found else "no keyword found"
    else:
        answer = solve(kind, texts)
    return [{"text": answer, "mediaType": "text/plain"},
            {"data": {"answer": answer, "question": kind, "usedPixels": False}, "mediaType": "application/json"}]
