"""The web console and its live decision feed."""

from __future__ import annotations

import base64

import httpx

from mma2a.ext import EXTENSION_URI
from tests.gateway.conftest import ADMIN, agent, agents, gateway, rpc
from tests.media import png_bytes

AUTH = {"Authorization": f"Bearer {ADMIN}"}


async def test_console_page_and_the_decision_feed_with_thumbnails():
    thumb = base64.b64encode(png_bytes(8, 6)).decode()
    part = {"raw": base64.b64encode(png_bytes()).decode(), "mediaType": "image/png",
            "metadata": {EXTENSION_URI: {"thumbnail": {"mediaType": "image/png", "data": thumb}}}}
    async with agents({"vision": agent("vision", ["image/*"])}) as urls:
        async with gateway({"agents": [{"name": "vision", "url": urls["vision"]}]}) as (gw, url):
            async with httpx.AsyncClient() as c:
                page = await c.get(url + "/console")
                script = await c.get(url + "/console/console.js")
                style = await c.get(url + "/console/console.css")
                empty = (await c.get(url + "/admin/decisions", headers=AUTH)).json()
                await rpc(url, "SendMessage", {"message": {"messageId": "c1", "role": "ROLE_USER", "parts": [part]}})
                await rpc(url, "SendMessage", {"message": {"messageId": "c2", "role": "ROLE_USER", "parts": [{"text": "hi"}]}})
                feed = (await c.get(url + "/admin/decisions", headers=AUTH)).json()["decisions"]
                newer = (await c.get(url + f"/admin/decisions?after={feed[0]['seq']}", headers=AUTH)).json()["decisions"]
                bad = await c.get(url + "/admin/decisions?after=x", headers=AUTH)
                anon = await c.get(url + "/admin/decisions")
    assert page.status_code == 200 and "<title>mma2a console</title>" in page.text
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "style-src 'self'" in csp and "unsafe-inline" not in csp
    assert "<script>" not in page.text and "<style>" not in page.text and " style=" not in page.text
    assert '<script src="/console/console.js" defer></script>' in page.text
    assert script.status_code == 200 and script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert style.status_code == 200 and style.headers["content-type"] == "text/css; charset=utf-8"
    assert "innerHTML" not in script.text  # every value goes through textContent
    assert empty == {"decisions": []}
    assert [d["messageId"] for d in feed] == ["c1", "c2"]
    assert feed[0]["route"][0]["targets"] == ["vision"] and feed[0]["outcome"] == "TASK_STATE_COMPLETED"
    assert feed[0]["thumbnails"] == [{"index": 0, "mediaType": "image/png", "data": thumb}]
    # no agent takes text here: the refusal shows in the feed too
    assert feed[1]["route"] == [] and feed[1]["outcome"] == (
        "refused -32005: part 0 (text/plain): no agent accepts it and no transform chain reaches one that does")
    assert [d["messageId"] for d in newer] == ["c2"]
    assert bad.status_code == 400 and bad.json()["error"]["message"] == "after: must be a decision sequence number, got 'x'"
    assert anon.status_code == 401
