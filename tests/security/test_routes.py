"""Authorization from the route table (issue 14, finding 1): every route × method × credential kind, the
paths that used to slip past authentication, unknown paths, and an unclassified route stopping the start."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest
import websockets
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute

from mma2a.gateway import Gateway, parse_config
from mma2a.gateway.access.authz import AccessClass, UnclassifiedRoute, Unrouted, check_classified, route_table
from tests.gateway.conftest import ADMIN
from tests.security.conftest import API_KEY, CLIENTS, TOKEN, secured, send_body

PARAMS = {"agent": "text", "name": "ghost", "id": "t-none", "push_id": "p-none", "key:path": "0" * 64,
          "upload_id": "u-none", "stream_id": "s-none", "leg": "l-none"}
FORGED = "exp=9999999999&sig=Zm9yZ2Vk"
CREDENTIALS: dict[str, tuple[dict[str, str], str]] = {  # kind -> (headers, query)
    "none": ({}, ""),
    "client": ({"Authorization": f"Bearer {TOKEN}"}, ""),
    "wrong-client": ({"Authorization": "Bearer tok-not-a-client"}, ""),
    "admin": ({"Authorization": f"Bearer {ADMIN}"}, ""),
    "forged-signature": ({}, FORGED),
}
# refusals that come from the access class (the route was never reached)
ACCESS_REFUSALS = ("admin API: invalid token", "admin API: missing bearer token", "missing credentials",
                   "invalid bearer token", "may not call agent")


@pytest.fixture(autouse=True)
def _bob_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)


def concrete(path: str) -> str:
    return re.sub(r"\{([^}]+)\}", lambda m: PARAMS[m.group(1)], path)


def refused_by_access(method: str, status: int, text: str) -> bool:
    if method == "HEAD":  # no body to tell an access refusal from the route's own 403
        return status in (401, 403)
    return status == 401 or (status == 403 and any(m in text for m in ACCESS_REFUSALS))


async def _ws_outcome(url: str, headers: dict[str, str]) -> tuple[int, str]:
    """(close code or HTTP status, reason) of a WebSocket attempt."""
    try:
        async with websockets.connect(url, additional_headers=headers, open_timeout=10) as ws:
            try:
                await asyncio.wait_for(ws.recv(), 10)
                await asyncio.wait_for(ws.recv(), 10)
            except websockets.ConnectionClosed as closed:
                return (closed.rcvd.code if closed.rcvd else 1006), (closed.rcvd.reason if closed.rcvd else "")
            return 1000, "open"
    except websockets.InvalidStatus as exc:
        return exc.response.status_code, exc.response.body.decode(errors="replace") if exc.response.body else ""


async def test_every_route_method_and_credential_gets_the_outcome_of_its_class() -> None:
    # hundreds of wrong credentials from one address, each judged by its route's class: the budget of failed
    # credentials (which would refuse them unchecked, 429) has its own tests (test_failed_credentials.py)
    auth = {"clients": CLIENTS, "failed_credentials": {"enabled": False}}
    async with secured({"auth": auth}) as (gw, url, _):
        table = list(route_table(gw.app.routes))
        # every route classified (the SDK's REST routes included), then the unrouted catch-all
        assert len(table) == len(gw.app.routes) - 1 > 60 and isinstance(gw.app.routes[-1], Unrouted)
        outcomes: list[tuple[str, str, str, int, str]] = []
        async with httpx.AsyncClient(timeout=30) as c:
            for route, access in table:
                path = concrete(route.path)  # type: ignore[attr-defined]
                if isinstance(route, WebSocketRoute):
                    ws_base = url.replace("http", "ws", 1) + path
                    for kind, (headers, query) in CREDENTIALS.items():
                        code, reason = await _ws_outcome(ws_base + (f"?{query}" if query else ""), headers)
                        outcomes.append((access.cls.value, "WEBSOCKET", route.path, code, kind + ":" + reason))
                        assert code not in (1000,), (route.path, kind)  # never served without a valid signature
                        assert code in (4401, 4403, 1008), (route.path, kind, code, reason)
                    continue
                assert isinstance(route, Route) and route.methods
                for method in sorted(route.methods):
                    for kind, (headers, query) in CREDENTIALS.items():
                        body = b"{}" if method in ("POST", "PUT", "PATCH") else None
                        r = await c.request(method, url + path + (f"?{query}" if query else ""), content=body,
                                            headers={"A2A-Version": "1.0", "Content-Type": "application/json", **headers})
                        outcomes.append((access.cls.value, method, route.path, r.status_code, kind))
                        assert r.status_code < 500, (method, route.path, kind, r.text[:200])
                        refused = refused_by_access(method, r.status_code, r.text)
                        cls = access.cls
                        if cls is AccessClass.PUBLIC:
                            assert not refused, (method, route.path, kind, r.status_code)
                        elif cls is AccessClass.CLIENT:
                            may = kind == "client" or (kind == "admin" and access.admin_also)
                            assert refused != may, (method, route.path, kind, r.status_code, r.text[:200])
                        elif cls is AccessClass.ADMIN:
                            assert refused != (kind == "admin"), (method, route.path, kind, r.status_code, r.text[:200])
                        elif cls is AccessClass.WEBHOOK:  # an agent's push notification: only its leg's secret decides
                            assert r.status_code == 404 and "no such push leg" in r.text, (
                                method, route.path, kind, r.status_code, r.text[:200])
                        else:  # signed: no credential opens it, only the route's own signature check decides
                            assert r.status_code == 403 and (method == "HEAD" or "sig" in r.json()["error"]["data"]["field"]), (
                                method, route.path, kind, r.status_code, r.text[:200])
                        if cls is not AccessClass.PUBLIC and kind != "client" and not (kind == "admin" and cls is AccessClass.ADMIN):
                            assert not 200 <= r.status_code < 300 or (kind == "admin" and access.admin_also), (
                                method, route.path, kind, r.status_code)
            # signed routes do open with a valid signature (the route checks it, nothing else)
            exp, sig = gw.signer.sign_query(PARAMS["key:path"], "GET")
            r = await c.get(f"{url}/blobs/{PARAMS['key:path']}?exp={exp}&sig={sig}")
            assert r.status_code == 404 and "sig" not in r.text  # reached the store: no such blob
    kinds = {(o[0], o[4].split(":")[0]) for o in outcomes}
    assert {(c.value, k) for c in AccessClass for k in CREDENTIALS} <= kinds  # every class met every credential


async def test_the_paths_that_slipped_past_authentication_are_refused() -> None:
    """Finding 1, as the attack: /admin/… and /streams/… paths that used to reach the SDK's tenant REST handler."""
    async with secured() as (gw, url, _):
        text_agent = gw.test_specs["text"][1]  # type: ignore[attr-defined]
        msg = {"message": {"messageId": "bypass-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}
        async with httpx.AsyncClient(timeout=30) as c:
            ok = await c.post(url + "/", json=send_body("own-1"), headers={"Authorization": f"Bearer {TOKEN}",
                                                                            "A2A-Version": "1.0"})
            task_id = ok.json()["result"]["task"]["id"]
            attacks = [
                await c.post(url + "/admin/message:send", json=msg, headers={"A2A-Version": "1.0"}),
                await c.get(url + f"/admin/tasks/{task_id}", headers={"A2A-Version": "1.0"}),
                await c.get(url + f"/streams/tasks/{task_id}?sig=x", headers={"A2A-Version": "1.0"}),
                await c.get(url + f"/blobs/tasks/{task_id}?sig=x"),
                await c.post(url + "/acme/message:send", json=msg),
                await c.post(url + "/admin/message:send", content=b"\xff\xfe\x00garbage"),
            ]
            # with credentials: 404 (no catch-all tenant mount; the tenant form names an agent, and none is 'admin')
            as_admin = await c.post(url + "/admin/message:send", json=msg, headers={"Authorization": f"Bearer {TOKEN}"})
            as_client = await c.get(url + f"/admin/tasks/{task_id}", headers={"Authorization": f"Bearer {TOKEN}"})
    for r in attacks:
        assert r.status_code in (401, 403), (r.request.url, r.status_code, r.text[:200])
    assert attacks[0].json()["error"]["status"] == "UNAUTHENTICATED"
    assert attacks[2].status_code == 401  # not a signed route: /streams/tasks/{id} does not exist
    assert as_admin.status_code == 404 and as_admin.json()["error"]["status"] == "NOT_FOUND"
    assert as_client.status_code == 404
    assert [m.message.message_id for m in text_agent.received] == ["own-1"]  # nothing else reached an agent


async def test_an_unauthenticated_huge_body_is_refused_before_it_is_read() -> None:
    """Finding 1's 200 MB body: the answer (401) comes after the headers, the body is never read or parsed."""
    async with secured() as (gw, url, _):
        host, port = url.removeprefix("http://").split(":")
        for path, extra in (("/admin/message:send", ""), ("/message:send", ""), ("/", ""),
                            ("/", "Content-Encoding: gzip\r\n"), ("/message:send", "Content-Encoding: zstd\r\n")):
            reader, writer = await asyncio.open_connection(host, int(port))  # compressed bodies: not decoded either
            writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
                         f"Content-Length: {200 * 1024 * 1024}\r\n\r\n".encode() + b"{" * 1024)
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)  # 200 MB were never sent
            writer.close()
            assert head.startswith(b"HTTP/1.1 401"), (path, head)


async def test_unknown_paths_answer_401_then_404_and_methods_405() -> None:
    async with secured() as (gw, url, _):
        async with httpx.AsyncClient(timeout=30) as c:
            anon = await c.get(url + "/no/such/path")
            known = await c.get(url + "/no/such/path", headers={"Authorization": f"Bearer {TOKEN}"})
            wrong_method = await c.put(url + "/healthz")
    assert anon.status_code == 401 and anon.headers["www-authenticate"] == 'Bearer realm="mma2a"'
    assert known.status_code == 404 and known.json()["error"]["message"] == "no route for GET /no/such/path"
    assert wrong_method.status_code == 405


async def test_upload_routes_need_the_client_credential_whatever_the_query() -> None:
    """Finding 5: GET/HEAD/DELETE /blobs/uploads/{id}?sig=anything used to work with no credential."""
    async with secured() as (gw, url, _):
        async with httpx.AsyncClient(timeout=30) as c:
            auth = {"Authorization": f"Bearer {TOKEN}"}
            begun = (await c.post(url + "/blobs/uploads", headers=auth)).json()
            where = f"{url}/blobs/uploads/{begun['uploadId']}?exp=9999999999&sig=anything"
            anon = [await c.get(where), await c.head(where), await c.delete(where)]
            still = await c.get(where, headers=auth)
            own_abort = await c.delete(where, headers=auth)
    assert [r.status_code for r in anon] == [401, 401, 401]
    assert still.status_code == 200 and still.json()["offset"] == 0  # the anonymous DELETE aborted nothing
    assert own_abort.status_code == 204


async def test_the_console_page_is_public_and_its_data_apis_need_the_admin_token() -> None:
    """Finding 9: a browser gets the console page, then needs the admin token for every admin API it calls."""
    async with secured() as (gw, url, _):
        admin_routes = [(sorted(r.methods - {"HEAD"})[0], concrete(r.path)) for r, a in route_table(gw.app.routes)
                        if a.cls is AccessClass.ADMIN and isinstance(r, Route) and r.methods]
        async with httpx.AsyncClient(timeout=30) as c:
            page = await c.get(url + "/console")
            anon = {(m, p): (await c.request(m, url + p, content=b"{}" if m != "GET" else None)).status_code
                    for m, p in admin_routes if m == "GET"}
            tokened = {(m, p): (await c.request(m, url + p, headers={"Authorization": f"Bearer {ADMIN}"})).status_code
                       for m, p in admin_routes if m == "GET"}
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert ("GET", "/admin/decisions") in anon and ("GET", "/admin/agents") in anon
    assert set(anon.values()) == {401} and set(tokened.values()) == {200}


def test_an_unclassified_route_stops_the_start() -> None:
    gw = Gateway(parse_config({"listen": "127.0.0.1:1", "admin": {"token": ADMIN}}))
    check_classified(gw.app.routes)

    async def extra(request: Any) -> Response:
        return Response(b"secret")

    with pytest.raises(UnclassifiedRoute) as err:
        check_classified([*gw.app.routes, Route("/debug/dump", extra, methods=["GET", "POST"])])
    assert err.value.message.endswith("GET,HEAD,POST /debug/dump") and err.value.data["routes"] == ["GET,HEAD,POST /debug/dump"]
    gw.app.app.add_route("/late", extra)  # added to the Starlette app after the build: start() refuses it too
    with pytest.raises(UnclassifiedRoute, match="/late"):
        asyncio.run(gw.start())


def test_url_lookups_pass_over_the_unrouted_catch_all() -> None:
    """The catch-all that answers unknown paths has no URL: a lookup by a name no route has is Starlette's
    NoMatchFound, as with any router, and a named route is still found past the catch-all."""
    from starlette.routing import NoMatchFound

    app = Gateway(parse_config({"agents": []})).app.app  # the Starlette app behind the front door
    with pytest.raises(NoMatchFound):
        app.url_path_for("no-such-route")
