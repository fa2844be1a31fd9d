"""Plain A2A peers on either side keep working: plain a2a-sdk clients (1.0 and v0.3) to an SDK consumer,
and an SDK producer to plain a2a-sdk agents, directly and through a real gateway."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import httpx
from a2a.client import ClientConfig, ClientFactory, create_client
from a2a.types import AgentCard, Message, Part, Role, SendMessageRequest, TaskState
from google.protobuf import json_format

from mma2a.ext import EXTENSION_URI
from mma2a.sdk import Live, MultimodalClient, run_agent
from tests.agents import RecordingExecutor, make_card
from tests.agents import run_agent as run_plain_agent
from tests.gateway.conftest import agent, agents, gateway
from tests.media import png_bytes, wav_bytes
from tests.sdk.conftest import SavingConsumer, consumer_behind_gateway
from tests.sdk.test_exchange import _mic

PNG, WAV = png_bytes(32, 24), wav_bytes(0.5)


def _plain_message(mid: str) -> Message:
    """What a plain a2a-sdk client sends: standard parts, no extension (the WAV even without a media type)."""
    return Message(message_id=mid, role=Role.ROLE_USER, parts=[
        Part(text="what is this?"), Part(raw=PNG, media_type="image/png", filename="p.png"), Part(raw=WAV)])


def _check_plain_view(consumer: SavingConsumer) -> None:
    text, image, audio = consumer.messages[-1].parts
    assert [p.extension for p in (text, image, audio)] == [False, False, False]
    assert (image.modality, audio.modality) == ("image/png", "audio/wav")  # mediaType, then sniffed from the bytes
    assert image.features == {"size": len(PNG), "sha256": hashlib.sha256(PNG).hexdigest()}
    assert [s.sha256 for s in consumer.saved[-1][1:]] == [hashlib.sha256(PNG).hexdigest(), hashlib.sha256(WAV).hexdigest()]


async def test_plain_sdk_client_to_consumer_directly(tmp_path: Path) -> None:
    consumer = SavingConsumer(tmp_path)
    async with run_agent(consumer.card("inspector", "saves"), consumer) as url:
        client = await create_client(url, ClientConfig(streaming=False))
        [ev] = [e async for e in client.send_message(SendMessageRequest(message=_plain_message("plain-1")))]
        await client.close()
    _check_plain_view(consumer)
    assert ev.task.status.state == TaskState.TASK_STATE_COMPLETED
    [answer] = ev.task.artifacts[0].parts
    assert answer.text.splitlines()[1] == f"image/png: {len(PNG)} bytes"
    assert EXTENSION_URI not in answer.metadata  # the client did not activate the extension: plain parts back
    assert consumer.messages[-1].extension is None and not consumer.messages[-1].extension_requested


async def test_plain_sdk_client_through_gateway_to_consumer(tmp_path: Path) -> None:
    async with consumer_behind_gateway(tmp_path) as (consumer, _, gw):
        client = await create_client(gw, ClientConfig(streaming=False))
        [ev] = [e async for e in client.send_message(SendMessageRequest(message=_plain_message("plain-2")))]
        await client.close()
    _check_plain_view(consumer)
    assert ev.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert consumer.messages[-1].extension_requested  # the gateway speaks the extension to agents that declare it


async def _v03_client(url: str) -> object:
    """A client that speaks A2A v0.3 (`message/send`, `kind: file`): the SDK's compat transport, chosen by the card."""
    async with httpx.AsyncClient() as http:
        card = json_format.ParseDict((await http.get(url.rstrip("/") + "/.well-known/agent-card.json")).json(),
                                     AgentCard(), ignore_unknown_fields=True)
    for iface in card.supported_interfaces:
        iface.protocol_version = "0.3"
    return ClientFactory(ClientConfig(streaming=False)).create(card)


async def test_v03_client_to_consumer_directly_and_through_gateway(tmp_path: Path) -> None:
    async with consumer_behind_gateway(tmp_path) as (consumer, agent_url, gw):
        for i, url in enumerate([agent_url, gw]):
            client = await _v03_client(url)
            assert type(client._transport).__name__ == "CompatJsonRpcTransport"  # type: ignore[attr-defined]
            events = [e async for e in client.send_message(SendMessageRequest(message=_plain_message(f"v03-{i}")))]  # type: ignore[attr-defined]
            await client.close()  # type: ignore[attr-defined]
            _check_plain_view(consumer)
            assert events[-1].task.status.state == TaskState.TASK_STATE_COMPLETED
            assert events[-1].task.artifacts[0].parts[0].text.endswith(f"audio/wav: {len(WAV)} bytes")


async def test_producer_to_plain_agent_directly_sends_plain_parts(tmp_path: Path) -> None:
    big = tmp_path / "scan.png"
    big.write_bytes(png_bytes(600, 600) + os.urandom(300 * 1024))  # over the inline limit, but no gateway to upload to
    plain = RecordingExecutor(reply="plain ok")
    async with run_plain_agent(make_card("plain", input_modes=["image/png", "text/plain"]), plain,
                               validate_input_modes=True) as url:
        async with await MultimodalClient.connect(url, extract_features=True) as client:
            assert not client.extension
            reply = await client.send(big, text="hello")
    assert reply.text == "plain ok"
    [got] = plain.received
    assert EXTENSION_URI not in got.requested_extensions and not got.message.extensions
    assert EXTENSION_URI not in got.message.metadata and all(EXTENSION_URI not in p.metadata for p in got.message.parts)
    assert got.message.parts[0].text == "hello"
    assert got.message.parts[1].raw == big.read_bytes() and got.message.parts[1].media_type == "image/png"


async def test_producer_through_gateway_to_plain_agent_by_reference_and_stream(tmp_path: Path) -> None:
    blob = tmp_path / "clip.bin"
    blob.write_bytes(os.urandom(600 * 1024))
    audio = wav_bytes(2.0)
    specs = {"plain": agent("plain", ["*/*"], ext=False)}
    async with agents(specs) as urls, gateway({"agents": [{"name": "plain", "url": urls["plain"]}]}) as (_, gw):
        async with await MultimodalClient.connect(gw) as client:
            r1 = await client.send(blob, modality="application/octet-stream")
            r2 = await client.send(Live(_mic(audio), modality="audio/wav"))
        ref, live = (rec.message.parts[0] for rec in specs["plain"][1].received)
        async with httpx.AsyncClient() as http:  # what a plain agent does with a url part: GET it
            fetched, streamed = await http.get(ref.url), await http.get(live.url)
    assert r1.ok and r2.ok
    assert not ref.metadata and ref.media_type == "application/octet-stream" and fetched.content == blob.read_bytes()
    assert not live.metadata and live.media_type == "audio/wav" and streamed.content == audio
    assert streamed.headers["content-type"] == "audio/wav"


async def test_streaming_reply_and_embedding(tmp_path: Path) -> None:
    from mma2a.sdk import Embedding, IncomingMessage, MultimodalExecutor

    class Counter(MultimodalExecutor):
        async def handle(self, request: IncomingMessage):  # type: ignore[no-untyped-def]
            vec = request.parts[0].vector()
            for i in range(3):
                yield f"step {i}: dim {len(vec)}"
            yield {"norm2": round(sum(v * v for v in vec), 3)}

    ex = Counter()
    async with run_agent(ex.card("counter", "counts", input_modes=["application/x-a2a-embedding"]), ex) as url:
        async with gateway({"agents": [{"name": "counter", "url": url}]}) as (_, gw):
            async with await MultimodalClient.connect(gw) as client:
                stream = await client.send(Embedding([0.5, 0.5, 0.5, 0.5], model="toy"), stream_reply=True)
                events = [ev async for ev in stream]
    texts = [ev.text for ev in events if ev.kind == "artifact"]
    assert texts[:3] == ["step 0: dim 4", "step 1: dim 4", "step 2: dim 4"]
    assert events[-1].final and events[-1].state == "completed"
    assert stream.reply is not None and stream.reply.ok
    assert stream.reply.parts[-1].data == {"norm2": 1.0}
    assert [p.text for p in stream.reply.parts[:3]] == texts[:3]
