"""The embedded demo: reference agents and a gateway in one process, a scripted multimodal conversation.

Runs the same product-defect report (text + photo + voice note) natively and through the
text bottleneck, and shows where each part went, why, and what came back.
"""

from __future__ import annotations

import base64
import contextlib
import io
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from .agents.catalog import CATALOG
from .agents.runtime import SkillExecutor, run_agent
from .ext import EXTENSION_URI, MessageExtension, PartExtension, write_message, write_part
from .gateway import Gateway, parse_config
from .serving import free_port, running

DEMO_RULES = """
version: 1
default: {capability: any}
rules:
  - name: photos-to-vision
    priority: 10
    match: {modality: image/*}
    action: {route_to: vision}
  - name: voice-notes-as-text
    match: {modality: audio/*}
    action: {transform: text/plain, then: {route_to: analyst}}
  - name: reports-to-analyst
    match: {modality: text/plain}
    action: {route_to: analyst}
"""

REPORT = "Customer report: the left hinge of the lid cracked after one week and now it makes a rattle."
VOICE = "the left hinge is cracked and it makes a rattle"


def defect_photo() -> bytes:
    """A product photo: a grey lid with a dark crack near its left hinge (drawn, 640x480 PNG)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (640, 480), (210, 214, 220))
    d = ImageDraw.Draw(img)
    d.rectangle((80, 90, 560, 390), fill=(150, 156, 165), outline=(90, 95, 100), width=4)
    d.rectangle((60, 180, 95, 300), fill=(110, 112, 118))  # the left hinge
    d.line([(100, 200), (130, 228), (118, 256), (150, 290)], fill=(15, 15, 18), width=7)  # the crack
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def demo_message(photo: bytes, voice: bytes | None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": REPORT, "mediaType": "text/plain"}]
    parts.append(write_part({"raw": base64.b64encode(photo).decode(), "mediaType": "image/png", "filename": "lid.png"},
                            PartExtension(modality="image/png", encoding="base64", features={"width": 640, "height": 480})))
    if voice is not None:
        parts.append(write_part({"raw": base64.b64encode(voice).decode(), "mediaType": "audio/wav", "filename": "note.wav"},
                                PartExtension(modality="audio/wav", encoding="base64")))
    msg: dict[str, Any] = {"messageId": "demo-defect-report", "role": "ROLE_USER", "parts": parts}
    return write_message(msg, MessageExtension(intent="auto", priority=7))


@dataclass
class DemoRow:
    part: int
    modality: str
    why: str
    target: str
    via: str
    answer: str


@contextlib.asynccontextmanager
async def demo_network(mode: str = "native") -> AsyncIterator[tuple[Gateway, str]]:
    """Every reference agent and a gateway in front of them, on free loopback ports."""
    async with contextlib.AsyncExitStack() as stack:
        agents = []
        for ref in CATALOG.values():
            url = await stack.enter_async_context(run_agent(ref.card(), SkillExecutor(ref.reply)))
            agents.append({"name": ref.name, "url": url, "transformer": ref.transformer})
        port = free_port()
        gw = Gateway(parse_config({"listen": f"127.0.0.1:{port}", "rules": DEMO_RULES, "mode": mode, "agents": agents,
                                   "log_decisions": False, "admin": {"token_env": None}}))
        url = await stack.enter_async_context(running(gw.app, "127.0.0.1", port))
        yield gw, url


def rows_of(task: dict[str, Any]) -> list[DemoRow]:
    meta = (task.get("metadata") or {}).get(EXTENSION_URI) or {}
    answers: dict[str, list[str]] = {}
    for art in task.get("artifacts") or []:
        source = ((art.get("metadata") or {}).get(EXTENSION_URI) or {}).get("source") or art.get("name", "").split("/")[0]
        answers.setdefault(source, []).extend(p["text"] for p in art.get("parts", []) if "text" in p)
    rows = []
    for r in meta.get("route", []):
        for target, via in zip(r["targets"], r["via"]):
            why = ("rule " + ", ".join(r["matched"])) if r["matched"] else "capability (Agent Card accepts it)"
            chain = " → ".join(f"{s['agent']} ({s['from']}→{s['to']})" for s in via) or "native"
            rows.append(DemoRow(int(r["index"]), r["modality"], why, target, chain + (" [text bottleneck]" if r["bottleneck"] else ""),
                                " | ".join(answers.get(target, [])) or "-"))
    return rows


async def run_demo(*, modes: tuple[str, ...] = ("native", "text-bottleneck")) -> dict[str, list[DemoRow]]:
    """Send the scripted report through a gateway in each mode; returns the rows per mode."""
    from a2a.client import ClientConfig, create_client
    from a2a.types import SendMessageRequest
    from google.protobuf import json_format

    photo = defect_photo()
    try:
        from .agents.speech import synthesize

        voice: bytes | None = synthesize(VOICE)
    except (ImportError, OSError):
        voice = None
    results: dict[str, list[DemoRow]] = {}
    for mode in modes:
        async with demo_network(mode) as (gw, url):
            async with httpx.AsyncClient(timeout=60) as http:
                client = await create_client(url, ClientConfig(streaming=False, httpx_client=http))
                request = json_format.ParseDict({"message": demo_message(photo, voice)}, SendMessageRequest())
                events = [ev async for ev in client.send_message(request)]
            task = json_format.MessageToDict(events[-1].task)
            results[mode] = rows_of(task)
    return results
