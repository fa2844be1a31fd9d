"""Image facts with Pillow: format, size, mode, dominant colours, blur score and a tiny thumbnail;
and `read_picture`, the one way every image extractor and reference agent reads pixels.

The header is read first and the pixel count checked against `Limits.max_pixels` before a
single pixel is decoded (decompression bombs). Pixels are read as a viewer shows them: EXIF
orientation applied, 16-bit and float grey scaled to 8 bits (not clipped), transparent pixels on
white; a large JPEG is decoded at a reduced scale when only a smaller size is needed. Blur is the
variance of the Laplacian of the grey image scaled to at most 1024 px on its long side: low means
blurry.
"""

from __future__ import annotations

import io
import math
import re
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import MediaError
from ..ext import Thumbnail
from ..modality import Modality
from .base import THUMBNAIL_BUDGET, THUMBNAIL_KEY, Limits
from .imagehead import HeadNotFound, image_size, png_for_decoder
from .probe import head_refusal

if TYPE_CHECKING:
    from PIL.Image import Image

BLUR_SIDE = 1024
COLOR_COUNT = 5


UNDECODED_BRANDS = {"heic": "HEIC", "heix": "HEIC", "heim": "HEIC", "heis": "HEIC", "hevc": "HEIC", "hevx": "HEIC",
                    "mif1": "HEIF", "msf1": "HEIF"}
"""`ftyp` major brands of HEIF stills (an iPhone's photos) Pillow cannot read without `pillow-heif`, not installed here."""


def undecodable_kind(data: bytes) -> str | None:
    """The name of an image format these bytes are in that Pillow does not read here (HEIC, JPEG XL, SVG, PDF), so
    that the error names it rather than calling the bytes unknown; None otherwise."""
    from .containers import ftyp_brand

    head = data[:256]
    brand = ftyp_brand(head)
    if brand in UNDECODED_BRANDS:
        return f"{UNDECODED_BRANDS[brand]} (an HEIF photo: no HEIF decoder is installed)"
    if head[:2] == b"\xff\x0a" or head[:12] == b"\0\0\0\x0cJXL \r\n\x87\n":
        return "JPEG XL (no decoder installed)"
    if head[:5] == b"%PDF-":
        return "PDF (a document, not a picture)"
    if head[:4] == b"v/1\x01":
        return "OpenEXR (an HDR image: no decoder installed)"
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return "TIFF (floating-point or 64-bit samples, or a BigTIFF: Pillow reads neither)"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith(b"<svg") or (text.startswith((b"<?xml", b"<!doctype svg")) and b"<svg" in data[:4096].lower()):
        return "SVG (a vector drawing: nothing here renders it)"
    return None


def open_image(data: bytes, limits: Limits, what: str = "image", *, max_side: int | None = None) -> Image:
    """Open and fully decode an image, refusing it before decoding when it has too many pixels.

    With `max_side`, a JPEG is decoded at a reduced scale (libjpeg's DCT scaling, 1/2 to 1/8) that still
    covers `max_side` on its longest side: a 6000x4000 photo read for a 1024 px detector never holds its
    24 MP in memory. `im.size` is then the reduced size; the header's is in `im.info["mma2a.size"]`."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    limits.check_size(data, what)
    if not data:
        raise MediaError(f"{what}: empty payload (0 bytes)")
    try:  # Pillow walks a file's structure up to its image data: only when that lies in the bounded prefix
        image_size(data, complete=True)
        data = png_for_decoder(data)  # and never the chunks after a PNG's image data
    except HeadNotFound as exc:
        raise head_refusal(exc, "image", what) from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PILImage.DecompressionBombWarning)
            im = PILImage.open(io.BytesIO(data))
    except UnidentifiedImageError:
        known = undecodable_kind(data)
        if known is not None:
            raise MediaError(f"{what}: {known} is not decoded here ({len(data)} bytes); send it as JPEG, PNG or "
                             "WebP") from None
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
    if max_side is not None and im.format in ("JPEG", "MPO") and max(width, height) > 2 * max_side:
        scale = max_side / max(width, height)
        im.draft(im.mode, (max(1, math.ceil(width * scale)), max(1, math.ceil(height * scale))))
    try:
        im.load()
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise MediaError(f"{what}: cannot decode {im.format or 'image'} data: {exc}") from None
    im.info["mma2a.size"] = (width, height)
    return im


EXIF_ORIENTATION = 0x0112
SWAPS_SIDES = frozenset({5, 6, 7, 8})
"""EXIF orientations that turn the picture a quarter turn: the displayed width is the stored height."""

MATTE = (255, 255, 255)
"""What shows through transparent pixels: white, as a page or a browser shows a transparent PNG."""


@dataclass(frozen=True, slots=True)
class Picture:
    """An image as a viewer sees it: `rgb` (8-bit RGB, EXIF orientation applied, transparency on white, at most
    the `max_side` asked for), and the facts of the file: its displayed `width` and `height` at full size, its
    `mode` and `format`, its number of `frames` (an animation's first frame is the picture)."""

    rgb: Image
    width: int
    height: int
    mode: str
    format: str | None
    frames: int = 1
    alpha: Image | None = None
    """The transparency (`L`, the size of `rgb`) of an image that has some; None for an opaque one."""

    @property
    def back(self) -> float:
        """The factor from `rgb`'s pixel coordinates to the full-size image's (1.0 when not scaled)."""
        return max(self.width, self.height) / max(self.rgb.size)

    def with_alpha(self) -> Image:
        """`rgb` with its transparency (RGBA), or `rgb` itself when opaque."""
        if self.alpha is None:
            return self.rgb
        out = self.rgb.copy()
        out.putalpha(self.alpha)
        return out


def orientation(im: Image) -> int:
    """The EXIF orientation tag (1-8; 1 = as stored)."""
    try:
        value = im.getexif().get(EXIF_ORIENTATION, 1)
    except Exception:  # noqa: BLE001 - a corrupt EXIF block is no orientation
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def to_8bit(im: Image) -> Image:
    """Grey images deeper than 8 bits (16-bit PNG `I;16`, 32-bit `I`, float `F`) as 8-bit `L`, their range
    kept: Pillow's own conversion clips at 255, so a 16-bit photo turns white and a 0-1 float one black."""
    import numpy as np
    from PIL import Image as PILImage

    a = np.asarray(im)
    if a.size == 0:
        return PILImage.new("L", im.size)
    a = a.astype(np.float64)
    lo, hi = float(a.min()), float(a.max())
    if im.mode == "F" and lo >= 0.0 and hi <= 1.0:
        a = a * 255.0  # a float image in [0, 1]
    elif lo >= 0.0 and hi <= 255.0:
        pass  # already in the 8-bit range
    elif lo >= 0.0 and hi <= 65535.0:
        a = a / 257.0  # 16-bit samples
    else:
        a = (a - lo) * (255.0 / (hi - lo))  # anything else: stretched to its own range
    return PILImage.fromarray(np.clip(np.rint(a), 0, 255).astype(np.uint8), "L")


def to_rgb(im: Image, matte: tuple[int, int, int] = MATTE) -> tuple[Image, Image | None]:
    """8-bit RGB of any Pillow mode, and its transparency (None when opaque): deep grey scaled to 8 bits
    (`to_8bit`), transparent pixels composited on `matte` (what shows, not the colour a transparent pixel hides)."""
    from PIL import Image as PILImage

    if im.mode in ("I", "F") or im.mode.startswith("I;"):
        im = to_8bit(im)
    if im.mode == "P":
        im = im.convert("RGBA" if "transparency" in im.info else "RGB")
    elif im.mode in ("LA", "La", "RGBa", "PA") or (im.mode in ("L", "RGB") and "transparency" in im.info):
        im = im.convert("RGBA")
    if im.mode == "RGBA":
        alpha = im.getchannel("A")
        if alpha.getextrema() == (255, 255):
            return im.convert("RGB"), None
        base = PILImage.new("RGB", im.size, matte)
        base.paste(im, mask=alpha)
        return base, alpha
    try:
        return (im if im.mode == "RGB" else im.convert("RGB")), None
    except ValueError as exc:
        raise MediaError(f"image: pixel mode {im.mode} cannot be shown as RGB: {exc}") from None


def read_picture(data: bytes, limits: Limits, *, max_side: int | None = None, what: str = "image") -> Picture:
    """The image in `data` as a viewer sees it (`Picture`), scaled to at most `max_side` on its longest side
    when that is given; the pixel limit is checked from the header before anything is decoded."""
    from PIL import Image as PILImage

    im = open_image(data, limits, what, max_side=max_side)
    width, height = im.info.get("mma2a.size", im.size)
    mode, fmt, frames = im.mode, im.format, int(getattr(im, "n_frames", 1) or 1)
    if fmt == "MPO":  # a JPEG with a second picture after it (a phone's depth map, a 3D camera's other eye): a viewer
        fmt, frames = "JPEG", 1  # shows the first; it read as format `mpo`, 2 frames, and was decoded at full size
    turn = orientation(im)
    if max_side is not None and max(im.size) > max_side:
        factor = max(im.size) // max_side
        if factor >= 2:  # a cheap box reduction first, in the stored mode (a 36 MP grey scan is not made RGB)
            try:
                im = im.reduce(factor)
            except (ValueError, NotImplementedError):
                pass
    rgb, alpha = to_rgb(im)
    if turn != 1:
        rgb, alpha = _turn(rgb, turn), (_turn(alpha, turn) if alpha is not None else None)
    if max_side is not None and max(rgb.size) > max_side:
        scale = max_side / max(rgb.size)
        size = (max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale)))
        rgb = rgb.resize(size, PILImage.Resampling.BILINEAR)
        alpha = alpha.resize(size, PILImage.Resampling.BILINEAR) if alpha is not None else None
    if turn in SWAPS_SIDES:
        width, height = height, width
    return Picture(rgb, int(width), int(height), mode, fmt, frames, alpha)


def _turn(im: Image, tag: int) -> Image:
    """`im` turned or mirrored as EXIF orientation `tag` says (the EXIF specification's eight cases)."""
    from PIL import Image as PILImage

    op = {2: PILImage.Transpose.FLIP_LEFT_RIGHT, 3: PILImage.Transpose.ROTATE_180, 4: PILImage.Transpose.FLIP_TOP_BOTTOM,
          5: PILImage.Transpose.TRANSPOSE, 6: PILImage.Transpose.ROTATE_270, 7: PILImage.Transpose.TRANSVERSE,
          8: PILImage.Transpose.ROTATE_90}.get(tag)
    return im.transpose(op) if op is not None else im


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
        pic = read_picture(data, self.limits, max_side=BLUR_SIDE)
        out: dict[str, Any] = {
            "format": (pic.format or modality.subtype).lower(),
            "width": pic.width,
            "height": pic.height,
            "mode": pic.mode,
            "dominantColors": dominant_colors(pic.rgb),
            "blur": blur_score(pic.rgb),
        }
        if pic.frames > 1:
            out["frames"] = pic.frames  # an animation: the facts are its first frame's
        if self.thumbnail:
            out[THUMBNAIL_KEY] = make_thumbnail(pic.with_alpha())
        return out


def image_array(data: bytes, limits: Limits, *, max_side: int, what: str = "image") -> tuple[Any, float]:
    """RGB pixels (uint8, height x width x 3) scaled to at most `max_side` on the long side, and the
    factor that maps their coordinates back to the original's (1.0 when not scaled): the picture as a viewer
    sees it (`read_picture`: EXIF orientation applied, deep grey scaled, transparency on white)."""
    import numpy as np

    pic = read_picture(data, limits, max_side=max_side, what=what)
    return np.ascontiguousarray(np.asarray(pic.rgb, dtype=np.uint8)), pic.back


LONG_ASPECT = 2.5
"""A picture more than this many times as long as it is wide (a panorama, a banner, a strip of photos) is looked at
square-ish piece by piece by the detectors that squash or shrink a whole picture (objects, faces: `spans`)."""
MAX_PIECES = 6


def long_picture(data: bytes) -> tuple[int, int] | None:
    """(long side, short side) of an image whose header says it is over `LONG_ASPECT` times as long as it is wide;
    None for any other shape, or when its header cannot be read here (the reader then says why)."""
    from .imagehead import HeadNotFound, image_size

    try:
        size = image_size(data, complete=True)
    except HeadNotFound:
        return None
    if not size or min(size) < 1 or max(size) <= LONG_ASPECT * min(size):
        return None
    return max(size), min(size)


def spans(long: int, short: int, pieces: int = MAX_PIECES) -> list[tuple[int, int]]:
    """Where the pieces of a picture `long` x `short` pixels lie along its long side: squares of its short side (or
    longer, so that at most `pieces` cover it) overlapping by a quarter, the last one ending at its end."""
    size = max(short, math.ceil(long / (1 + 0.75 * (pieces - 1))))
    if long <= size:
        return [(0, long)]
    n = min(pieces, -(-(long - size) * 4 // (3 * size)) + 1)
    step = (long - size) / max(1, n - 1)
    return [(round(i * step), round(i * step) + size) for i in range(n)]


def overlap(a: list[int], b: list[int]) -> float:
    """The share of the smaller of boxes `a` and `b` (x0, y0, x1, y1) that the other covers."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    smaller = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return w * h / smaller if smaller > 0 else 0.0


def quad_box(points: Any, back: float = 1.0) -> list[int]:
    """The axis-aligned box `[x0, y0, x1, y1]` (original pixels) around a quadrilateral's points."""
    xs = [float(p[0]) for p in points]
    ys = [float(p[1]) for p in points]
    return [int(min(xs) * back), int(min(ys) * back), int(round(max(xs) * back)), int(round(max(ys) * back))]
