"""Vision inspector: works on pixels — COCO objects (SSD-MobileNetV2), text (RapidOCR), barcodes
(zxing-cpp; QR labels with text and place), dark defects (each with its box, only where the
picture gives evidence of them), status lights (colour and place), the surface colour, all as
structured findings.

`inspect_image` is the perception every pixel-reading agent shares (the analyst sees the
same findings; the captioner verbalises them and drops what a caption cannot say).
"""

from __future__ import annotations

import copy
import hashlib
import threading
from collections import OrderedDict
from typing import Any

from a2a.types import AgentCard

from ..errors import MediaError
from ..features.codes import QR_FAMILY, read_codes
from ..features.image import LONG_ASPECT, read_picture
from ..features.objects import PACKAGE as OBJECTS
from ..features.objects import detect_objects, detect_objects_in_pieces
from ..features.ocr import read_lines
from .pixels import check_pixels, hex_colour
from .runtime import AGENT_LIMITS, ReceivedPart, decoding, make_card, run_blocking

NAME = "vision"

WORK_SIDE = 1024
"""Images are analysed at most this large (longest side); coordinates are reported in the original's pixels."""

OCR = "rapidocr"

MODELS: dict[str, tuple[str, str, str]] = {
    "objects": (OBJECTS, "ssd-mobilenet-v2-coco", "objects"),
    "text": (OCR, "rapidocr-ppocrv6", "ocr"),
    "codes": ("zxingcpp", "zxing-cpp", "codes"),
}
"""What each model finding needs: (the package, the model's name, the mma2a extra that installs it)."""


def _has(module: str) -> bool:
    """Is the model package installed (the `objects`, `ocr` and `codes` extras are optional)?"""
    import importlib.util

    return importlib.util.find_spec(module) is not None


def card() -> AgentCard:
    return make_card(NAME, "Inspects images on their pixels: objects (COCO detector), text (OCR), barcodes and QR "
                     "labels (decoded, with their place), dark defects with their boxes, status lights (colour, "
                     "place), the surface colour. Answers JSON findings and a one-line description.",
                     input_modes=["image/png", "image/jpeg", "image/webp", "image/*"],
                     output_modes=["application/json", "text/plain"], skill="inspect-image")


_findings: OrderedDict[bytes, dict[str, Any]] = OrderedDict()
_findings_lock = threading.Lock()
_inspecting: dict[bytes, threading.Lock] = {}  # images being inspected now: a second caller waits for the first
FINDINGS_CACHE = 32
"""Findings of this many recent images are kept (by SHA-256): perception is deterministic, and the
same photo often reaches several agents of one process (the inspector, the analyst, the captioner)."""


def _cached(key: bytes) -> dict[str, Any] | None:
    with _findings_lock:
        cached = _findings.get(key)
        if cached is not None:
            _findings.move_to_end(key)
            return copy.deepcopy(cached)
        return None


def inspect_image(data: bytes) -> dict[str, Any]:
    """Findings from the pixels (see the module docstring); blocking — run it off the event loop.

    One inspection per image at a time: the same photo cloned to the inspector and the analyst of one
    process is inspected once, the second caller waiting for the first one's findings (two at once
    doubled the work, and on a loaded machine pushed both past the gateway's agent timeout)."""
    key = hashlib.sha256(data).digest()
    found = _cached(key)
    if found is not None:
        return found
    with _findings_lock:
        running = _inspecting.setdefault(key, threading.Lock())
    with running:
        try:
            found = _cached(key)  # the caller we waited for found them (unless it failed: then this one tries)
            if found is not None:
                return found
            findings = _inspect(data)
            with _findings_lock:
                _findings[key] = copy.deepcopy(findings)
                while len(_findings) > FINDINGS_CACHE:
                    _findings.popitem(last=False)
            return findings
        finally:
            with _findings_lock:
                if _inspecting.get(key) is running:
                    del _inspecting[key]


def _inspect(data: bytes) -> dict[str, Any]:
    import numpy as np

    try:  # as a viewer sees it: EXIF orientation, 16-bit grey, transparency (features/image.py)
        with decoding(data, "image/*", "vision"):  # bounded with the process's other decodes
            pic = read_picture(data, AGENT_LIMITS, max_side=WORK_SIDE)
    except MediaError as exc:
        raise ValueError(exc.message) from None
    width, height = pic.width, pic.height
    arr = np.ascontiguousarray(np.asarray(pic.rgb, dtype=np.uint8))
    h, w = arr.shape[:2]
    back = pic.back

    findings: dict[str, Any] = {"width": width, "height": height, "meanColor": hex_colour(arr.reshape(-1, 3).mean(axis=0))}

    # which models this process has: a finding whose model is missing is said to be missing, not empty
    ran = {key: _has(package) for key, (package, _, _) in MODELS.items()}
    findings["models"] = [MODELS[key][1] for key, present in ran.items() if present]
    findings["unavailable"] = {key: f"pip install 'mma2a[{MODELS[key][2]}]'" for key, present in ran.items()
                               if not present}

    # barcodes first (zxing-cpp): the black modules of a label are dark but are not defects
    label_mask = np.zeros((h, w), dtype=np.uint8)
    qr: list[dict[str, Any]] = []
    codes = read_codes(arr, back) if ran["codes"] else []
    for code in codes:
        x0, y0, x1, y1 = (v / back for v in code.box)
        pad = max(x1 - x0, y1 - y0) * 0.25  # the quiet zone and the label around it
        label_mask[max(0, int(y0 - pad)):min(h, int(y1 + pad) + 1), max(0, int(x0 - pad)):min(w, int(x1 + pad) + 1)] = 1
        if code.is_qr:
            qr.append({"text": code.text, "region": code.box,
                       "center": [(code.box[0] + code.box[2]) // 2, (code.box[1] + code.box[3]) // 2]})
    qr.sort(key=lambda q: (q["center"][0], q["center"][1]))
    findings["qr"] = qr
    findings["codes"] = [c.to_json() for c in codes]
    # a panorama is looked at piece by piece (whole, the detector's square input squashes it: features/objects.py)
    detect = detect_objects_in_pieces if max(h, w) > LONG_ASPECT * min(h, w) else detect_objects
    findings["objects"] = [d.to_json() for d in detect(arr, back)] if ran["objects"] else []
    findings["text"] = [ln.to_json() for ln in read_lines(arr, back)] if ran["text"] else []
    for ln in findings["text"]:  # printed text is dark too, and is not a defect
        x0, y0, x1, y1 = (v / back for v in ln["box"])
        pad = (y1 - y0) * 0.3
        label_mask[max(0, int(y0 - pad)):min(h, int(y1 + pad) + 1), max(0, int(x0 - pad)):min(w, int(x1 + pad) + 1)] = 1

    pixels = check_pixels(arr, label_mask, back)
    if pixels.note is not None:
        findings["defectsNote"] = pixels.note
    findings["defects"] = pixels.defects
    findings["lights"] = pixels.lights
    findings["surfaceColor"] = pixels.surface
    return findings


def describe(f: dict[str, Any]) -> str:
    """The findings in one line (for people; agents read the JSON)."""
    text = f"{f['width']}x{f['height']} image"
    objects = list(dict.fromkeys(o["label"] for o in f.get("objects") or []))
    if objects:
        text += "; objects: " + ", ".join(objects)
    if f.get("text"):
        text += "; text: " + " / ".join(f'"{ln["text"]}"' for ln in f["text"])
    others = [c for c in f.get("codes") or [] if c["format"] not in QR_FAMILY]
    if others:
        text += "; barcodes: " + ", ".join(f"{c['format']} {c['text']}" for c in others)
    if f.get("qr"):
        text += "; QR: " + ", ".join(f"{q['text']} at ({q['center'][0]},{q['center'][1]})" for q in f["qr"])
    defects = f.get("defects") or []
    if defects:
        spots = "; ".join(f"({d['region'][0]},{d['region'][1]})-({d['region'][2]},{d['region'][3]})" for d in defects)
        text += f"; {len(defects)} dark defect region{'s' if len(defects) > 1 else ''} at {spots}"
    else:
        text += "; no defect found"
    if f.get("lights"):
        text += "; lights: " + ", ".join(f"{li['colorName']} {li['color']} at ({li['center'][0]},{li['center'][1]})"
                                         for li in f["lights"])
    text += f"; surface {f['surfaceColor']}"
    missing = f.get("unavailable") or {}
    if missing:  # a model that is not installed found nothing because it did not look
        text += "; not installed: " + ", ".join(f"{MODELS[k][1]} ({hint})" for k, hint in missing.items() if k in MODELS)
    return text


async def reply(parts: list[ReceivedPart]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in parts:
        if p.data is None or not p.modality.startswith("image/"):
            continue
        findings = await run_blocking(inspect_image, p.data)
        out.append({"text": describe(findings), "mediaType": "text/plain"})
        out.append({"data": findings, "mediaType": "application/json"})
    if not out:
        raise ValueError("no image part to inspect")
    return out
