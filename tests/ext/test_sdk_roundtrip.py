"""The extension over the real a2a-sdk on loopback: what the client sends is exactly what the agent reads."""

from __future__ import annotations

import hashlib
import io
import wave

import httpx
from a2a.client import ClientCallContext, ClientConfig, create_client
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mma2a.card import EXTENSIONS_HEADER, card_declares_extension, declare_extension
from mma2a.ext import EXTENSION_URI, FeatureSource, MessageExtension, PartExtension, PayloadRef, Session, Thumbnail
from mma2a.proto import get_message_extension, get_part_extension, set_message_extension, set_part_extension
from tests.agents import RecordingExecutor, make_card, run_agent, serve_app
from tests.media import png_bytes, wav_bytes

PNG = png_bytes()
WAV = wav_bytes()


async def _send(url: str, message: Message, *, activate: bool) -> TaskState:
    """Send one message with a real a2a-sdk client; return the final task state."""
    client = await create_client(url, ClientConfig(streaming=False))
    ctx = ClientCallContext(service_parameters={EXTENSIONS_HEADER: EXTENSION_URI}) if activate else None
    state = TaskState.TASK_STATE_UNSPECIFIED
    try:
        async for ev in client.send_message(SendMessageRequest(message=message), context=ctx):
            if ev.HasField("task"):
                state = ev.task.status.state
    finally:
        await client.close()
    return state


def _media_app() -> Starlette:
    async def tone(request: Request) -> Response:
        return Response(WAV, media_type="audio/wav")

    return Starlette(routes=[Route("/media/tone.wav", tone)])


def _message(audio_url: str) -> tuple[Message, list[PartExtension], MessageExtension]:
    """text + image by bytes + audio by URL, each with extension metadata."""
    text_ext = PartExtension(
        modality="text/plain",
        encoding="raw",
        features={"language": "en", "length": 36, "keywords": ["hinge", "crack"]},
        feature_schema="text/1",
        feature_source=FeatureSource("producer", "mma2a-test", "1"),
    )
    image_ext = PartExtension(
        modality="image/png",
        encoding="raw",
        features={"format": "PNG", "width": 64, "height": 48, "dominantColors": ["#c81e1e"], "blur": 0.25},
        feature_schema="image/1",
        feature_source=FeatureSource("hybrid", "pillow", "13.0.0"),
        thumbnail=Thumbnail("image/png", png_bytes(8, 6)),
    )
    audio_ext = PartExtension(
        modality="audio/wav; rate=16000",
        encoding="native",
        features={"format": "WAV", "duration": 0.25, "sampleRate": 16000, "channels": 1},
        feature_schema="audio/1",
        feature_source=FeatureSource("router", "mma2a.features.audio", "0.1"),
        payload=PayloadRef(hashlib.sha256(WAV).hexdigest(), len(WAV), 4102444800),
    )
    parts = [
        set_part_extension(Part(text="The left hinge cracked after a week."), text_ext),
        set_part_extension(Part(raw=PNG, media_type="image/png", filename="hinge.png"), image_ext),
        set_part_extension(Part(url=audio_url, media_type="audio/wav", filename="tone.wav"), audio_ext),
    ]
    msg_ext = MessageExtension(intent="auto", priority=7, session=Session("s-1", 0, False), hops=1)
    msg = Message(message_id="m-roundtrip", role=Role.ROLE_USER, parts=parts)
    set_message_extension(msg, msg_ext)
    return msg, [text_ext, image_ext, audio_ext], msg_ext


async def test_declaring_agent_reads_back_exactly_what_was_sent() -> None:
    card = declare_extension(make_card("mm", input_modes=["text/plain", "image/png", "audio/wav"]))
    assert card_declares_extension(card)
    executor = RecordingExecutor()
    async with serve_app(_media_app()) as media, run_agent(card, executor) as url:
        audio_url = media + "media/tone.wav"
        msg, part_exts, msg_ext = _message(audio_url)
        assert await _send(url, msg, activate=True) == TaskState.TASK_STATE_COMPLETED

        [got] = executor.received
        assert EXTENSION_URI in got.requested_extensions
        assert list(got.message.extensions) == [EXTENSION_URI]
        assert get_message_extension(got.message) == msg_ext
        assert [get_part_extension(p) for p in got.message.parts] == part_exts
        # content: the text, the PNG bytes, the audio URL, media types and filenames unchanged
        text, image, audio = got.message.parts
        assert text.text == "The left hinge cracked after a week."
        assert image.raw == PNG and image.media_type == "image/png" and image.filename == "hinge.png"
        assert audio.url == audio_url and audio.media_type == "audio/wav" and audio.filename == "tone.wav"
        # the image decodes, the thumbnail survived as bytes, numbers came back as ints
        from PIL import Image

        assert Image.open(io.BytesIO(image.raw)).size == (64, 48)
        img_ext = get_part_extension(image)
        assert img_ext.thumbnail is not None and Image.open(io.BytesIO(img_ext.thumbnail.data)).size == (8, 6)
        assert type(img_ext.features["width"]) is int
        # the audio reference resolves to the very bytes its payload metadata describes
        aud_ext = get_part_extension(audio)
        assert aud_ext.payload is not None
        async with httpx.AsyncClient() as http:
            fetched = (await http.get(audio.url)).content
        assert hashlib.sha256(fetched).hexdigest() == aud_ext.payload.sha256
        assert len(fetched) == aud_ext.payload.size
        with wave.open(io.BytesIO(fetched)) as w:
            assert (w.getframerate(), w.getnchannels()) == (16000, 1)
