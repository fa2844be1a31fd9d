"""The agent SDK: multimodal producers and consumers in a few lines on top of the official `a2a-sdk`.

- `MultimodalClient` (producer): `await client.send(Path("photo.png"), text="look", to="inspector")`.
- `MultimodalExecutor` (consumer): subclass, implement `handle(request)`, serve with `run_agent`/`serve`.
See docs/sdk.md.
"""

from __future__ import annotations

from .consumer import IncomingMessage, MultimodalExecutor, agent_app, run_agent, serve
from .items import Blob, Embedding, File, Live, Text
from .parts import IncomingPart, PayloadReader, frames_url, view_parts
from .producer import MultimodalClient
from .reply import Reply, ReplyEvent, ReplyStream
from .transfer import GatewayStore

__all__ = [
    "Blob",
    "Embedding",
    "File",
    "GatewayStore",
    "IncomingMessage",
    "IncomingPart",
    "Live",
    "MultimodalClient",
    "MultimodalExecutor",
    "PayloadReader",
    "Reply",
    "ReplyEvent",
    "ReplyStream",
    "Text",
    "agent_app",
    "frames_url",
    "run_agent",
    "serve",
    "view_parts",
]
