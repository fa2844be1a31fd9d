"""Regular expressions in feature schemas cannot hold the event loop (round 4): Python's `re` backtracks, so an
admin's schema with `pattern: ^(a+)+$`, or a fair pattern such as `[a-z]+\\d` checked against a 16 KiB feature,
took seconds to hours per message. Patterns that backtrack without bound are refused when the schema is
registered, and strings over 256 characters are not searched (`mma2a.patterns`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from mma2a.ext import EXTENSION_URI
from mma2a.patterns import check_pattern
from tests.conformance.sut import sample_agent
from tests.gateway.conftest import ADMIN, gateway

TOKEN = "tok-patterns-1"


def admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN}"}


def with_features(mid: str, features: dict[str, Any]) -> dict[str, Any]:
    part = {"text": "scan", "mediaType": "application/x-lidar",
            "metadata": {EXTENSION_URI: {"modality": "application/x-lidar", "features": features}}}
    message = {"messageId": mid, "role": "ROLE_USER", "parts": [part], "extensions": [EXTENSION_URI]}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


@contextlib.asynccontextmanager
async def registered(gw: Any, modality: str) -> AsyncIterator[None]:
    """The gateway's registry is the process's default one: the modality the test registers is removed after it."""
    try:
        yield
    finally:
        if gw.registry.lookup(modality) is not None:
            gw.registry.unregister(modality)


async def test_slow_patterns_are_refused_at_registration_and_long_strings_are_not_searched():
    async with sample_agent("a") as a:
        cfg = {"agents": [{"name": "a", "url": a.url}], "auth": {"clients": [{"name": "c", "token": TOKEN}]},
               "rules": {"rules": [{"name": "all", "match": {"modality": "*/*"}, "action": {"route_to": "a"}}]}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c, registered(gw, "application/x-lidar"):
            bombs = {p: await c.post(url + "/admin/modalities", headers=admin(), json={
                "modality": "application/x-lidar", "schema": {"type": "object", "properties": {"name": {
                    "type": "string", "pattern": p}}}}) for p in ("^(a+)+$", "(a|ab)*c", ".*.*x", "(a)\\1")}
            keys = await c.post(url + "/admin/modalities", headers=admin(), json={
                "modality": "application/x-lidar", "schema": {"type": "object", "patternProperties": {"(x+x+)+y": {}}}})
            fair = await c.post(url + "/admin/modalities", headers=admin(), json={
                "modality": "application/x-lidar", "schema": {"type": "object", "properties": {"name": {
                    "type": "string", "pattern": "[a-z]+\\d"}}}})
            auth = {"Authorization": f"Bearer {TOKEN}", "A2A-Version": "1.0"}
            long, health = await asyncio.gather(  # 21 s of backtracking on the event loop before
                c.post(url, json=with_features("m-long", {"name": "a" * 16000}), headers=auth), c.get(url + "/healthz"))
            short = await c.post(url, json=with_features("m-short", {"name": "aaaa"}), headers=auth)
            good = await c.post(url, json=with_features("m-good", {"name": "lidar7"}), headers=auth)
    for p, r in bombs.items():
        assert r.status_code == 400, p
        assert r.json()["error"]["message"] == (f"schema.properties.name.pattern: {p!r} refused: {check_pattern(p)} "
                                                "(docs/security.md)")
    assert "a repeat inside a repeat" in check_pattern("^(a+)+$")  # type: ignore[operator]
    assert keys.status_code == 400 and keys.json()["error"]["message"].startswith(
        "schema.patternProperties: '(x+x+)+y' refused: a repeat inside a repeat")
    assert fair.status_code == 201
    assert health.status_code == 200
    err = long.json()["error"]
    assert err["code"] == -32602 and err["message"] == (
        "message.parts[0].features.name: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'... is longer than 256 characters, "
        "the most checked against a pattern (schema application/x-lidar/1)")
    assert short.json()["error"]["message"] == (
        "message.parts[0].features.name: 'aaaa' does not match '[a-z]+\\\\d' (schema application/x-lidar/1)")
    assert good.json()["error"]["code"] == -32005  # past the schema check: agent a takes no lidar (routing answers)


@pytest.mark.parametrize("pattern", ["^[0-9a-f]{64}$", "^\\d{4}-\\d{2}-\\d{2}(T\\d{2}:\\d{2})?$", "^[a-z]{2}(-[A-Z]{2})?$",
                                     "^[^@]+@[^@]+$", "cat|dog", "[a-z]+\\d"])
def test_ordinary_patterns_pass(pattern: str) -> None:
    assert check_pattern(pattern) is None
