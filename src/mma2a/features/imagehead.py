"""An image's width and height from a bounded prefix of its bytes, before any decoder sees it.

Pillow's lazy `Image.open` reads no pixel, but it walks a file's structure up to its image data in Python: a PNG's
chunks up to the first IDAT, a JPEG's segments up to the scan, a GIF's blocks up to the first frame. A PNG with
1.67 M empty private chunks between IHDR and IDAT (20 MB) held the thread that opened it for 3.5 s, and a JPEG whose
frame header sat after 1.1 MB of comments was not judged at all (the header "could not be read" in the first MiB).

`image_size(head, complete=...)` reads PNG, JPEG, GIF, BMP, WebP and TIFF itself, walking at most
`IMAGE_HEADER_BYTES` and `MAX_HEADER_BLOCKS` structures up to where the image data starts (where Pillow stops):
an image whose dimensions or image data are not found there is `HeadNotFound` (the caller refuses it, naming the
part). Other formats go to Pillow on the same prefix. Bytes no image decoder recognises are not an image (None).
"""

from __future__ import annotations

import io
import re
import warnings
from typing import Literal

IMAGE_HEADER_BYTES = 1 << 20
"""Bytes of an image read for its header (every structure before the image data must fit in them)."""
MAX_HEADER_BLOCKS = 4096
"""PNG chunks, JPEG segments or GIF extension blocks before the image data (a photo has a few dozen)."""

_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


class HeadNotFound(Exception):
    """An image format was recognised, but its dimensions or the start of its image data are not within the bound."""


def _be(b: bytes, at: int, n: int) -> int:
    return int.from_bytes(b[at:at + n], "big")


def _le(b: bytes, at: int, n: int) -> int:
    return int.from_bytes(b[at:at + n], "little")


def _short(b: bytes, at: int, n: int, what: str) -> None:
    if at + n > len(b):
        raise HeadNotFound(f"{what} not found in the first {len(b)} bytes")


def _png(b: bytes) -> tuple[int, int]:
    _short(b, 8, 25, "the IHDR chunk")
    if b[12:16] != b"IHDR":
        raise HeadNotFound("the first PNG chunk is not IHDR")
    size = (_be(b, 16, 4), _be(b, 20, 4))
    pos, blocks = 8, 0
    while True:
        _short(b, pos, 8, "the image data (IDAT)")
        if b[pos + 4:pos + 8] == b"IDAT":
            return size
        blocks += 1
        if blocks > MAX_HEADER_BLOCKS:
            raise HeadNotFound(f"more than {MAX_HEADER_BLOCKS} PNG chunks before the image data (IDAT)")
        if b[pos + 4:pos + 8] == b"IEND":
            raise HeadNotFound("no image data (IDAT) before IEND")
        pos += 12 + _be(b, pos, 4)


MAX_IDAT_CHUNKS = 65536
"""IDAT chunks of one PNG (encoders write 8-64 KiB each: 65536 of 8 KiB is 512 MiB of compressed pixels)."""
_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"


def png_for_decoder(data: bytes) -> bytes:
    """A PNG as a decoder should see it: everything up to the end of its image data, then IEND. Pillow walks the
    chunks after the image data in Python once it has decoded it (keeping every private one): 1.67 M empty chunks
    after IDAT held a decode for seconds and hundreds of MB. `HeadNotFound` past `MAX_IDAT_CHUNKS` IDAT chunks."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return data
    pos, idat = 8, 0
    n = len(data)
    while pos + 8 <= n:
        kind = data[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += 1
            if idat > MAX_IDAT_CHUNKS:
                raise HeadNotFound(f"more than {MAX_IDAT_CHUNKS} IDAT chunks")
        elif idat:  # the image data ended here (IDAT chunks are consecutive)
            return data if kind == b"IEND" else data[:pos] + _IEND
        elif idat == 0 and pos > IMAGE_HEADER_BYTES:
            raise HeadNotFound(f"the image data (IDAT) not found in the first {IMAGE_HEADER_BYTES} bytes")
        pos += 12 + _be(data, pos, 4)
    return data


def _jpeg(b: bytes) -> tuple[int, int]:
    pos, blocks, size = 2, 0, None
    while True:
        _short(b, pos, 2, "the frame header (SOF)" if size is None else "the start of scan (SOS)")
        if b[pos] != 0xFF:
            raise HeadNotFound(f"no JPEG marker at byte {pos}")
        marker = b[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        if marker == 0xD9:
            raise HeadNotFound("end of image before the scan")
        _short(b, pos, 4, "the frame header (SOF)" if size is None else "the start of scan (SOS)")
        if marker in _SOF:
            _short(b, pos, 9, "the frame header (SOF)")
            size = (_be(b, pos + 7, 2), _be(b, pos + 5, 2))
        elif marker == 0xDA:
            if size is None:
                raise HeadNotFound("no frame header (SOF) before the scan")
            return size
        blocks += 1
        if blocks > MAX_HEADER_BLOCKS:
            raise HeadNotFound(f"more than {MAX_HEADER_BLOCKS} JPEG segments before the scan")
        pos += 2 + _be(b, pos + 2, 2)


def _gif(b: bytes) -> tuple[int, int]:
    _short(b, 0, 13, "the logical screen")
    width, height, flags = _le(b, 6, 2), _le(b, 8, 2), b[10]
    pos, blocks = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0), 0
    while True:
        _short(b, pos, 1, "the first frame")
        kind = b[pos]
        if kind == 0x2C:  # image descriptor: a frame may reach past the screen (Pillow grows the canvas)
            _short(b, pos, 9, "the first frame")
            return (max(width, _le(b, pos + 1, 2) + _le(b, pos + 5, 2)),
                    max(height, _le(b, pos + 3, 2) + _le(b, pos + 7, 2)))
        if kind != 0x21:
            raise HeadNotFound("no frame before the GIF trailer" if kind == 0x3B else f"unknown GIF block at byte {pos}")
        blocks += 1
        if blocks > MAX_HEADER_BLOCKS:
            raise HeadNotFound(f"more than {MAX_HEADER_BLOCKS} GIF extension blocks before the first frame")
        pos += 2
        while True:  # data sub-blocks up to an empty one
            _short(b, pos, 1, "the first frame")
            if b[pos] == 0:
                pos += 1
                break
            pos += 1 + b[pos]


def _bmp(b: bytes) -> tuple[int, int] | None:
    if len(b) < 26:
        return None
    header = _le(b, 14, 4)
    if header == 12:  # OS/2 core header
        return _le(b, 18, 2), _le(b, 20, 2)
    if header not in (40, 52, 56, 64, 108, 124):  # not a bitmap: Pillow's own readers on the prefix
        return None
    return abs(int.from_bytes(b[18:22], "little", signed=True)), abs(int.from_bytes(b[22:26], "little", signed=True))


def _webp(b: bytes) -> tuple[int, int]:
    _short(b, 0, 30, "the WebP header")
    kind = b[12:16]
    if kind == b"VP8X":
        return 1 + _le(b, 24, 3), 1 + _le(b, 27, 3)
    if kind == b"VP8L":
        bits = _le(b, 21, 4)
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if kind == b"VP8 ":
        return _le(b, 26, 2) & 0x3FFF, _le(b, 28, 2) & 0x3FFF
    raise HeadNotFound(f"unknown WebP chunk {kind!r}")


def _tiff(b: bytes) -> tuple[int, int] | None:
    order: Literal["little", "big"] = "little" if b[:2] == b"II" else "big"
    if int.from_bytes(b[2:4], order) != 42:  # BigTIFF and others: Pillow's own reader on the prefix
        return None
    ifd = int.from_bytes(b[4:8], order)
    _short(b, ifd, 2, "the first image directory")
    found: dict[int, int] = {}
    for i in range(int.from_bytes(b[ifd:ifd + 2], order)):
        at = ifd + 2 + 12 * i
        _short(b, at, 12, "the image size tags")
        tag, kind = int.from_bytes(b[at:at + 2], order), int.from_bytes(b[at + 2:at + 4], order)
        if tag in (256, 257):
            found[tag] = int.from_bytes(b[at + 8:at + 10], order) if kind == 3 else int.from_bytes(b[at + 8:at + 12], order)
    if 256 not in found or 257 not in found:
        raise HeadNotFound("no image width or length in the first image directory")
    return found[256], found[257]


def _pillow(head: bytes, complete: bool) -> tuple[int, int] | None:
    """Another format: Pillow on the prefix (never a PNG, JPEG or GIF: those are walked above)."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(head)) as im:
                return int(im.size[0]), int(im.size[1])
    except Image.DecompressionBombError as exc:  # over twice Pillow's own limit: the message has the count
        found = re.search(r"\((\d+) pixels\)", str(exc))
        return (int(found.group(1)) if found else 1 << 62), 1
    except Exception:  # noqa: BLE001 - Pillow raises many types for bytes it cannot read
        pass
    if not complete and _pillow_would_try(head):
        raise HeadNotFound(f"no readable image header in the first {len(head)} bytes")
    return None  # no decoder takes these bytes: not an image (the decoder, if any, reports it)


def _pillow_would_try(head: bytes) -> bool:
    from PIL import Image

    Image.init()
    return any(accept is not None and accept(head[:16]) for _, accept in Image.OPEN.values())


def image_size(head: bytes, *, complete: bool) -> tuple[int, int] | None:
    """(width, height) of the image `head` starts (at most `IMAGE_HEADER_BYTES` of it; `complete`: the whole of it),
    or None when no image decoder recognises the bytes. `HeadNotFound` says why an image's size or the start of its
    image data is not within the prefix (a decoder would walk further than the bound: the caller refuses it). Bytes
    read in full whose structure is broken are left to the decoder (None): its walk is bounded by their size."""
    complete = complete and len(head) <= IMAGE_HEADER_BYTES
    head = head[:IMAGE_HEADER_BYTES]
    try:
        return _size(head, complete)
    except HeadNotFound:
        if complete:
            return None
        raise


def _size(head: bytes, complete: bool) -> tuple[int, int] | None:
    if head.startswith(b"\x89PNG\r\n\x1a\n"):  # PNG, JPEG and GIF walked here, never by Pillow on the prefix
        return _png(head)
    if head.startswith(b"\xff\xd8"):
        return _jpeg(head)
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return _gif(head)
    if head[:2] == b"BM" and (size := _bmp(head)) is not None:
        return size
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _webp(head)
    if head[:4] in (b"II*\x00", b"MM\x00*") and (size := _tiff(head)) is not None:
        return size
    return _pillow(head, complete)
