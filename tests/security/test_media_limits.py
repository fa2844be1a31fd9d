"""Finding 4 (issue 14), as the attack: decompression bombs — a 13000×13000 PNG of a few hundred KB, a WAV that
declares ten hours — refused from their headers at the gateway (inline and uploaded), at a reference agent
reached through the a2a-sdk client, and by the SDK's consumer helpers; nothing decodes them."""

from __future__ import annotations

import base64
import hashlib
import io
import resource
import struct
import wave
import zlib

import httpx
import pytest
from a2a.types import Part
from google.protobuf import json_format

from mma2a.errors import MediaError, MMA2AError
from mma2a.features.base import Limits
from mma2a.features.probe import check_media
from mma2a.sdk.parts import view_parts
from tests.security.conftest import TOKEN, bearer, error_field, post, secured, send_body

pytest.importorskip("PIL")


def bomb_png(side: int = 13000) -> bytes:
    """A valid greyscale PNG of side×side zero pixels, compressed row by row (it never exists decoded here)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    z = zlib.compressobj(9)
    row = b"\0" * (side + 1)  # filter byte + pixels
    idat = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def long_wav(hours: float = 10.0) -> bytes:
    """A WAV whose header declares `hours` of 8 kHz audio, followed by one second of it."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\0\0" * 8000)
    data = bytearray(buf.getvalue())
    struct.pack_into("<I", data, 40, int(hours * 3600 * 8000 * 2))  # the data chunk's declared size
    return bytes(data)


def small_png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (32, 24), (10, 200, 30)).save(buf, "PNG")
    return buf.getvalue()


BOMB = bomb_png()


def test_the_bomb_is_small_and_its_header_says_what_it_would_cost() -> None:
    assert len(BOMB) < 600_000  # a few hundred KB on the wire; 169,000,000 pixels decoded
    with pytest.raises(MediaError) as err:
        check_media(BOMB, "image/png", Limits(), "part")
    assert err.value.message == ("part: image/png declares 13000x13000 = 169000000 pixels, over the limit of 40000000 "
                                 "(decompression bomb guard); not decoded")
    with pytest.raises(MediaError, match=r"declares 36000\.0 s, over the limit of 600 s"):
        check_media(long_wav(), "audio/wav", Limits(), "part")
    check_media(small_png(), "image/png", Limits(), "part")  # ordinary media passes


async def test_the_gateway_refuses_the_bomb_inline_declared_otherwise_and_uploaded() -> None:
    async with secured() as (gw, url, _):
        b64 = base64.b64encode(BOMB).decode()
        inline = await post(url, "/", send_body("bomb-1", parts=[{"raw": b64, "mediaType": "image/png"}]), bearer(TOKEN))
        disguised = await post(url, "/", send_body("bomb-2", parts=[{"raw": b64, "mediaType": "application/octet-stream"}]),
                               bearer(TOKEN))
        wav = await post(url, "/", send_body("bomb-3", parts=[{"raw": base64.b64encode(long_wav(20)).decode(),
                                                               "mediaType": "audio/wav"}]), bearer(TOKEN))
        ok = await post(url, "/", send_body("fine", parts=[{"raw": base64.b64encode(small_png()).decode(),
                                                            "mediaType": "image/png"}]), bearer(TOKEN))
        async with httpx.AsyncClient(timeout=60) as c:
            put = await c.post(url + "/blobs", content=BOMB, headers={"Content-Type": "image/png", **bearer(TOKEN)})
            begun = (await c.post(url + "/blobs/uploads", headers={"Upload-Media-Type": "application/octet-stream",
                                                                   **bearer(TOKEN)})).json()
            await c.patch(url + f"/blobs/uploads/{begun['uploadId']}", content=BOMB,
                          headers={"Upload-Offset": "0", **bearer(TOKEN)})
            finish = await c.post(url + f"/blobs/uploads/{begun['uploadId']}/finish", headers=bearer(TOKEN))
            try:
                await gw.store.stat(hashlib.sha256(BOMB).hexdigest())
                stored = True
            except MMA2AError:
                stored = False
        received = [m.message.message_id for spec in gw.test_specs.values() for m in spec[1].received]
    where = "params.message.parts[0].raw"
    for r in (inline, disguised, wav):
        err = r.json()["error"]
        assert err["code"] == -32602 and error_field(err) == where, err
    assert "13000x13000" in inline.json()["error"]["message"] and "13000x13000" in disguised.json()["error"]["message"]
    assert "72000.0 s, over the limit of 14400 s" in wav.json()["error"]["message"]
    assert ok.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert put.status_code == 400 and put.json()["error"]["reason"] == "media_error" and "13000x13000" in put.text
    assert finish.status_code == 400 and finish.json()["error"]["reason"] == "media_error"
    assert not stored  # the refused blob was deleted
    assert received == ["fine"]


async def test_a_reference_agent_reached_through_the_sdk_refuses_the_bomb_before_decoding() -> None:
    """Directly at the vision inspector (no gateway in front): the header check fails the task; nothing decodes."""
    pytest.importorskip("cv2")
    from mma2a.agents import vision
    from mma2a.agents.runtime import SkillExecutor, run_agent
    from tests.agents_ref.conftest import failure, raw_part, send

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, this process's peak so far
    async with run_agent(vision.card(), SkillExecutor(vision.reply)) as agent_url:
        task = await send(agent_url, [raw_part(BOMB, "image/png")])
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024  # before the models load
        fine = await send(agent_url, [raw_part(small_png(), "image/png")])
    assert "part 0 (image/png): image/png declares 13000x13000" in failure(task)
    assert fine["status"]["state"] == "TASK_STATE_COMPLETED"
    assert grown_mb < 150  # decoding it would take 169 MB grey, 507 MB as RGB (the finding: 142 → 1,458 MB)


async def test_the_sdk_consumer_helpers_check_before_they_decode() -> None:
    parts = [json_format.ParseDict({"raw": base64.b64encode(BOMB).decode(), "mediaType": "image/png"}, Part()),
             json_format.ParseDict({"raw": base64.b64encode(long_wav()).decode(), "mediaType": "audio/wav"}, Part()),
             json_format.ParseDict({"raw": base64.b64encode(small_png()).decode(), "mediaType": "image/png"}, Part())]
    bomb, wav, fine = view_parts(parts, None)
    with pytest.raises(MediaError, match=r"^part 0 \(image/png\): image/png declares 13000x13000"):
        await bomb.image()
    with pytest.raises(MediaError, match=r"^part 1 \(audio/wav\): audio/wav declares 36000\.0 s"):
        await wav.read_media()
    assert (await fine.image()).size == (32, 24)
    with pytest.raises(MediaError, match="declares 32x24 = 768 pixels, over the limit of 100"):
        await fine.image(limits=Limits(max_pixels=100))
