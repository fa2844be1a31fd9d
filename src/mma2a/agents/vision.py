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
import io
import threading
from collections import OrderedDict
from typing import Any

from a2a.types import AgentCard

from ..features.codes import QR_FAMILY, read_codes
from ..features.objects import PACKAGE as OBJECTS
from ..features.objects import detect_objects
from ..features.ocr import read_lines
from .runtime import ReceivedPart, make_card, run_blocking

NAME = "vision"

WORK_SIDE = 1024
"""Images are analysed at most this large (longest side); coordinates are reported in the original's pixels."""

MAX_DEFECTS = 8
MAX_DEFECT_AREA = 0.03
"""More dark regions than this, or more of the frame: scene texture, reported as a note, not as defects."""

LIGHT_LIFT = 120.0
"""A status light is at least this much brighter or more saturated (HSV, 0-255) than the ring around it:
the evaluation's lights lift 140 and more; a red patch in a photo (a flag, a saucer) about 90-110."""

OCR = "rapidocr"


def _has(module: str) -> bool:
    """Is the model package installed (the `objects` and `ocr` extras are optional)?"""
    import importlib.util

    return importlib.util.find_spec(module) is not None

COLOUR_NAMES: dict[str, tuple[int, int, int]] = {
    "red": (205, 45, 40), "orange": (235, 135, 30), "yellow": (225, 205, 45), "green": (50, 160, 70),
    "blue": (45, 90, 205), "purple": (130, 60, 170), "pink": (230, 130, 170), "brown": (130, 85, 50),
    "white": (238, 238, 238), "grey": (128, 128, 128), "black": (25, 25, 25),
}
"""The colour words of a caption, with a typical RGB for each (nearest wins)."""


def card() -> AgentCard:
    return make_card(NAME, "Inspects images on their pixels: objects (COCO detector), text (OCR), barcodes and QR "
                     "labels (decoded, with their place), dark defects with their boxes, status lights (colour, "
                     "place), the surface colour. Answers JSON findings and a one-line description.",
                     input_modes=["image/png", "image/jpeg", "image/webp", "image/*"],
                     output_modes=["application/json", "text/plain"], skill="inspect-image")


def colour_name(rgb: tuple[int, int, int] | str) -> str:
    """The caption word for a colour, from RGB or `#rrggbb`: white/grey/black when unsaturated, else the nearest hue word."""
    if isinstance(rgb, str):
        rgb = hex_rgb(rgb)
    hi, lo = max(rgb), min(rgb)
    if hi - lo < 0.2 * max(hi, 1) or hi - lo < 25:
        return "white" if hi > 215 else "black" if hi < 50 else "grey"
    chromatic = [n for n in COLOUR_NAMES if n not in ("white", "grey", "black")]
    return min(chromatic, key=lambda n: sum((a - b) ** 2 for a, b in zip(rgb, COLOUR_NAMES[n])))


def hex_rgb(value: str) -> tuple[int, int, int]:
    v = value.lstrip("#")
    if len(v) != 6:
        raise ValueError(f"colour: expected #rrggbb, got {value!r}")
    return int(v[0:2], 16), int(v[2:4], 16), int(v[4:6], 16)


def _hex(rgb: Any) -> str:
    return "#%02x%02x%02x" % tuple(int(round(float(c))) for c in rgb)


_findings: OrderedDict[bytes, dict[str, Any]] = OrderedDict()
_findings_lock = threading.Lock()
FINDINGS_CACHE = 32
"""Findings of this many recent images are kept (by SHA-256): perception is deterministic, and the
same photo often reaches several agents of one process (the inspector, the analyst, the captioner)."""


def inspect_image(data: bytes) -> dict[str, Any]:
    """Findings from the pixels (see the module docstring); blocking — run it off the event loop."""
    key = hashlib.sha256(data).digest()
    with _findings_lock:
        cached = _findings.get(key)
        if cached is not None:
            _findings.move_to_end(key)
            return copy.deepcopy(cached)
    findings = _inspect(data)
    with _findings_lock:
        _findings[key] = copy.deepcopy(findings)
        while len(_findings) > FINDINGS_CACHE:
            _findings.popitem(last=False)
    return findings


def _inspect(data: bytes) -> dict[str, Any]:
    import cv2
    import numpy as np
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            width, height = im.size
            rgb_im = im.convert("RGB")
    except Exception as exc:  # PIL raises many types for bad input
        raise ValueError(f"image: cannot decode ({type(exc).__name__})") from None
    scale = min(1.0, WORK_SIDE / max(width, height))
    if scale < 1.0:
        rgb_im = rgb_im.resize((max(1, round(width * scale)), max(1, round(height * scale))), Image.Resampling.BILINEAR)
    arr = np.asarray(rgb_im, dtype=np.uint8)
    h, w = arr.shape[:2]
    back = 1.0 / scale

    def box(x0: float, y0: float, x1: float, y1: float) -> list[int]:
        return [int(x0 * back), int(y0 * back), int(x1 * back), int(y1 * back)]

    findings: dict[str, Any] = {"width": width, "height": height, "meanColor": _hex(arr.reshape(-1, 3).mean(axis=0))}

    # barcodes first (zxing-cpp): the black modules of a label are dark but are not defects
    label_mask = np.zeros((h, w), dtype=np.uint8)
    qr: list[dict[str, Any]] = []
    grey8 = cv2.cvtColor(arr, cv2.COLOR_RGB2GRAY)
    codes = read_codes(arr, back)
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
    findings["objects"] = [d.to_json() for d in detect_objects(arr, back)] if _has(OBJECTS) else []
    findings["text"] = [ln.to_json() for ln in read_lines(arr, back)] if _has(OCR) else []
    for ln in findings["text"]:  # printed text is dark too, and is not a defect
        x0, y0, x1, y1 = (v / back for v in ln["box"])
        pad = (y1 - y0) * 0.3
        label_mask[max(0, int(y0 - pad)):min(h, int(y1 + pad) + 1), max(0, int(x0 - pad)):min(w, int(x1 + pad) + 1)] = 1

    # a defect is a dark valley: much darker than the surface a closing (kernel wider than any crack or dent)
    # fills in around it; the edge between a dark product and a light background is a step, not a valley
    k = max(15, round(min(h, w) * 0.065)) | 1
    closed = cv2.morphologyEx(grey8, cv2.MORPH_CLOSE, cv2.getStructuringElement(cv2.MORPH_RECT, (k, k)))
    grey, surface_level = grey8.astype(np.int16), closed.astype(np.int16)
    dark = (((surface_level - grey) > 45) & (grey * 10 < surface_level * 6) & (label_mask == 0)).astype(np.uint8)
    dark = cv2.morphologyEx(dark, cv2.MORPH_CLOSE, np.ones((3, 3), np.uint8))
    defects: list[dict[str, Any]] = []
    min_area = max(12, int(h * w * 0.00008))
    if 0 < dark.mean() < 0.5:
        n, _, stats, cents = cv2.connectedComponentsWithStats(dark, connectivity=8)
        for i in range(1, n):
            x, y, bw, bh, area = (int(v) for v in stats[i])
            if area < min_area:
                continue
            defects.append({"region": box(x, y, x + bw, y + bh), "center": [int(cents[i][0] * back), int(cents[i][1] * back)],
                            "area": round(area / (h * w), 5), "shape": "line" if area < 0.45 * bw * bh else "spot"})
    defects.sort(key=lambda d: (-d["area"], d["center"]))
    if len(defects) > MAX_DEFECTS or sum(d["area"] for d in defects) > MAX_DEFECT_AREA:
        # dozens of dark valleys, or a large share of the frame: the texture of a scene, not marks on a surface
        findings["defectsNote"] = (f"{len(defects)} dark regions covering {sum(d['area'] for d in defects):.1%} of the "
                                   "image: scene texture, not evidence of defects")
        defects = []
    findings["defects"] = defects

    hsv = cv2.cvtColor(arr, cv2.COLOR_RGB2HSV)
    lit = ((hsv[:, :, 1] > 110) & (hsv[:, :, 2] > 150)).astype(np.uint8)
    lights: list[dict[str, Any]] = []
    light_mask = np.zeros((h, w), dtype=bool)
    if lit.any():
        n, labels, stats, cents = cv2.connectedComponentsWithStats(lit, connectivity=8)
        for i in range(1, n):
            x, y, bw, bh, area = (int(v) for v in stats[i])
            # a light is a small, roughly round blob; a coloured product surface is not
            if area < max(30, h * w * 0.0002) or area > h * w * 0.02 or area < 0.5 * bw * bh or not 0.5 < bw / bh < 2:
                continue
            blob = labels == i
            # and it glows: clearly brighter or more saturated than the ring around it (a patch of fur is not)
            x0, y0, x1, y1 = max(0, x - bw // 2), max(0, y - bh // 2), min(w, x + bw + bw // 2), min(h, y + bh + bh // 2)
            ring = ~blob[y0:y1, x0:x1] & (lit[y0:y1, x0:x1] == 0)
            if ring.any():
                inner, outer = hsv[y0:y1, x0:x1][blob[y0:y1, x0:x1]], hsv[y0:y1, x0:x1][ring]
                lift = max(float(inner[:, 2].mean() - outer[:, 2].mean()), float(inner[:, 1].mean() - outer[:, 1].mean()))
                if lift < LIGHT_LIFT:
                    continue
            light_mask |= blob
            colour = arr[blob].mean(axis=0)
            lights.append({"center": [int(cents[i][0] * back), int(cents[i][1] * back)], "region": box(x, y, x + bw, y + bh),
                           "color": _hex(colour), "colorName": colour_name((int(colour[0]), int(colour[1]), int(colour[2])))})
    lights.sort(key=lambda li: (li["center"][0], li["center"][1]))
    findings["lights"] = lights

    # the surface: the middle of the frame, without defects, labels or lights
    cy0, cy1, cx0, cx1 = h // 4, h - h // 4, w // 4, w - w // 4
    keep = (dark == 0) & (label_mask == 0) & ~light_mask
    core = arr[cy0:cy1, cx0:cx1][keep[cy0:cy1, cx0:cx1]]
    surface = np.median(core, axis=0) if len(core) else np.median(arr.reshape(-1, 3), axis=0)
    findings["surfaceColor"] = _hex(surface)
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
    return text + f"; surface {f['surfaceColor']}"


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
