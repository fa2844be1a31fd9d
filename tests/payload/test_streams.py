"""Live streams: the hub's ring and resume rules, and producers/consumers over real WebSocket and chunked HTTP."""

from __future__ import annotations

import asyncio
import os
import socket

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from mma2a.errors import PayloadError, PayloadNotFound, RangeNotSatisfiable
from mma2a.ext import StreamRef
from mma2a.payload import Frame, FrameDecoder, StreamHub, decode_frame
from tests.payload.conftest import PayloadServer

# --- the hub ----------------------------------------------------------------------------


async def collect(hub: StreamHub, sid: str, offset: int = 0) -> list[Frame]:
    return [f async for f in hub.subscribe(sid, offset)]


async def test_hub_frames_and_resume_from_any_offset() -> None:
    hub = StreamHub(ring_chunks=8, chunk_size=10, ring_bytes=1000)
    sid = hub.create("audio/ogg; codecs=opus", stream_id="mic-1", session_id="s-1").id
    data = bytes(range(45))
    hub.publish(sid, data[:25])  # split into 10 + 10 + 5
    hub.publish(sid, data[25:])
    hub.close(sid)
    frames = await collect(hub, sid)
    assert [f.type for f in frames] == ["start", "delta", "delta", "delta", "delta", "delta", "stop"]
    start, *deltas, stop = frames
    assert (start.media_type, start.session_id, start.seq, start.offset) == ("audio/ogg; codecs=opus", "s-1", 0, 0)
    assert [(f.seq, f.offset, len(f.data)) for f in deltas] == [(1, 0, 10), (2, 10, 10), (3, 20, 5), (4, 25, 10), (5, 35, 10)]
    assert (stop.seq, stop.offset, stop.reason) == (6, 45, "producer closed")
    resumed = await collect(hub, sid, 13)
    assert resumed[1].offset == 13 and resumed[1].seq == 2  # the chunk holding byte 13, cut to start there
    assert b"".join(f.data for f in resumed) == data[13:]
    assert [f.type for f in await collect(hub, sid, 45)] == ["start", "stop"]
    with pytest.raises(RangeNotSatisfiable) as exc:
        await collect(hub, sid, 46)
    assert exc.value.message == "stream mic-1: offset 46 is past the end of the stream (45 bytes)"


async def test_hub_ring_is_bounded_and_old_offsets_are_refused() -> None:
    hub = StreamHub(ring_chunks=4, chunk_size=100, ring_bytes=1000)
    sid = hub.create(stream_id="cam").id
    for _ in range(10):
        hub.publish(sid, os.urandom(100))
    info = hub.info(sid)
    assert (info.size, info.chunks, info.first_offset) == (1000, 10, 600)
    with pytest.raises(RangeNotSatisfiable) as exc:
        await collect(hub, sid, 599)
    assert exc.value.message == "stream cam: offset 599 is no longer buffered (oldest buffered offset is 600)"
    assert exc.value.http_status == 416


async def test_hub_slow_consumer_gets_an_error_not_a_gap() -> None:
    hub = StreamHub(ring_chunks=2, chunk_size=10, ring_bytes=100)
    sid = hub.create(stream_id="fast").id
    hub.publish(sid, b"a" * 10)
    frames = hub.subscribe(sid, 0)
    assert (await anext(frames)).type == "start"
    assert (await anext(frames)).offset == 0
    for _ in range(5):
        hub.publish(sid, b"b" * 10)
    with pytest.raises(RangeNotSatisfiable) as exc:
        await anext(frames)
    assert exc.value.message == "stream fast: offset 10 is no longer buffered (oldest buffered offset is 40)"


async def test_hub_errors() -> None:
    hub = StreamHub(max_streams=1)
    hub.create(stream_id="one")
    with pytest.raises(PayloadError) as exc:
        hub.create(stream_id="one")
    assert exc.value.message == "stream one already exists"
    with pytest.raises(PayloadError) as exc:
        hub.create(stream_id="two")
    assert exc.value.message == "too many open streams (limit 1)"
    with pytest.raises(PayloadError) as exc:
        hub.info("../x")
    assert exc.value.message == "stream id '../x' is not valid (1 to 64 letters, digits, '-' or '_')"
    with pytest.raises(PayloadNotFound) as exc2:
        hub.info("zzz")
    assert exc2.value.message == "stream zzz not found"
    hub.attach_producer("one")
    with pytest.raises(PayloadError) as exc:
        hub.attach_producer("one")
    assert exc.value.message == "stream one already has a producer"
    hub.close("one")
    with pytest.raises(PayloadError) as exc:
        hub.publish("one", b"x")
    assert exc.value.message == "stream one is closed"


def test_frame_codec_round_trip_and_incremental_decoding() -> None:
    frames = [
        Frame("start", "s", 0, 0, media_type="video/mp4", session_id="sess"),
        Frame("delta", "s", 1, 0, os.urandom(1000)),
        Frame("stop", "s", 2, 1000, reason="producer closed"),
    ]
    wire = b"".join(f.encode() for f in frames)
    dec = FrameDecoder()
    got: list[Frame] = []
    for i in range(0, len(wire), 7):
        got += dec.feed(wire[i : i + 7])
    assert got == frames and dec.pending == 0
    assert decode_frame(frames[1].encode()) == frames[1]
    with pytest.raises(PayloadError) as exc:
        FrameDecoder().feed(b"\x00\x00\x00\x02{x")
    assert exc.value.message == "stream frame header is not JSON"


# --- over the wire ----------------------------------------------------------------------


async def create_stream(client: httpx.AsyncClient, server: PayloadServer, **body: str) -> dict:
    r = await client.post(f"{server.url}/streams", json={"mediaType": "audio/ogg; codecs=opus", **body})
    assert r.status_code == 201, r.text
    return r.json()


def ws(url: str) -> str:
    return url.replace("http://", "ws://", 1)


async def test_create_returns_signed_urls_and_stream_ref(server: PayloadServer) -> None:
    async with httpx.AsyncClient() as client:
        s = await create_stream(client, server, sessionId="sess-9")
    assert s["producerWsUrl"] == ws(s["producerUrl"])
    assert s["subscribeUrl"].startswith(f"ws://127.0.0.1:{server.url.rsplit(':', 1)[1]}/streams/{s['id']}/subscribe?exp=")
    ref = StreamRef.from_json(s["stream"], "stream")
    assert (ref.url, ref.session_id, ref.chunk_size, ref.open) == (s["subscribeUrl"], "sess-9", 4096, True)


async def test_ws_consumer_cut_off_mid_stream_resumes_without_loss_or_duplicates(server: PayloadServer) -> None:
    payload = os.urandom(40 * 3000)
    async with httpx.AsyncClient() as client:
        s = await create_stream(client, server)
    async with connect(s["producerWsUrl"]) as producer:
        await producer.send(orjson.dumps({"type": "start", "mediaType": "audio/ogg"}).decode())
        for i in range(20):
            await producer.send(payload[i * 3000 : (i + 1) * 3000])

        received: list[Frame] = []
        async with connect(s["subscribeUrl"] + "&offset=0") as consumer:
            start = decode_frame(await consumer.recv())
            assert (start.type, start.media_type) == ("start", "audio/ogg; codecs=opus")
            while sum(len(f.data) for f in received) < 30_000:
                received.append(decode_frame(await consumer.recv()))
            consumer.transport.abort()  # cut off: the connection drops with frames still in flight
        # the consumer is gone while the producer keeps going
        for i in range(20, 40):
            await producer.send(payload[i * 3000 : (i + 1) * 3000])
        await producer.send(orjson.dumps({"type": "stop"}).decode())
        summary = orjson.loads(await producer.recv())
        assert summary == {"type": "stop", "streamId": s["id"], "seq": 41, "offset": len(payload), "reason": "producer closed"}

    offset = sum(len(f.data) for f in received)
    async with connect(s["subscribeUrl"] + f"&offset={offset}") as consumer:
        assert decode_frame(await consumer.recv()).offset == offset
        while (f := decode_frame(await consumer.recv())).type == "delta":
            received.append(f)
        assert (f.type, f.offset, f.reason) == ("stop", len(payload), "producer closed")
        with pytest.raises(ConnectionClosed):
            await consumer.recv()
        assert consumer.close_code == 1000

    assert b"".join(f.data for f in received) == payload
    assert [f.seq for f in received] == list(range(1, 41))
    assert [f.offset for f in received] == [i * 3000 for i in range(40)]


async def test_http_producer_and_chunked_get_consumer_resume(server: PayloadServer) -> None:
    payload = os.urandom(200_000)
    gate = asyncio.Event()

    async def body():  # type: ignore[no-untyped-def]
        for i in range(0, 100_000, 10_000):
            yield payload[i : i + 10_000]
        await gate.wait()
        for i in range(100_000, len(payload), 10_000):
            yield payload[i : i + 10_000]

    async with httpx.AsyncClient(timeout=30) as client:
        s = await create_stream(client, server)
        producing = asyncio.create_task(client.post(s["producerUrl"], content=body()))

        got = bytearray()
        dec = FrameDecoder()
        async with client.stream("GET", s["consumerUrl"]) as r:
            assert r.headers["content-type"] == "application/x-mma2a-stream-frames"
            async for chunk in r.aiter_raw():
                for f in dec.feed(chunk):
                    if f.type == "delta":
                        assert f.offset == len(got)
                        got += f.data
                if len(got) >= 50_000:
                    break  # drop the connection mid-stream, maybe mid-frame
        gate.set()
        seen_stop = False
        async with client.stream("GET", s["consumerUrl"] + f"&offset={len(got)}") as r:
            assert r.headers["x-stream-offset"] == str(len(got))
            dec = FrameDecoder()
            async for chunk in r.aiter_raw():
                for f in dec.feed(chunk):
                    if f.type == "delta":
                        assert f.offset == len(got)
                        got += f.data
                    seen_stop = seen_stop or f.type == "stop"
        assert seen_stop
        assert bytes(got) == payload
        done = await producing
        assert done.status_code == 200
        assert done.json()["size"] == len(payload) and done.json()["open"] is False

        raw = await client.get(s["consumerUrl"] + "&offset=150000&format=raw")
        assert (raw.headers["content-type"], raw.content) == ("audio/ogg; codecs=opus", payload[150_000:])


async def test_producer_close_ends_the_stream_for_all_consumers(server: PayloadServer) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        s = await create_stream(client, server)

        started = [asyncio.Event(), asyncio.Event()]  # each consumer's start frame read: subscribed, waiting

        async def ws_consumer() -> tuple[bytes, Frame]:
            data = b""
            async with connect(s["subscribeUrl"]) as c:
                while (f := decode_frame(await c.recv())).type != "stop":
                    started[0].set()
                    data += f.data
            return data, f

        async def http_consumer() -> tuple[bytes, Frame]:
            data, last = b"", None
            async with client.stream("GET", s["consumerUrl"]) as r:
                dec = FrameDecoder()
                async for chunk in r.aiter_raw():
                    for f in dec.feed(chunk):
                        started[1].set()
                        data += f.data
                        last = f
            assert last is not None
            return data, last

        consumers = [asyncio.create_task(ws_consumer()), asyncio.create_task(http_consumer())]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 30)  # both subscribed before the producer
        assert all(not c.done() for c in consumers)  # and waiting
        async with connect(s["producerWsUrl"]) as producer:
            await producer.send(b"hello ")
            await producer.send(b"world")
        results = await asyncio.wait_for(asyncio.gather(*consumers), 10)
        for data, last in results:
            assert data == b"hello world"
            assert (last.type, last.offset, last.reason) == ("stop", 11, "producer disconnected")


async def test_stream_errors_over_the_wire(server: PayloadServer) -> None:
    async with httpx.AsyncClient() as client:
        s = await create_stream(client, server, id="cam-7")
        sid = s["id"]
        assert sid == "cam-7"
        # wrong method: a consumer URL used to produce
        r = await client.post(s["consumerUrl"], content=b"x")
        assert (r.status_code, r.json()["error"]["message"]) == (403, f"streams/{sid}: URL is signed for GET, not POST")
        # tampered signature on the WebSocket subscription: an error frame, then close code 4403
        async with connect(s["subscribeUrl"][:-3] + "AAA") as c:
            err = decode_frame(await c.recv())
            assert (err.type, err.status, err.reason) == ("error", 403, f"streams/{sid}: signature does not match (URL tampered with)")
            with pytest.raises(ConnectionClosed):
                await c.recv()
            assert c.close_code == 4403
        # a second producer is refused
        async with connect(s["producerWsUrl"]) as p1:
            await p1.send(os.urandom(4096 * 70))  # more than the 64-chunk ring holds
            while server.hub.info(sid).size < 4096 * 70:  # until the server has read it all (it shares this loop)
                await asyncio.sleep(0.01)
            async with connect(s["producerWsUrl"]) as p2:
                err = decode_frame(await p2.recv())
                assert (err.status, err.reason) == (400, "stream cam-7 already has a producer")
            r = await client.get(s["consumerUrl"] + "&offset=0")
            assert r.status_code == 416
            assert r.json()["error"]["message"] == "stream cam-7: offset 0 is no longer buffered (oldest buffered offset is 24576)"
            r = await client.get(s["consumerUrl"] + "&offset=soon")
            assert (r.status_code, r.json()["error"]["message"]) == (400, "offset 'soon' is not a non-negative integer")
        exp, sig = server.signer.sign_query("nope", "GET", scope="streams")
        r = await client.get(f"{server.url}/streams/nope?exp={exp}&sig={sig}")
        assert (r.status_code, r.json()["error"]["message"]) == (404, "stream nope not found")
        r = await client.post(f"{server.url}/streams", json={"mediaType": 5})
        assert r.status_code == 400


# --- direct relay under backpressure ----------------------------------------------------


async def _stalled_consumer(server: PayloadServer, hub: StreamHub, total: int, piece: int) -> tuple[list[Frame], int]:
    """A consumer with a tiny receive buffer that reads nothing while `total` bytes are published, then reads all.

    Returns its frames and how many times the gateway had to (re)start pushing to it.
    """
    follows = 0
    real_follow = hub.follow

    def counting_follow(*args, **kwargs):  # the hub's own follow, counted
        nonlocal follows
        follows += 1
        return real_follow(*args, **kwargs)

    hub.follow = counting_follow  # type: ignore[method-assign]
    async with httpx.AsyncClient() as client:
        s = await create_stream(client, server)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    port = int(server.url.rsplit(":", 1)[1])
    sock.connect(("127.0.0.1", port))
    frames: list[Frame] = []
    async with connect(s["subscribeUrl"], sock=sock, max_size=None, max_queue=1) as consumer:
        assert decode_frame(await consumer.recv()).type == "start"
        hub.attach_producer(s["id"])
        payload = os.urandom(piece)
        for _ in range(total // piece):
            hub.publish(s["id"], payload)
            await asyncio.sleep(0)  # let the server's loop write (and fill the socket) between chunks
        hub.close(s["id"])
        while (f := decode_frame(await consumer.recv())).type == "delta":
            frames.append(f)
        frames.append(f)
    return frames, follows


@pytest.mark.parametrize("server", ["direct"], indirect=True)
async def test_direct_relay_pauses_on_a_full_socket_and_resumes_without_loss_or_duplicates(server: PayloadServer) -> None:
    server.hub.ring_chunks, server.hub.ring_bytes, server.hub.chunk_size = 10_000, 64 << 20, 64 << 10
    frames, follows = await _stalled_consumer(server, server.hub, 24 << 20, 64 << 10)
    assert follows > 1  # the socket filled: pushing stopped and resumed from the next byte
    deltas, stop = frames[:-1], frames[-1]
    assert (stop.type, stop.offset) == ("stop", 24 << 20)
    assert [f.seq for f in deltas] == list(range(1, len(deltas) + 1))
    assert [f.offset for f in deltas] == [i * (64 << 10) for i in range(len(deltas))]
    assert sum(len(f.data) for f in deltas) == 24 << 20


@pytest.mark.parametrize("server", ["direct"], indirect=True)
async def test_direct_relay_tells_a_consumer_that_fell_out_of_the_ring(server: PayloadServer) -> None:
    server.hub.ring_chunks, server.hub.ring_bytes, server.hub.chunk_size = 16, 1 << 20, 64 << 10
    frames, _ = await _stalled_consumer(server, server.hub, 24 << 20, 64 << 10)
    last = frames[-1]
    assert (last.type, last.status) == ("error", 416)
    assert "no longer buffered" in (last.reason or "")
    deltas = frames[:-1]
    assert [f.offset for f in deltas] == [i * (64 << 10) for i in range(len(deltas))]  # no gap before the error
