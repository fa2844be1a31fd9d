"""Captioner: image → text, the text bottleneck's step.

There is no captioning model: the caption is assembled from what the vision inspector perceives
(the same `inspect_image`) and says so. First the pixel checks, in caption words: the overall
shape, the surface's colour word, how many dark marks and where each is in the picture (a 3x3 grid
word), what each QR label reads (left to right), the lights' colour words left to right. Then the
models, each in a sentence that names what it is: the COCO detector's objects (with their scores),
the text OCR read (not again where it repeats a barcode's text), the other barcodes zxing-cpp
read (with their symbology). A model whose extra is not installed is said to be missing, not
silently left out. What text does not carry is what a caption cannot say: pixel coordinates,
exact colours (a word, not a hex value), and how things relate in the picture beyond that grid.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from a2a.types import AgentCard

from ..features.codes import QR_FAMILY
from .pixels import colour_name
from .questions import grid_cell
from .runtime import ReceivedPart, make_card, run_blocking
from .vision import MODELS, inspect_image

NAME = "captioner"

_NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}

SYMBOLOGIES = {
    "QRCode": "QR Code", "MicroQRCode": "Micro QR Code", "RMQRCode": "rMQR Code", "DataMatrix": "Data Matrix",
    "EAN13": "EAN-13", "EAN8": "EAN-8", "UPCA": "UPC-A", "UPCE": "UPC-E", "Code128": "Code 128",
    "Code39": "Code 39", "Code93": "Code 93", "PDF417": "PDF417", "Aztec": "Aztec", "ITF": "ITF",
    "Codabar": "Codabar", "DataBar": "DataBar", "DataBarOmni": "DataBar", "DataBarLtd": "DataBar Limited",
    "DataBarExp": "DataBar Expanded", "DataBarExpanded": "DataBar Expanded", "MaxiCode": "MaxiCode",
    "MicroPDF417": "MicroPDF417", "ITF14": "ITF-14",
}
"""zxing-cpp's format names as people write them."""

_MODEL_WORDS = {"objects": ("object detection", "object detector"), "text": ("OCR", "OCR model"),
                "codes": ("barcode reading", "barcode reader")}


def card() -> AgentCard:
    return make_card(NAME, "Captions images (image to text), assembled from pixel checks (shape, colour word, marks "
                     "and where they are, lights left to right), object detection, OCR and barcode reading; no "
                     "captioning model, no coordinates, no exact colours.",
                     input_modes=["image/*"], output_modes=["text/plain"], skill="caption-image")


def _how_many(n: int, noun: str) -> str:
    if n == 1:
        return f"a {noun}"
    return f"{_NUMBERS.get(n, str(n))} {noun}s"


def _place(center: list[int], findings: dict[str, Any]) -> str:
    return grid_cell(center[0], center[1], (0, 0, findings["width"], findings["height"]))


def _a(word: str) -> str:
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def symbology(fmt: str) -> str:
    return SYMBOLOGIES.get(fmt, fmt)


def pixel_sentences(findings: dict[str, Any]) -> str:
    """What the pixel checks and the QR labels show, in caption words."""
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


def model_sentences(findings: dict[str, Any]) -> list[str]:
    """One sentence per model: what it found, that it found nothing, or that it is not installed."""
    missing = findings.get("unavailable") or {}
    out = []
    if "objects" in missing:
        out.append("No object detector installed.")
    else:
        best: dict[str, float] = {}
        for det in findings.get("objects") or []:  # best first per label
            best.setdefault(det["label"], det["score"])
        out.append("Objects detected: " + ", ".join(f"{_a(label)} ({score:.0%})" for label, score in best.items()) + "."
                   if best else "No object detected.")
    codes = findings.get("codes") or []
    if "text" in missing:
        out.append("No OCR model installed.")
    else:
        coded = {c["text"].strip().lower() for c in codes}  # a serial printed under its code is said once
        lines = [ln["text"] for ln in findings.get("text") or [] if ln["text"].strip().lower() not in coded]
        out.append("Text read: " + ", ".join(f'"{t}"' for t in lines) + "." if lines else "No text read.")
    if "codes" in missing:
        out.append("No barcode reader installed.")
    else:
        others = [c for c in codes if c["format"] not in QR_FAMILY]  # QR labels are in the first sentence
        if others:
            out.append("Other barcodes: " + ", ".join(f"{symbology(c['format'])} {c['text']}" for c in others) + ".")
    return out


def provenance(findings: dict[str, Any]) -> str:
    """The closing note: what the caption was assembled from (and, for a model that is missing, how to add it)."""
    missing = findings.get("unavailable") or {}
    used = ["pixel checks"] + [_MODEL_WORDS[key][0] for key in MODELS if key not in missing]
    note = "(Assembled from " + ", ".join(used[:-1]) + " and " + used[-1] + "; no captioning model."
    for key, hint in missing.items():
        note += f" Without the {_MODEL_WORDS.get(key, (key, key))[1]}: {hint}."
    return note + ")"


def caption(findings: dict[str, Any]) -> str:
    """The caption of one image's findings (see the module docstring for what it says and what it cannot)."""
    return " ".join([pixel_sentences(findings), *model_sentences(findings), provenance(findings)])


async def reply(parts: list[ReceivedPart]) -> list[dict[str, Any]]:
    out = []
    for p in parts:
        if p.data is not None and p.modality.startswith("image/"):
            out.append({"text": caption(await run_blocking(inspect_image, p.data)), "mediaType": "text/plain"})
    if not out:
        raise ValueError("no image part to caption")
    return out
