"""Captioner: image → text, the text bottleneck's lossy step.

It says only what a caption says: the size, the dominant colour, whether something dark
spoils the surface. Coordinates, QR contents and measurements are lost on purpose.
"""

from __future__ import annotations

from typing import Any

from a2a.types import AgentCard

from .runtime import ReceivedPart, make_card, run_blocking
from .vision import inspect_image

NAME = "captioner"

_COLOURS = {"red": (200, 40, 40), "green": (40, 160, 60), "blue": (40, 70, 200), "white": (235, 235, 235),
            "black": (20, 20, 20), "grey": (128, 128, 128), "yellow": (220, 200, 40), "orange": (230, 130, 30)}


def card() -> AgentCard:
    return make_card(NAME, "Captions images in a sentence (image to text).",
                     input_modes=["image/*"], output_modes=["text/plain"], skill="caption-image")


def colour_name(hex_colour: str) -> str:
    rgb = tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return min(_COLOURS, key=lambda n: sum((a - b) ** 2 for a, b in zip(rgb, _COLOURS[n])))


def caption(findings: dict[str, Any]) -> str:
    shape = "wide" if findings["width"] > findings["height"] * 1.2 else "tall" if findings["height"] > findings["width"] * 1.2 else "square"
    text = f"A {shape} photo of a mostly {colour_name(findings['meanColor'])} object"
    if "defect" in findings:
        text += " with a dark mark on it"
    return text + "."


async def reply(parts: list[ReceivedPart]) -> list[dict[str, Any]]:
    out = []
    for p in parts:
        if p.data is not None and p.modality.startswith("image/"):
            out.append({"text": caption(await run_blocking(inspect_image, p.data)), "mediaType": "text/plain"})
    if not out:
        raise ValueError("no image part to caption")
    return out
