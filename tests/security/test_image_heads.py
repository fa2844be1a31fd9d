"""Security round 4 (issue 31), findings 4 and 10, as the attacks: an image's header is read within a bounded prefix
(`IMAGE_HEADER_BYTES`), off the event loop, chunk walks included. A 12000x12000 JPEG whose frame header sits after
1.1 MB of comments and a PNG with 1.67 M empty private chunks between IHDR and IDAT (20 MB) are refused, naming the
part, at upload and as raw parts; ordinary images of every format keep their size."""

from __future__ import annotations

import base64
import hashlib
import io
import struct
import zlib

import httpx
import pytest

from mma2a.errors import MediaError, MMA2AError
from mma2a.features.base import Limits
from mma2a.features.image import read_picture
from mma2a.features.imagehead import IMAGE_HEADER_BYTES, MAX_HEADER_BLOCKS, HeadNotFound, image_size
from mma2a.features.probe import check_media
from tests.security.conftest import TOKEN, bearer, error_field, post, secured, send_body

PIL = pytest.importorskip("PIL")


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def chunk_walk_png(empty_chunks: int = 1_670_000) -> bytes:
    """IHDR (64x64 grey), `empty_chunks` empty private chunks, then IDAT and IEND: 20 MB of chunk headers."""
    empty = chunk(b"prVt", b"")
    idat = zlib.compress(b"\0" * (65 * 64))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 64, 8, 0, 0, 0, 0))
            + empty * empty_chunks + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def padded_jpeg(side: int = 12000, padding: int = 1_100_000) -> bytes:
    """A JPEG whose SOF (side x side) sits after `padding` bytes of COM segments (a real small JPEG's SOF patched)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (16, 16), 128).save(buf, "JPEG")
    data = bytearray(buf.getvalue())
    sof = data.index(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, side, side)
    com = b"\xff\xfe" + struct.pack(">H", 65535) + b"c" * 65533
    pad = com * (padding // len(com) + 1)
    return bytes(data[:2] + pad + data[2:])


def real(fmt: str, size: tuple[int, int] = (37, 23), **kw: object) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, (10, 200, 30)).save(buf, fmt, **kw)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "BMP", "WEBP", "TIFF", "PPM", "ICO"])
def test_ordinary_images_keep_their_size(fmt: str) -> None:
    data = real(fmt, (37, 23) if fmt != "ICO" else (32, 32))
    assert image_size(data, complete=True) == ((37, 23) if fmt != "ICO" else (32, 32))


def test_an_image_with_a_large_but_honest_header_still_passes() -> None:
    """600 KB of text chunks before the image data (under the bound): read, judged, passed."""
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    for i in range(20):
        info.add_text(f"k{i}", "x" * 30_000)
    buf = io.BytesIO()
    Image.new("RGB", (40, 30)).save(buf, "PNG", pnginfo=info)
    assert image_size(buf.getvalue(), complete=True) == (40, 30)


def test_the_attacks_are_refused_from_a_bounded_prefix() -> None:
    png, jpeg = chunk_walk_png(), padded_jpeg()
    assert len(png) > 20_000_000 and len(jpeg) > 1_100_000
    with pytest.raises(HeadNotFound) as walk:
        image_size(png, complete=True)
    assert str(walk.value) == f"more than {MAX_HEADER_BLOCKS} PNG chunks before the image data (IDAT)"
    with pytest.raises(HeadNotFound) as sof:
        image_size(jpeg, complete=True)
    assert str(sof.value) == f"the frame header (SOF) not found in the first {IMAGE_HEADER_BYTES} bytes"
    with pytest.raises(MediaError) as err:
        check_media(jpeg[:IMAGE_HEADER_BYTES], "image/jpeg", Limits(), "body", complete=False)
    assert err.value.message == (f"body: image/jpeg: the frame header (SOF) not found in the first {IMAGE_HEADER_BYTES} "
                                 f"bytes; an image's header must lie in its first {IMAGE_HEADER_BYTES} bytes (not decoded)")
    # the same JPEG with its SOF inside the prefix: judged by its size, as before
    with pytest.raises(MediaError, match="declares 12000x12000 = 144000000 pixels"):
        check_media(padded_jpeg(padding=300_000), "image/jpeg", Limits(), "body")
    # the decoders every extractor and agent use refuse it too, before Pillow walks anything
    with pytest.raises(MediaError) as dec:
        read_picture(png, Limits(max_bytes=1 << 30))
    assert dec.value.message.startswith(f"image: image: more than {MAX_HEADER_BLOCKS} PNG chunks before the image data")


async def test_the_gateway_refuses_both_inline_and_uploaded() -> None:
    png, jpeg = chunk_walk_png(), padded_jpeg()
    async with secured() as (gw, url, _):
        inline = await post(url, "/", send_body("walk-1", parts=[{"raw": base64.b64encode(png).decode(),
                                                                   "mediaType": "image/png"}]), bearer(TOKEN))
        disguised = await post(url, "/", send_body("walk-2", parts=[{"raw": base64.b64encode(jpeg).decode(),
                                                                      "mediaType": "application/octet-stream"}]),
                               bearer(TOKEN))
        async with httpx.AsyncClient(timeout=60) as c:
            put = await c.post(url + "/blobs", content=jpeg, headers={"Content-Type": "image/jpeg", **bearer(TOKEN)})
            put_png = await c.post(url + "/blobs", content=png, headers={"Content-Type": "image/png", **bearer(TOKEN)})
            try:
                await gw.store.stat(hashlib.sha256(jpeg).hexdigest())
                stored = True
            except MMA2AError:
                stored = False
        received = [m.message.message_id for spec in gw.test_specs.values() for m in spec[1].received]
    where = "params.message.parts[0].raw"
    err = inline.json()["error"]
    assert err["code"] == -32602 and error_field(err) == where
    assert err["message"] == (f"{where}: image/png: more than {MAX_HEADER_BLOCKS} PNG chunks before the image data "
                              f"(IDAT); an image's header must lie in its first {IMAGE_HEADER_BYTES} bytes (not decoded)")
    assert disguised.json()["error"]["message"].startswith(f"{where}: image/*: the frame header (SOF) not found")
    assert put.status_code == 400 and put.json()["error"]["message"].startswith(
        "body: image/jpeg: the frame header (SOF) not found in the first 1048576 bytes")
    assert put_png.status_code == 400 and "PNG chunks before the image data" in put_png.json()["error"]["message"]
    assert not stored and received == []


def test_chunks_after_the_image_data_are_never_walked_by_a_decoder() -> None:
    """The same padding after IDAT: the header is fine, so the decoders see the PNG cut after its image data."""
    from mma2a.features.imagehead import MAX_IDAT_CHUNKS, png_for_decoder

    empty = chunk(b"prVt", b"")
    head = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 64, 8, 0, 0, 0, 0))
    body = chunk(b"IDAT", zlib.compress(b"\0" * (65 * 64)))
    tail_padded = head + body + empty * 1_670_000 + chunk(b"IEND", b"")
    cut = png_for_decoder(tail_padded)
    assert cut == head + body + chunk(b"IEND", b"")  # what Pillow gets: 1.67 M chunks never walked nor kept
    assert png_for_decoder(cut) is cut  # a PNG that ends after its image data is given as it is
    pic = read_picture(tail_padded, Limits(max_bytes=1 << 30))
    assert (pic.width, pic.height) == (64, 64)
    many = head + chunk(b"IDAT", b"") * (MAX_IDAT_CHUNKS + 1) + chunk(b"IEND", b"")
    with pytest.raises(MediaError) as err:
        read_picture(many, Limits(max_bytes=1 << 30))
    assert err.value.message.startswith(f"image: image: more than {MAX_IDAT_CHUNKS} IDAT chunks")
