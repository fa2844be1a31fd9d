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
        async with await MultimodalClient.connect(gw, features=True) as client:
            reply = await client.send(img, text="inspect this")
    assert reply.ok and reply.state == "completed"
    assert reply.text == "text/plain: 12 bytes\nimage/png: %d bytes" % img.stat().st_size
    text, image = consumer.saved[0]
    assert image.extension and image.kind == "raw" and image.sha256 == hashlib.sha256(img.read_bytes()).hexdigest()
    assert image.features["width"] == 64 and image.features["height"] == 48
    assert consumer.messages[0].parts[1].thumbnail is not None
    assert [r["targets"] for r in reply.route] == [["inspector"], ["inspector"]]
