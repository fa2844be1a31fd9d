"""Text in images with RapidOCR (PP-OCRv6 small detection and recognition, ONNX, shipped in `rapidocr`).

`read_lines` is the one reader: the feature extractor (`text`, `textLines`) and the reference
agents call it. The engine is loaded once per process, lazily, from the package's own model
files; the angle classifier is off (signs and labels are upright or slightly tilted, and the
recogniser reads those). Lines under `MIN_CONFIDENCE` are dropped: on a photo without text
the detector finds texture, and the recogniser's low scores say so; so are lines of one character
(`MIN_CHARS`), which is what the recogniser makes of texture at high scores too.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from typing import Any

from ..modality import Modality
from .base import Limits, load_once
from .image import image_array, quad_box
from .imagehead import HeadNotFound, image_size

MODEL_NAME = "rapidocr-ppocrv6"
MIN_CONFIDENCE = 0.6
MAX_SIDE = 1280
"""Images are read at most this large (longest side); boxes are reported in the original's pixels."""
MAX_LINES = 50

MIN_CHARS = 2
"""A line of fewer characters (spaces aside) is not reported: a glyph alone is what the recogniser makes of texture.
On the unseen media (tests/features/unseen.py) every false line was one character, boxed over much of the frame, at
confidences no threshold separates from real text — dev split: "0" 0.885 and 0.616, "8" 0.997, "口" 0.913, "新"
0.628, "回" 0.882 (a barcode read as a CJK glyph); held-out split: "0" 0.645 and 0.751, "8" 0.913 and 0.993 — while
every real line had 7 or more. The price: a sign of one character ("P", "7") is not read."""

_lock = threading.Lock()


@load_once
def ocr_engine() -> Any:
    """The RapidOCR engine (loaded on first use, about 1 s)."""
    from rapidocr import RapidOCR

    threads = max(1, min(2, os.cpu_count() or 1))
    return RapidOCR(params={
        "Global.log_level": "critical",
        "Global.use_cls": False,
        "Det.limit_type": "max",
        "Det.limit_side_len": 960,
        "EngineConfig.onnxruntime.intra_op_num_threads": threads,
        "EngineConfig.onnxruntime.inter_op_num_threads": 1,
    })


@dataclass(frozen=True, slots=True)
class TextLine:
    text: str
    confidence: float
    box: list[int]

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "confidence": self.confidence, "box": self.box}


def read_lines(rgb: Any, back: float = 1.0, *, min_confidence: float = MIN_CONFIDENCE) -> list[TextLine]:
    """The text lines in RGB pixels, top to bottom then left to right (blocking)."""
    engine = ocr_engine()
    bgr = rgb[:, :, ::-1].copy()
    with _lock:  # one recognition at a time: the engine's sessions already use the cores
        result = engine(bgr)
    if result is None or result.txts is None or result.boxes is None:
        return []
    lines = []
    codes = matrix_code_boxes(rgb)
    for text, score, quad in zip(result.txts, result.scores, result.boxes):
        text = " ".join(str(text).split())
        if len(text.replace(" ", "")) >= MIN_CHARS and float(score) >= min_confidence and not _on_code(quad, codes):
            lines.append(TextLine(text, round(float(score), 3), quad_box(quad, back)))
    lines.sort(key=lambda ln: (ln.box[1] // 16, ln.box[0]))
    return lines[:MAX_LINES]


def matrix_code_boxes(rgb: Any) -> list[tuple[float, float, float, float]]:
    """The boxes (x0, y0, x1, y1 in these pixels) of the 2-D barcodes zxing-cpp reads in one pass: QR, DataMatrix,
    Aztec, PDF417 (none without the `codes` extra). The recogniser reads a QR code's modules as CJK glyphs at high
    confidence ("回瓶回" 0.9, beside a printed line): what it reads there is no text. Linear codes are not masked: the
    digits printed under their bars are."""
    try:
        import cv2
        import zxingcpp
    except ImportError:
        return []
    grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    formats = zxingcpp.BarcodeFormats([zxingcpp.BarcodeFormat.AllMatrix, zxingcpp.BarcodeFormat.PDF417])
    out = []
    for r in zxingcpp.read_barcodes(grey, formats=formats):
        if not r.valid:
            continue
        pos = r.position
        xs = [p.x for p in (pos.top_left, pos.top_right, pos.bottom_right, pos.bottom_left)]
        ys = [p.y for p in (pos.top_left, pos.top_right, pos.bottom_right, pos.bottom_left)]
        out.append((float(min(xs)), float(min(ys)), float(max(xs)), float(max(ys))))
    return out


def _on_code(quad: Any, codes: list[tuple[float, float, float, float]]) -> bool:
    """Does a line's quadrilateral (in the pixels read) centre inside one of `codes`' boxes?"""
    if not codes:
        return False
    cx = sum(float(p[0]) for p in quad) / len(quad)
    cy = sum(float(p[1]) for p in quad) / len(quad)
    return any(x0 <= cx <= x1 and y0 <= cy <= y1 for x0, y0, x1, y1 in codes)


TILE_ASPECT = 3.0
MAX_TILES = 4
"""A picture longer than `MAX_SIDE` and over `TILE_ASPECT` times as long as it is wide (a receipt, a scrolled
screenshot, a banner) is read in up to `MAX_TILES` pieces along its length, each at up to `MAX_SIDE`: read whole, its
text shrank with its length (a 36 px line in a 10000x300 banner was 4.6 px at 1280 and not found; the detector's own
960 px limit shrinks it again)."""


def tiles_for(width: int, height: int, max_side: int = MAX_SIDE) -> int:
    """How many pieces a `width` x `height` picture is read in (1: whole)."""
    long, short = max(width, height), max(1, min(width, height))
    if long <= max_side or long <= TILE_ASPECT * short:
        return 1
    return min(MAX_TILES, math.ceil(long / (TILE_ASPECT * short)))


def cuts(rgb: Any, tiles: int) -> list[int]:
    """Where to cut RGB pixels into `tiles` pieces along their longer axis: near each even cut, the line across the
    picture with the least edge energy within a quarter piece either way (a gap between words or lines, not a glyph)."""
    import numpy as np

    grey = rgb.mean(axis=2, dtype=np.float32)
    along_x = rgb.shape[1] >= rgb.shape[0]
    length = rgb.shape[1] if along_x else rgb.shape[0]
    edges = np.abs(np.diff(grey, axis=1 if along_x else 0))
    energy = edges.sum(axis=0 if along_x else 1)
    energy = np.convolve(energy, np.ones(5, np.float32), "same")  # a gap a few pixels wide, not a seam in a glyph
    step = length / tiles
    out = [0]
    for i in range(1, tiles):
        lo, hi = int(i * step - step / 4), int(i * step + step / 4)
        out.append(lo + int(np.argmin(energy[lo:hi])))
    return out + [length]


def read_lines_tiled(rgb: Any, back: float, tiles: int) -> list[TextLine]:
    """`read_lines` on `tiles` pieces of a long picture (`cuts`), boxes mapped back to the whole picture's pixels."""
    import numpy as np

    along_x = rgb.shape[1] >= rgb.shape[0]
    bounds = cuts(rgb, tiles)
    lines: list[TextLine] = []
    for a, b in zip(bounds, bounds[1:]):
        piece = np.ascontiguousarray(rgb[:, a:b] if along_x else rgb[a:b])
        shift = int(a * back)
        for ln in read_lines(piece, back):
            x0, y0, x1, y1 = ln.box
            box = [x0 + shift, y0, x1 + shift, y1] if along_x else [x0, y0 + shift, x1, y1 + shift]
            lines.append(TextLine(ln.text, ln.confidence, box))
    return in_reading_order(lines)[:MAX_LINES]


def in_reading_order(lines: list[TextLine]) -> list[TextLine]:
    """Lines top to bottom, a row's left to right: a line whose vertical centre lies within the half height of the
    row's first line is in that row (pieces of a banner read apart share a row whatever pixel their boxes start at)."""
    rows: list[list[TextLine]] = []
    for ln in sorted(lines, key=lambda ln: (ln.box[1] + ln.box[3]) / 2):
        first = rows[-1][0].box if rows else None
        if first is not None and abs((ln.box[1] + ln.box[3]) / 2 - (first[1] + first[3]) / 2) <= (first[3] - first[1]) / 2:
            rows[-1].append(ln)
        else:
            rows.append([ln])
    return [ln for row in rows for ln in sorted(row, key=lambda ln: ln.box[0])]


class OCRExtractor:
    """text (the lines joined) and textLines (text, confidence, box) with RapidOCR (the `ocr` extra)."""

    name = MODEL_NAME
    version = "1.0"
    modalities = ("image/*",)
    requires = ("rapidocr", "onnxruntime", "PIL", "numpy")
    provides = ("text", "textLines")
    extra = "ocr"
    budget_s = 6.0
    """Its own time per image: a 1080p frame on the busy machine (4.6 s median, 6.1 s p95; 1.1 s of CPU:
    docs/benchmarks.md); a 600x400 photo takes about half of that."""

    def __init__(self, *, limits: Limits | None = None, max_side: int = MAX_SIDE) -> None:
        self.limits = limits or Limits()
        self.max_side = max_side

    def warm_up(self) -> None:
        ocr_engine()

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        try:
            size = image_size(data, complete=True)
        except HeadNotFound:
            size = None  # refused by the reader below, with its reason
        tiles = tiles_for(*size, max_side=self.max_side) if size else 1
        rgb, back = image_array(data, self.limits, max_side=self.max_side * tiles)
        lines = read_lines_tiled(rgb, back, tiles) if tiles > 1 else read_lines(rgb, back)
        return {"text": " ".join(ln.text for ln in lines)[:2000], "textLines": [ln.to_json() for ln in lines]}
