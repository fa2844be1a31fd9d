"""A reasoner backed by any OpenAI-compatible chat endpoint (`POST {base_url}/chat/completions`).

Users with a model (a vision model, ideally) run the same evaluation with it: the agent's
card accepts images only when `vision` is set, so the gateway delivers photos natively to
it, or captions them first when it is not (or in text-bottleneck mode). Texts made from
other media are labelled as such in the prompt. The answer is the reply's first line.
"""

from __future__ import annotations

import base64
import os
from typing import Any

import httpx
from a2a.types import AgentCard
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import DispatchError, InvalidParams
from .runtime import ReceivedPart, make_card

NAME = "llm"

SYSTEM_PROMPT = (
    "You are a customer-service analyst. Answer the question at the end of the customer's report, using the report, "
    "the photos and any captions or transcripts given. Reply with the answer only, in the form the question asks for "
    "(a few words, no explanation)."
)


class ChatReasonerConfig(BaseModel):
    """Where the model lives: base URL (ending before `/chat/completions`), model name, the env var holding the key."""

    model_config = ConfigDict(extra="forbid")

    base_url: str
    model: str = Field(min_length=1)
    api_key_env: str | None = None
    vision: bool = False
    timeout_s: float = Field(default=60.0, gt=0)
    temperature: float = Field(default=0.0, ge=0, le=2)

    @classmethod
    def parse(cls, data: dict[str, Any]) -> ChatReasonerConfig:
        """Validate; the error names the field (`llm.base_url: ...`)."""
        try:
            cfg = cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = "llm." + ".".join(str(p) for p in err["loc"])
            raise InvalidParams(f"{where}: {err['msg']}", field=where) from None
        if not cfg.base_url.startswith(("http://", "https://")):
            raise InvalidParams("llm.base_url: must be an http:// or https:// URL", field="llm.base_url")
        return cfg

    def api_key(self) -> str | None:
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise InvalidParams(f"llm.api_key_env: environment variable {self.api_key_env} is not set",
                                field="llm.api_key_env")
        return key


class ChatReasoner:
    """The agent: a card from the config, and a reply function calling the endpoint."""

    def __init__(self, config: ChatReasonerConfig, *, name: str = NAME) -> None:
        self.config = config
        self.name = name
        self.key = config.api_key()  # fail at start, not on the first task
        self.url = config.base_url.rstrip("/") + "/chat/completions"

    def card(self) -> AgentCard:
        inputs = ["text/plain", "text/markdown"] + (["image/png", "image/jpeg", "image/webp"] if self.config.vision else [])
        return make_card(self.name, f"Answers customer-service questions with the chat model {self.config.model} "
                         f"({'text and images' if self.config.vision else 'text only'}).",
                         input_modes=inputs, output_modes=["text/plain", "application/json"], skill="chat-analyse")

    def request_body(self, parts: list[ReceivedPart]) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        for p in parts:
            if p.text is not None:
                src = p.transformed_from
                label = "" if src is None else (
                    "[caption of a photo] " if src.startswith("image/") else "[transcript of a voice note] " if src.startswith("audio/")
                    else f"[text made from {src}] ")
                content.append({"type": "text", "text": label + p.text})
            elif p.data is not None and p.modality.startswith("image/") and self.config.vision:
                url = f"data:{p.modality.split(';')[0]};base64,{base64.b64encode(p.data).decode('ascii')}"
                content.append({"type": "image_url", "image_url": {"url": url}})
        if not content:
            raise ValueError("no text or image part to read")
        return {"model": self.config.model, "temperature": self.config.temperature,
                "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": content}]}

    async def reply(self, parts: list[ReceivedPart]) -> list[dict[str, Any]]:
        body = self.request_body(parts)
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        async with httpx.AsyncClient(timeout=self.config.timeout_s) as client:
            try:
                resp = await client.post(self.url, json=body, headers=headers)
            except httpx.HTTPError as exc:
                raise DispatchError(f"llm: cannot reach {self.url}: {type(exc).__name__}") from None
        if resp.status_code != 200:
            raise DispatchError(f"llm: {self.url} answered HTTP {resp.status_code}: {resp.text[:200]}")
        answer = parse_answer(resp)
        return [{"text": answer, "mediaType": "text/plain"},
                {"data": {"answer": answer, "model": self.config.model, "usedPixels": any(
                    c["type"] == "image_url" for c in body["messages"][1]["content"])}, "mediaType": "application/json"}]


def parse_answer(resp: httpx.Response) -> str:
    """The first non-empty line of `choices[0].message.content` (a string or a list of text parts)."""
    try:
        content = resp.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise DispatchError("llm: the reply has no choices[0].message.content") from None
    if isinstance(content, list):
        content = " ".join(c.get("text", "") for c in content if isinstance(c, dict))
    if not isinstance(content, str):
        raise DispatchError("llm: choices[0].message.content is neither text nor a list of text parts")
    lines = [ln.strip() for ln in content.strip().splitlines() if ln.strip()]
    if not lines:
        raise DispatchError("llm: the model answered nothing")
    return lines[0]
