"""What a developer hits, as typed errors with exact messages: expired URL, digest mismatch, gateway
unreachable, an agent refusing a modality (-32005), a URL the SSRF guard refuses, bad items; and a live
stream that survives a dropped connection."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import Message, Part, Role, SendMessageRequest

from mma2a.errors import (
    ContentTypeNotSupported,
    DigestMismatch,
    GatewayUnreachable,
    InvalidParams,
    ModalityRefused,
    PayloadExpired,
    SignatureError,
)
from mma2a.ext import EXTENSION_URI, PayloadRef, StreamRef
from mma2a.sdk import GatewayStore, Live, MultimodalClient, PayloadReader, run_agent
from mma2a.serving import free_port
from tests.gateway.conftest import gateway, rpc
from tests.media import wav_bytes
from tests.sdk.conftest import SavingConsumer, consumer_behind_gateway




async def test_expired_and_tampered_payload_urls(tmp_path: Path) -> None:
    data = os.urandom(400 * 1024)
    async with consumer_behind_gateway(tmp_path) as (consumer, _, gw):
        async with await MultimodalClient.connect(gw) as client:
            await client.send(data, modality="application/octet-stream")
        part = consumer.messages[0].parts[0]
        assert part.payload is not None and part.payload.expires is not None
        exp = part.payload.expires
        part.reader = PayloadReader.for_gateway(gw, clock=lambda: exp + 42)  # the consumer reads it 42 s too late
        with pytest.raises(PayloadExpired) as expired:
            async for _ in part.open():
                pass
        part.reader = PayloadReader.for_gateway(gw)
        part.part.url = part.part.url.replace("sig=", "sig=A")
        with pytest.raises(SignatureError) as tampered:
            async for _ in part.open():
                pass
    assert expired.value.message == (
        "part 0 (application/octet-stream): the payload URL expired 42 s ago; ask the sender for a fresh reference")
    assert tampered.value.message == (
        "part 0 (application/octet-stream): the payload URL was refused (HTTP 403: signature invalid or expired)")


async def test_digest_and_size_mismatch_fail_the_task_with_the_reason(tmp_path: Path) -> None:
    real, claimed = os.urandom(64 * 1024), os.urandom(64 * 1024)
    async with consumer_behind_gateway(tmp_path) as (consumer, _, gw):
        async with httpx.AsyncClient() as http:
            info = (await http.post(gw + "/blobs", content=real, headers={"Content-Type": "application/octet-stream"})).json()
        lies = [PayloadRef(hashlib.sha256(claimed).hexdigest(), len(real)), PayloadRef(info["sha256"], 1000)]
        docs = []
        for i, ref in enumerate(lies):
            part = {"url": info["url"], "mediaType": "application/octet-stream",
                    "metadata": {EXTENSION_URI: {"encoding": "native", "payload": ref.to_json()}}}
            docs.append(await rpc(gw, "SendMessage", {"message": {"messageId": f"lie-{i}", "role": "ROLE_USER",
                                                                  "parts": [part]}}))
    wrong_digest, too_big = (d["result"]["task"]["status"] for d in docs)
    assert wrong_digest["state"] == too_big["state"] == "TASK_STATE_FAILED"
    assert wrong_digest["message"]["parts"][0]["text"] == (
        f"part 0 (application/octet-stream): payload digest mismatch: expected sha256 {hashlib.sha256(claimed).hexdigest()} "
        f"({len(real)} bytes), got {info['sha256']} ({len(real)} bytes)")
    assert too_big["message"]["parts"][0]["text"] == (
        "part 0 (application/octet-stream): payload is larger than the 1000 bytes its reference declares")
    assert not consumer.saved  # handle never got past reading


async def test_digest_mismatch_is_a_typed_error_for_the_reader(tmp_path: Path) -> None:
    data = os.urandom(300 * 1024)
    async with consumer_behind_gateway(tmp_path) as (consumer, _, gw):
        store = GatewayStore(gw, httpx.AsyncClient())
        info = await store.upload_bytes(data, "application/octet-stream")
        await store.http.aclose()
        reader = PayloadReader.for_gateway(gw)
        with pytest.raises(DigestMismatch) as exc:
            async for _ in reader.open_url(info["url"], where="part 3", payload=PayloadRef("0" * 64, len(data))):
                pass
    assert exc.value.message == (
        f"part 3: payload digest mismatch: expected sha256 {'0' * 64} ({len(data)} bytes), got {info['sha256']} "
        f"({len(data)} bytes)")


async def test_gateway_unreachable_at_connect_and_at_send(tmp_path: Path) -> None:
    port = free_port()
    with pytest.raises(GatewayUnreachable) as at_connect:
        await MultimodalClient.connect(f"http://127.0.0.1:{port}")
    assert at_connect.value.message == f"cannot reach the gateway at http://127.0.0.1:{port}: All connection attempts failed"
    assert at_connect.value.code == -32603 and at_connect.value.http_status == 503
    async with contextlib.AsyncExitStack() as stack:
        _, _, gw = await stack.enter_async_context(consumer_behind_gateway(tmp_path))
        client = await MultimodalClient.connect(gw)
    with pytest.raises(GatewayUnreachable) as at_send:  # the gateway is gone now
        await client.send("anyone there?")
    await client.close()
    assert at_send.value.message == f"cannot reach the gateway at {gw}: All connection attempts failed"


async def test_agent_refuses_the_modality_directly_and_through_the_gateway(tmp_path: Path) -> None:
    wav = wav_bytes(0.2)
    async with consumer_behind_gateway(tmp_path, input_modes=("image/*",)) as (consumer, agent_url, gw):
        async with await MultimodalClient.connect(agent_url) as direct:
            with pytest.raises(ModalityRefused) as refused_direct:
                await direct.send(wav)
        async with await MultimodalClient.connect(gw) as client:
            with pytest.raises(ModalityRefused) as refused_gw:
                await client.send(wav, to="inspector")
    assert refused_direct.value.message == "inspector refuses the message: part 0 (audio/wav): this agent accepts image/*"
    assert refused_direct.value.code == -32005
    assert refused_gw.value.message == ("mma2a gateway refuses the message: part 0 (audio/wav): agent 'inspector' "
                                        "does not accept it and no transform chain reaches a mode it accepts")
    assert isinstance(refused_gw.value, ContentTypeNotSupported) and refused_gw.value.code == -32005
    assert not consumer.messages


async def test_consumer_refuses_urls_outside_the_gateway(tmp_path: Path) -> None:
    consumer = SavingConsumer(tmp_path)
    async with run_agent(consumer.card("inspector", "saves"), consumer) as url:
        client = await create_client(url, ClientConfig(streaming=False))
        msg = Message(message_id="ssrf", role=Role.ROLE_USER,
                      parts=[Part(url="http://169.254.169.254/latest/meta-data/", media_type="text/plain")])
        [ev] = [e async for e in client.send_message(SendMessageRequest(message=msg))]
        await client.close()
    assert ev.task.status.message.parts[0].text == (
        "refused to fetch http://169.254.169.254/latest/meta-data/: "
        "169.254.169.254 is a link-local address (169.254.0.0/16, cloud metadata)")


async def test_bad_items_name_the_item(tmp_path: Path) -> None:
    consumer = SavingConsumer(tmp_path)
    async def chunks() -> AsyncIterator[bytes]:
        yield b"x"
    async with run_agent(consumer.card("inspector", "saves"), consumer) as url:
        async with await MultimodalClient.connect(url) as client:
            with pytest.raises(InvalidParams) as nothing:
                await client.send()
            with pytest.raises(InvalidParams) as odd:
                await client.send("fine", object())
            with pytest.raises(InvalidParams) as missing:
                await client.send(tmp_path / "nope.png")
            with pytest.raises(InvalidParams) as live:
                await client.send(Live(chunks(), modality="audio/wav"))
    assert nothing.value.message == "items: nothing to send (give at least one item, or text=...)"
    assert odd.value.message == ("items[1]: cannot send a object; send a Path, bytes, str, list[float], "
                                 "an async iterator of bytes, or an a2a Part")
    assert missing.value.message == f"items[0]: no such file: {str(tmp_path / 'nope.png')!r}"
    assert live.value.message == (f"items[0]: a live stream needs an mma2a gateway to carry it; {url} is not one "
                                  "(pass gateway=...)")


@contextlib.asynccontextmanager
async def cutting_proxy(upstream_port: int, cut_after: int) -> AsyncIterator[tuple[int, list[int]]]:
    """A real TCP proxy to the gateway that drops the first stream subscription after `cut_after` response bytes."""
    conns: list[int] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limit: int | None) -> None:
        sent = 0
        try:
            while data := await reader.read(65536):
                if limit is not None and sent + len(data) > limit:
                    writer.write(data[: limit - sent])
                    await writer.drain()
                    break
                writer.write(data)
                sent += len(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.append(len(conns))
        up_r, up_w = await asyncio.open_connection("127.0.0.1", upstream_port)
        limit = cut_after if len(conns) == 1 else None
        await asyncio.gather(pipe(reader, up_w, None), pipe(up_r, writer, limit))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], conns
    finally:
        server.close()


async def test_live_stream_resumes_after_a_dropped_connection(tmp_path: Path) -> None:
    audio = wav_bytes(4.0)  # 128 KB: two hub chunks
    async with gateway({}) as (_, gw):
        http = httpx.AsyncClient()
        store = GatewayStore(gw, http)
        info = await store.open_stream("audio/wav")
        push = asyncio.create_task(store.push(info["producerUrl"], _slow(audio)))
        gw_port = int(gw.rsplit(":", 1)[1])
        async with cutting_proxy(gw_port, cut_after=40_000) as (proxy_port, conns):
            ref = StreamRef.from_json(info["stream"], "stream")
            via_proxy = StreamRef(ref.url.replace(f":{gw_port}/", f":{proxy_port}/"), ref.session_id)
            reader = PayloadReader.for_gateway([gw, f"http://127.0.0.1:{proxy_port}"])
            got = b"".join([c async for c in reader.open_stream(via_proxy, where="part 0")])
        await push
        await http.aclose()
    assert len(conns) >= 2  # the first subscription was cut mid-stream, the reader reconnected from its offset
    assert got == audio


async def _slow(data: bytes, chunk: int = 8000) -> AsyncIterator[bytes]:
    for i in range(0, len(data), chunk):
        yield data[i : i + chunk]
        await asyncio.sleep(0.01)


async def test_connect_waits_for_a_gateway_then_says_how_long() -> None:
    from mma2a.serving import free_port

    port = free_port()
    with pytest.raises(GatewayUnreachable) as info:
        await MultimodalClient.connect(f"http://127.0.0.1:{port}", wait=0.4)
    assert info.value.message.startswith(f"cannot reach the gateway at http://127.0.0.1:{port} (waited 0.4 s): ")
    assert info.value.message.endswith("is `mma2a serve` running there? (to wait longer: --wait SECONDS, or wait= in the SDK)")
