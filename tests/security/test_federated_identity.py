"""Round 6 #1 (security round 4, the High one): a federated hop made every client of gateway A one principal at
gateway B. Now A signs who its client is (`federation.private_key_env`), B trusts A's key
(`federation.trusted_gateways`) and keys dedupe, task ownership and rate buckets by (peer, upstream client).

Two real gateways A → B and a real a2a-sdk agent behind B; alice and dave are clients of A, B knows only `gwa`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import ssl
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from mma2a.gateway.access.federation import HEADER, Federation
from mma2a.signing import new_private_key, private_key_text, public_key_text
from tests.gateway.conftest import agent, gateway
from tests.agents import run_agent
from tests.certs import CA

ALICE, DAVE, GWA, EVE = "alice-token-1", "dave-token-1", "gwa-token-1", "eve-token-1"


class CutOnce:
    """A TCP relay in front of gw-b that, armed with a marker, cuts the connection whose request carries it as soon
    as gw-b's answer begins: gw-b read and served the request, gw-a sees the connection close before any answer
    (an answer lost on the way) and sends the request again. `cut`: the request's bytes as gw-b received them."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.target_port = 0
        self.marker: bytes | None = None
        self.cut: list[bytes] = []
        self.url = ""
        self.tls = tls  # HTTPS to gw-a (TLS ends here, gw-b is reached plain): gw-a sends over aiohttp
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> CutOnce:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0, ssl=self.tls)
        scheme = "https" if self.tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        seen = bytearray()  # the request bytes since the last answer

        async def to_b() -> None:
            while data := await reader.read(1 << 16):
                seen.extend(data)
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def to_a() -> None:
            while data := await up_reader.read(1 << 16):
                if self.marker is not None and self.marker in seen:
                    self.marker = None
                    self.cut.append(bytes(seen))
                    writer.transport.abort()
                    up_writer.transport.abort()
                    return
                seen.clear()
                writer.write(data)
                await writer.drain()
            writer.close()

        tasks = [asyncio.ensure_future(to_b()), asyncio.ensure_future(to_a())]
        with contextlib.suppress(ConnectionError, OSError):
            await asyncio.gather(*tasks)
        for t in tasks:
            t.cancel()


@contextlib.asynccontextmanager
async def a_to_b(monkeypatch: pytest.MonkeyPatch, *, rate: float = 100.0, burst: int = 200, relay: CutOnce | None = None,
                 site_b: dict[str, Any] | None = None, wrap_b: Callable[[Any], Any] | None = None
                 ) -> AsyncIterator[tuple[Any, str, Any, str, Any]]:
    """gw-a (alice, dave) → gw-b (gwa, eve) → agent `notes` (echoes what it is sent); yields (gw_a, url_a, gw_b,
    url_b, gw-a's private key). `relay`: gw-a reaches gw-b through it; `site_b`: more of gw-a's config of gw-b
    (`tls`, `compress`); `wrap_b`: ASGI middleware in front of gw-b."""
    key = new_private_key()
    monkeypatch.setenv("FED_A_KEY", private_key_text(key))
    monkeypatch.setenv("FED_A_PUB", public_key_text(key))
    monkeypatch.setenv("MMA2A_AGENT_GWA_TOKEN", GWA)
    card, ex = agent("notes", ["text/plain"], echo=True)
    async with run_agent(card, ex) as notes_url:
        async with gateway({"name": "gw-b", "agents": [{"name": "notes", "url": notes_url}],
                            "auth": {"clients": [{"name": "gwa", "token": GWA, "rate": rate, "burst": burst},
                                                 {"name": "eve", "token": EVE}]},
                            "rate_limit": {"enabled": True}, "faults": {"dedupe_ttl_s": 300}, "grpc_listen": "127.0.0.1:0",
                            "federation": {"trusted_gateways": {"gwa": {"public_key_env": "FED_A_PUB"}}}},
                           wrap=wrap_b) as (gw_b, url_b):
            if relay is not None:
                relay.target_port = int(url_b.rsplit(":", 1)[1])
            async with gateway({"name": "gw-a", "agents": [{"name": "site-b", "url": relay.url if relay else url_b,
                                                            "token_env": "MMA2A_AGENT_GWA_TOKEN", **(site_b or {})}],
                                "auth": {"clients": [{"name": "alice", "token": ALICE}, {"name": "dave", "token": DAVE}]},
                                "federation": {"private_key_env": "FED_A_KEY"}}) as (gw_a, url_a):
                assert gw_a.startup_errors == gw_b.startup_errors == []
                yield gw_a, url_a, gw_b, url_b, key


async def call(c: httpx.AsyncClient, url: str, token: str, method: str, params: dict[str, Any],
               headers: dict[str, str] | None = None) -> dict[str, Any]:
    r = await c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                     headers={"A2A-Version": "1.0", "Authorization": f"Bearer {token}", **(headers or {})})
    return r.json()  # type: ignore[no-any-return]


def text_message(mid: str, text: str) -> dict[str, Any]:
    return {"message": {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}]}}


def texts(task: dict[str, Any]) -> str:
    return " ".join(p.get("text", "") for m in task.get("history") or [] for p in m.get("parts") or [])


async def test_two_clients_of_a_with_one_message_id_get_two_tasks_each_their_own(monkeypatch: pytest.MonkeyPatch
                                                                                   ) -> None:
    async with a_to_b(monkeypatch) as (_, url_a, gw_b, _, _), httpx.AsyncClient(timeout=30) as c:
        mine = await call(c, url_a, ALICE, "SendMessage", text_message("m-same", "alice's secret plan"))
        his = await call(c, url_a, DAVE, "SendMessage", text_message("m-same", "dave asks"))
        alice_task, dave_task = mine["result"]["task"], his["result"]["task"]
        assert alice_task["id"] != dave_task["id"]  # at B: (alice via gwa, m-same) and (dave via gwa, m-same)
        assert gw_b.pipeline.tasks.owner_of(alice_task["id"]) == (True, "alice via gwa")
        assert gw_b.pipeline.tasks.owner_of(dave_task["id"]) == (True, "dave via gwa")
        assert "alice" not in texts(dave_task)  # B's dedupe answered dave with alice's task before
        # each reads only its own, through both gateways
        got = await call(c, url_a, ALICE, "GetTask", {"id": alice_task["id"]})
        assert "alice's secret plan" in texts(got["result"]) and "dave asks" not in texts(got["result"])
        stolen = await call(c, url_a, DAVE, "GetTask", {"id": alice_task["id"]})
        assert stolen["error"]["code"] == -32001 and stolen["error"]["message"] == f"task {alice_task['id']!r} not found"
        got = await call(c, url_a, DAVE, "GetTask", {"id": dave_task["id"]})
        assert "dave asks" in texts(got["result"]) and "alice" not in texts(got["result"])
        again = await call(c, url_a, ALICE, "GetTask", {"id": alice_task["id"]})  # A kept alice as the owner
        assert "alice's secret plan" in texts(again["result"])


async def test_a_flood_from_one_client_of_a_leaves_the_other_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    """gwa may send a request every 10 s with a burst of 5 at B, per client of A: dave's 20 at once empty his bucket
    only."""
    async with a_to_b(monkeypatch, rate=0.1, burst=5) as (_, url_a, *_), httpx.AsyncClient(timeout=30) as c:
        answers = await asyncio.gather(*(call(c, url_a, DAVE, "SendMessage", text_message(f"d-{i}", "flood"))
                                         for i in range(20)))
        refused = [a["error"] for a in answers if "error" in a]
        assert len(refused) >= 10, answers
        for err in refused:  # B's refusal, passed back: it names neither the gateway nor another of its clients
            assert err["message"].startswith("rate limit of this client exceeded; retry in "), err
        mine = await call(c, url_a, ALICE, "SendMessage", text_message("a-1", "still there?"))
    assert mine["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", mine


async def test_assertions_are_checked_at_the_door(monkeypatch: pytest.MonkeyPatch) -> None:
    """Straight to B: a lifted assertion, another key, a stale one are refused; from a peer B does not trust the
    header is ignored; without one the peer is one principal."""
    async with a_to_b(monkeypatch) as (_, _, gw_b, url_b, key), httpx.AsyncClient(timeout=30) as c:
        a = Federation("gw-a", private_key=key)
        now = int(time.time())

        lifted = {HEADER: a.assertion("alice", "message:m-1", now)}
        doc = await call(c, url_b, GWA, "SendMessage", text_message("m-2", "replayed"), lifted)
        assert doc["error"] == {"code": -32600, "message": f"{HEADER}: the assertion was signed for another request "
                                "than this one (message 'm-2'); the upstream gateway signs one per request",
                                "data": doc["error"]["data"]}
        doc = await call(c, url_b, GWA, "GetTask", {"id": "t-1"}, {HEADER: a.assertion("alice", "message:t-1", now)})
        assert doc["error"]["message"].startswith(f"{HEADER}: the assertion was signed for another request than this "
                                                  "one (task 't-1')")

        forged = {HEADER: Federation("gw-a", private_key=new_private_key()).assertion("alice", "message:m-3", now)}
        r = await c.post(url_b, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                      "params": text_message("m-3", "x")},
                         headers={"A2A-Version": "1.0", "Authorization": f"Bearer {GWA}", **forged})
        assert r.status_code == 401
        assert r.json()["error"]["message"] == (f"{HEADER}: the signature does not verify with the key of gwa "
                                                "(federation.trusted_gateways.gwa)")

        stale = {HEADER: a.assertion("alice", "message:m-4", now - 600)}
        doc = await call(c, url_b, GWA, "SendMessage", text_message("m-4", "x"), stale)
        assert doc["error"]["message"].startswith(f"{HEADER}: the assertion is 6")  # 600 or 601 s old
        assert doc["error"]["message"].endswith("s old, outside the 60 s window (federation.window_s; replayed, or "
                                                "the clocks disagree)")

        # eve is no trusted gateway: her claim to speak for alice is ignored, the task is eve's
        doc = await call(c, url_b, EVE, "SendMessage", text_message("m-5", "x"),
                         {HEADER: a.assertion("alice", "message:m-5", now)})
        assert gw_b.pipeline.tasks.owner_of(doc["result"]["task"]["id"]) == (True, "eve")
        # gwa without an assertion: one principal, as before
        doc = await call(c, url_b, GWA, "SendMessage", text_message("m-6", "x"))
        assert gw_b.pipeline.tasks.owner_of(doc["result"]["task"]["id"]) == (True, "gwa")
        # and a genuine one: alice's own task at B
        doc = await call(c, url_b, GWA, "SendMessage", text_message("m-7", "x"),
                         {HEADER: a.assertion("alice", "message:m-7", now)})
        assert gw_b.pipeline.tasks.owner_of(doc["result"]["task"]["id"]) == (True, "alice via gwa")


async def test_a_captured_assertion_replayed_is_refused_and_the_request_it_came_with_served(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 15's leftover: an assertion was good for its whole 60 s window, so one lifted from the wire between the
    gateways could be sent again (with the request it was signed for) and B believed it each time — its holder was
    alice at B, and a wrong credential beside it spent alice's share of failed credentials and gwa's total instead of
    its own address's budget. Now each assertion is good for one request (A signs a fresh one, a nonce in it, for each
    call: alice's repeated task calls through A are all served)."""
    import grpc
    import grpc.aio
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    async with a_to_b(monkeypatch) as (_, url_a, gw_b, url_b, key), httpx.AsyncClient(timeout=30) as c:
        a = Federation("gw-a", private_key=key)
        captured = {HEADER: a.assertion("alice", "message:r-1", int(time.time()))}
        served = await call(c, url_b, GWA, "SendMessage", text_message("r-1", "alice's"), captured)
        r = await c.post(url_b, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                      "params": text_message("r-1", "replayed")},
                         headers={"A2A-Version": "1.0", "Authorization": f"Bearer {GWA}", **captured})
        replayed = r.status_code, r.json()
        assert gw_b.federation is not None  # a replay beside a wrong credential is judged as its address's
        judged_as = gw_b.federation.asserted(captured[HEADER], time.time())
        assert gw_b.grpc is not None
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gw_b.grpc.port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as over_grpc:
                await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(  # type: ignore[no-untyped-call]
                    a2a_pb2.SendMessageRequest(message=a2a_pb2.Message(
                        message_id="r-1", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="replayed")])),
                    timeout=30, metadata=[("a2a-version", "1.0"), ("authorization", f"Bearer {GWA}"),
                                          (HEADER.lower(), captured[HEADER])])
        # the real upstream: a message and its task read twice at once, each call its own assertion
        mine = await call(c, url_a, ALICE, "SendMessage", text_message("r-2", "through a"))
        task_id = mine["result"]["task"]["id"]
        reads = await asyncio.gather(*(call(c, url_a, ALICE, "GetTask", {"id": task_id}) for _ in range(3)))
    assert gw_b.pipeline.tasks.owner_of(served["result"]["task"]["id"]) == (True, "alice via gwa")
    why = (f"{HEADER}: the assertion was used already (each is good for one request; a replay of a lifted header is "
           "refused): the upstream gateway signs one per call")
    assert replayed == (401, {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600, "message": why, "data": replayed[1]["error"]["data"]}})
    assert {"field": HEADER} in [d.get("metadata") for d in replayed[1]["error"]["data"]], replayed
    assert judged_as is None
    assert over_grpc.value.code() == grpc.StatusCode.UNAUTHENTICATED and over_grpc.value.details() == why
    assert [r["result"]["id"] for r in reads] == [task_id] * 3, reads


async def test_a_request_sent_again_after_a_cut_connection_carries_a_fresh_assertion(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 16's leftover: gw-a resends a request whose connection to gw-b was cut before any answer (a new
    connection; a kept-alive one gone stale), and it resent the same bytes, assertion and all: gw-b had read that
    assertion, so it refused the second send as a replay (401, `the assertion was used already`) and alice got that.
    Each send is signed afresh now: gw-b's dedupe answers the resend with the task it made. The first send's bytes
    sent again as they were are still a replay."""
    async with CutOnce() as relay, a_to_b(monkeypatch, relay=relay) as (_, url_a, gw_b, url_b, _), \
            httpx.AsyncClient(timeout=30) as c:
        answers = []
        for mid in ("cut-1", "cut-2"):  # the first on a new connection, the second on a kept-alive one
            relay.marker = mid.encode()
            answers.append(await call(c, url_a, ALICE, "SendMessage", text_message(mid, f"alice's {mid}")))
        first_cut = relay.cut[0]
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.target_port)
        writer.write(first_cut)
        await writer.drain()
        status = await reader.readline()
        writer.close()
    assert len(relay.cut) == 2
    for answer in answers:
        assert "result" in answer, answer
        task = answer["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer
        assert gw_b.pipeline.tasks.owner_of(task["id"]) == (True, "alice via gwa")
    assert status.startswith(b"HTTP/1.1 401 "), status  # the captured send itself: good once


async def test_an_https_request_sent_again_after_a_cut_connection_carries_a_fresh_assertion(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """FL1's resend over HTTPS (gw-a's aiohttp session, not the lean pool): gw-a reaches gw-b through a relay that
    ends TLS with a certificate the test made (gw-a trusts its CA, `agents[].tls.ca_file`) and cuts the connection as
    gw-b's answer begins. gw-a sends again, signed afresh, and gw-b's dedupe answers with the task it made; the cut
    send's bytes sent again as they were are a replay (401)."""
    ca = CA(tmp_path)
    pair = ca.issue("relay")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(pair.cert_file, pair.key_file)
    async with CutOnce(tls) as relay, \
            a_to_b(monkeypatch, relay=relay, site_b={"tls": {"ca_file": ca.cert_file}}) as (_, url_a, gw_b, _, _), \
            httpx.AsyncClient(timeout=30) as c:
        assert relay.url.startswith("https://")
        answers = []
        for mid in ("tls-cut-1", "tls-cut-2"):  # the first on a new connection, the second on a kept-alive one
            relay.marker = mid.encode()
            answers.append(await call(c, url_a, ALICE, "SendMessage", text_message(mid, f"alice's {mid}")))
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.target_port)
        writer.write(relay.cut[0])
        await writer.drain()
        status = await reader.readline()
        writer.close()
    assert len(relay.cut) == 2
    for answer in answers:
        assert "result" in answer, answer
        task = answer["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer
        assert gw_b.pipeline.tasks.owner_of(task["id"]) == (True, "alice via gwa")
    assert status.startswith(b"HTTP/1.1 401 "), status  # the captured send itself: good once


class Unread:
    """In front of gw-b: a body gw-a sent coded is passed on with a coding gw-b does not read (`br`), as to a peer
    without gw-a's coding: gw-b's door checks the request's assertion first, then answers 415 (and the codings it
    reads). Each request's (coding, assertion) and each answer's status are kept."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[tuple[str | None, str | None]] = []
        self.statuses: list[int] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        coding = headers.get(b"content-encoding")
        assertion = headers.get(HEADER.lower().encode())
        self.seen.append((coding.decode() if coding else None, assertion.decode() if assertion else None))
        if coding == b"gzip":
            scope = {**scope, "headers": [(k, b"br" if k == b"content-encoding" else v) for k, v in scope["headers"]]}

        async def keep(message: Any) -> None:
            if message["type"] == "http.response.start":
                self.statuses.append(message["status"])
            await send(message)

        await self.app(scope, receive, keep)


async def test_a_plain_resend_after_a_peers_415_carries_a_fresh_assertion(monkeypatch: pytest.MonkeyPatch) -> None:
    """FL1's 415 resend: gw-a compresses bodies to gw-b (`compress: [gzip]`, over 4,096 bytes); gw-b reads the
    assertion, then refuses the coding with 415 (RFC 7694: before this round it answered 400, which gw-a passed on
    to alice). gw-a sends the body again plain with an assertion of its own — gw-b would refuse the first's as a
    replay — and plain from then on: alice's message is served, hers at gw-b."""
    wrapped: list[Unread] = []

    def unread(app: Any) -> Unread:
        wrapped.append(Unread(app))
        return wrapped[0]

    async with a_to_b(monkeypatch, site_b={"compress": ["gzip"]}, wrap_b=unread) as (_, url_a, gw_b, _, _), \
            httpx.AsyncClient(timeout=30) as c:
        front = wrapped[0]
        front.seen.clear()
        front.statuses.clear()  # (gw-a's reading of gw-b's card)
        first = await call(c, url_a, ALICE, "SendMessage", text_message("coded-1", "x" * 8000))
        second = await call(c, url_a, ALICE, "SendMessage", text_message("coded-2", "y" * 8000))
    for answer in (first, second):
        assert "result" in answer, answer
        task = answer["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer
        assert gw_b.pipeline.tasks.owner_of(task["id"]) == (True, "alice via gwa")
    assert front.statuses == [415, 200, 200], front.statuses
    (coded, a1), (plain, a2), (then, a3) = front.seen
    assert (coded, plain, then) == ("gzip", None, None)  # coded once, then plain, and plain from then on
    assert a1 and a2 and a3 and len({a1, a2, a3}) == 3  # each send its own assertion


async def test_the_grpc_door_reads_the_assertion_from_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    """B's gRPC port: the same header as metadata (`mma2a-upstream-client`) makes gwa's call alice's; a forged one is
    UNAUTHENTICATED naming it."""
    import grpc
    import grpc.aio
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    async with a_to_b(monkeypatch) as (_, _, gw_b, _, key):
        assert gw_b.grpc is not None
        a = Federation("gw-a", private_key=key)

        async def send(mid: str, assertion: str) -> Any:
            msg = a2a_pb2.Message(message_id=mid, role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="over grpc")])
            md = [("a2a-version", "1.0"), ("authorization", f"Bearer {GWA}"), (HEADER.lower(), assertion)]
            async with grpc.aio.insecure_channel(f"127.0.0.1:{gw_b.grpc.port}") as channel:
                return await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(  # type: ignore[no-untyped-call]
                    a2a_pb2.SendMessageRequest(message=msg), metadata=md, timeout=30)

        got = await send("g-1", a.assertion("alice", "message:g-1", int(time.time())))
        with pytest.raises(grpc.aio.AioRpcError) as forged:
            await send("g-2", Federation("gw-a", private_key=new_private_key()).assertion(
                "alice", "message:g-2", int(time.time())))
        assert gw_b.pipeline.tasks.owner_of(got.task.id) == (True, "alice via gwa")
    assert forged.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert forged.value.details() == (f"{HEADER}: the signature does not verify with the key of gwa "
                                      "(federation.trusted_gateways.gwa)")


async def test_a_stream_through_a_is_alices_at_b_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """SendStreamingMessage through A carries the assertion as SendMessage does: the task B records is alice's."""
    import orjson

    async with a_to_b(monkeypatch) as (_, url_a, gw_b, _, _), httpx.AsyncClient(timeout=30) as c:
        events = []
        async with c.stream("POST", url_a, json={"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                                                 "params": text_message("s-1", "alice streams")},
                            headers={"A2A-Version": "1.0", "Authorization": f"Bearer {ALICE}"}) as r:
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    events.append(orjson.loads(line[5:]))
        first = events[0]["result"]
        tid = (first.get("task") or first.get("statusUpdate") or {}).get("id") or first["statusUpdate"]["taskId"]
        assert gw_b.pipeline.tasks.owner_of(tid) == (True, "alice via gwa"), events
        got = await call(c, url_a, ALICE, "GetTask", {"id": tid})
        stolen = await call(c, url_a, DAVE, "GetTask", {"id": tid})
    assert "alice streams" in texts(got["result"])
    assert stolen["error"]["code"] == -32001


async def test_an_assertion_lifted_from_a_message_neither_lists_the_clients_tasks_nor_uploads_as_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 12, S12-3: an assertion is bound to one message or task, but ListTasks (and the payload routes) never
    looked at the binding: whoever held gwa's credential and one of alice's assertions (signed for her message) could,
    within the window, list every task of hers at B — her texts in their history — on JSON-RPC, REST and gRPC, and
    upload blobs charged to her quota. The upstream never signs such requests, so an assertion there is refused."""
    import grpc
    import grpc.aio
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    async with a_to_b(monkeypatch) as (_, url_a, gw_b, url_b, key), httpx.AsyncClient(timeout=30) as c:
        mine = await call(c, url_a, ALICE, "SendMessage", text_message("m-plan", "alice's secret plan"))
        assert gw_b.pipeline.tasks.owner_of(mine["result"]["task"]["id"]) == (True, "alice via gwa")
        def lifted() -> dict[str, str]:  # one of alice's assertions for m-plan, not used yet (each is good once)
            return {HEADER: Federation("gw-a", private_key=key).assertion("alice", "message:m-plan", int(time.time()))}

        why = (f"{HEADER}: the assertion was signed for message m-plan, not for this ListTasks (the upstream gateway "
               "signs each listing for its params)")
        listed = await call(c, url_b, GWA, "ListTasks", {}, lifted())
        rest = await c.get(url_b + "/tasks", headers={"A2A-Version": "1.0", "Authorization": f"Bearer {GWA}", **lifted()})
        upload = await c.post(url_b + "/blobs", content=b"charged to alice", headers={
            "Authorization": f"Bearer {GWA}", "Content-Type": "text/plain", **lifted()})
        own = await call(c, url_b, GWA, "ListTasks", {})  # gwa itself, without an assertion: its own (none)
        assert gw_b.grpc is not None
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gw_b.grpc.port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as over_grpc:
                await a2a_pb2_grpc.A2AServiceStub(channel).ListTasks(  # type: ignore[no-untyped-call]
                    a2a_pb2.ListTasksRequest(), timeout=30, metadata=[
                        ("a2a-version", "1.0"), ("authorization", f"Bearer {GWA}"), (HEADER.lower(), lifted()[HEADER])])
    assert "result" not in listed and listed["error"]["message"] == why  # before: alice's task, her text in it
    # REST: refused inside the SDK's handler, answered with its own status as on JSON-RPC (session 17: the SDK, which
    # has no 401, rendered it 400), as a lifted GetTask already was
    assert rest.status_code == 401 and rest.json()["error"]["message"] == why
    assert rest.json()["error"]["details"][0]["metadata"] == {"field": HEADER}
    assert upload.status_code == 401
    assert upload.json()["error"]["message"] == (f"{HEADER}: the assertion was signed for message m-plan; POST /blobs "
                                                 "carries none (the upstream gateway signs messages, task calls, listings "
                                                 "and ratings only)")
    assert over_grpc.value.code() == grpc.StatusCode.UNAUTHENTICATED and over_grpc.value.details() == why
    assert own["result"]["tasks"] == []


async def test_a_via_list_longer_than_a_message_can_travel_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 12, S12-7: `via` was bounded only by the body cap: a client's message naming 200,000 gateways was taken,
    kept in its task and passed on to the agent and every next gateway. Each gateway adds itself as it adds a hop, and
    a message with `MAX_HOPS` hops is refused, so a longer list is forged."""
    from mma2a.ext import EXTENSION_URI, PROTOCOL

    async with a_to_b(monkeypatch) as (_, _, gw_b, url_b, _), httpx.AsyncClient(timeout=30) as c:
        def forged(n: int) -> dict[str, Any]:
            body = text_message(f"v-{n}", "x")
            body["message"]["metadata"] = {EXTENSION_URI: {"protocol": PROTOCOL, "via": [f"gw-{i}" for i in range(n)]}}
            return body

        long = await call(c, url_b, EVE, "SendMessage", forged(200_000))
        nine = await call(c, url_b, EVE, "SendMessage", forged(9))
        eight = await call(c, url_b, EVE, "SendMessage", forged(8))
    assert long["error"]["code"] == -32600
    assert long["error"]["message"] == (f"message.metadata[{EXTENSION_URI}].via: 200000 gateways, more than a message "
                                        "passes (8 hops)")
    assert nine["error"]["message"].startswith(f"message.metadata[{EXTENSION_URI}].via: 9 gateways")
    assert eight["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_lifted_assertion_reads_no_push_config_of_a_task_the_map_forgot(monkeypatch: pytest.MonkeyPatch) -> None:
    """S12-3, the push configs' side: get/list/delete of a task's configs skipped the task lookup (and its check of
    the assertion's binding) when the task had left the task map but its owner still held configs of it, so an
    assertion lifted from another of alice's requests read her config — the webhook's token and credentials."""
    from mma2a.errors import Unauthorized
    from mma2a.gateway.access.clients import Client, current_client

    async with a_to_b(monkeypatch) as (_, _, gw_b, _, _):
        push = gw_b.pipeline.push
        push.store.put("alice via gwa", {"taskId": "t-gone", "id": "c1", "url": "https://hooks.example/alice",
                                         "token": "alice-webhook-token"})
        assert gw_b.pipeline.tasks.find("t-gone") is None
        lifted = Client("gwa", "bearer", upstream="alice", bound="message:m-other")
        own = Client("gwa", "bearer", upstream="alice", bound="task:t-gone")
        token = current_client.set(lifted)
        try:
            with pytest.raises(Unauthorized) as info:
                await push.get("t-gone", "c1", None)
            with pytest.raises(Unauthorized):
                await push.list("t-gone", None)
        finally:
            current_client.reset(token)
        token = current_client.set(own)  # an assertion signed for this task still reads it
        try:
            kept = await push.get("t-gone", "c1", None)
        finally:
            current_client.reset(token)
    assert info.value.message == (f"{HEADER}: the assertion was signed for another request than this one (task "
                                  "'t-gone'); the upstream gateway signs one per request")
    assert kept["token"] == "alice-webhook-token"


async def test_a_client_of_a_lists_her_own_tasks_through_the_hop_and_a_listings_assertion_lists_nothing_else(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ListTasks through A (root and `/agents/site-b`) lists alice's tasks at B: A signs each listing for its params
    (`list:<digest>`), so B lists `alice via gwa`'s. Before, A signed none, B listed gwa's own (none) and alice saw an
    empty list through the hop (docs/security.md's "a gap, not a leak"; the conformance kit through a hop,
    tests/conformance/test_tck_federated_auth.py). Dave through A sees none of hers. Straight to B, an assertion
    signed for one listing is refused on a listing of other params, and used once only."""
    from mma2a.gateway.access.federation import list_bound

    async with a_to_b(monkeypatch) as (_, url_a, gw_b, url_b, key), httpx.AsyncClient(timeout=30) as c:
        ctx = {"contextId": "ctx-plans"}
        mine = await call(c, url_a, ALICE, "SendMessage", {"message": {**text_message("l-1", "alice's plan")["message"], **ctx}})
        his = await call(c, url_a, DAVE, "SendMessage", text_message("l-2", "dave's note"))
        tid = mine["result"]["task"]["id"]
        lists = {who: [t["id"] for t in (await call(c, url, token, "ListTasks", params))["result"]["tasks"]]
                 for who, url, token, params in [("alice", url_a, ALICE, {}), ("alice by context", url_a, ALICE, ctx),
                                                 ("alice on the path", url_a + "/agents/site-b", ALICE, ctx),
                                                 ("dave by her context", url_a, DAVE, ctx)]}
        signed = Federation("gw-a", private_key=key).assertion("alice", list_bound(ctx) or "", int(time.time()))
        other = await call(c, url_b, GWA, "ListTasks", {"pageSize": 5}, {HEADER: signed})
        same = await call(c, url_b, GWA, "ListTasks", ctx, {HEADER: signed})
    assert lists == {"alice": [tid], "alice by context": [tid], "alice on the path": [tid], "dave by her context": []}
    assert his["result"]["task"]["id"] not in lists["alice"]
    assert gw_b.pipeline.tasks.owner_of(tid) == (True, "alice via gwa")
    assert other["error"]["message"] == (f"{HEADER}: the assertion was signed for {list_bound(ctx).replace(':', ' ')}, "  # type: ignore[union-attr]
                                         "not for this ListTasks (the upstream gateway signs each listing for its params)")
    assert same["error"]["message"].startswith(f"{HEADER}: the assertion was used already")  # spent by the refused one
