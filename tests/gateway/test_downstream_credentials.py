"""Per-agent credentials: the gateway authenticates to each agent with that agent's own token."""

from __future__ import annotations

import base64

from mma2a.agents.runtime import agent_app
from mma2a.serving import free_port, running
from tests.agents import RecordingExecutor, make_card
from tests.gateway.conftest import gateway, rpc
from tests.media import png_bytes


async def test_each_agent_gets_its_own_bearer_token_and_a_wrong_one_fails_clearly(monkeypatch):
    monkeypatch.setenv("MMA2A_AGENT_VISION_TOKEN", "vision-s3cret")
    monkeypatch.setenv("MMA2A_AGENT_OTHER_TOKEN", "not-the-right-one")
    seen: list[bytes | None] = []

    def guarded(name: str, port: int):
        inner = agent_app(make_card(name, input_modes=["image/*"]), RecordingExecutor(), f"http://127.0.0.1:{port}/")

        async def app(scope, receive, send):
            if scope["type"] == "http" and scope["method"] == "POST":
                auth = dict(scope["headers"]).get(b"authorization")
                seen.append(auth)
                if auth != b"Bearer vision-s3cret":
                    await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"application/json")]})
                    await send({"type": "http.response.body", "body": b'{"error": "unauthorized"}'})
                    return
            await inner(scope, receive, send)

        return app

    p1, p2 = free_port(), free_port()
    msg = {"messageId": "cred-1", "role": "ROLE_USER", "parts": [{"raw": base64.b64encode(png_bytes()).decode(), "mediaType": "image/png"}]}
    async with running(guarded("vision", p1), "127.0.0.1", p1) as u1, running(guarded("other", p2), "127.0.0.1", p2) as u2:
        cfg = {"agents": [{"name": "vision", "url": u1, "token_env": "MMA2A_AGENT_VISION_TOKEN"},
                          {"name": "other", "url": u2, "token_env": "MMA2A_AGENT_OTHER_TOKEN"}]}
        async with gateway(cfg) as (gw, url):
            ok = await rpc(url, "SendMessage", {"message": msg}, path="/agents/vision/")
            refused = await rpc(url, "SendMessage", {"message": {**msg, "messageId": "cred-2"}}, path="/agents/other/")
    assert seen[0] == b"Bearer vision-s3cret"
    assert ok["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    status = refused["result"]["task"]["status"]
    assert status["state"] == "TASK_STATE_FAILED"
    assert status["message"]["parts"][0]["text"] == ("agent other refused the gateway's credentials (HTTP 401); "
                                                 "check its agents[].auth (or token_env)")
