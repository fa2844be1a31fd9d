"""Running reference agents: an `a2a-sdk` server per agent, from a card and a reply function.

A reference agent is a pure function from the parts it receives (as JSON-form parts with
their bytes resolved) to the parts it answers; `SkillExecutor` wraps it as an SDK
`AgentExecutor` so every agent is a real A2A 1.0 server with an honest card.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.routing import BaseRoute

from ..card import declare_extension
from ..ext import EXTENSION_URI, read_part
from ..features.base import Limits
from ..features.probe import check_media


@dataclass
class ReceivedPart:
    """A part as a reference agent sees it: modality, features, bytes (fetched if by URL) or text."""

    modality: str
    features: dict[str, Any]
    text: str | None = None
    data: bytes | None = None
    filename: str | None = None
    json: dict[str, Any] = field(default_factory=dict)

    @property
    def transformed_from(self) -> str | None:
        """The modality this part was made from by a gateway transform (a caption: `image/png`), if any."""
        meta = ((self.json.get("metadata") or {}).get(EXTENSION_URI) or {}).get("transformedFrom") or {}
        source = meta.get("modality") if isinstance(meta, dict) else None
        return str(source) if source else None


Reply = Callable[[list[ReceivedPart]], Awaitable[list[dict[str, Any]]]]


AGENT_LIMITS = Limits()  # what a reference agent decodes: checked from each part's header first (features.probe)


async def resolve_parts(parts: Sequence[Part], client: httpx.AsyncClient) -> list[ReceivedPart]:
    out = []
    for i, p in enumerate(parts):
        pj = json_format.MessageToDict(p)
        ext = read_part(pj)
        data: bytes | None = None
        kind = p.WhichOneof("content")
        if kind == "raw":
            data = p.raw
        elif kind == "url":
            resp = await client.get(p.url)
            resp.raise_for_status()
            data = resp.content
        if data:  # a decompression bomb is refused here, before any agent decodes it
            await asyncio.to_thread(check_media, data, ext.modality or "application/octet-stream", AGENT_LIMITS,
                                    f"message.parts[{i}]")
        out.append(ReceivedPart(ext.modality or "application/octet-stream", dict(ext.features),
                                p.text if kind == "text" else None, data, p.filename or None, pj))
    return out


class SkillExecutor(AgentExecutor):
    """Completes each task with the parts its reply function returns, as one artifact."""

    def __init__(self, reply: Reply, *, artifact_name: str = "answer") -> None:
        self.reply = reply
        self.artifact_name = artifact_name
        self._client = httpx.AsyncClient(timeout=30.0)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        task = context.current_task or new_task_from_user_message(context.message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        try:
            received = await resolve_parts(context.message.parts, self._client)
            answer = await self.reply(received)
        except Exception as exc:  # the agent's own failure becomes a FAILED task with the reason
            await updater.failed(updater.new_agent_message([Part(text=f"{type(exc).__name__}: {exc}")]))
            return
        parts = [json_format.ParseDict(a, Part()) for a in answer]
        await updater.add_artifact(parts, name=self.artifact_name)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


def make_card(
    name: str,
    description: str,
    *,
    input_modes: Sequence[str],
    output_modes: Sequence[str],
    skill: str,
    extension: bool = True,
) -> AgentCard:
    card = AgentCard(
        name=name,
        description=description,
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=list(input_modes),
        default_output_modes=list(output_modes),
        skills=[AgentSkill(id=skill, name=skill.replace("-", " "), description=description, tags=[name],
                           input_modes=list(input_modes), output_modes=list(output_modes))],
    )
    if extension:
        declare_extension(card)
    return card


def agent_app(card: AgentCard, executor: AgentExecutor, url: str) -> Starlette:
    card.ClearField("supported_interfaces")
    card.supported_interfaces.append(AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"))
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card)
    routes: list[BaseRoute] = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True),
        *create_rest_routes(handler, enable_v0_3_compat=True),
    ]
    return Starlette(routes=routes)


@contextlib.asynccontextmanager
async def run_agent(card: AgentCard, executor: AgentExecutor, *, host: str = "127.0.0.1", port: int | None = None) -> AsyncIterator[str]:
    """Serve one agent on a loopback port inside this event loop; yields its base URL."""
    from ..serving import free_port, running

    port = port or free_port(host)
    url = f"http://{host}:{port}"
    async with running(agent_app(card, executor, url + "/"), host, port):
        yield url


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


async def run_blocking(fn: Callable[..., Any], *args: Any) -> Any:
    """Blocking work (decoding, recognition) off the event loop."""
    return await asyncio.to_thread(fn, *args)
