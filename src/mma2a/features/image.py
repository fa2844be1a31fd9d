"""Image facts with Pillow: format, size, mode, dominant colours, blur score and a tiny thumbnail.

The header is read first and the pixel count checked against `Limits.max_pixels` before a
single pixel is decoded (decompression bombs). Blur is the variance of the Laplacian of
the grey image scaled to at most 1024 px on its long side: low means blurry.
"""

from __future__ import annotations

import io
import re
import warnings
from typing import TYPE_CHECKING, Any

from ..errors import MediaError
from ..ext import Thumbnail
from ..modality import Modality
from .base import THUMBNAIL_BUDGET, THUMBNAIL_KEY, Limits

if TYPE_CHECKING:
    from PIL.Image import Image

BLUR_SIDE = 1024
COLOR_COUNT = 5


def open_image(data: bytes, limits: Limits, what: str = "image") -> Image:
    """Open and fully decode an image, refusing it before decoding when it has too many pixels."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    limits.check_size(data, what)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PILImage.DecompressionBombWarning)
            im = PILImage.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise MediaError(f"{what}: not a readable image (unknown or corrupt format, {len(data)} bytes)") from None
    except (PILImage.DecompressionBombError, PILImage.DecompressionBombWarning) as exc:
        found = re.search(r"\((\d+) pixels\)", str(exc))
        count = f"{found.group(1)} pixels" if found else "too many pixels"
        raise MediaError(
            f"{what}: {count} is over the limit of {limits.max_pixels} pixels (decompression bomb guard); not decoded"
        ) from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise MediaError(f"{what}: corrupt image header: {exc}") from None
    width, height = im.size
    limits.check_pixels(width, height, what)
    try:
        im.load()
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise MediaError(f"{what}: cannot decode {im.format or 'image'} data: {exc}") from None
    return im


def make_thumbnail(im: Image, budget: int = THUMBNAIL_BUDGET) -> Thumbnail:
    """A JPEG (or PNG when the image has transparency) preview that fits in `budget` bytes."""
    from PIL import Image as PILImage

    alpha = im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info)
    base = im.convert("RGBA" if alpha else "RGB")
    for side in (128, 96, 64, 48, 32, 16):
        small = base.copy()
        small.thumbnail((side, side), PILImage.Resampling.BILINEAR)
        for quality in ((None,) if alpha else (70, 50, 30)):
            buf = io.BytesIO()
            if alpha:
                small.quantize(64).save(buf, "PNG", optimize=True)
            else:
                small.save(buf, "JPEG", quality=quality, optimize=True)
            if buf.tell() <= budget:
                return Thumbnail("image/png" if alpha else "image/jpeg", buf.getvalue())
    raise MediaError("image: could not make a thumbnail within the size budget")


def dominant_colors(im: Image, count: int = COLOR_COUNT) -> list[str]:
    """The most common colours (hex, most frequent first) of a 64x64 median-cut quantisation."""
    from PIL import Image as PILImage

    small = im.convert("RGB").resize((64, 64), PILImage.Resampling.BILINEAR)
    quant = small.quantize(colors=count, method=PILImage.Quantize.MEDIANCUT)
    palette: list[int] = list(quant.getpalette() or [])
    counts = [(int(n), i) for n, i in (quant.getcolors() or []) if isinstance(i, int)]  # (count, palette index)
    out: list[str] = []
    for _, index in sorted(counts, key=lambda c: (-c[0], c[1])):
        r, g, b = palette[3 * index : 3 * index + 3]
        hexc = f"#{r:02x}{g:02x}{b:02x}"
        if hexc not in out:
            out.append(hexc)
    return out


def blur_score(im: Image) -> float:
    """Variance of the 4-neighbour Laplacian of the grey image (scaled to at most BLUR_SIDE px)."""
    import numpy as np
    from PIL import Image as PILImage

    grey = im.convert("L")
    if max(grey.size) > BLUR_SIDE:
        grey = grey.copy()
        grey.thumbnail((BLUR_SIDE, BLUR_SIDE), PILImage.Resampling.BILINEAR)
    a = np.asarray(grey, dtype=np.float32)
    if a.shape[0] < 3 or a.shape[1] < 3:
        return 0.0
    lap = a[1:-1, :-2] + a[1:-1, 2:] + a[:-2, 1:-1] + a[2:, 1:-1] - 4.0 * a[1:-1, 1:-1]
    return round(float(lap.var()), 2)


class ImageExtractor:
    """Format, width, height, mode, dominantColors, blur and a thumbnail (Pillow, numpy)."""

    name = "pillow-image"
    version = "1.0"
    modalities = ("image/*",)
    requires = ("PIL", "numpy")
    extra = "vision"

    def __init__(self, *, limits: Limits | None = None, thumbnail: bool = True) -> None:
        self.limits = limits or Limits()
        self.thumbnail = thumbnail

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        im = open_image(data, self.limits)
        out: dict[str, Any] = {
            "format": (im.format or modality.subtype).lower(),
            "width": im.size[0],
            "height": im.size[1],
            "mode": im.mode,
            "dominantColors": dominant_colors(im),
            "blur": blur_score(im),
        }
        if self.thumbnail:
            out[THUMBNAIL_KEY] = make_thumbnail(im)
        return out


def image_array(data: bytes, limits: Limits, *, max_side: int, what: str = "image") -> tuple[Any, float]:
    """RGB pixels (uint8, height x width x 3) scaled to at most `max_side` on the long side, and the
    factor that maps their coordinates back to the original's (1.0 when not scaled)."""
    import numpy as np
    from PIL import Image as PILImage

    im = open_image(data, limits, what).convert("RGB")
    width, height = im.size
    scale = min(1.0, max_side / max(width, height))
    if scale < 1.0:
        im = im.resize((max(1, round(width * scale)), max(1, round(height * scale))), PILImage.Resampling.BILINEAR)
    return np.ascontiguousarray(np.asarray(im, dtype=np.uint8)), 1.0 / scale


def quad_box(points: Any, back: float = 1.0) -> list[int]:
    """The axis-aligned box `[x0, y0, x1, y1]` (original pixels) around a quadrilateral's points."""
    xs = [float(p[0]) for p in points]
    ys = [float(p[1]) for p in points]
    return [int(min(xs) * back), int(min(ys) * back), int(round(max(xs) * back)), int(round(max(ys) * back))]
