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


def _symbol(r: Any, back: float) -> Code:
    """One zxing-cpp result as a `Code`, named as the symbol is printed: an EAN-13 that starts with 0 is a
    UPC-A (the same bars; zxing-cpp reports it as its 13-digit GTIN), a UPC-E reads its own 8 digits."""
    fmt, text = _format_name(r.format), str(r.text)
    if fmt == "EAN13" and len(text) == 13 and text.startswith("0"):
        fmt, text = "UPCA", text[1:]
    elif fmt == "UPCE":
        short = (getattr(r, "extra", None) or {}).get("UPCE")
        text = str(short) if short else text
    pos = r.position
    quad = [(p.x, p.y) for p in (pos.top_left, pos.top_right, pos.bottom_right, pos.bottom_left)]
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
    if not found and max(grey.shape) <= SMALL_SIDE:
        found = _read_enlarged(grey)
        back /= 2
    out: dict[tuple[str, str], Code] = {}
    for r in found:
        code = _symbol(r, back)
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


class CodesExtractor:
    """codes (format, text, box) for every barcode, and qr (QR-family texts) with zxing-cpp (the `codes` extra)."""

    name = MODEL_NAME
    version = "1.0"
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
