"""Drawn media for the evaluation: product photos with defects at known places, QR labels,
status-light panels. Deterministic for a seed (PIL drawing, numpy noise, PNG/JPEG encoding).
"""

from __future__ import annotations

import io
import random
from collections.abc import Sequence
from dataclasses import dataclass

RGB = tuple[int, int, int]

BACKGROUND: RGB = (226, 229, 233)
PANEL: RGB = (48, 51, 56)

@dataclass(frozen=True)
class Mark:
    """A defect to draw: a crack (a dark jagged line) or a dent (a dark spot), centred at (x, y)."""

    kind: str
    x: float
    y: float
    size: float = 1.0


@dataclass(frozen=True)
class Label:
    """A white label with a QR code of `text`, centred at (x, y)."""

    text: str
    x: float
    y: float


def qr_modules(text: str) -> list[list[int]]:
    """The QR code of `text` as rows of 0/1 modules (1 = dark), quiet zone included (OpenCV's encoder)."""
    import cv2

    code = cv2.QRCodeEncoder.create().encode(text)
    return [[1 if v < 128 else 0 for v in row] for row in code.tolist()]


def _draw_label(draw: object, label: Label, module: int) -> None:
    from PIL import ImageDraw

    assert isinstance(draw, ImageDraw.ImageDraw)
    rows = qr_modules(label.text)
    side = len(rows) * module
    x0, y0 = int(label.x - side / 2), int(label.y - side / 2)
    draw.rectangle((x0 - module, y0 - module, x0 + side + module, y0 + side + module), fill=(250, 250, 250))
    for r, row in enumerate(rows):
        for c, v in enumerate(row):
            if v:
                draw.rectangle((x0 + c * module, y0 + r * module, x0 + (c + 1) * module - 1, y0 + (r + 1) * module - 1), fill=(12, 12, 12))


def _draw_mark(draw: object, mark: Mark, rng: random.Random, scale: float) -> None:
    from PIL import ImageDraw

    assert isinstance(draw, ImageDraw.ImageDraw)
    ink = (rng.randint(10, 28),) * 3
    if mark.kind == "crack":
        length = 70 * scale * mark.size
        angle = rng.uniform(0, 3.1416)
        import math

        dx, dy = math.cos(angle), math.sin(angle)
        pts = []
        for i in range(6):
            t = (i / 5 - 0.5) * length
            jitter = rng.uniform(-6, 6) * scale
            pts.append((mark.x + dx * t - dy * jitter, mark.y + dy * t + dx * jitter))
        draw.line(pts, fill=ink, width=max(3, int(6 * scale)), joint="curve")
    else:
        r = rng.uniform(9, 14) * scale * mark.size
        draw.ellipse((mark.x - r, mark.y - r * 0.8, mark.x + r, mark.y + r * 0.8), fill=ink)


def _finish(img: object, rng: random.Random, fmt: str, noise: float) -> bytes:
    import numpy as np
    from PIL import Image

    assert isinstance(img, Image.Image)
    arr = np.asarray(img, dtype=np.float32)
    h, w = arr.shape[:2]
    gen = np.random.default_rng(rng.getrandbits(32))
    # uneven light across the frame, and sensor noise
    gx = np.linspace(-1, 1, w)[None, :, None] * rng.uniform(-10, 10)
    gy = np.linspace(-1, 1, h)[:, None, None] * rng.uniform(-10, 10)
    lit = arr + gx + gy + gen.normal(0, noise, arr.shape)
    out = Image.fromarray(np.clip(lit, 0, 255).astype(np.uint8), "RGB")
    buf = io.BytesIO()
    if fmt == "jpeg":
        out.save(buf, format="JPEG", quality=rng.choice((80, 88, 95)))
    else:
        out.save(buf, format="PNG")
    return buf.getvalue()


OBJECT_MARGIN = 0.06
"""The object fills the frame but this fraction on each side."""


def object_box(width: int, height: int) -> tuple[float, float, float, float]:
    return (width * OBJECT_MARGIN, height * OBJECT_MARGIN, width * (1 - OBJECT_MARGIN), height * (1 - OBJECT_MARGIN))


def product_photo(rng: random.Random, colour: RGB, marks: Sequence[Mark] = (), labels: Sequence[Label] = (), *,
                  size: tuple[int, int] = (640, 480), fmt: str = "png", noise: float = 3.0) -> bytes:
    """A product seen from the front: a rounded slab of `colour` filling the frame, with marks and labels."""
    from PIL import Image, ImageDraw

    w, h = size
    img = Image.new("RGB", size, BACKGROUND)
    d = ImageDraw.Draw(img)
    x0, y0, x1, y1 = object_box(w, h)
    edge = tuple(max(0, c - 30) for c in colour)
    d.rounded_rectangle((x0, y0, x1, y1), radius=int(min(w, h) * 0.05), fill=colour, outline=edge, width=3)
    scale = w / 640
    for label in labels:
        _draw_label(d, label, max(3, int(4 * scale)))
    for mark in marks:
        _draw_mark(d, mark, rng, scale)
    return _finish(img, rng, fmt, noise)


def units_photo(rng: random.Random, units: Sequence[tuple[RGB, str, bool]], *, unit_size: tuple[int, int] = (300, 400),
                fmt: str = "png", noise: float = 3.0) -> bytes:
    """Several units side by side, each with a QR label near its top; some cracked below the label."""
    from PIL import Image, ImageDraw

    uw, uh = unit_size
    gap = 40
    w, h = len(units) * (uw + gap) + gap, uh + 2 * gap
    img = Image.new("RGB", (w, h), BACKGROUND)
    d = ImageDraw.Draw(img)
    for i, (colour, serial, cracked) in enumerate(units):
        x0 = gap + i * (uw + gap)
        edge = tuple(max(0, c - 30) for c in colour)
        d.rounded_rectangle((x0, gap, x0 + uw, gap + uh), radius=18, fill=colour, outline=edge, width=3)
        _draw_label(d, Label(serial, x0 + uw / 2, gap + uh * 0.27), 4)
        if cracked:
            _draw_mark(d, Mark("crack", x0 + uw * rng.uniform(0.35, 0.65), gap + uh * rng.uniform(0.62, 0.8)), rng, 1.0)
    return _finish(img, rng, fmt, noise)


def status_panel(rng: random.Random, lights: Sequence[RGB], *, size: tuple[int, int] = (640, 360), fmt: str = "png",
                 noise: float = 3.0) -> bytes:
    """A device's front panel with a row of round status lights, left to right."""
    from PIL import Image, ImageDraw

    w, h = size
    img = Image.new("RGB", size, BACKGROUND)
    d = ImageDraw.Draw(img)
    x0, y0, x1, y1 = object_box(w, h)
    d.rounded_rectangle((x0, y0, x1, y1), radius=24, fill=PANEL, outline=(25, 25, 28), width=4)
    n = len(lights)
    r = 17 * w / 640
    cy = h * rng.uniform(0.42, 0.58)
    for i, colour in enumerate(lights):
        cx = x0 + (x1 - x0) * (i + 1) / (n + 1)
        d.ellipse((cx - r - 4, cy - r - 4, cx + r + 4, cy + r + 4), fill=(30, 30, 32))
        d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=colour)
    return _finish(img, rng, fmt, noise)
