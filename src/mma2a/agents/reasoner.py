"""Text reasoner: answers from text alone (the analyst every route ends at)."""

from __future__ import annotations

import re
from typing import Any

from a2a.types import AgentCard

from .runtime import ReceivedPart, make_card

NAME = "analyst"

_ISSUES = ("crack", "cracked", "broken", "scratch", "dent", "leak", "noise", "rattle", "defect", "stain", "mark", "fault")


def card() -> AgentCard:
    return make_card(NAME, "Reads text reports and answers: what is wrong, how urgent.",
                     input_modes=["text/plain", "text/markdown"], output_modes=["text/plain"], skill="analyse-report")


def analyse(text: str) -> str:
    words = re.findall(r"[a-z']+", text.lower())
    issues = sorted({w for w in words if w in _ISSUES})
    urgent = any(w in words for w in ("urgent", "immediately", "dangerous", "smoke", "fire"))
    verdict = f"issues: {', '.join(issues)}" if issues else "no issue named"
    return f"{verdict}; urgency: {'high' if urgent else 'normal'} ({len(words)} words read)"


async def reply(parts: list[ReceivedPart]) -> list[dict[str, Any]]:
    texts = [p.text for p in parts if p.text is not None]
    if not texts:
        raise ValueError("no text part to read")
    return [{"text": analyse("\n".join(texts)), "mediaType": "text/plain"}]
