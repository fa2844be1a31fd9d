"""A rating given at gateway A of a task A forwarded to peer gateway B reaches B's learned routing, for the same
client (A's signed client assertion), and only for that client."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from mma2a.ext import EXTENSION_URI
from mma2a.signing import new_private_key, private_key_text, public_key_text
from tests.gateway.conftest import agent, agents, gateway

ALICE, DAVE, GWA = "alice-token-1", "dave-token-1", "gwa-token-1"
LEARN = {"version": 1, "default": {"learn": {"explore": 0}}, "rules": []}


async def send(c: httpx.AsyncClient, url: str, token: str, mid: str, text: str) -> dict[str, Any]:
    r = await c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}]}}},
        headers={"A2A-Version": "1.0", "Authorization": f"Bearer {token}"})
    task: dict[str, Any] = r.json()["result"]["task"]
    return task


def desk_at_b(task: dict[str, Any]) -> str:
    """The agent gateway B chose (B's route, kept under `downstream` by A)."""
    return str(task["metadata"][EXTENSION_URI]["downstream"]["route"][0]["targets"][0])


async def test_a_rating_at_a_reaches_b_for_the_same_client(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    key = new_private_key()
    monkeypatch.setenv("FED_A_KEY", private_key_text(key))
    monkeypatch.setenv("FED_A_PUB", public_key_text(key))
    monkeypatch.setenv("MMA2A_AGENT_GWA_TOKEN", GWA)
    specs = {n: agent(n, ["text/plain"]) for n in ("desk-a", "desk-b")}
    async with agents(specs) as urls:
        async with gateway({"name": "gw-b", "agents": [{"name": n, "url": u} for n, u in urls.items()],
                            "rules": orjson.dumps(LEARN).decode(), "data_dir": str(tmp_path / "b"),
                            "auth": {"clients": [{"name": "gwa", "token": GWA}]},
                            "federation": {"trusted_gateways": {"gwa": {"public_key_env": "FED_A_PUB"}}}}) as (gw_b, url_b):
            async with gateway({"name": "gw-a", "data_dir": str(tmp_path / "a"),
                                "agents": [{"name": "site-b", "url": url_b, "token_env": "MMA2A_AGENT_GWA_TOKEN"}],
                                "auth": {"clients": [{"name": "alice", "token": ALICE}, {"name": "dave", "token": DAVE}]},
                                "federation": {"private_key_env": "FED_A_KEY"}}) as (gw_a, url_a), \
                    httpx.AsyncClient(timeout=30) as c:
                first = await send(c, url_a, ALICE, "m-1", "My parcel was delivered to the wrong address")
                rated = await c.post(f"{url_a}/tasks/{first['id']}:feedback", json={"score": 0},
                                     headers={"Authorization": f"Bearer {ALICE}"})
                second = await send(c, url_a, ALICE, "m-2", "The parcel went to a wrong delivery address")
                dave = await send(c, url_a, DAVE, "m-3", "My parcel was delivered to the wrong address")
    assert desk_at_b(first) == "desk-a"  # no ratings at B yet: capability routing, the first of equals
    assert rated.status_code == 200, rated.text
    assert rated.json()["agent"] == "site-b" and rated.json()["forwarded"] == {"agent": "site-b", "learnedParts": 1}
    assert desk_at_b(second) == "desk-b"  # B learned alice's rating, given at A
    assert desk_at_b(dave) == "desk-a"  # counted for alice via gwa only: dave's traffic at B is his own
