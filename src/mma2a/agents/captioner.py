"""Captioner: image → text, the text bottleneck's step.

It perceives exactly what the vision inspector perceives (the same `inspect_image`) and
writes all of it into caption language, with nothing left out on purpose: the overall
shape, the surface's colour word, how many dark marks and where each is in the picture (a
3x3 grid word), what each QR label reads (left to right), the lights' colour words left to
right. What text does not carry is what a caption cannot say: pixel coordinates, exact
colours (a word, not a hex value), and how things relate in the picture beyond that grid.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from a2a.types import AgentCard

from .runtime import ReceivedPart, make_card, run_blocking
from .questions import grid_cell
from .pixels import colour_name
from .vision import inspect_image

NAME = "captioner"

_NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def card() -> AgentCard:
    return make_card(NAME, "Captions images (image to text): shape, colour word, marks and where they are, what "
                     "labels read, lights left to right; no coordinates, no exact colours.",
                     input_modes=["image/*"], output_modes=["text/plain"], skill="caption-image")


def _how_many(n: int, noun: str) -> str:
    if n == 1:
        return f"a {noun}"
    return f"{_NUMBERS.get(n, str(n))} {noun}s"


def _place(center: list[int], findings: dict[str, Any]) -> str:
    return grid_cell(center[0], center[1], (0, 0, findings["width"], findings["height"]))


def caption(findings: dict[str, Any]) -> str:
    """One caption sentence from the findings (see the module docstring for what survives)."""
    w, h = findings["width"], findings["height"]
    shape = "wide" if w > h * 1.2 else "tall" if h > w * 1.2 else "square"
    text = f"A {shape} photo of a mostly {colour_name(findings['surfaceColor'])} object"
    extras = []
    defects = findings.get("defects") or []  # largest first
    if defects:
        places = ", ".join(_place(d["center"], findings) for d in defects)
        extras.append(_how_many(len(defects), "dark mark") + f" (at the {places})")
    labels = findings.get("qr") or []  # left to right
    if labels:
        extras.append(_how_many(len(labels), "QR code label") + " reading " + ", ".join(lab["text"] for lab in labels))
    lights = findings.get("lights") or []  # left to right
    if lights:
        counts = Counter(li["colorName"] for li in lights)
        words = [f"{_NUMBERS.get(n, str(n))} {name}" for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
        extras.append(" and ".join(words) + (" light" if len(lights) == 1 else " lights"))
    if extras:
        text += " with " + ", ".join(extras[:-1]) + (" and " if len(extras) > 1 else "") + extras[-1]
    text += "."
    if len(lights) > 1:
        text += " The lights from left to right: " + ", ".join(li["colorName"] for li in lights) + "."
    return text


async def reply(parts: list[ReceivedPart]) -> list[dict[str, Any]]:
    out = []
    for p in parts:
        if p.data is not None and p.modality.startswith("image/"):
            out.append({"text": caption(await run_blocking(inspect_image, p.data)), "mediaType": "text/plain"})
    if not out:
        raise ValueError("no image part to caption")
    return out
