"""Fixtures: a temp-dir blob store, a signer on a settable clock, the payload routes under real uvicorn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from starlette.applications import Starlette

from mma2a.payload import LocalBlobStore, StreamHub, URLSigner, payload_routes
from tests.payload.support import SECRET, Clock, serve


@dataclass
class PayloadServer:
    url: str
    store: LocalBlobStore
    signer: URLSigner
    hub: StreamHub
    clock: Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs")


@pytest.fixture
def signer(clock: Clock) -> URLSigner:
    return URLSigner(SECRET, clock=clock)


@pytest.fixture(params=["direct", "asgi"])
async def server(
    request: pytest.FixtureRequest, store: LocalBlobStore, signer: URLSigner, clock: Clock
) -> AsyncIterator[PayloadServer]:
    """Every payload test runs twice: with direct WebSocket I/O (as mma2a serves) and over plain ASGI."""
    hub = StreamHub(ring_chunks=64, chunk_size=4096)
    app = Starlette(routes=payload_routes(store, signer, hub=hub, max_upload_bytes=64 * 1024 * 1024))
    async with serve(app, direct=request.param == "direct") as url:
        yield PayloadServer(url, store, signer, hub, clock)
