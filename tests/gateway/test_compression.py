"""Compressed JSON on the wire: gateway → agent request bodies, gateway → client replies, client → gateway requests."""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest
from google.protobuf import json_format
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mma2a.compression import ContentCoding
from mma2a.ext import EXTENSION_URI
from tests.agents import run_agent
from tests.gateway.conftest import agent, gateway

zstd = pytest.importorskip("zstandard")
TEXT = " ".join(f"sensor {i} reads {i % 17} degrees" for i in range(3000))  # ~90 KB of compressible text


@dataclass
class Wire:
    """What reached the agent's socket: each POST's Content-Encoding and body size (then the agent decodes it)."""

    seen: list[tuple[str | None, int]] = field(default_factory=list)
    refuse_coded: bool = False  # an agent that cannot read coded bodies: 415 (RFC 7694)

    def wrap(self, app: ASGIApp) -> ASGIApp:
        inner = app if self.refuse_coded else ContentCoding(app, max_body_bytes=8 * 1024 * 1024, min_size=None)

        async def recorder(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope["method"] != "POST":
                await inner(scope, receive, send)
                return
            coding = dict(scope["headers"]).get(b"content-encoding")
            body = b""
            while True:
                msg = await receive()
                body += msg.get("body", b"")
                if not msg.get("more_body"):
                    break
            self.seen.append((coding.decode() if coding else None, len(body)))
            if coding and self.refuse_coded:
                await send({"type": "http.response.start", "status": 415, "headers": [(b"accept-encoding", b"identity")]})
                await send({"type": "http.response.body", "body": b""})
                return
            done = False

            async def replay() -> Message:
                nonlocal done
                if done:
                    return await receive()
                done = True
                return {"type": "http.request", "body": body, "more_body": False}

            await inner(scope, replay, send)

        return recorder


@contextlib.asynccontextmanager
async def coded_agent(name: str, wire: Wire, card_codings: list[str] | None) -> AsyncIterator[tuple[str, Any]]:
    card, executor = agent(name, ["text/plain"], echo=True)
    if card_codings is not None:
        for ext in card.capabilities.extensions:
            if ext.uri == EXTENSION_URI:
                ext.params.update({"contentEncodings": card_codings})
    async with run_agent(card, executor, wrap=wire.wrap) as url:
        yield url.rstrip("/"), executor


def message(text: str, mid: str) -> dict[str, Any]:
    return {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}]}


async def post(url: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as c:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        return await c.post(url + "/", content=data, headers={"Content-Type": "application/json", "A2A-Version": "1.0",
                                                             **(headers or {})})


def rpc_body(msg: dict[str, Any], rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "SendMessage", "params": {"message": msg}}


@pytest.mark.parametrize(("card", "operator", "expected"), [
    (["zstd", "gzip"], None, "zstd"),     # the card's first coding
    (["zstd", "gzip"], ["gzip"], "gzip"),  # the operator's word wins
    (["zstd", "gzip"], [], None),          # the operator turned it off
    (None, None, None),                     # the card says nothing: plain JSON
])
async def test_leg_bodies_are_compressed_as_the_agent_reads_them(card, operator, expected):
    wire = Wire()
    async with coded_agent("sink", wire, card) as (url, executor):
        cfg: dict[str, Any] = {"name": "sink", "url": url}
        if operator is not None:
            cfg["compress"] = operator
        async with gateway({"agents": [cfg]}) as (gw, gw_url):
            big = (await post(gw_url, rpc_body(message(TEXT, "c1")))).json()
            small = (await post(gw_url, rpc_body(message("hi", "c2")))).json()
    assert big["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert small["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert json_format.MessageToDict(executor.received[0].message.parts[0])["text"] == TEXT
    (big_coding, big_size), (small_coding, _) = wire.seen
    assert big_coding == expected and small_coding is None  # a small body is never worth coding
    if expected is not None:
        assert big_size < len(TEXT) // 4
    else:
        assert big_size > len(TEXT)


async def test_an_agent_that_answers_415_gets_the_body_plain_and_plain_from_then_on():
    wire = Wire(refuse_coded=True)
    async with coded_agent("old", wire, ["gzip"]) as (url, executor):
        async with gateway({"agents": [{"name": "old", "url": url}]}) as (gw, gw_url):
            first = (await post(gw_url, rpc_body(message(TEXT, "r1")))).json()
            second = (await post(gw_url, rpc_body(message(TEXT, "r2")))).json()
    assert first["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert second["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [c for c, _ in wire.seen] == ["gzip", None, None]
    assert len(executor.received) == 2


async def test_replies_are_compressed_for_clients_that_ask_and_only_when_large():
    wire = Wire()
    async with coded_agent("echo", wire, None) as (url, _):
        async with gateway({"agents": [{"name": "echo", "url": url}]}) as (gw, gw_url):
            zs = await post(gw_url, rpc_body(message(TEXT, "z1")), {"Accept-Encoding": "gzip;q=0.5, zstd"})
            gz = await post(gw_url, rpc_body(message(TEXT, "z2")), {"Accept-Encoding": "gzip"})
            none = await post(gw_url, rpc_body(message(TEXT, "z3")), {"Accept-Encoding": "identity"})
            tiny = await post(gw_url, rpc_body(message("hi", "z4")), {"Accept-Encoding": "zstd"})
    assert zs.headers["content-encoding"] == "zstd" and zs.headers["vary"] == "Accept-Encoding"
    assert int(zs.headers["content-length"]) < len(TEXT) // 4  # what travelled
    assert gz.headers["content-encoding"] == "gzip"
    for r in (zs, gz, none):  # httpx decoded it: the same task text
        assert r.json()["result"]["task"]["status"]["message"]["parts"][0]["text"] == TEXT
    assert "content-encoding" not in none.headers and "content-encoding" not in tiny.headers


async def test_clients_may_send_coded_requests_and_bad_ones_get_clear_errors():
    wire = Wire()
    async with coded_agent("echo", wire, None) as (url, _):
        async with gateway({"agents": [{"name": "echo", "url": url}], "max_body_bytes": 1024 * 1024}) as (gw, gw_url):
            ok = await post(gw_url, gzip.compress(orjson.dumps(rpc_body(message(TEXT, "g1")))),
                            {"Content-Encoding": "gzip"})
            ok_z = await post(gw_url, zstd.ZstdCompressor().compress(orjson.dumps(rpc_body(message(TEXT, "g2")))),
                              {"Content-Encoding": "zstd"})
            corrupt = await post(gw_url, b"plainly not gzip", {"Content-Encoding": "gzip"})
            bomb = await post(gw_url, gzip.compress(b"[" + b" " * (4 * 1024 * 1024) + b"]"), {"Content-Encoding": "gzip"})
            unknown = await post(gw_url, b"{}", {"Content-Encoding": "br"})
    assert ok.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert ok_z.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert corrupt.status_code == 400 and "not valid gzip data" in corrupt.json()["error"]["message"]
    assert bomb.status_code == 413 and "decodes to more than 1048576 bytes" in bomb.json()["error"]["message"]
    assert unknown.status_code == 415 and "Content-Encoding 'br' is not supported" in unknown.json()["error"]["message"]
    assert unknown.headers["accept-encoding"] == "zstd, gzip"  # RFC 7694: what it reads (an upstream resends plain)
