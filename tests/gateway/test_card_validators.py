"""A card's validators are the same on every gateway serving it (session 15's leftover): `Last-Modified` was when
this process first served the content, so a gateway or worker started later answered a client's `If-Modified-Since`
(the date another one sent it) with 200. Now both validators come from the content; `If-Modified-Since` is matched
exactly (another content's date may be earlier or later, so "not modified since" cannot be read from a date)."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.gateway.conftest import agent, agents, gateway

CARD = "/.well-known/agent-card.json"


async def test_a_card_revalidates_by_its_date_on_a_gateway_started_later(monkeypatch: pytest.MonkeyPatch) -> None:
    card, executor = agent("text", ["text/plain"])
    async with agents({"text": (card, executor)}) as urls, httpx.AsyncClient(timeout=30) as c:
        config = {"agents": [{"name": "text", "url": urls["text"]}], "public_url": "https://gw.example.org"}
        async with gateway(config) as (_, first), gateway(config) as (_, later):
            paths = (CARD, "/agents/text" + CARD)
            seen = [await c.get(first.rstrip("/") + p) for p in paths]
            real = time.time
            monkeypatch.setattr(time, "time", lambda: real() + 3600)  # the later gateway serves them an hour on
            again = [await c.get(later.rstrip("/") + p, headers={"If-Modified-Since": r.headers["last-modified"]})
                     for p, r in zip(paths, seen, strict=True)]
            fresh = [await c.get(later.rstrip("/") + p) for p in paths]
            monkeypatch.setattr(time, "time", real)
            # another content's date is not "not modified": the agent's card with the root card's date, a date after
            other = await c.get(later.rstrip("/") + paths[1], headers={"If-Modified-Since": seen[0].headers["last-modified"]})
            after = await c.get(later.rstrip("/") + paths[0], headers={"If-Modified-Since": "Fri, 01 Jan 2100 00:00:00 GMT"})
    assert [r.status_code for r in seen] == [200, 200]
    assert [r.status_code for r in again] == [304, 304]  # before: 200 (its Last-Modified an hour later)
    for s, f in zip(seen, fresh, strict=True):
        assert (f.headers["last-modified"], f.headers["etag"], f.content) == (
            s.headers["last-modified"], s.headers["etag"], s.content)
    assert seen[0].headers["last-modified"] != seen[1].headers["last-modified"]
    assert (other.status_code, other.json()["name"]) == (200, "text")
    assert after.status_code == 200 and after.headers["last-modified"] == seen[0].headers["last-modified"]
