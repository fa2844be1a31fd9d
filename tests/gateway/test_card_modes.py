"""Cards as published samples write them: informal modes read as MIME families, and a mode that
cannot be read is reported (admin, health, log) instead of leaving the agent silently unroutable."""

from __future__ import annotations

import logging

import httpx
import pytest

from tests.agents import RecordingExecutor, make_card
from tests.gateway.conftest import ADMIN, agent, agents, gateway, rpc

AUTH = {"Authorization": f"Bearer {ADMIN}"}
TEXT_MSG = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}


async def test_text_card_is_routable_at_root_and_by_name():
    card = make_card("sut", input_modes=["text"], output_modes=["text"])
    ex = RecordingExecutor(reply="sut says hi")
    async with agents({"sut": (card, ex)}) as urls:
        async with gateway({"agents": [{"name": "sut", "url": urls["sut"]}]}) as (gw, url):
            root = await rpc(url, "SendMessage", {"message": TEXT_MSG})
            named = await rpc(url, "SendMessage", {"message": {**TEXT_MSG, "messageId": "m2"}}, path="/agents/sut/")
            async with httpx.AsyncClient() as c:
                health = (await c.get(url + "/healthz")).json()
                listed = (await c.get(url + "/admin/agents", headers=AUTH)).json()
    for doc in (root, named):
        assert doc["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", doc
        assert doc["result"]["task"]["status"]["message"]["parts"][0]["text"] == "sut says hi"
    assert len(ex.received) == 2
    assert health["status"] == "ok" and "agentProblems" not in health
    assert listed["agents"][0]["problems"] == []


async def test_unreadable_mode_is_reported_and_the_rest_of_the_card_still_routes(caplog: pytest.LogCaptureFixture):
    card = make_card("odd", input_modes=["text/plain", "not a mode"])
    caplog.set_level(logging.WARNING, logger="mma2a.gateway.directory")
    async with agents({"odd": (card, RecordingExecutor(reply="odd ok"))}) as urls:
        async with gateway({"agents": [{"name": "odd", "url": urls["odd"]}]}) as (gw, url):
            doc = await rpc(url, "SendMessage", {"message": TEXT_MSG})
            async with httpx.AsyncClient() as c:
                health = (await c.get(url + "/healthz")).json()
                listed = (await c.get(url + "/admin/agents", headers=AUTH)).json()
    assert doc["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    problem = "card 'odd'.defaultInputModes[1]: 'not a mode' is not a media type (expected type/subtype)"
    assert health["status"] == "degraded"
    assert health["agentProblems"] == {"odd": [problem]}
    assert listed["agents"][0]["problems"] == [problem]
    assert any(problem in r.getMessage() and "left out of routing" in r.getMessage() for r in caplog.records)


async def test_failed_routing_rebuild_shows_in_health():
    rules = {"version": 1, "rules": [{"name": "to-b", "match": {"modality": "text/plain"}, "action": {"route_to": "b"}}]}
    async with agents({"a": agent("a", ["text/plain"]), "b": agent("b", ["text/plain"])}) as urls:
        cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()], "rules": rules}
        async with gateway(cfg) as (gw, url):
            async with httpx.AsyncClient() as c:
                before = (await c.get(url + "/healthz")).json()
                assert (await c.delete(url + "/admin/agents/b", headers=AUTH)).status_code == 204
                after = (await c.get(url + "/healthz")).json()
    assert before["status"] == "ok"
    assert after["status"] == "degraded"
    assert "'b'" in after["routingError"]
