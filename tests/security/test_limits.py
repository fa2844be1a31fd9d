"""Limits through a real gateway: body size (413 on each binding), parts, inline bytes, features size,
modality allow/deny lists (gateway-wide and per agent), rate limits (429 + Retry-After)."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from mma2a.errors import error_info
from mma2a.ext import EXTENSION_URI
from tests.security.conftest import API_KEY, PNG_1PX, TOKEN, bearer, post, secured, send_body

IMG = {"raw": PNG_1PX, "mediaType": "image/png"}


@pytest.fixture(autouse=True)
def _bob_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)


async def test_oversize_bodies_get_413_on_every_binding() -> None:
    big = send_body(parts=[{"text": "x" * 5000}])
    async with secured({"max_body_bytes": 4096}) as (gw, url, _):
        rpc = await post(url, "/", big, bearer(TOKEN))
        rest = await post(url, "/message:send", {"message": big["params"]["message"]}, bearer(TOKEN))

        async def chunks():  # no Content-Length: the limit still holds
            for _ in range(10):
                yield b" " * 1000
        chunked = await post(url, "/message:send", chunks(), {**bearer(TOKEN), "Content-Type": "application/json"})
        chunked_rpc = await post(url, "/", chunks(), {**bearer(TOKEN), "Content-Type": "application/json"})
        small = await post(url, "/", send_body(), bearer(TOKEN))
    msg = "request body exceeds 4096 bytes; send large media by reference (POST /blobs)"
    assert rpc.status_code == 413 and rpc.json()["error"] == {"code": -32600, "message": msg, "data": [error_info(-32600)]}
    assert rest.status_code == 413 and rest.json()["error"]["message"] == msg and rest.json()["error"]["code"] == 413
    assert chunked.status_code == 413 and chunked.json()["error"]["message"] == msg
    assert chunked_rpc.status_code == 413
    assert small.status_code == 200


async def test_parts_inline_bytes_and_features_size_are_limited() -> None:
    limits = {"limits": {"max_parts": 3, "max_inline_bytes": 1000, "max_features_bytes": 200}}
    async with secured(limits) as (gw, url, _):
        many = await post(url, "/", send_body(parts=[{"text": "a"}] * 4), bearer(TOKEN))
        inline = await post(url, "/", send_body(parts=[{"text": "a"}, {"raw": base64.b64encode(b"x" * 2000).decode(),
                                                                        "mediaType": "image/png"}]), bearer(TOKEN))
        feats = {EXTENSION_URI: {"modality": "image/png", "features": {"objects": ["x" * 50] * 10}}}
        features = await post(url, "/", send_body(parts=[{**IMG, "metadata": feats}]), bearer(TOKEN))
        rest = await post(url, "/message:send", {"message": send_body(parts=[{"text": "a"}] * 4)["params"]["message"]},
                          bearer(TOKEN))
    assert many.json()["error"] == {"code": -32600, "message": "params.message.parts: 4 parts, the limit is 3",
                                    "data": [error_info(-32600, {"field": "params.message.parts"})]}
    assert inline.json()["error"]["message"] == (
        "params.message.parts[1]: inline content passes 1000 bytes; send large media by reference (POST /blobs)")
    where = f"params.message.parts[0].metadata[{EXTENSION_URI}].features"
    assert features.json()["error"]["message"] == f"{where}: 543 bytes, the limit is 200"
    assert rest.status_code == 413 and rest.json()["error"]["message"] == "params.message.parts: 4 parts, the limit is 3"


async def test_modality_deny_and_allow_lists_gateway_wide_and_per_agent() -> None:
    limits = {"limits": {"modalities": {"deny": ["video/*"]}, "agents": {"text": {"allow": ["text/*"]},
                                                                         "vision": {"deny": ["image/gif"]}}}}
    async with secured(limits) as (gw, url, _):
        video = await post(url, "/", send_body(parts=[{"raw": "AAAA", "mediaType": "video/mp4"}]), bearer(TOKEN))
        explicit = await post(url, "/agents/text/", send_body(parts=[IMG]), bearer(TOKEN))
        gif = await post(url, "/", send_body(parts=[{"raw": "R0lGODlh", "mediaType": "image/gif"}]), bearer(TOKEN))
        png = await post(url, "/", send_body(parts=[IMG]), bearer(TOKEN))
        rest = await post(url, "/message:send", {"message": {"messageId": "v", "role": "ROLE_USER",
                          "parts": [{"raw": "AAAA", "mediaType": "video/mp4"}]}}, bearer(TOKEN))
    assert video.json()["error"] == {"code": -32600, "message": "params.message.parts[0]: modality video/mp4 is on the "
                                     "deny list of this gateway", "data": [error_info(-32600, {"field": "params.message.parts[0]"}, reason="PERMISSION_DENIED")]}
    assert explicit.json()["error"]["message"] == (
        "params.message.parts[0]: modality image/png is not on the allow list of agent text")
    assert gif.json()["error"]["message"] == "params.message.parts[0]: modality image/gif is on the deny list of agent vision"
    assert png.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert rest.status_code == 403 and "is on the deny list of this gateway" in rest.json()["error"]["message"]  # its own status (session 17)


async def test_rate_limits_per_sender_answer_429_with_retry_after() -> None:
    # a slow refill (one token per 1,000 s): a loaded machine cannot refill the bucket between requests
    async with secured({"rate_limit": {"enabled": True, "rate": 0.001, "burst": 3}}) as (gw, url, _):
        alice = [await post(url, "/", send_body(f"a{i}"), bearer(TOKEN)) for i in range(4)]
        bob = await post(url, "/", send_body("b"), {"X-API-Key": API_KEY, "A2A-Version": "1.0"})
        rest = await post(url, "/message:send", {"message": send_body("r")["params"]["message"]}, bearer(TOKEN))
        async with httpx.AsyncClient() as c:
            card = await c.get(url + "/.well-known/agent-card.json")
    assert [r.status_code for r in alice] == [200, 200, 200, 429]
    limited = alice[3]
    assert limited.json()["error"]["code"] == -32600
    message = limited.json()["error"]["message"]
    assert message.startswith("rate limit of alice exceeded; retry in ")
    wait = float(message.removeprefix("rate limit of alice exceeded; retry in ").split(" ")[0])
    assert 900 < wait <= 1000  # most of a token's 1,000 s
    assert 0 <= int(limited.headers["retry-after"]) - wait < 1.01  # the header says the same, rounded up to seconds
    assert bob.status_code == 200  # buckets are per sender
    assert rest.status_code == 429 and rest.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert card.status_code == 200  # discovery is not rate limited


async def test_anonymous_senders_are_limited_by_address_when_auth_is_off() -> None:
    from tests.gateway.conftest import agent, agents, gateway

    async with agents({"text": agent("text", ["text/plain"])}) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}], "rate_limit": {"enabled": True, "rate": 0.1, "burst": 1}}
        async with gateway(cfg) as (gw, url):
            first = await post(url, "/", send_body("1"), {"A2A-Version": "1.0"})
            second = await post(url, "/", send_body("2"), {"A2A-Version": "1.0"})
    assert first.status_code == 200
    assert second.status_code == 429 and second.json()["error"]["message"].startswith("rate limit of ip:127.0.0.1 exceeded")


async def test_an_ipv6_caller_is_limited_by_its_64_not_by_each_of_its_addresses() -> None:
    """Session 15 (probe6, S15-13): without authentication a caller is limited by its address, and an IPv6 caller was
    keyed by its whole address — a host holds a /64, 2^64 addresses, so by changing its source address on each request
    it had a fresh bucket each time: 10 requests from 10 addresses of one /64, all served past a burst of 3. Now an
    IPv6 caller is keyed by its /64 (as its failed credentials already were), for its request rate, ratings, body
    bytes and stream slots; another /64 and IPv4 callers keep theirs. Addresses through the trusted local proxy."""
    from tests.gateway.conftest import agent, agents, gateway

    async with agents({"text": agent("text", ["text/plain"])}) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}], "rate_limit": {"enabled": True, "rate": 0.001, "burst": 3}}
        async with gateway(cfg) as (gw, url):
            def sent(i: int, address: str) -> Any:
                return post(url, "/", send_body(f"m-{i}"), {"A2A-Version": "1.0", "X-Forwarded-For": address})

            one_64 = [(await sent(i, f"2001:db8:1:1::{i + 1:x}")).status_code for i in range(10)]
            other_64 = await sent(10, "2001:db8:1:2::1")
            refused = await sent(11, "2001:db8:1:1:ffff::9")
    assert one_64 == [200] * 3 + [429] * 7  # before: 200 all ten
    assert other_64.status_code == 200
    assert refused.json()["error"]["message"].startswith("rate limit of ip:2001:db8:1:1::/64 exceeded; retry in ")
