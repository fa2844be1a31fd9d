"""Helpers: serve a reference agent on a loopback port and talk to it with the a2a-sdk client."""

from __future__ import annotations

import base64
from typing import Any

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types import SendMessageRequest
from google.protobuf import json_format


async def send(url: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One message to the agent at `url`; the final task in JSON form."""
    async with httpx.AsyncClient(timeout=60) as http:
        client = await create_client(url, ClientConfig(streaming=False, httpx_client=http))
        msg = {"messageId": "m1", "role": "ROLE_USER", "parts": parts}
        events = [ev async for ev in client.send_message(json_format.ParseDict({"message": msg}, SendMessageRequest()))]
    return json_format.MessageToDict(events[-1].task)


def raw_part(data: bytes, media_type: str) -> dict[str, Any]:
    return {"raw": base64.b64encode(data).decode(), "mediaType": media_type}


def answer_parts(task: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for art in task.get("artifacts") or [] for p in art.get("parts") or []]


def failure(task: dict[str, Any]) -> str:
    assert task["status"]["state"] == "TASK_STATE_FAILED", task["status"]
    return " ".join(p.get("text", "") for p in task["status"]["message"]["parts"])
