"""Card fetches stay on the agent's origin and bounded in size (round 4): the gateway followed any redirect of an
agent's card URL (aiohttp's default, 10 hops), so a card could send it to an internal host (SSRF: the metadata
address, an admin port), and it read a card of any size whole into memory on every refresh."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

import httpx
from google.protobuf import json_format

from mma2a.gateway.downstream.transport import MAX_JSON_BYTES
from tests.agents import make_card
from tests.gateway.conftest import ADMIN, gateway
from tests.payload.support import serve

AUTH = {"Authorization": f"Bearer {ADMIN}"}


async def test_a_card_cannot_redirect_the_gateway_elsewhere_nor_be_too_large():
    internal_hits: list[str] = []

    async def internal(request: Request) -> Response:  # stands for 169.254.169.254 or an admin port
        internal_hits.append(request.url.path)
        return JSONResponse({"secret": "metadata"})

    async with serve(Starlette(routes=[Route("/{p:path}", internal)])) as inside:
        base: dict[str, str] = {}

        async def card(request: Request) -> Response:
            doc = json_format.MessageToDict(make_card("hop"))
            doc["supportedInterfaces"] = [{"url": base["url"] + "/same", "protocolBinding": "JSONRPC",
                                           "protocolVersion": "1.0"}]
            return JSONResponse(doc)

        async def moved(request: Request) -> Response:
            return RedirectResponse(base["url"] + "/card", status_code=302)

        async def away(request: Request) -> Response:
            return RedirectResponse(inside + "/latest/meta-data/", status_code=302)

        async def huge(request: Request) -> Response:
            return Response(b"{" + b" " * (MAX_JSON_BYTES + 10) + b"}", media_type="application/json")

        paths = {"/same/.well-known/agent-card.json": moved, "/card": card, "/away/.well-known/agent-card.json": away,
                 "/huge/.well-known/agent-card.json": huge}
        app = Starlette(routes=[Route(p, f) for p, f in paths.items()])
        async with serve(app) as outside:
            base["url"] = outside
            async with gateway({"agents": []}) as (gw, url), httpx.AsyncClient(timeout=30) as c:
                same = await c.post(url + "/admin/agents", headers=AUTH, json={"name": "same", "url": outside + "/same"})
                far = await c.post(url + "/admin/agents", headers=AUTH, json={"name": "far", "url": outside + "/away"})
                big = await c.post(url + "/admin/agents", headers=AUTH, json={"name": "big", "url": outside + "/huge"})
    assert same.status_code == 201, same.text  # a redirect within the origin is followed
    assert far.status_code == 502 and far.json()["error"]["message"] == (
        f"GET {outside}/away/.well-known/agent-card.json: redirected to another origin ({inside}); register the agent "
        "at the URL that serves its card")
    assert internal_hits == []
    assert big.status_code == 502 and big.json()["error"]["message"] == (
        f"GET {outside}/huge/.well-known/agent-card.json: response larger than {MAX_JSON_BYTES} bytes")
