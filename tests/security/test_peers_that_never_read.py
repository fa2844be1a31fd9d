"""Peers that never read what the gateway writes (round 5). On a WebSocket every ping read is a pong written, so a peer that sent pings
and read nothing grew the gateway's write buffer without bound (118 MB of pings: +100 MB, held while the socket
stayed open; the stream URL's signature only decides what the app answers, the pongs come first)."""

from __future__ import annotations

import asyncio
import base64
import errno
import os
import socket
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx

from tests.security.conftest import bearer, secured, TOKEN

PING = bytes([0x89, 0x80 | 125]) + b"\0\0\0\0" + b"p" * 125  # a masked ping (zero mask), 131 bytes; its pong is 127
OFFERED = 64 * 1024 * 1024  # what the attacker tries to send
STUCK_AFTER = 200  # consecutive 10 ms waits without the server taking a byte: it stopped reading


async def subscribe_socket(url: str) -> socket.socket:
    """A raw WebSocket to a fresh stream's signed subscribe URL, handshake done, receiving as little as it can."""
    async with httpx.AsyncClient() as c:
        r = await c.post(url + "/streams", json={"mediaType": "audio/wav"}, headers=bearer(TOKEN))
    sub = urlsplit(r.json()["subscribeUrl"])
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await loop.sock_connect(sock, (sub.hostname, sub.port))
    key = base64.b64encode(os.urandom(16)).decode()
    await loop.sock_sendall(sock, (f"GET {sub.path}?{sub.query} HTTP/1.1\r\nHost: {sub.netloc}\r\nUpgrade: websocket\r\n"
                                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                                   ).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += await loop.sock_recv(sock, 1)
    assert head.startswith(b"HTTP/1.1 101 ")
    return sock


async def flood(sock: socket.socket) -> tuple[int, Exception | None]:
    """Send pings, reading nothing, until `OFFERED` bytes went or the server stops taking them (or cuts us)."""
    batch = memoryview(PING * 4000)
    sent = idle = 0
    while sent < OFFERED and idle < STUCK_AFTER:
        try:
            n = sock.send(batch[sent % len(batch):])  # a partial send goes on where it stopped
        except BlockingIOError:
            idle += 1
            await asyncio.sleep(0.01)
            continue
        except OSError as exc:  # cut
            return sent, exc
        sent, idle = sent + n, 0
        await asyncio.sleep(0)
    return sent, None


async def test_a_peer_sending_pings_without_reading_is_no_longer_read_then_served_once_it_reads() -> None:
    async with secured() as (gw, url, _):
        sock = await subscribe_socket(url)
        try:
            sent, cut = await flood(sock)
            # the server stopped reading once its write buffer passed its high-water mark: what went is what the
            # kernel buffers of both ends hold (a few MB on loopback), not the 64 MB offered (before: all of it,
            # each ping turned into a pong held in the gateway's memory)
            assert cut is None and sent < OFFERED // 2
            loop = asyncio.get_running_loop()

            async def read_all() -> bytearray:
                got = bytearray()
                while not got.endswith(bytes([0x8A, 4]) + b"last"):  # every pong, in order, then the last one's
                    got += await loop.sock_recv(sock, 1 << 20)
                return got

            reading = asyncio.create_task(read_all())  # once the peer reads, the server reads again
            rest = PING[sent % len(PING):] if sent % len(PING) else b""  # the end of a ping cut by the kernel
            last = bytes([0x89, 0x84]) + b"\0\0\0\0" + b"last"  # then a ping of its own
            await asyncio.wait_for(loop.sock_sendall(sock, rest + last), 60)
            got = await asyncio.wait_for(reading, 60)
            pings = (sent + len(rest)) // len(PING)
            pongs = (bytes([0x8A, 125]) + b"p" * 125) * pings + bytes([0x8A, 4]) + b"last"
            start = got[:len(got) - len(pongs)]  # the stream's own first frame (binary), then only pongs
            assert got.endswith(pongs) and start[0] == 0x82 and b'"type":"start"' in start  # each ping answered once
        finally:
            sock.close()


async def test_a_peer_that_takes_nothing_written_to_it_is_cut_after_the_ping_deadlines() -> None:
    server = {"ws_ping_interval_s": 0.3, "ws_ping_timeout_s": 0.3}  # cut after 0.6 s of not taking what is sent
    async with secured({"server": server}) as (gw, url, _):
        sock = await subscribe_socket(url)
        try:
            sent, cut = await flood(sock)
            assert isinstance(cut, (ConnectionResetError, BrokenPipeError)) and sent < OFFERED // 2
            async with httpx.AsyncClient() as c:  # the gateway itself is fine
                assert (await c.get(url + "/healthz")).status_code == 200
        finally:
            sock.close()


async def test_a_stream_consumer_that_never_reads_is_cut_after_the_write_deadline() -> None:
    """A consumer of a live stream (`GET /streams/{id}`, signed) that reads nothing held its connection, its task
    and a write buffer forever (200 such consumers of one stream: +54 MB, kept after the stream ended)."""
    async with secured({"server": {"write_timeout_s": 0.5}}) as (gw, url, _):
        async with httpx.AsyncClient() as c:
            doc = (await c.post(url + "/streams", json={"mediaType": "application/octet-stream"},
                                headers=bearer(TOKEN))).json()
            consumer = urlsplit(doc["consumerUrl"])
            loop = asyncio.get_running_loop()
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, (consumer.hostname, consumer.port))
                await loop.sock_sendall(sock, f"GET {consumer.path}?{consumer.query} HTTP/1.1\r\nHost: x\r\n\r\n".encode())

                async def media() -> AsyncIterator[bytes]:
                    for _ in range(16):
                        yield b"x" * (1 << 20)

                produced = await c.post(doc["producerUrl"], content=media(), headers=bearer(TOKEN), timeout=60)
                assert produced.status_code == 200 and produced.json()["size"] == 16 << 20
                error = 0
                for _ in range(200):  # look without reading: the socket's pending error tells a reset
                    error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if error:
                        break
                    await asyncio.sleep(0.05)
                assert error == errno.ECONNRESET  # before: the gateway waited for the reader forever
                assert (await c.get(url + "/healthz")).status_code == 200
            finally:
                sock.close()
