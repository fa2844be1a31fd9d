"""The consumer side: `MultimodalExecutor`, a base for `a2a-sdk` AgentExecutors that speak the extension.

    class Inspector(MultimodalExecutor):
        async def handle(self, request):
            for part in request.parts:               # typed views: modality, features, payload, stream
                async for chunk in part.open():      # referenced or live bytes, checked, never buffered whole
                    ...
            return "done"                            # str, bytes, Path, dict, Part, or a list; an async generator streams

The card it builds declares the extension with the feature schemas it understands; parts
whose modality the card does not accept are refused with -32005 before `handle` runs.
Replies carry the extension unless the caller did not activate it (plain A2A clients get
plain parts). Plain parts (no extension) are viewed from `mediaType` and their bytes.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
)
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from ..card import declare_extension
from ..compression import ContentCoding
from ..errors import ContentTypeNotSupported, MMA2AError
from ..ext import (
    EXTENSION_URI,
    MessageExtension,
    PartExtension,
    downgrade_part,
    read_message,
    write_part,
)
from ..features.producer import build_part
from ..modality import accepts
from ..payload import URLPolicy
from ..payload.ssrf import hosts_of
from ..proto import message_to_json
from .items import Blob, Embedding, File, Text
from .parts import IncomingPart, PayloadReader, view_parts


@dataclass
class IncomingMessage:
    """What `handle` gets: the message's parts as typed views, its extension fields, the SDK context."""

    message: Message
    parts: list[IncomingPart]
    extension: MessageExtension | None
    extension_requested: bool  # did the caller activate the extension (A2A-Extensions header)?
    context: RequestContext

    @property
    def text(self) -> str:
        return "\n".join(p.text for p in self.parts if p.text is not None)

    @property
    def message_id(self) -> str:
        return self.message.message_id

    @property
    def task_id(self) -> str | None:
        return self.context.task_id

    @property
    def context_id(self) -> str | None:
        return self.context.context_id

    def of(self, modality: str) -> list[IncomingPart]:
        """The parts whose modality matches `modality` (`image/*`, `audio/wav`, ...)."""
        return [p for p in self.parts if accepts([modality], p.modality)]


class MultimodalExecutor(AgentExecutor):
    """Subclass and implement `handle`; see the module docstring.

    `gateway` (and `allow_hosts`) name the hosts payload URLs may point to; anything else
    must be a public address (the SSRF guard). `reply_features` extracts features for reply
    parts. Class attributes: `feature_schemas` declared in the card (None: every schema
    the registry knows), `artifact_name`.
    """

    feature_schemas: Sequence[str] | None = None
    artifact_name: str = "answer"

    def __init__(
        self,
        *,
        gateway: str | Sequence[str] | None = None,
        allow_hosts: Sequence[str] = (),
        allow_private: bool = False,
        reader: PayloadReader | None = None,
        reply_features: bool = False,
    ) -> None:
        urls = [gateway] if isinstance(gateway, str) else list(gateway or [])
        self.reader = reader or PayloadReader(
            URLPolicy(allow_hosts=hosts_of(urls) + tuple(allow_hosts), allow_private=allow_private))
        self.reply_features = reply_features
        self.input_modes: list[str] = ["*/*"]

    # --- what subclasses write ------------------------------------------------------------
    @abc.abstractmethod
    async def handle(self, request: IncomingMessage) -> Any:
        """The agent's work: return the reply (or yield pieces of it, to stream). Abstract: a subclass
        without it cannot be instantiated (abc)."""

    # --- the card -----------------------------------------------------------------------
    def card(
        self,
        name: str,
        description: str,
        *,
        input_modes: Sequence[str] = ("*/*",),
        output_modes: Sequence[str] = ("text/plain",),
        skills: Sequence[AgentSkill] | None = None,
        streaming: bool = True,
        version: str = "1.0.0",
        accepts: Mapping[str, Mapping[str, Any]] | None = None,
        content_encodings: Sequence[str] | None = None,
    ) -> AgentCard:
        """An Agent Card declaring the extension; parts outside `input_modes` will be refused (-32005).

        `accepts` and `content_encodings`: the form this agent wants parts and request bodies in
        (docs/extension.md, section 6); `agent_app` decodes zstd and gzip request bodies.
        """
        self.input_modes = list(input_modes)
        card = AgentCard(
            name=name, description=description, version=version,
            capabilities=AgentCapabilities(streaming=streaming),
            default_input_modes=list(input_modes), default_output_modes=list(output_modes),
            skills=list(skills) if skills is not None else [AgentSkill(
                id=name, name=name, description=description, tags=[name],
                input_modes=list(input_modes), output_modes=list(output_modes))],
        )
        return declare_extension(card, feature_schemas=self.feature_schemas, accepts=accepts,
                                 content_encodings=content_encodings)

    # --- the SDK's entry points -------------------------------------------------------------
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        try:
            incoming = self.view(context)
        except MMA2AError as exc:
            raise InvalidParamsError(message=exc.message) from None
        for part in incoming.parts:
            if not accepts(self.input_modes, part.modality):
                raise ContentTypeNotSupportedError(
                    message=f"part {part.index} ({part.modality}): this agent accepts {', '.join(self.input_modes)}")
        task = context.current_task or new_task_from_user_message(context.message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        plain = not incoming.extension_requested
        try:
            result = self.handle(incoming)
            if inspect.isasyncgen(result):
                artifact_id = None
                async for piece in result:
                    parts = await self.reply_parts(piece, plain=plain)
                    if parts:
                        first = artifact_id is None
                        artifact_id = artifact_id or f"{task.id}-{self.artifact_name}"
                        await updater.add_artifact(parts, artifact_id=artifact_id, name=self.artifact_name,
                                                   append=not first, last_chunk=False)
                await updater.complete()
                return
            parts = await self.reply_parts(await result, plain=plain)
        except ContentTypeNotSupported as exc:
            await updater.reject(updater.new_agent_message([Part(text=exc.message)]))
            return
        except Exception as exc:  # the agent's own failure: a FAILED task that says why
            text = exc.message if isinstance(exc, MMA2AError) else f"{type(exc).__name__}: {exc}"
            await updater.failed(updater.new_agent_message([Part(text=text)]))
            return
        if parts:
            await updater.add_artifact(parts, name=self.artifact_name)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()

    # --- helpers ------------------------------------------------------------------------------
    def view(self, context: RequestContext) -> IncomingMessage:
        """The typed view of the request (extension errors name the field)."""
        assert context.message is not None
        msg = context.message
        mext = read_message(message_to_json(msg)) if EXTENSION_URI in msg.metadata else None
        requested = EXTENSION_URI in context.requested_extensions or EXTENSION_URI in msg.extensions
        return IncomingMessage(msg, view_parts(msg.parts, self.reader), mext, requested, context)

    async def reply_parts(self, value: Any, *, plain: bool = False) -> list[Part]:
        """SDK parts for a reply value, each with the extension (modality, features when `reply_features`)."""
        if value is None:
            return []
        if isinstance(value, (list, tuple)):
            return [p for v in value for p in await self.reply_parts(v, plain=plain)]
        if isinstance(value, Part):
            return [value]
        if isinstance(value, IncomingPart):
            return [value.part]
        pj = await asyncio.to_thread(self._reply_json, value)
        if plain:
            pj = downgrade_part(pj)
        return [json_format.ParseDict(pj, Part())]

    def _reply_json(self, value: Any) -> dict[str, Any]:
        feats = self.reply_features
        if isinstance(value, str):
            value = Text(value)
        if isinstance(value, Text):
            return build_part(value.text.encode(), modality=value.modality, features=feats, thumbnail=False)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return build_part(bytes(value), features=feats, thumbnail=feats)
        if isinstance(value, Blob):
            return build_part(value.data, modality=value.modality, features=feats, thumbnail=feats, filename=value.filename)
        if isinstance(value, (Path, File)):
            f = value if isinstance(value, File) else File(value)
            return build_part(Path(f.path), modality=f.modality, features=feats, thumbnail=feats, filename=f.filename)
        if isinstance(value, Embedding):
            import struct

            data = struct.pack(f"<{len(value.vector)}f", *value.vector)
            return build_part(data, modality=f"application/x-a2a-embedding; dtype=float32; dimension={len(value.vector)}",
                              features=True, thumbnail=False)
        if isinstance(value, dict):
            return write_part({"data": value, "mediaType": "application/json"}, PartExtension(modality="application/json"))
        raise TypeError(f"cannot reply with a {type(value).__name__}; return str, bytes, Path, dict, Part or a list of them")


MAX_BODY_BYTES = 64 * 1024 * 1024
"""The largest request body an SDK agent reads (after decoding a Content-Encoding)."""


def agent_app(card: AgentCard, executor: AgentExecutor, url: str) -> Starlette:
    """The Starlette app of one agent at `url`: card, JSON-RPC and REST, A2A 1.0 and v0.3."""
    served = AgentCard()
    served.CopyFrom(card)
    served.ClearField("supported_interfaces")
    served.supported_interfaces.append(AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"))
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=served)
    routes: list[BaseRoute] = [*create_agent_card_routes(served), *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True)]
    routes += create_rest_routes(handler, enable_v0_3_compat=True)
    # request bodies with Content-Encoding (a gateway compresses them for cards that list contentEncodings)
    return Starlette(routes=routes, middleware=[Middleware(ContentCoding, max_body_bytes=MAX_BODY_BYTES, min_size=None)])


@contextlib.asynccontextmanager
async def run_agent(card: AgentCard, executor: AgentExecutor, *, host: str = "127.0.0.1",
                    port: int | None = None) -> AsyncIterator[str]:
    """Serve an agent inside this event loop (uvicorn); yields its base URL."""
    from ..serving import free_port, running

    port = port or free_port(host)
    url = f"http://{host}:{port}"
    async with running(agent_app(card, executor, url + "/"), host, port):
        yield url


async def serve(executor: AgentExecutor, card: AgentCard, *, host: str = "127.0.0.1", port: int = 9000) -> None:
    """Serve an agent until cancelled (Ctrl-C)."""
    async with run_agent(card, executor, host=host, port=port):
        await asyncio.Event().wait()
