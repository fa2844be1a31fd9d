"""offload_parts: large inline raw parts become signed url parts; small ones stay; receivers fetch the bytes."""

from __future__ import annotations

import base64
import copy
import hashlib
import os

import httpx
import pytest

from mma2a.errors import PayloadError
from mma2a.ext import EXTENSION_URI, read_part
from mma2a.payload import offload_parts
from tests.payload.conftest import PayloadServer


def message(*parts: dict) -> dict:
    return {"messageId": "m1", "role": "ROLE_USER", "parts": list(parts)}


async def test_offload_replaces_300kb_and_keeps_10kb(server: PayloadServer) -> None:
    big, small = os.urandom(300 * 1024), os.urandom(10 * 1024)
    msg = message(
        {"text": "what is wrong with this hinge?"},
        {
            "raw": base64.b64encode(big).decode(),
            "mediaType": "image/jpeg",
            "filename": "hinge.jpg",
            "metadata": {"camera": "left", EXTENSION_URI: {"features": {"width": 1920}, "featureSchema": "image/1"}},
        },
        {"raw": base64.b64encode(small).decode(), "mediaType": "audio/wav", "filename": "note.wav"},
    )
    before = copy.deepcopy(msg)
    out = await offload_parts(msg, server.store, server.signer, base_url=server.url)
    assert msg == before, "the input message must not change"

    assert out["parts"][0] == msg["parts"][0]
    assert out["parts"][2] == msg["parts"][2]
    part = out["parts"][1]
    digest = hashlib.sha256(big).hexdigest()
    assert "raw" not in part
    assert (part["mediaType"], part["filename"], part["metadata"]["camera"]) == ("image/jpeg", "hinge.jpg", "left")
    assert part["url"].startswith(f"{server.url}/blobs/{digest}?exp=")
    ext = read_part(part)
    assert ext.encoding == "native"
    assert ext.payload is not None
    assert (ext.payload.sha256, ext.payload.size) == (digest, len(big))
    assert ext.payload.expires == int(server.clock.now) + server.signer.default_expires_in
    assert (dict(ext.features), ext.feature_schema) == ({"width": 1920}, "image/1")
    assert out["extensions"] == [EXTENSION_URI]

    async with httpx.AsyncClient() as client:
        r = await client.get(part["url"])
    assert (r.status_code, r.headers["content-type"], r.content) == (200, "image/jpeg", big)


async def test_threshold_is_configurable_and_urlsafe_base64_decodes(server: PayloadServer) -> None:
    data = os.urandom(5000) + b"\xfb\xff"  # makes '-' / '_' appear in URL-safe base64
    raw = base64.urlsafe_b64encode(data).decode().rstrip("=")
    out = await offload_parts(message({"raw": raw}), server.store, server.signer, base_url=server.url + "/", threshold=4096)
    part = out["parts"][0]
    assert part["mediaType"] == "application/octet-stream"
    assert await server.store.read_all(read_part(part).payload.sha256) == data  # type: ignore[union-attr]
    same = await offload_parts(message({"raw": raw}), server.store, server.signer, base_url=server.url, threshold=10_000)
    assert same["parts"][0] == {"raw": raw} and "extensions" not in same


async def test_bad_input_is_named(server: PayloadServer) -> None:
    with pytest.raises(PayloadError) as exc:
        await offload_parts(message({"text": "x"}, {"raw": "!!!!" * 100}), server.store, server.signer, base_url=server.url, threshold=10)
    assert exc.value.message == "message.parts[1].raw: not valid base64"
    with pytest.raises(PayloadError) as exc:
        await offload_parts({"parts": "nope"}, server.store, server.signer, base_url=server.url)
    assert exc.value.message == "message.parts: must be a list"
