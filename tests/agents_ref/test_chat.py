"""The OpenAI-compatible chat reasoner against a small local fake endpoint: the protocol only
(request shape, key, images natively or captions, errors), never figures."""

from __future__ import annotations

import random
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from mma2a.agents.chat import ChatReasoner, ChatReasonerConfig
from mma2a.agents.runtime import SkillExecutor, run_agent
from mma2a.errors import InvalidParams
from mma2a.eval.media import Mark, product_photo
from mma2a.serving import running

from .conftest import answer_parts, failure, raw_part, send


class FakeChat:
    """POST /v1/chat/completions: records each request; answers `content` (or fails with `status`)."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, Any], str | None]] = []
        self.content: Any = "Top left.\nThe crack is near the corner."
        self.status = 200

    async def completions(self, request: Request) -> Any:
        body = await request.json()
        self.requests.append((body, request.headers.get("authorization")))
        if self.status != 200:
            return PlainTextResponse("boom", status_code=self.status)
        if self.content is None:
            return JSONResponse({"choices": []})
        return JSONResponse({"id": "x", "object": "chat.completion",
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": self.content}}]})

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self.completions, methods=["POST"])])


@pytest.fixture
async def fake():
    chat = FakeChat()
    async with running(chat.app()) as url:
        yield chat, url + "/v1"


def test_config_errors_name_the_field(monkeypatch):
    with pytest.raises(InvalidParams, match=r"^llm.base_url: must be an http:// or https:// URL$"):
        ChatReasonerConfig.parse({"base_url": "localhost:8000", "model": "m"})
    with pytest.raises(InvalidParams, match=r"^llm.model: Field required$"):
        ChatReasonerConfig.parse({"base_url": "http://x"})
    with pytest.raises(InvalidParams, match=r"^llm.colour: Extra inputs are not permitted$"):
        ChatReasonerConfig.parse({"base_url": "http://x", "model": "m", "colour": 1})
    monkeypatch.delenv("MMA2A_FAKE_KEY", raising=False)
    with pytest.raises(InvalidParams, match=r"^llm.api_key_env: environment variable MMA2A_FAKE_KEY is not set$"):
        ChatReasoner(ChatReasonerConfig.parse({"base_url": "http://x", "model": "m", "api_key_env": "MMA2A_FAKE_KEY"}))


async def test_vision_model_gets_the_photo_and_the_key(fake, monkeypatch):
    chat, base = fake
    monkeypatch.setenv("MMA2A_FAKE_KEY", "sk-test")
    agent = ChatReasoner(ChatReasonerConfig.parse({"base_url": base, "model": "tiny-vl", "api_key_env": "MMA2A_FAKE_KEY",
                                                    "vision": True}))
    assert "image/png" in agent.card().default_input_modes
    photo = product_photo(random.Random(1), (200, 200, 200), [Mark("crack", 100, 90)])
    async with run_agent(agent.card(), SkillExecutor(agent.reply)) as url:
        parts = answer_parts(await send(url, [{"text": "Question: where is the crack?"}, raw_part(photo, "image/png")]))
    assert parts[0]["text"] == "Top left."
    assert parts[1]["data"] == {"answer": "Top left.", "model": "tiny-vl", "usedPixels": True}
    body, auth = chat.requests[0]
    assert auth == "Bearer sk-test"
    assert body["model"] == "tiny-vl" and body["temperature"] == 0.0
    assert body["messages"][0]["role"] == "system"
    content = body["messages"][1]["content"]
    assert content[0] == {"type": "text", "text": "Question: where is the crack?"}
    assert content[1]["type"] == "image_url" and content[1]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")


async def test_text_model_card_takes_no_images_and_errors_are_reported(fake):
    chat, base = fake
    agent = ChatReasoner(ChatReasonerConfig.parse({"base_url": base, "model": "tiny"}))
    assert list(agent.card().default_input_modes) == ["text/plain", "text/markdown"]
    async with run_agent(agent.card(), SkillExecutor(agent.reply)) as url:
        chat.content = [{"type": "text", "text": "refund"}]
        assert answer_parts(await send(url, [{"text": "what?"}]))[0]["text"] == "refund"
        assert chat.requests[-1][1] is None  # no key configured, no header
        chat.status = 500
        assert failure(await send(url, [{"text": "what?"}])) == (
            f"llm: {base}/chat/completions answered HTTP 500: boom")
        chat.status, chat.content = 200, None
        assert failure(await send(url, [{"text": "what?"}])) == (
            "llm: the reply has no choices[0].message.content")
        chat.content = "  \n "
        assert failure(await send(url, [{"text": "what?"}])) == "llm: the model answered nothing"


async def test_the_evaluation_runs_with_a_chat_reasoner(fake):
    """Native arm: the photo reaches the model as an image; bottleneck arm: as a labelled caption."""
    from mma2a.eval.runner import run_crossmodal

    chat, base = fake
    chat.content = "unknown"
    report = await run_crossmodal(3, seed=1, sets=("development",),
                                  llm=ChatReasonerConfig.parse({"base_url": base, "model": "m", "vision": True}))
    assert report["reasoner"] == "llm"
    llm_results = [r for r in report["sets"]["development"]["results"] if r["arm"] in ("native", "bottleneck")]
    assert all(r["error"] is None and r["answer"] == "unknown" for r in llm_results)
    contents = [b["messages"][1]["content"] for b, _ in chat.requests]
    with_image = [c for c in contents if any(x["type"] == "image_url" for x in c)]
    with_caption = [c for c in contents if any(x.get("text", "").startswith("[caption of a photo] A ") for x in c)]
    with_transcript = [c for c in contents if any(x.get("text", "").startswith("[transcript of a voice note] ") for x in c)]
    assert with_image and with_caption and with_transcript
    assert not any(c in with_caption for c in with_image)
