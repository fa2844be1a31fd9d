"""Captioner: image → text, the text bottleneck's lossy step.

It perceives exactly what the vision inspector perceives (the same `inspect_image`), then
says only what an image caption says: the overall shape, the surface's colour word, how
many dark marks in words ("a", "two", "several"), that there are QR labels, the colours of
lights and how many of each. Places, coordinates, decoded label texts and exact colours are
not caption material and are lost — that loss is what the evaluation measures.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from a2a.types import AgentCard

from .runtime import ReceivedPart, make_card, run_blocking
from .vision import colour_name, inspect_image

NAME = "captioner"

_NUMBERS = {1: "one", 2: "two"}


def card() -> AgentCard:
    return make_card(NAME, "Captions images in one sentence (image to text): shape, colour, marks, labels, lights; "
                     "no coordinates, no label contents.",
                     input_modes=["image/*"], output_modes=["text/plain"], skill="caption-image")


def _how_many(n: int, noun: str) -> str:
    if n == 1:
        return f"a {noun}"
    return f"{_NUMBERS.get(n, 'several')} {noun}s"


def caption(findings: dict[str, Any]) -> str:
    """One caption sentence from the findings (see the module docstring for what survives)."""
    w, h = findings["width"], findings["height"]
    shape = "wide" if w > h * 1.2 else "tall" if h > w * 1.2 else "square"
    text = f"A {shape} photo of a mostly {colour_name(findings['surfaceColor'])} object"
    extras = []
    defects = findings.get("defects") or []
    if defects:
        extras.append(_how_many(len(defects), "dark mark"))
    labels = findings.get("qr") or []
    if labels:
        extras.append(_how_many(len(labels), "QR code label"))
    lights = Counter(li["colorName"] for li in findings.get("lights") or [])
    if lights:
        words = [f"{_NUMBERS.get(n, 'several')} {name}" for name, n in sorted(lights.items(), key=lambda kv: (-kv[1], kv[0]))]
        total = sum(lights.values())
        extras.append(" and ".join(words) + (" light" if total == 1 else " lights"))
    if extras:
        text += " with " + ", ".join(extras[:-1]) + (" and " if len(extras) > 1 else "") + extras[-1]
    return text + "."


async def reply(parts: list[ReceivedPart]) -> list[dict[str, Any]]:
    out = []
    for p in parts:
        if p.data is not None and p.modality.startswith("image/"):
            out.append({"text": caption(await run_blocking(inspect_image, p.data)), "mediaType": "text/plain"})
    if not out:
        raise ValueError("no image part to caption")
    return out
