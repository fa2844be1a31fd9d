"""A real webhook receiver on loopback, for push notification tests: it keeps every POST (headers, JSON body)
and answers each with the next status of `statuses` (then 200)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.agents import serve_app


@dataclass
class Hit:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class WebhookReceiver:
    url: str = ""  # base URL, no trailing slash
    hits: list[Hit] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # answers to the first POSTs, in order
    _arrived: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def wait_for(self, n: int = 1, *, timeout: float = 30.0) -> list[Hit]:
        """The first `n` POSTs once they have arrived (a generous timeout guards against a hang only)."""
        async with self._arrived:
            await asyncio.wait_for(self._arrived.wait_for(lambda: len(self.hits) >= n), timeout)
        return self.hits[:n]

    async def wait_until(self, predicate: Any, *, timeout: float = 30.0) -> list[Hit]:
        """All POSTs once one satisfies `predicate(hit)`."""
        async with self._arrived:
            await asyncio.wait_for(self._arrived.wait_for(lambda: any(predicate(h) for h in self.hits)), timeout)
        return list(self.hits)

    async def _post(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = raw
        async with self._arrived:
            self.hits.append(Hit(request.url.path, {k.lower(): v for k, v in request.headers.items()}, body))
            self._arrived.notify_all()
        status = self.statuses.pop(0) if self.statuses else 200
        return Response(status_code=status)


@contextlib.asynccontextmanager
async def webhook_receiver(statuses: list[int] | None = None) -> AsyncIterator[WebhookReceiver]:
    receiver = WebhookReceiver(statuses=list(statuses or []))
    app = Starlette(routes=[Route("/{path:path}", receiver._post, methods=["POST"])])
    async with serve_app(app) as url:
        receiver.url = url.rstrip("/")
        yield receiver


def task_state(hit: Hit) -> str | None:
    return ((hit.body.get("task") or {}).get("status") or {}).get("state") if isinstance(hit.body, dict) else None
