"""SDK fixtures: a consumer built on `MultimodalExecutor` that saves what it receives, behind a real gateway."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mma2a.sdk import IncomingMessage, MultimodalExecutor, PayloadReader, run_agent
from tests.gateway.conftest import gateway


@dataclass
class Saved:
    """One part as the consumer received it: its view and the digest and size of the bytes it read."""

    modality: str
    kind: str
    features: dict[str, Any]
    extension: bool
    sha256: str
    size: int
    stream: bool


class SavingConsumer(MultimodalExecutor):
    """Reads every part's bytes with `part.open()` into `out_dir` and answers with a summary line per part."""

    feature_schemas = ("image/1", "audio/1", "video/1", "text/1")

    def __init__(self, out_dir: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.out_dir = out_dir
        self.messages: list[IncomingMessage] = []
        self.saved: list[list[Saved]] = []

    async def handle(self, request: IncomingMessage) -> Any:
        self.messages.append(request)
        saved, lines = [], []
        for part in request.parts:
            digest, size = hashlib.sha256(), 0
            with (self.out_dir / f"{request.message_id}-{part.index}").open("wb") as f:
                async for chunk in part.open():
                    digest.update(chunk)
                    size += len(chunk)
                    f.write(chunk)
            saved.append(Saved(part.modality, part.kind, dict(part.features), part.extension, digest.hexdigest(), size,
                               part.is_stream))
            lines.append(f"{part.modality}: {size} bytes")
        self.saved.append(saved)
        return "\n".join(lines)


@contextlib.asynccontextmanager
async def consumer_behind_gateway(tmp_path: Path, *, input_modes: tuple[str, ...] = ("*/*",), name: str = "inspector",
                                  extra_agents: dict[str, str] | None = None, config: dict[str, Any] | None = None,
                                  ) -> AsyncIterator[tuple[SavingConsumer, str, str]]:
    """A SavingConsumer on a loopback port registered with a real gateway; yields (consumer, agent URL, gateway URL)."""
    consumer = SavingConsumer(tmp_path)
    card = consumer.card(name, "saves what it gets", input_modes=input_modes)
    async with run_agent(card, consumer) as agent_url:
        agents = [{"name": name, "url": agent_url}] + [{"name": n, "url": u} for n, u in (extra_agents or {}).items()]
        async with gateway({"agents": agents, **(config or {})}) as (_, url):
            consumer.reader = PayloadReader.for_gateway(url)  # payload URLs may point at this gateway only
            yield consumer, agent_url, url
