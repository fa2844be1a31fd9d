"""The system under test for the conformance scenarios: a plain a2a-sdk agent as published samples
write it (`["text"]` modes, JSON-RPC and HTTP+JSON, streaming), reached directly or through a gateway."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, TaskState
from starlette.applications import Starlette

from tests.agents import _bind_loopback, _serve_on

if TYPE_CHECKING:
    import grpc.aio


class SampleExecutor(AgentExecutor):
    """`wait` leaves the task waiting for input (cancelable); anything else gets an artifact, then
    completes with a reply naming what it read."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        task = context.current_task or new_task_from_user_message(context.message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        text = " ".join(p.text for p in context.message.parts if p.text)
        if text == "wait":
            await updater.update_status(TaskState.TASK_STATE_INPUT_REQUIRED,
                                        updater.new_agent_message([Part(text="waiting for more")]))
            return
        await updater.add_artifact([Part(text=f"artifact for {text}")], name="result")
        await updater.complete(updater.new_agent_message([Part(text=f"read: {text}")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.current_task is not None
        await TaskUpdater(event_queue, context.current_task.id, context.current_task.context_id).cancel()


def sample_card(name: str, url: str, grpc_address: str | None = None, *, grpc_only: bool = False,
                modes: tuple[str, ...] = ("text",), streaming: bool = True) -> AgentCard:
    """The card: JSON-RPC and HTTP+JSON; with `grpc_address` gRPC too, and with `grpc_only` nothing else."""
    http = [AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=url, protocol_binding="HTTP+JSON", protocol_version="1.0")]
    grpc_ = [AgentInterface(url=grpc_address, protocol_binding="GRPC", protocol_version="1.0")] if grpc_address else []
    return AgentCard(
        name=name, description=f"sample agent {name}", version="1.0.0",
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=list(modes), default_output_modes=list(modes),
        supported_interfaces=grpc_ if grpc_only else http + grpc_,
        skills=[AgentSkill(id="read", name="read", description="reads text", tags=["sample"])],
    )


@dataclass(frozen=True)
class Way:
    """One way to reach an agent — directly, at a gateway's root or at /agents/{name} (of one gateway, of `serve
    --workers 2`, of a cluster behind a balancer: test_tck_scaled.py): its JSON-RPC URL, its HTTP+JSON base and its
    card base (the well-known path goes after it)."""

    kind: str  # "direct", "root", "agent-path"
    rpc: str
    rest: str
    card: str
    grpc: str = ""  # HOST:PORT of the gRPC binding ("" without one)
    tenant: str = ""  # on gRPC the gateway's per-agent address is the tenant


def own_channel(target: str) -> grpc.aio.Channel:
    """A gRPC channel on a connection of its own (gRPC shares one between channels to an address
    by default), so each call through a balancer, or to `serve --workers`, may reach another gateway."""
    import grpc.aio

    return grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])


@dataclass(frozen=True)
class SampleAgent:
    url: str  # base URL of the HTTP bindings and the card (no trailing slash)
    grpc: str | None  # HOST:PORT of its gRPC binding, when it has one


@contextlib.asynccontextmanager
async def sample_agent(name: str, *, grpc: bool = False, grpc_only: bool = False,
                       modes: tuple[str, ...] = ("text",), streaming: bool = True) -> AsyncIterator[SampleAgent]:
    """A sample agent on free loopback ports: the card and JSON-RPC + HTTP+JSON (not with `grpc_only`),
    and with `grpc` (or `grpc_only`) the gRPC binding; `streaming=False` declares no streaming (and the SDK
    then refuses the streaming methods)."""
    sock = _bind_loopback()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = None
    address = None
    if grpc or grpc_only:
        import grpc.aio
        from a2a.server.request_handlers.grpc_handler import GrpcHandler
        from a2a.types import a2a_pb2_grpc

        server = grpc.aio.server()
        address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    card = sample_card(name, url, address, grpc_only=grpc_only, modes=modes, streaming=streaming)
    handler = DefaultRequestHandler(agent_executor=SampleExecutor(), task_store=InMemoryTaskStore(), agent_card=card)
    routes = create_agent_card_routes(card)
    if not grpc_only:
        routes += create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True) + create_rest_routes(handler, enable_v0_3_compat=True)
    if server is not None:
        a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)
        await server.start()
    try:
        async with _serve_on(Starlette(routes=routes), sock):
            yield SampleAgent(url, address)
    finally:
        if server is not None:
            await server.stop(grace=None)
