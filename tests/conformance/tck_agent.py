"""An agent shaped like the A2A conformance kit's system under test: an a2a-sdk 1.3 agent whose
behaviour is chosen by the prefix of the incoming `messageId`, with its HTTP+JSON binding under its
own path (`/a2a/rest`, not the JSON-RPC URL), gRPC beside, streaming on, push notifications off (on with
`push=True`: a2a-sdk's own config store and sender, as the kit's agent has them).

The conformance suite drives such an agent by the message ids it sends, so through a gateway the id
must arrive unchanged and every shape of answer (a bare Message, a rejected task, chunked artifacts,
file and data parts, a long task to resubscribe to) must come back as the agent gave it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc.aio
import httpx
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.grpc_handler import GrpcHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import (BasePushNotificationSender, InMemoryPushNotificationConfigStore, InMemoryTaskStore,
                              TaskUpdater)
from a2a.types import (AgentCapabilities, AgentCard, AgentExtension, AgentInterface, AgentProvider, AgentSkill, Part,
                       a2a_pb2_grpc)
from a2a.utils.errors import A2AError, ExtensionSupportRequiredError, InvalidParamsError
from google.protobuf.struct_pb2 import Struct, Value
from starlette.applications import Starlette

from tests.agents import _bind_loopback, _serve_on

REST_PREFIX = "/a2a/rest"
Behaviour = Callable[[TaskUpdater, EventQueue], Awaitable[None]]


def _data_value() -> Value:
    fields = Struct()
    fields.update({"key": "value", "count": 42})
    return Value(struct_value=fields)


async def _message_only(u: TaskUpdater, q: EventQueue) -> None:
    await q.enqueue_event(u.new_agent_message([Part(text="a message, no task")]))


async def _input_required(u: TaskUpdater, q: EventQueue) -> None:
    await u.requires_input(u.new_agent_message([Part(text="say more")]))


async def _complete(u: TaskUpdater, q: EventQueue) -> None:
    await u.complete(u.new_agent_message([Part(text="done")]))


async def _text_artifact(u: TaskUpdater, q: EventQueue) -> None:
    await u.add_artifact([Part(text="some text")], name="text")
    await u.complete()


async def _file_artifact(u: TaskUpdater, q: EventQueue) -> None:
    await u.add_artifact([Part(raw=b"tck bytes", media_type="text/plain", filename="out.txt")], name="file")
    await u.complete()


async def _url_artifact(u: TaskUpdater, q: EventQueue) -> None:
    await u.add_artifact([Part(url="https://example.com/out.txt", media_type="text/plain", filename="out.txt")])
    await u.complete()


async def _data_artifact(u: TaskUpdater, q: EventQueue) -> None:
    await u.add_artifact([Part(data=_data_value())], name="data")
    await u.complete()


async def _reject(u: TaskUpdater, q: EventQueue) -> None:
    raise A2AError("refused by the agent")


async def _error_with_metadata(u: TaskUpdater, q: EventQueue) -> None:
    raise InvalidParamsError("the agent's own refusal", data={"field": "message.parts", "hint": "say it in words"})


async def _working_stream(u: TaskUpdater, q: EventQueue) -> None:
    await u.start_work()
    await u.add_artifact([Part(text="streamed")], name="out")
    await u.complete()


async def _chunked(u: TaskUpdater, q: EventQueue) -> None:
    await u.start_work()
    await u.add_artifact([Part(text="one ")], artifact_id="chunks", append=False)
    await u.add_artifact([Part(text="two")], artifact_id="chunks", append=True, last_chunk=True)
    await u.complete()


async def _chunks_appended(u: TaskUpdater, q: EventQueue) -> None:
    """As the kit's agent streams chunks: the first one already says `append`, to an artifact not yet sent."""
    await u.start_work()
    await u.add_artifact([Part(text="chunk-1 ")], append=True)
    await u.add_artifact([Part(text="chunk-2")], append=True, last_chunk=True)
    await u.complete()


async def _streamed_file(u: TaskUpdater, q: EventQueue) -> None:
    await u.start_work()
    await u.add_artifact([Part(raw=b"tck", media_type="text/plain", filename="output.txt")])
    await u.complete()


async def _quiet_input(u: TaskUpdater, q: EventQueue) -> None:
    await u.requires_input()  # no message, as the kit's agent asks


# messageId prefix -> what the agent does (first match wins; anything else completes with an echo)
BEHAVIOURS: dict[str, Behaviour] = {
    "tck-message-response": _message_only, "tck-input-required": _input_required,
    "tck-complete-task": _complete, "tck-artifact-text": _text_artifact, "tck-artifact-file-url": _url_artifact,
    "tck-artifact-file": _file_artifact, "tck-artifact-data": _data_artifact, "tck-reject-task": _reject,
    "tck-error-metadata": _error_with_metadata, "tck-stream-artifact-chunked": _chunks_appended,
    "tck-stream-artifact-file": _streamed_file, "tck-stream-002": _complete, "tck-quiet-input": _quiet_input,
    "tck-stream-chunked": _chunked, "tck-stream": _working_stream,
}


class PrefixExecutor(AgentExecutor):
    """`tck-slow…` works until `release` is set, so a client can subscribe to a task still running; with a
    `required` extension, a request that does not activate it is refused (ExtensionSupportRequiredError), and
    `tck-extensions…` completes with a reply naming the extensions the request activated."""

    def __init__(self, required: str | None = None) -> None:
        self.release = asyncio.Event()
        self.required = required

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None and context.task_id and context.context_id
        if self.required is not None and self.required not in context.requested_extensions:
            raise ExtensionSupportRequiredError(f"this agent requires the extension {self.required}")
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        message_id = context.message.message_id
        if message_id.startswith("tck-extensions"):
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
            await updater.complete(updater.new_agent_message([Part(text=" ".join(sorted(context.requested_extensions)))]))
            return
        behaviour = next((b for prefix, b in BEHAVIOURS.items() if message_id.startswith(prefix)), None)
        if behaviour is not _message_only and context.current_task is None:
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        if message_id.startswith("tck-slow"):
            await updater.start_work()
            await self.release.wait()
            await updater.add_artifact([Part(text="late")], name="late")
            await updater.complete()
            return
        if behaviour is None:
            await updater.complete(updater.new_agent_message([Part(text=f"echo {message_id}")]))
            return
        await behaviour(updater, event_queue)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class EchoActivated:
    """ASGI wrapper: a request that activates `uri` (`A2A-Extensions`) is answered with it in `A2A-Extensions`."""

    def __init__(self, app: Any, uri: str) -> None:
        self.app, self.uri = app, uri

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        asked = b",".join(v for k, v in scope.get("headers", ()) if k == b"a2a-extensions").decode("latin-1")
        if scope["type"] != "http" or self.uri not in [u.strip() for u in asked.split(",")]:
            await self.app(scope, receive, send)
            return

        async def echo(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), (b"a2a-extensions", self.uri.encode())]}
            await send(message)
        await self.app(scope, receive, echo)


@dataclass(frozen=True)
class TckAgent:
    url: str  # JSON-RPC URL and card base (no trailing slash)
    rest: str  # HTTP+JSON base
    grpc: str  # HOST:PORT
    executor: PrefixExecutor
    push_configs: InMemoryPushNotificationConfigStore | None = None  # with `push`: what clients registered


@contextlib.asynccontextmanager
async def tck_agent(name: str = "tck", *, required_extension: str | None = None, push: bool = False
                    ) -> AsyncIterator[TckAgent]:
    """The agent on free loopback ports; with `required_extension`, its card declares that extension as required,
    the agent refuses requests that do not activate it and, as newer a2a-sdk releases do, answers those that do
    with the extension it activated in `A2A-Extensions` (on its HTTP bindings)."""
    sock = _bind_loopback()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = grpc.aio.server()
    address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    card = AgentCard(
        name=name, description="an agent shaped like the conformance kit's system under test", version="1.0.0",
        provider=AgentProvider(organization="mma2a tests", url="https://example.com"),
        capabilities=AgentCapabilities(streaming=True, push_notifications=push, extensions=[
            AgentExtension(uri=required_extension, description="required by this agent", required=True)
        ] if required_extension else []),
        default_input_modes=["text"], default_output_modes=["text"],
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
                              AgentInterface(url=url + REST_PREFIX, protocol_binding="HTTP+JSON", protocol_version="1.0"),
                              AgentInterface(url=address, protocol_binding="GRPC", protocol_version="1.0")],
        skills=[AgentSkill(id="tck", name="conformance", description="answers conformance probes", tags=["tck"])],
    )
    executor = PrefixExecutor(required_extension)
    configs = InMemoryPushNotificationConfigStore() if push else None
    http = httpx.AsyncClient(timeout=10)
    sender = BasePushNotificationSender(http, configs) if configs is not None else None
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card,
                                    push_config_store=configs, push_sender=sender)
    routes = (create_jsonrpc_routes(handler, "/") + create_agent_card_routes(card)
              + create_rest_routes(handler, path_prefix=REST_PREFIX))
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)
    await server.start()
    try:
        app: Any = Starlette(routes=routes)
        async with _serve_on(EchoActivated(app, required_extension) if required_extension else app, sock):
            yield TckAgent(url, url + REST_PREFIX, address, executor, configs)
    finally:
        executor.release.set()  # tasks still working finish
        await server.stop(grace=None)
        await http.aclose()
