"""The reference agents run on the agent SDK's consumer: one runtime, payload URLs read only through its
guarded fetcher (the SSRF guard), so an agent reads its gateway's references and refuses any other private,
loopback or link-local address (cloud metadata) before connecting, redirects included."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

import mma2a
import mma2a.agents
import mma2a.sdk
from mma2a.agents import vision
from mma2a.agents.runtime import ReceivedPart, ReplyFn, SkillExecutor, agent_app, run_agent
from mma2a.eval.media import Label, Mark, product_photo
from mma2a.gateway import Gateway, parse_config
from mma2a.sdk import Blob, MultimodalClient, MultimodalExecutor
from mma2a.serving import free_port, running

from .conftest import answer_parts, failure, send

pytest.importorskip("cv2")

METADATA = "http://169.254.169.254/latest/meta-data/"


def photo() -> bytes:
    return product_photo(random.Random(3), (230, 210, 50), [Mark("crack", 100, 100)], [Label("SN-12345", 400, 300)])


def recording(seen: list[ReceivedPart]) -> ReplyFn:
    """The vision inspector's reply, noting the parts it was given."""

    async def reply(parts: list[ReceivedPart]) -> list[dict[str, Any]]:
        seen.extend(parts)
        return await vision.reply(parts)

    return reply


async def test_a_url_part_is_read_from_the_agents_gateway_and_refused_anywhere_private_else():
    data = photo()
    fetched: list[str] = []

    async def blob(request: Request) -> Response:
        fetched.append(request.url.path)
        return Response(data, media_type="image/png")

    async def to_metadata(request: Request) -> Response:
        fetched.append(request.url.path)
        return RedirectResponse(METADATA, status_code=302)

    app = Starlette(routes=[Route("/blobs/photo.png", blob), Route("/blobs/moved", to_metadata)])
    async with running(app) as store:
        part = {"url": f"{store}/blobs/photo.png", "mediaType": "image/png"}
        seen: list[ReceivedPart] = []
        async with run_agent(vision.card(), SkillExecutor(recording(seen), gateway=store)) as url:
            parts = answer_parts(await send(url, [part]))
            assert "QR: SN-12345" in parts[0]["text"]
            assert fetched == ["/blobs/photo.png"] and seen[0].part.is_reference and seen[0].data == data
            # its own gateway allowed, the metadata address still is not: refused before any connection
            reason = failure(await send(url, [{"url": METADATA, "mediaType": "image/png"}]))
            assert reason == (f"refused to fetch {METADATA}: 169.254.169.254 is a link-local address (169.254.0.0/16, "
                              f"cloud metadata); this agent reads payload URLs from its gateways ({store}) and public "
                              "addresses only")
            # every redirect hop is checked: the allowed host cannot bounce the agent to the metadata address
            reason = failure(await send(url, [{"url": f"{store}/blobs/moved", "mediaType": "image/png"}]))
            assert reason.startswith(f"refused to fetch {METADATA}: 169.254.169.254 is a link-local address")
            assert f"(redirected from {store}/blobs/moved)" in reason
        assert fetched == ["/blobs/photo.png", "/blobs/moved"] and len(seen) == 1
        async with run_agent(vision.card(), SkillExecutor(vision.reply)) as url:  # no gateway named: loopback refused
            reason = failure(await send(url, [part]))
        assert reason == (f"refused to fetch {store}/blobs/photo.png: 127.0.0.1 is a loopback address; this agent reads "
                          "payload URLs from its gateways (none named) and public addresses only")
        assert fetched == ["/blobs/photo.png", "/blobs/moved"]  # the refused URL was never requested


async def test_a_payload_by_reference_through_the_gateway_is_fetched_from_it_checked():
    """A producer uploads the photo to the gateway's store; the agent gets a signed URL part and reads it there."""
    data = photo()
    seen: list[ReceivedPart] = []
    port = free_port()
    gw_url = f"http://127.0.0.1:{port}"
    async with run_agent(vision.card(), SkillExecutor(recording(seen), gateway=gw_url)) as open_url, \
            run_agent(vision.card(), SkillExecutor(vision.reply)) as closed_url, \
            running(Gateway(parse_config({
                "listen": f"127.0.0.1:{port}", "admin": {"token_env": None}, "history": {"enabled": False},
                "agents": [{"name": "vision", "url": open_url}, {"name": "closed", "url": closed_url}]})).app,
                "127.0.0.1", port):
        async with await MultimodalClient.connect(gw_url, inline_limit=1024) as client:
            ok = await client.send(Blob(data, "image/png"), to="vision")
            refused = await client.send(Blob(data, "image/png"), to="closed")
    assert ok.ok and "QR: SN-12345" in ok.text, ok.status_text
    [got] = seen
    assert got.part.is_reference and got.part.url is not None and got.part.url.startswith(f"{gw_url}/blobs/")
    assert got.part.payload is not None and got.part.payload.size == len(data) and got.data == data
    assert not refused.ok
    assert f"refused to fetch {gw_url}/blobs/" in refused.status_text
    assert "&sig=…: " in refused.status_text and re.search(r"sig=[\w-]", refused.status_text) is None  # not echoed
    assert "127.0.0.1 is a loopback address; this agent reads payload URLs from its gateways (none named)" in refused.status_text


def test_one_runtime_and_one_meaning_per_name():
    """The reference agents are SDK consumers served by the SDK; `Reply` is the producer's reply, `ReplyFn` an agent's."""
    assert issubclass(SkillExecutor, MultimodalExecutor)
    assert agent_app is mma2a.sdk.agent_app and run_agent is mma2a.sdk.run_agent
    assert mma2a.agents.agent_app is mma2a.sdk.agent_app and mma2a.agents.run_agent is mma2a.sdk.run_agent
    assert mma2a.Reply is mma2a.sdk.Reply and isinstance(mma2a.sdk.Reply, type)
    import mma2a.agents.runtime as runtime

    assert not hasattr(runtime, "Reply") and not hasattr(runtime, "resolve_parts")
    shared = {n for n in dir(runtime) if not n.startswith("_")} & set(mma2a.sdk.__all__)
    assert all(getattr(runtime, n) is getattr(mma2a.sdk, n) for n in shared), shared
