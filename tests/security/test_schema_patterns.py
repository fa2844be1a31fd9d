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


async def test_a_schema_referring_to_a_remote_schema_is_refused_and_nothing_is_ever_fetched(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 12, S12-4: jsonschema's default resolver fetched a remote `$ref` with urllib when a client's features
    were validated — on the event loop, with no timeout, past the URL policy: with the `$ref` host not answering, the
    gateway answered nothing (not even /healthz) for as long as the host held the connection. Now registration refuses
    a reference outside the schema, and the validator never retrieves (an empty registry)."""
    from mma2a.errors import FeatureSchemaError
    from mma2a.modality import ModalityRegistry
    from mma2a.serving import running

    hits: list[str] = []

    async def remote(scope: dict[str, Any], receive: Any, send: Any) -> None:  # records what the gateway asks of it
        if scope["type"] == "http":
            hits.append(scope["path"])
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"type": "integer"}'})

    async with running(remote) as there, sample_agent("a") as a:
        ref = there.rstrip("/") + "/name.json"
        cfg = {"agents": [{"name": "a", "url": a.url}], "auth": {"clients": [{"name": "c", "token": TOKEN}]}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c, registered(gw, "application/x-lidar"):
            refused = {field: await c.post(url + "/admin/modalities", headers=admin(), json={
                "modality": "application/x-lidar", "schema": schema}) for field, schema in (
                ("schema.properties.name.$ref", {"type": "object", "properties": {"name": {"$ref": ref}}}),
                ("schema.$defs.n.$dynamicRef", {"$defs": {"n": {"$dynamicRef": "name.json"}}}),
                ("schema.allOf[0].$ref", {"$id": there, "allOf": [{"$ref": "name.json"}]}))}
            local = await c.post(url + "/admin/modalities", headers=admin(), json={
                "modality": "application/x-lidar", "schema": {"$defs": {"n": {"type": "integer"}}, "type": "object",
                                                              "properties": {"name": {"$ref": "#/$defs/n"}}}})
            described = await c.post(url + "/admin/modalities", headers=admin(), json={
                "modality": "application/x-lidar", "description": {"an": "object"}})  # kept and served as it came
            auth = {"Authorization": f"Bearer {TOKEN}", "A2A-Version": "1.0"}
            checked = await c.post(url, json=with_features("m-ref", {"name": "not a number"}), headers=auth)
    for field, r in refused.items():
        assert r.status_code == 400, field
        assert r.json()["error"]["message"].startswith(f"{field}: "), r.text
        assert r.json()["error"]["message"].endswith("refused: a feature schema's references must point inside it "
                                                     "('#/$defs/...'); remote schemas are never fetched")
    assert local.status_code == 201  # a reference inside the schema works
    assert described.status_code == 400 and described.json()["error"]["message"] == ("description: must be a "
                                                                                       "string, got dict")
    assert checked.json()["error"]["message"] == ("message.parts[0].features.name: 'not a number' is not of type "
                                                  "'integer' (schema application/x-lidar/1)")
    # a schema that got in some other way still fetches nothing: its reference cannot be resolved, said by name
    registry = ModalityRegistry(builtins=False)
    with monkeypatch.context() as m:  # as if an older replica had registered it, unchecked
        m.setattr(ModalityRegistry, "check_schema", staticmethod(lambda pattern, schema: None))
        registry.register("application/x-sneak", schema={"type": "object", "properties": {"name": {"$ref": ref}}})
    with pytest.raises(FeatureSchemaError) as info:
        registry.validate_features("application/x-sneak", {"name": 1})
    assert info.value.message.startswith("features: schema application/x-sneak/1 has a reference that cannot be "
                                         "resolved (")
    assert hits == []  # before: /name.json fetched once per message
