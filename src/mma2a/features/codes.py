"""Barcodes with zxing-cpp: QR, Micro QR, rMQR, DataMatrix, Aztec, PDF417, EAN/UPC, Code 128/39/93,
ITF, Codabar and more — rotated, tilted or slightly blurred photos included.

`read_codes` is the one reader (the feature extractor and the vision agent call it). `codes`
lists every symbol (format, text, box); `qr` keeps the texts of the QR family alone, the
feature rules have always tested.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..modality import Modality
from .base import Limits
from .image import image_array, quad_box

MODEL_NAME = "zxing-cpp"
MAX_SIDE = 2048
QR_FAMILY = frozenset({"QRCode", "MicroQRCode", "RMQRCode", "QRCodeModel1", "QRCodeModel2"})


@dataclass(frozen=True, slots=True)
class Code:
    format: str
    text: str
    box: list[int]

    @property
    def is_qr(self) -> bool:
        return self.format in QR_FAMILY

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "text": self.text, "box": self.box}


def _format_name(fmt: Any) -> str:
    name = getattr(fmt, "name", None)
    return str(name) if name else str(fmt).replace(" ", "")


def _symbol(r: Any, back: float, undo: Any = None) -> Code:
    """One zxing-cpp result as a `Code`, named as the symbol is printed: an EAN-13 that starts with 0 is a
    UPC-A (the same bars; zxing-cpp reports it as its 13-digit GTIN), a UPC-E reads its own 8 digits. `undo`:
    the affine map (2x3) from the pixels it was read in back to the picture's."""
    fmt, text = _format_name(r.format), str(r.text)
    if fmt == "EAN13" and len(text) == 13 and text.startswith("0"):
        fmt, text = "UPCA", text[1:]
    elif fmt == "UPCE":
        short = (getattr(r, "extra", None) or {}).get("UPCE")
        text = str(short) if short else text
    pos = r.position
    quad = [(p.x, p.y) for p in (pos.top_left, pos.top_right, pos.bottom_right, pos.bottom_left)]
    if undo is not None:
        quad = [(undo[0][0] * x + undo[0][1] * y + undo[0][2], undo[1][0] * x + undo[1][1] * y + undo[1][2]) for x, y in quad]
    return Code(fmt, text, quad_box(quad, back))


def _near(a: list[int], b: list[int]) -> bool:
    """Does box `a` touch box `b` widened by a quarter of `b`'s longer side?"""
    m = max(b[2] - b[0], b[3] - b[1]) / 4
    return a[0] <= b[2] + m and b[0] - m <= a[2] and a[1] <= b[3] + m and b[1] - m <= a[3]


def read_codes(rgb: Any, back: float = 1.0) -> list[Code]:
    """Every barcode in RGB pixels, left to right then top to bottom (blocking, a few ms).

    zxing-cpp's own `try_invert` finds light-on-dark matrix codes (QR, DataMatrix, Aztec) but not linear
    ones nor PDF417, so those are also looked for in the inverted image. A linear read whose text is
    part of another read of the same symbology over the same bars (a partial scan line) is left out."""
    import cv2
    import zxingcpp

    grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    found = [r for r in zxingcpp.read_barcodes(grey) if r.valid and r.text]
    inverted = zxingcpp.BarcodeFormats([zxingcpp.BarcodeFormat.AllLinear, zxingcpp.BarcodeFormat.PDF417])
    found += [r for r in zxingcpp.read_barcodes(cv2.bitwise_not(grey), formats=inverted, try_invert=False)
              if r.valid and r.text]
    undo = None
    if not found and max(grey.shape) <= SMALL_SIDE:
        found = _read_enlarged(grey)
        back = back / 2 if found else back
    if not found:
        found, undo = _read_deskewed(grey)
    out: dict[tuple[str, str], Code] = {}
    for r in found:
        code = _symbol(r, back, undo)
        out.setdefault((code.format, code.text), code)
    codes = list(out.values())
    partial = {id(c) for c in codes for o in codes
               if o is not c and o.format == c.format and c.text in o.text and len(c.text) < len(o.text)
               and _near(c.box, o.box)}
    return sorted((c for c in codes if id(c) not in partial), key=lambda c: (c.box[0], c.box[1], c.text))


SMALL_SIDE = 1024
"""An image no longer than this on its longest side, where no code was read, is read again at twice its size,
binarised with a global threshold: a label photographed small has bars and modules a pixel or two wide, which the
local binariser loses once blurred. On the unseen media's dev split (tests/features/unseen.py: 13 symbologies on
photos, rotated, in perspective, some blurred) this read 3 of the 6 codes missed (Code 39 and Code 93 blurred,
an rMQR), on the held-out split 1 of 3 (a blurred UPC-A); still missed: PDF417 in perspective, a Code 39 and an
rMQR at an angle. zxing-cpp checks each symbol's checksum, so the second look adds reads, not guesses."""


def _read_enlarged(grey: Any) -> list[Any]:
    """zxing-cpp's reads of `grey` enlarged twice (cubic), with its fixed and global-histogram binarisers."""
    import cv2
    import zxingcpp

    big = cv2.resize(grey, None, fx=2, fy=2, interpolation=cv2.INTER_CUBIC)
    for binarizer in (zxingcpp.Binarizer.FixedThreshold, zxingcpp.Binarizer.GlobalHistogram):
        found = [r for r in zxingcpp.read_barcodes(big, binarizer=binarizer) if r.valid and r.text]
        if found:
            return found
    return []


MIN_SKEW = 3.0
"""A picture where nothing was read is read once more turned upright by its strongest edges' angle when that is at
least this many degrees off the axes (zxing-cpp reads PDF417 and rMQR only nearly level). See `_read_deskewed`."""


ANGLE_SIDE = 640
"""`dominant_angle` measures a picture at most this many pixels on its longest side (a few ms)."""


def dominant_angle(grey: Any) -> float:
    """The angle (degrees, -45 to 45) of the strongest edges, modulo a quarter turn: a barcode's bars and a matrix
    code's modules dominate the edges around them. Measured at most `ANGLE_SIDE` pixels on the longest side."""
    import cv2
    import numpy as np

    h, w = grey.shape[:2]
    scale = ANGLE_SIDE / max(h, w)
    # the size given, at least a pixel a side: a 1x20000 strip scaled by a factor was 0 pixels wide (OpenCV's assert)
    small = (cv2.resize(grey, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA)
             if scale < 1 else grey)
    gx = cv2.Sobel(small, cv2.CV_32F, 1, 0, ksize=3)
    gy = cv2.Sobel(small, cv2.CV_32F, 0, 1, ksize=3)
    mag = cv2.magnitude(gx, gy)
    keep = mag > np.percentile(mag, 90)
    ang = np.degrees(np.arctan2(gy[keep], gx[keep])) % 90.0
    hist, _ = np.histogram(ang, bins=90, range=(0, 90), weights=mag[keep])
    smooth = np.convolve(np.r_[hist[-2:], hist, hist[:2]], np.ones(5), "valid")  # a circular 5-degree window
    a = float(np.argmax(smooth)) + 0.5
    return a if a <= 45 else a - 90


def _read_deskewed(grey: Any) -> tuple[list[Any], Any]:
    """zxing-cpp's reads of `grey` turned by its dominant edge angle (local, then fixed binariser), and the map back.

    On the unseen media's dev split this read the two codes every other pass missed there (a PDF417 blurred in
    perspective at 15 degrees, an rMQR blurred at 21); zxing-cpp checks every symbol's checksum, so it adds reads,
    not guesses. Held-out: docs/features.md, "On media nobody tuned for"."""
    import cv2
    import numpy as np
    import zxingcpp

    angle = dominant_angle(grey)
    if abs(angle) < MIN_SKEW:
        return [], None
    h, w = grey.shape[:2]
    turn = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.0)
    cos, sin = abs(turn[0, 0]), abs(turn[0, 1])
    nw, nh = int(h * sin + w * cos), int(h * cos + w * sin)
    turn[0, 2] += nw / 2 - w / 2
    turn[1, 2] += nh / 2 - h / 2
    upright = cv2.warpAffine(grey, turn, (nw, nh), flags=cv2.INTER_CUBIC, borderValue=255)
    undo = cv2.invertAffineTransform(turn)
    for binarizer in (zxingcpp.Binarizer.LocalAverage, zxingcpp.Binarizer.FixedThreshold):
        found = [r for r in zxingcpp.read_barcodes(upright, binarizer=binarizer) if r.valid and r.text]
        if found:
            return found, np.asarray(undo).tolist()
    return [], None


class CodesExtractor:
    """codes (format, text, box) for every barcode, and qr (QR-family texts) with zxing-cpp (the `codes` extra)."""

    name = MODEL_NAME
    version = "1.1"
    modalities = ("image/*",)
    requires = ("zxingcpp", "cv2", "PIL", "numpy")
    provides = ("codes", "qr")
    extra = "codes"
    budget_s = 2.0
    """Its own time per image: a 1080p frame takes 0.9 s median, 1.0 s p95 on the busy machine (0.17 s of CPU;
    docs/benchmarks.md)."""

    def __init__(self, *, limits: Limits | None = None, max_side: int = MAX_SIDE) -> None:
        self.limits = limits or Limits()
        self.max_side = max_side

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        rgb, back = image_array(data, self.limits, max_side=self.max_side)
        codes = read_codes(rgb, back)
        return {"codes": [c.to_json() for c in codes], "qr": sorted({c.text for c in codes if c.is_qr})}
