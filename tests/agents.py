"""Real a2a-sdk agents on loopback ports, for tests.

    async with run_agent(card, executor) as url:
        client = await create_client(url, ClientConfig(streaming=False))

`run_agent` binds a free 127.0.0.1 port, fills in the card's JSON-RPC interface URL,
serves the card plus JSON-RPC (A2A 1.0, and v0.3 through the SDK's compat layer) under
uvicorn, and stops the server on exit. `RecordingExecutor` keeps every request it gets
(message and requested extensions) and completes the task with a short text reply (or
echoes the parts back). `serve_app` serves any ASGI app the same way (media files, ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Message, Part
from starlette.applications import Starlette
from starlette.types import ASGIApp

from mma2a.serving import WEBSOCKETS, tls_options
from mma2a.tls import ServerTLS

__all__ = ["Received", "RecordingExecutor", "Stepper", "make_card", "run_agent", "serve_app", "streaming_card"]


def make_card(
    name: str,
    *,
    input_modes: Iterable[str] = ("text/plain",),
    output_modes: Iterable[str] = ("text/plain",),
    skill_input_modes: Iterable[str] = (),
) -> AgentCard:
    """A minimal, spec-complete Agent Card; `run_agent` fills in its URL."""
    return AgentCard(
        name=name,
        description=f"test agent {name}",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=list(input_modes),
        default_output_modes=list(output_modes),
        skills=[
            AgentSkill(
                id=f"{name}-skill",
                name=f"{name} skill",
                description="echoes what it received",
                tags=["test"],
                input_modes=list(skill_input_modes),
            )
        ],
    )


@dataclass
class Received:
    """One request as the agent saw it."""

    message: Message
    requested_extensions: set[str]


@dataclass
class RecordingExecutor(AgentExecutor):
    """Records every message it is given and completes the task with a text reply
    (`reply`), or with a copy of the parts it received when `echo` is set."""

    reply: str = "ok"
    echo: bool = False
    received: list[Received] = field(default_factory=list)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        msg = Message()
        msg.CopyFrom(context.message)
        self.received.append(Received(msg, set(context.requested_extensions)))
        task = context.current_task or new_task_from_user_message(context.message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        parts = [Part(text=self.reply)] if not self.echo else [_copy(p) for p in context.message.parts]
        await updater.complete(updater.new_agent_message(parts))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


class Stepper(AgentExecutor):
    """A streaming agent the test steps: each task reports working and an artifact `first: TEXT`, then waits for the
    test to release TEXT, adds `second: TEXT` and completes. Cancel ends a waiting task as canceled."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}

    def gate(self, text: str) -> asyncio.Event:
        return self.gates.setdefault(text, asyncio.Event())

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        task = context.current_task or new_task_from_user_message(context.message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        text = " ".join(p.text for p in context.message.parts if p.text)
        await updater.start_work()
        await updater.add_artifact([Part(text=f"first: {text}")], name="first")
        await self.gate(text).wait()
        await updater.add_artifact([Part(text=f"second: {text}")], name="second")
        await updater.complete(updater.new_agent_message([Part(text=f"done: {text}")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.current_task is not None
        await TaskUpdater(event_queue, context.current_task.id, context.current_task.context_id).cancel()


def streaming_card(name: str) -> AgentCard:
    card = make_card(name)
    card.capabilities.CopyFrom(AgentCapabilities(streaming=True))
    return card


def _copy(part: Part) -> Part:
    out = Part()
    out.CopyFrom(part)
    return out


def _bind_loopback() -> socket.socket:
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted connections only for a socket whose `proto` says TCP
    # (proto 0 did not: a kept-alive connection's next request waited ~40 ms for the peer's delayed ACK)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def serve_app(app: ASGIApp) -> AsyncIterator[str]:
    """Serve any ASGI app under uvicorn on a free loopback port; yields its base URL."""
    sock = _bind_loopback()
    async with _serve_on(app, sock) as url:
        yield url


@contextlib.asynccontextmanager
async def _serve_on(app: ASGIApp, sock: socket.socket, *, tls: ServerTLS | None = None) -> AsyncIterator[str]:
    url = f"{'https' if tls else 'http'}://127.0.0.1:{sock.getsockname()[1]}/"
    options = tls_options(tls, "h11", WEBSOCKETS["ws"]) if tls else {}
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False, **options))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # re-raise the startup failure
            await asyncio.sleep(0.01)
        yield url
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()


@contextlib.asynccontextmanager
async def run_agent(
    card: AgentCard,
    executor: AgentExecutor,
    *,
    validate_input_modes: bool = False,
    enable_v0_3_compat: bool = True,
    wrap: Callable[[ASGIApp], ASGIApp] | None = None,
    tls: ServerTLS | None = None,
) -> AsyncIterator[str]:
    """Serve `executor` behind `card` on a free loopback port; yields the base URL (`http://127.0.0.1:PORT/`).

    The card is copied; interfaces without a URL (or a card without interfaces) get this
    server's JSON-RPC URL. The server speaks A2A 1.0 JSON-RPC, and v0.3 unless disabled.
    `wrap` puts ASGI middleware around the agent's app (request decoding, recording headers);
    `tls` serves it over HTTPS (`https://127.0.0.1:PORT/`).
    """
    sock = _bind_loopback()
    url = f"{'https' if tls else 'http'}://127.0.0.1:{sock.getsockname()[1]}/"
    served = AgentCard()
    served.CopyFrom(card)
    if not served.supported_interfaces:
        served.supported_interfaces.append(AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"))
    for iface in served.supported_interfaces:
        if not iface.url:
            iface.url = url
    handler = DefaultRequestHandler(
        agent_executor=executor,
        task_store=InMemoryTaskStore(),
        agent_card=served,
        validate_input_modes=validate_input_modes,
    )
    app = Starlette(
        routes=create_agent_card_routes(served)
        + create_jsonrpc_routes(handler, "/", enable_v0_3_compat=enable_v0_3_compat)
    )
    async with _serve_on(wrap(app) if wrap is not None else app, sock, tls=tls) as served_url:
        yield served_url
