"""Running reference agents on the agent SDK: a reply function becomes an `mma2a.sdk` consumer.

A reference agent is a function from the parts it receives (the SDK's `IncomingPart` views
with their bytes read) to the JSON-form parts it answers: a `ReplyFn`. `SkillExecutor`
runs one on `mma2a.sdk.MultimodalExecutor`, so every reference agent shares the SDK's one
consumer: parts viewed and validated there, payload URLs fetched only through its guarded
fetcher (the SSRF guard: the agent's gateways and public addresses), media headers checked
against decoding limits before anything decodes, and `mma2a.sdk.agent_app`/`run_agent`
serving it as a real A2A 1.0 server with an honest card.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Part
from google.protobuf import json_format

from ..card import declare_extension
from ..errors import URLForbidden
from ..features.base import Limits
from ..features.budget import decode_cost
from ..modality import parse_modality
from ..sdk import IncomingMessage, IncomingPart, MultimodalExecutor
from ..sdk import agent_app as agent_app
from ..sdk import run_agent as run_agent
from ..sdk.parts import DECODES
from ..sdk.parts import b64 as b64

AGENT_LIMITS = Limits()
"""What a reference agent decodes: each part's header is checked against these before any model sees its bytes."""

AGENT_DECODES = DECODES
"""Bytes (`features.budget.decode_cost`) a reference agent's process decodes at once — the SDK's own budget, which
`IncomingPart.image()` holds too; a decode waits for room up to `DECODE_WAIT_S`, then the part is refused with the
reason (features.budget)."""
DECODE_WAIT_S = 30.0


def decoding(data: bytes, modality: str, what: str) -> Any:
    """Hold `data`'s decode cost of the agent's decode budget while the block decodes it (blocking: worker threads)."""
    return AGENT_DECODES.reserve(decode_cost(data, parse_modality(modality)), time.monotonic() + DECODE_WAIT_S, what)


@dataclass(frozen=True)
class ReceivedPart:
    """A part as a reference agent's reply function sees it: the SDK's view of it (`part`: features, filename,
    payload, ...), and its bytes (read and checked)."""

    part: IncomingPart
    data: bytes | None = None  # raw or referenced bytes; None for text and JSON data parts

    @property
    def modality(self) -> str:
        return self.part.modality

    @property
    def text(self) -> str | None:
        return self.part.text

    @property
    def transformed_from(self) -> str | None:
        """The modality this part was made from by a gateway transform (a caption: `image/png`), if any."""
        return self.part.transformed_from


ReplyFn = Callable[[list[ReceivedPart]], Awaitable[list[dict[str, Any]]]]
"""A reference agent's work: the parts it received, to the JSON-form parts it answers (`mma2a.sdk.Reply` is
what a producer gets back from `send`, a different thing)."""


async def receive(part: IncomingPart, limits: Limits = AGENT_LIMITS) -> ReceivedPart:
    """The part with its bytes: inline ones, or a reference read through the SDK's guarded fetcher (its expiry,
    size and digest checked), refused (`MediaError`) when the header declares more than `limits` allow."""
    if part.kind in ("raw", "url"):
        return ReceivedPart(part, await part.read_media(limits=limits))
    return ReceivedPart(part)


class SkillExecutor(MultimodalExecutor):
    """A `ReplyFn` as an `a2a-sdk` AgentExecutor on the SDK's consumer (`mma2a.sdk.MultimodalExecutor`).

    `gateway` names the gateway(s) whose payload URLs the agent may read (`allow_hosts`, more hosts);
    any other URL must resolve to public addresses (loopback, private and link-local ones, cloud
    metadata among them, are refused unless `allow_private`). The answer is one artifact; a failure
    of the reply function is a FAILED task that says why.
    """

    def __init__(
        self,
        reply: ReplyFn,
        *,
        artifact_name: str = "answer",
        gateway: str | Sequence[str] | None = None,
        allow_hosts: Sequence[str] = (),
        allow_private: bool = False,
        limits: Limits = AGENT_LIMITS,
    ) -> None:
        super().__init__(gateway=gateway, allow_hosts=allow_hosts, allow_private=allow_private)
        self.reply = reply
        self.artifact_name = artifact_name
        self.limits = limits
        self.gateways = [gateway] if isinstance(gateway, str) else list(gateway or [])

    async def handle(self, request: IncomingMessage) -> list[Part]:
        try:
            received = [await receive(p, self.limits) for p in request.parts]
        except URLForbidden as exc:
            readable = ", ".join(self.gateways) or "none named"
            raise URLForbidden(f"{exc.message}; this agent reads payload URLs from its gateways ({readable}) and "
                               "public addresses only", field=exc.field) from None
        return [json_format.ParseDict(a, Part()) for a in await self.reply(received)]


def make_card(
    name: str,
    description: str,
    *,
    input_modes: Sequence[str],
    output_modes: Sequence[str],
    skill: str,
    extension: bool = True,
) -> AgentCard:
    """A reference agent's card: one skill, its modes, and (unless `extension=False`) the extension declared."""
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


async def run_blocking(fn: Callable[..., Any], *args: Any) -> Any:
    """Blocking work (decoding, recognition, models) off the event loop."""
    return await asyncio.to_thread(fn, *args)
