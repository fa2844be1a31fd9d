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


def read_codes(rgb: Any, back: float = 1.0) -> list[Code]:
    """Every barcode in RGB pixels, left to right then top to bottom (blocking, a few ms)."""
    import cv2
    import zxingcpp

    grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    out: dict[tuple[str, str], Code] = {}
    for r in zxingcpp.read_barcodes(grey):
        if not r.valid or not r.text:
            continue
        pos = r.position
        quad = [(p.x, p.y) for p in (pos.top_left, pos.top_right, pos.bottom_right, pos.bottom_left)]
        code = Code(_format_name(r.format), r.text, quad_box(quad, back))
        out.setdefault((code.format, code.text), code)
    return sorted(out.values(), key=lambda c: (c.box[0], c.box[1], c.text))


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
