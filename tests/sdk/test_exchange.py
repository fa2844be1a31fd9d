"""Producer and consumer through a real gateway: images with features, big payloads by reference, live streams."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from mma2a.sdk import Blob, Live, MultimodalClient
from tests.media import png_bytes, wav_bytes
from tests.sdk.conftest import consumer_behind_gateway


async def test_image_with_features_reaches_the_consumer(tmp_path: Path) -> None:
    img = tmp_path / "crack.png"
    img.write_bytes(png_bytes(64, 48))
    async with consumer_behind_gateway(tmp_path) as (consumer, _, gw):
        async with await MultimodalClient.connect(gw, extract_features=True) as client:
            reply = await client.send(img, text="inspect this")
    assert reply.ok and reply.state == "completed"
    assert reply.text == "text/plain: 12 bytes\nimage/png: %d bytes" % img.stat().st_size
    text, image = consumer.saved[0]
    assert image.extension and image.kind == "raw" and image.sha256 == hashlib.sha256(img.read_bytes()).hexdigest()
    assert image.features["width"] == 64 and image.features["height"] == 48
    assert consumer.messages[0].parts[1].thumbnail is not None
    assert [r["targets"] for r in reply.route] == [["inspector"], ["inspector"]]


def _fake_video(path: Path, size: int) -> str:
    """`size` bytes that sniff as MP4 (an `ftyp` box) followed by random bytes: not a playable video, which is
    all a by-reference transfer needs. Written 1 MiB at a time; returns the SHA-256."""
    digest = hashlib.sha256()
    with path.open("wb") as f:
        head = b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2"
        f.write(head)
        digest.update(head)
        left = size - len(head)
        while left:
            block = os.urandom(min(left, 1 << 20))
            f.write(block)
            digest.update(block)
            left -= len(block)
    return digest.hexdigest()


async def test_100_mb_video_goes_by_reference_with_memory_bounded(tmp_path: Path) -> None:
    import tracemalloc

    video = tmp_path / "line-3.mp4"
    size = 100 * 1024 * 1024
    sha = _fake_video(video, size)
    async with consumer_behind_gateway(tmp_path) as (consumer, _, gw):
        async with await MultimodalClient.connect(gw, extract_features=True) as client:
            tracemalloc.start()
            try:
                reply = await client.send(video, to="inspector")
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
    assert reply.ok, reply.status_text
    [got] = consumer.saved[0]
    part = consumer.messages[0].parts[0]
    assert got.modality == "video/mp4" and got.kind == "url" and part.url.startswith(gw + "/blobs/")
    assert part.payload is not None and part.payload.sha256 == sha and part.payload.size == size
    assert got.sha256 == sha and got.size == size  # byte for byte, as the consumer read it
    assert got.features["size"] == size and got.features["sha256"] == sha  # cheap producer facts for a big file
    # producer upload, gateway store, consumer download all ran in this process: chunks, never the whole payload
    assert peak < 48 * 1024 * 1024, f"peak traced memory {peak / 2**20:.1f} MiB"


async def _mic(audio: bytes, chunk: int = 3200) -> AsyncIterator[bytes]:
    """A "live" source: the recording in 100 ms chunks, as a microphone would deliver them."""
    for i in range(0, len(audio), chunk):
        yield audio[i : i + chunk]
        await asyncio.sleep(0.002)


async def test_live_audio_stream_arrives_byte_for_byte(tmp_path: Path) -> None:
    audio = wav_bytes(seconds=6.0)
    async with consumer_behind_gateway(tmp_path) as (consumer, _, gw):
        async with await MultimodalClient.connect(gw) as client:
            reply = await client.send(Live(_mic(audio)), text="listen")
    assert reply.ok, reply.status_text
    text, got = consumer.saved[0]
    part = consumer.messages[0].parts[1]
    assert got.stream and got.modality == "audio/wav" and part.stream is not None and part.stream.url.startswith("ws://")
    assert got.size == len(audio) and got.sha256 == hashlib.sha256(audio).hexdigest()
    assert (tmp_path / f"{consumer.messages[0].message_id}-1").read_bytes() == audio


async def test_explicit_receivers_and_automatic_routing(tmp_path: Path) -> None:
    from tests.gateway.conftest import agent, agents

    specs = {"texter": agent("texter", ["text/plain"])}
    async with agents(specs) as urls, consumer_behind_gateway(tmp_path, input_modes=("image/*", "text/plain"),
                                                              extra_agents=urls) as (consumer, _, gw):
        async with await MultimodalClient.connect(gw) as client:
            auto = await client.send(Blob(png_bytes()), "a note")
            explicit = await client.send("a note for the texter", to="texter")
    auto_targets = {r["modality"]: r["targets"] for r in auto.route}
    assert auto_targets["image/png"] == ["inspector"] and auto.route[0]["actions"] == ["capability:any"]
    assert explicit.route[0]["targets"] == ["texter"] and "receivers:texter" in explicit.route[0]["actions"]
    assert explicit.text == "texter ok"
    assert specs["texter"][1].received[-1].message.parts[0].text == "a note for the texter"
