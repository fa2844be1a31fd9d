"""Parts fitted to their receivers through a real gateway and real a2a-sdk agents (images, audio, video)."""

from __future__ import annotations

import asyncio
import base64
import io
import struct
import wave
from typing import Any

import httpx
import numpy as np
import pytest
from google.protobuf import json_format

from mma2a.errors import InvalidParams
from mma2a.ext import EXTENSION_URI
from mma2a.gateway import parse_config
from mma2a.gateway.config import ConfigError
from tests.gateway.conftest import agent, agents, gateway, rpc

av = pytest.importorskip("av")
Image = pytest.importorskip("PIL.Image")


def wants(spec: tuple[Any, Any], accepts: dict[str, Any], **extra: Any) -> tuple[Any, Any]:
    """The agent's card asks, in the extension's params, for `accepts` (and `extra` params)."""
    card, executor = spec
    for ext in card.capabilities.extensions:
        if ext.uri == EXTENSION_URI:
            ext.params.update({"accepts": accepts, **extra})
    return card, executor


def photo(width: int, height: int, fmt: str = "JPEG") -> bytes:
    """A photo-like picture: gradients, a disc and some noise."""
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) * 255 // (width + height)], -1)
    disc = (x - width / 2) ** 2 + (y - height / 2) ** 2 < (min(width, height) / 4) ** 2
    rgb[disc] = (250, 200, 40)
    rgb = rgb + np.random.default_rng(1).integers(-12, 12, rgb.shape)
    out = io.BytesIO()
    Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(out, fmt, quality=90)
    return out.getvalue()


def wav48k(seconds: float) -> bytes:
    t = np.arange(int(48000 * seconds)) / 48000
    pcm = (0.4 * np.sin(2 * np.pi * 440 * t) * 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(48000)
        w.writeframes(pcm.tobytes())
    return out.getvalue()


def mp4(width: int, height: int, frames: int, fps: int = 30) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as oc:
        st = oc.add_stream("libx264", rate=fps)
        st.width, st.height, st.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.full((height, width, 3), i * 7 % 255, np.uint8), format="rgb24")
            for p in st.encode(frame):
                oc.mux(p)
        for p in st.encode(None):
            oc.mux(p)
    return buf.getvalue()


def part(data: bytes, media_type: str, filename: str | None = None) -> dict[str, Any]:
    p: dict[str, Any] = {"raw": base64.b64encode(data).decode(), "mediaType": media_type}
    if filename:
        p["filename"] = filename
    return p


async def send(url: str, *parts: dict[str, Any], mid: str = "a1") -> dict[str, Any]:
    doc = await rpc(url, "SendMessage", {"message": {"messageId": mid, "role": "ROLE_USER", "parts": list(parts)}})
    assert "result" in doc, doc
    return doc["result"]["task"]  # type: ignore[no-any-return]


def received(executor: Any, n: int = 0) -> list[dict[str, Any]]:
    return [json_format.MessageToDict(p) for p in executor.received[n].message.parts]


async def body_of(p: dict[str, Any]) -> bytes:
    if "raw" in p:
        return base64.b64decode(p["raw"])
    async with httpx.AsyncClient() as c:
        r = await c.get(p["url"])
    assert r.status_code == 200
    return r.content


def adapted(task: dict[str, Any], index: int = 0) -> list[dict[str, Any]]:
    route = task["metadata"][EXTENSION_URI]["route"]
    return next(r for r in route if r["index"] == index).get("adapted", [])


async def test_a_large_jpeg_reaches_a_1_mp_webp_agent_resized_by_reference_and_cached():
    src = photo(2400, 1800)  # 4.3 MP, over the offload threshold: travels by reference
    spec = wants(agent("vision", ["image/*"]), {"image/*": {"maxPixels": 1_000_000, "encodings": ["image/webp"]}})
    async with agents({"vision": spec}) as urls:
        async with gateway({"agents": [{"name": "vision", "url": urls["vision"]}]}) as (gw, url):
            first = await send(url, part(src, "image/jpeg", "shot.jpg"), mid="i1")
            second = await send(url, part(src, "image/jpeg", "shot.jpg"), mid="i2")
            got = received(spec[1])
            data = await body_of(got[0])
            async with httpx.AsyncClient() as c:
                metrics = (await c.get(url + "/metrics")).text
    p = got[0]
    assert p["mediaType"] == "image/webp" and p["filename"] == "shot.webp" and "url" in p
    ext = p["metadata"][EXTENSION_URI]
    assert ext["modality"] == "image/webp" and ext["adaptedFrom"]["modality"] == "image/jpeg"
    assert int(ext["adaptedFrom"]["size"]) == len(src) and int(ext["payload"]["size"]) == len(data)
    im = Image.open(io.BytesIO(data))
    assert im.format == "WEBP" and im.size[0] * im.size[1] <= 1_000_000 and im.size[0] * im.size[1] > 900_000
    assert abs(im.size[0] / im.size[1] - 4 / 3) < 0.01
    rec = adapted(first)
    assert len(rec) == 1 and rec[0]["agent"] == "vision" and rec[0]["from"] == "image/jpeg" and rec[0]["to"] == "image/webp"
    assert rec[0]["bytesBefore"] == len(src) and rec[0]["bytesAfter"] == len(data) and rec[0]["cached"] is False
    again = adapted(second)
    assert again[0]["cached"] is True and again[0]["bytesAfter"] == len(data)
    assert received(spec[1], 1)[0]["metadata"][EXTENSION_URI]["payload"]["sha256"] == ext["payload"]["sha256"]
    assert 'mma2a_adaptations_total{result="adapted"} 1.0' in metrics
    assert 'mma2a_adaptations_total{result="reused"} 1.0' in metrics
    assert f'mma2a_adapted_bytes_total{{side="after"}} {2 * len(data)}.0' in metrics


async def test_an_uploaded_blob_sent_by_url_is_adapted_and_a_forged_url_is_not():
    src = photo(1200, 900)
    spec = wants(agent("vision", ["image/*"]), {"image/*": {"maxPixels": 300_000, "encodings": ["image/webp"]}})
    async with agents({"vision": spec}) as urls:
        async with gateway({"agents": [{"name": "vision", "url": urls["vision"]}]}) as (gw, url):
            async with httpx.AsyncClient() as c:
                blob = (await c.post(url + "/blobs", content=src, headers={"Content-Type": "image/jpeg"})).json()
            good = await send(url, {"url": blob["url"], "mediaType": "image/jpeg"}, mid="u1")
            forged = blob["url"].replace("sig=", "sig=0")
            bad = await send(url, {"url": forged, "mediaType": "image/jpeg"}, mid="u2")
            got = [received(spec[1], 0)[0], received(spec[1], 1)[0]]
            data = await body_of(got[0])
    w, h = Image.open(io.BytesIO(data)).size
    assert got[0]["mediaType"] == "image/webp" and w * h <= 300_000 and abs(w / h - 4 / 3) < 0.01
    assert adapted(good)[0]["bytesBefore"] == len(src)
    assert got[1]["url"] == forged and got[1]["mediaType"] == "image/jpeg"  # forwarded as it came
    assert adapted(bad)[0]["error"].startswith("not adapted: ")


async def test_the_same_picture_sent_twice_at_once_is_adapted_once():
    src = photo(1600, 1200)
    spec = wants(agent("vision", ["image/*"]), {"image/*": {"maxPixels": 200_000, "encodings": ["image/webp"]}})
    async with agents({"vision": spec}) as urls:
        async with gateway({"agents": [{"name": "vision", "url": urls["vision"]}]}) as (gw, url):
            tasks = await asyncio.gather(*(send(url, part(src, "image/jpeg"), mid=f"twice-{i}") for i in range(2)))
            keys = {received(spec[1], i)[0]["metadata"][EXTENSION_URI]["payload"]["sha256"] for i in range(2)}
    records = sorted((adapted(t)[0] for t in tasks), key=lambda r: r["cached"])
    assert [r["cached"] for r in records] == [False, True] and len(keys) == 1


async def test_the_operators_profile_wins_over_the_card_and_a_small_part_stays_inline():
    src = photo(400, 300, "PNG")
    spec = wants(agent("vision", ["image/*"]), {"image/*": {"maxPixels": 100_000, "encodings": ["image/png"]}})
    cfg = {"name": "vision", "url": "", "accepts": {"image/*": {"max_pixels": 30_000, "encodings": ["image/jpeg"]}}}
    async with agents({"vision": spec}) as urls:
        async with gateway({"agents": [{**cfg, "url": urls["vision"]}]}) as (gw, url):
            task = await send(url, part(src, "image/png"))
    p = received(spec[1])[0]
    assert "raw" in p and p["mediaType"] == "image/jpeg"
    im = Image.open(io.BytesIO(base64.b64decode(p["raw"])))
    assert im.format == "JPEG" and im.size[0] * im.size[1] <= 30_000
    assert adapted(task)[0]["to"] == "image/jpeg" and p["metadata"][EXTENSION_URI]["encoding"] == "base64"


async def test_a_part_that_already_fits_and_an_agent_without_wishes_get_the_original():
    src = photo(200, 150)
    picky = wants(agent("picky", ["image/*"]), {"image/*": {"maxPixels": 1_000_000, "encodings": ["image/jpeg"]}})
    plain = agent("plain", ["image/*"])
    async with agents({"picky": picky, "plain": plain}) as urls:
        cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()],
               "rules": {"version": 1, "rules": [{"name": "both", "match": {"modality": "image/*"},
                                                  "action": {"clone_and_route_to": ["picky", "plain"]}}]}}
        async with gateway(cfg) as (gw, url):
            task = await send(url, part(src, "image/jpeg"))
    assert base64.b64decode(received(picky[1])[0]["raw"]) == src
    assert base64.b64decode(received(plain[1])[0]["raw"]) == src
    assert adapted(task) == []


def opus_input_rate(ogg: bytes) -> int:
    """The input sample rate an Ogg Opus stream declares in its OpusHead packet (RFC 7845)."""
    at = ogg.index(b"OpusHead")
    return int(struct.unpack_from("<I", ogg, at + 12)[0])


async def test_48_khz_wav_reaches_a_speech_agent_as_16_khz_opus():
    src = wav48k(3.0)
    spec = wants(agent("speech", ["audio/*"]), {"audio/*": {"sampleRate": 16000, "channels": 1,
                                                           "encodings": ["audio/ogg; codecs=opus"]}})
    async with agents({"speech": spec}) as urls:
        async with gateway({"agents": [{"name": "speech", "url": urls["speech"]}]}) as (gw, url):
            task = await send(url, part(src, "audio/wav", "talk.wav"))
            p = received(spec[1])[0]
            data = await body_of(p)
    assert p["mediaType"] == "audio/ogg; codecs=opus" and p["filename"] == "talk.ogg"
    assert opus_input_rate(data) == 16000
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.audio[0]
        assert s.codec_context.name == "opus" and s.codec_context.channels == 1
        assert abs(c.duration / 1e6 - 3.0) < 0.1
    rec = adapted(task)[0]
    assert rec["from"] == "audio/wav" and rec["bytesBefore"] == len(src) and rec["bytesAfter"] == len(data) < len(src) // 10


async def test_audio_to_flac_at_the_asked_rate():
    src = wav48k(1.0)
    spec = wants(agent("speech", ["audio/*"]), {"audio/*": {"sampleRate": 22050, "encodings": ["audio/flac"]}})
    async with agents({"speech": spec}) as urls:
        async with gateway({"agents": [{"name": "speech", "url": urls["speech"]}]}) as (gw, url):
            await send(url, part(src, "audio/wav"))
            data = await body_of(received(spec[1])[0])
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.audio[0]
        assert c.format.name == "flac" and s.codec_context.sample_rate == 22050
        samples = sum(f.samples for f in c.decode(s))
    assert abs(samples - 22050) < 64


async def test_video_is_scaled_and_retimed_for_the_receiver():
    src = mp4(320, 240, 30, fps=30)
    spec = wants(agent("watch", ["video/*"]), {"video/*": {"maxPixels": 160 * 120, "maxFps": 10}})
    async with agents({"watch": spec}) as urls:
        async with gateway({"agents": [{"name": "watch", "url": urls["watch"]}]}) as (gw, url):
            task = await send(url, part(src, "video/mp4"))
            data = await body_of(received(spec[1])[0])
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.video[0]
        frames = sum(1 for _ in c.decode(s))
        assert (s.codec_context.width, s.codec_context.height) == (160, 120)
    assert frames == 10
    assert "10 fps" in adapted(task)[0]["detail"]


async def test_corrupt_media_forwards_the_original_with_the_reason():
    bad = b"\x89PNG\r\n\x1a\n" + b"\x00" * 500
    spec = wants(agent("vision", ["image/*"]), {"image/*": {"maxPixels": 10_000}})
    async with agents({"vision": spec}) as urls:
        async with gateway({"agents": [{"name": "vision", "url": urls["vision"]}]}) as (gw, url):
            task = await send(url, part(bad, "image/png"))
    assert base64.b64decode(received(spec[1])[0]["raw"]) == bad
    rec = adapted(task)[0]
    assert rec["to"] == "image/png" and rec["error"].startswith("original forwarded: image:")


async def test_media_over_the_pixel_limit_is_not_decoded():
    spec = wants(agent("vision", ["image/*"]), {"image/*": {"maxPixels": 10_000}})
    async with agents({"vision": spec}) as urls:
        async with gateway({"agents": [{"name": "vision", "url": urls["vision"]}],
                            "features": {"enabled": False, "max_pixels": 50_000}}) as (gw, url):
            task = await send(url, part(photo(300, 200, "PNG"), "image/png"))
    assert "over the limit of 50000 pixels" in adapted(task)[0]["error"]


def test_a_bad_profile_in_gateway_yaml_names_the_field():
    with pytest.raises(ConfigError) as err:
        parse_config({"agents": [{"name": "v", "url": "http://x", "accepts": {"image/*": {"max_pixels": -1}}}]})
    assert err.value.field == "agents.0.accepts.image/*.max_pixels"
    with pytest.raises(ConfigError) as err:
        parse_config({"agents": [{"name": "v", "url": "http://x", "accepts": {"image/*": {"colour": "red"}}}]})
    assert "colour" in err.value.message
    with pytest.raises(ConfigError) as err:
        parse_config({"agents": [{"name": "v", "url": "http://x", "compress": ["brotli"]}]})
    assert err.value.field.startswith("agents.0.compress")


async def test_an_sdk_agent_declares_its_wishes_and_reads_what_the_gateway_fitted():
    from mma2a.sdk.consumer import MultimodalExecutor, run_agent

    class Measure(MultimodalExecutor):
        """Reads the picture it gets (from the gateway's store) and answers its size, format and the coding it came in."""

        async def handle(self, request: Any) -> str:
            part = request.parts[0]
            data = b"".join([chunk async for chunk in part.open()])
            im = Image.open(io.BytesIO(data))
            return f"{im.format} {im.size[0]}x{im.size[1]} {part.media_type}"

    executor = Measure(allow_private=True)
    card = executor.card("measure", "measures pictures", input_modes=["image/*", "text/plain"], streaming=False,
                         accepts={"image/*": {"maxPixels": 120_000, "encodings": ["image/png"]}},
                         content_encodings=["gzip"])
    src = photo(800, 600)
    async with run_agent(card, executor) as agent_url:
        async with gateway({"agents": [{"name": "measure", "url": agent_url}], "offload_threshold": 1024 * 1024}) as (gw, url):
            task = await send(url, part(src, "image/jpeg"), {"text": "x" * 8000})  # 8 KB of text: the body is coded
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    assert task["artifacts"][0]["parts"][0]["text"] == "PNG 400x300 image/png"
    assert adapted(task)[0]["to"] == "image/png"
    with pytest.raises(InvalidParams) as err:
        executor.card("bad", "bad", accepts={"image/*": {"maxPixels": "many"}})
    assert err.value.field == "params.accepts.maxPixels"
