"""Security fixtures: a real gateway with clients and credentials in front of real a2a-sdk agents."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from tests.gateway.conftest import ADMIN, agent, agents, gateway

TOKEN = "tok-alice-7f3c2b9e1d"  # alice's bearer token
API_KEY = "key-bob-55aa01c3e9"  # bob's API key
CAROL = "tok-carol-0b1d2f"  # carol may only call /agents/vision
SECRETS = (TOKEN, API_KEY, CAROL, ADMIN)

CLIENTS = [
    {"name": "alice", "token": TOKEN},
    {"name": "bob", "api_key_env": "TEST_BOB_KEY"},
    {"name": "carol", "token": CAROL, "agents": ["vision"]},
]

PNG_1PX = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def send_body(message_id: str = "m-1", parts: list[dict[str, Any]] | None = None, **params: Any) -> dict[str, Any]:
    msg = {"messageId": message_id, "role": "ROLE_USER", "parts": parts or [{"text": "hello"}]}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": msg, **params}}


def error_field(err: dict[str, Any]) -> Any:
    """The field a JSON-RPC error names (`data`: ErrorInfo details, A2A 1.0)."""
    data = err.get("data")
    if isinstance(data, list):
        return next((d.get("metadata", {}).get("field") for d in data if isinstance(d, dict)), None)
    return data.get("field") if isinstance(data, dict) else None


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}


@contextlib.asynccontextmanager
async def secured(extra: dict[str, Any] | None = None, *, monkeypatch: Any = None,
                  names: tuple[str, ...] = ("vision", "text")) -> AsyncIterator[tuple[Any, str, dict[str, str]]]:
    """Agents `vision` (images) and `text`, a gateway with auth on; yields (gateway, url, agent urls)."""
    specs = {n: agent(n, ["image/*"] if n == "vision" else ["text/plain"]) for n in names}
    async with agents(specs) as urls:
        cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()], "auth": {"clients": CLIENTS}, **(extra or {})}
        async with gateway(cfg) as (gw, url):
            gw.test_specs = specs  # type: ignore[attr-defined]
            yield gw, url, urls


async def post(url: str, path: str, body: Any = None, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as c:
        if body is not None and isinstance(body, (dict, list)):
            return await c.post(url + path, json=body, headers=headers, **kw)
        return await c.post(url + path, content=body, headers=headers, **kw)
