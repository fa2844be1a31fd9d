"""Payloads through the gateway: big inline parts offloaded to signed references that agents fetch."""

from __future__ import annotations

import base64
import hashlib
import os

import httpx
from google.protobuf import json_format

from mma2a.ext import EXTENSION_URI
from tests.gateway.conftest import agent, agents, gateway, rpc


async def test_large_inline_part_reaches_the_agent_by_signed_reference():
    blob = os.urandom(300 * 1024)
    small = os.urandom(10 * 1024)
    specs = {"store": agent("store", ["application/octet-stream"])}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": "store", "url": urls["store"]}]}) as (gw, url):
            msg = {"messageId": "p1", "role": "ROLE_USER", "parts": [
                {"raw": base64.b64encode(blob).decode(), "mediaType": "application/octet-stream", "filename": "big.bin"},
                {"raw": base64.b64encode(small).decode(), "mediaType": "application/octet-stream"}]}
            doc = await rpc(url, "SendMessage", {"message": msg})
            received = [json_format.MessageToDict(p) for p in specs["store"][1].received[0].message.parts]
            async with httpx.AsyncClient() as c:
                fetched = await c.get(received[0]["url"])
                tampered = await c.get(received[0]["url"].replace("sig=", "sig=x"))
    assert doc["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    big, inline = received
    assert "raw" not in big and big["url"].startswith(url + "/blobs/") and big["filename"] == "big.bin"
    ref = big["metadata"][EXTENSION_URI]
    assert ref["encoding"] == "native" and ref["payload"]["sha256"] == hashlib.sha256(blob).hexdigest()
    assert int(ref["payload"]["size"]) == len(blob)
    assert fetched.status_code == 200 and fetched.content == blob
    assert tampered.status_code == 403
    assert base64.b64decode(inline["raw"]) == small


async def test_upload_then_send_by_url():
    data = os.urandom(64 * 1024)
    specs = {"store": agent("store", ["image/*"])}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": "store", "url": urls["store"]}]}) as (gw, url):
            async with httpx.AsyncClient() as c:
                up = await c.post(url + "/blobs", content=data, headers={"Content-Type": "image/png"})
            info = up.json()
            msg = {"messageId": "p2", "role": "ROLE_USER", "parts": [{"url": info["url"], "mediaType": "image/png"}]}
            doc = await rpc(url, "SendMessage", {"message": msg})
            async with httpx.AsyncClient() as c:
                got = await c.get(specs["store"][1].received[0].message.parts[0].url, headers={"Range": "bytes=0-99"})
    assert up.status_code == 201 and info["sha256"] == hashlib.sha256(data).hexdigest() and info["size"] == len(data)
    assert doc["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert got.status_code == 206 and got.content == data[:100]
