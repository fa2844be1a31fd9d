"""Memory and time bounded under hostile input (issue 14): the decision feed's byte budget, JSON nested
deeper than the parser takes, and clients that stall (slow headers, idle connections)."""

from __future__ import annotations

import asyncio
import base64

import httpx
import orjson
import pytest

from mma2a.ext import EXTENSION_URI
from tests.gateway.conftest import ADMIN, agent, agents, gateway
from tests.security.conftest import error_field

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}


def _thumb_msg(mid: str, thumb_bytes: int) -> dict:
    data = base64.b64encode(b"\x89PNG" + b"\0" * (thumb_bytes - 4)).decode()
    return {"jsonrpc": "2.0", "id": mid, "method": "SendMessage", "params": {"message": {
        "messageId": mid, "role": "ROLE_USER", "parts": [{"text": "hello", "metadata": {EXTENSION_URI: {
            "modality": "text/plain", "thumbnail": {"mediaType": "image/png", "data": data}}}}]}}}


async def test_refused_thumbnails_are_not_kept_and_the_feed_stays_in_its_byte_budget() -> None:
    """Finding 3, as the attack: messages refused for a 4 MB thumbnail (limit 16 KiB), then a run of accepted
    messages with full-size thumbnails; the feed holds no refused thumbnail and never passes its budget."""
    budget = 256 * 1024
    specs = {"text": agent("text", ["text/plain"])}
    async with agents(specs) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}], "features": False, "feed_max_bytes": budget,
               "max_body_bytes": 16 * 1024 * 1024}
        async with gateway(cfg) as (gw, url):
            async with httpx.AsyncClient(timeout=60) as c:
                refused = [await c.post(url + "/", json=_thumb_msg(f"big-{i}", 4 * 1024 * 1024),
                                        headers={"A2A-Version": "1.0"}) for i in range(8)]
                after_refusals = gw.pipeline.feed.size_bytes
                feed1 = await c.get(url + "/admin/decisions", headers=ADMIN_H)
                sizes = []
                for i in range(40):  # 40 × ~21 KB of accepted thumbnails (16 KiB raw each) > the 256 KiB budget
                    ok = await c.post(url + "/", json=_thumb_msg(f"ok-{i}", 16 * 1024 - 64), headers={"A2A-Version": "1.0"})
                    assert "result" in ok.json(), ok.text[:300]
                    sizes.append(gw.pipeline.feed.size_bytes)
                feed2 = await c.get(url + "/admin/decisions", headers=ADMIN_H)
    for r in refused:
        assert r.json()["error"]["message"].endswith("thumbnail is 4194304 bytes, the limit is 16384"), r.text[:300]
    entries = feed1.json()["decisions"]
    assert [e["messageId"] for e in entries] == [f"big-{i}" for i in range(8)]
    assert all(e["thumbnails"] == [] and e["outcome"].startswith("refused") for e in entries)
    assert after_refusals < 8 * 1024 and len(feed1.content) < 8 * 1024  # was 8 × 4 MB (336 MB for 40 MB ones)
    assert max(sizes) <= budget and len(feed2.content) <= budget + 1024
    kept = [e["messageId"] for e in feed2.json()["decisions"]]
    assert kept[-1] == "ok-39" and "big-0" not in kept and len(kept) < 40  # the oldest went first
    assert all(len(e["thumbnails"]) == 1 for e in feed2.json()["decisions"])


def test_the_feed_cuts_long_strings_and_skips_an_entry_larger_than_its_budget() -> None:
    from mma2a.gateway.observe.feed import DecisionFeed

    feed = DecisionFeed(max_bytes=2048)
    feed.record({"messageId": "m" * 100_000, "parts": []}, [], "refused -32602: " + "x" * 100_000, refused=True)
    (entry,) = feed.since(0)
    assert len(entry["messageId"]) == 513 and len(entry["outcome"]) == 513
    assert feed.size_bytes == len(orjson.dumps(entry)) <= 2048
    feed.record({"messageId": "r", "parts": []}, [{"targets": ["a" * 5000]}], "completed")  # alone over budget
    assert [e["messageId"] for e in feed.since(0)] == ["m" * 512 + "…"]


async def test_deep_json_gets_an_error_naming_the_field_never_an_internal_error() -> None:
    """Finding 8, as the attack: metadata nested ~1,000 deep (and around every limit) on every binding."""
    specs = {"text": agent("text", ["text/plain"])}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": "text", "url": urls["text"]}], "features": False}) as (gw, url):
            async with httpx.AsyncClient(timeout=60) as c:
                answers = {}
                for depth in (62, 63, 100, 300, 1000, 1100):
                    # metadata nested `depth` levels, built as text (orjson.dumps itself stops at 254)
                    raw = (b'{"jsonrpc":"2.0","id":1,"method":"%s","params":{"message":{"messageId":"d","role":'
                           b'"ROLE_USER","parts":[{"text":"hi"}],"metadata":' + b'{"a":' * (depth - 1) + b"{}"
                           + b"}" * (depth - 1) + b"}}}")
                    for method in ("SendMessage", "SendStreamingMessage"):
                        r = await c.post(url + "/", content=raw.replace(b"%s", method.encode()),
                                         headers={"A2A-Version": "1.0"})
                        answers[(depth, method)] = (r.status_code, r.json())
                    r = await c.post(url + "/message:send", content=raw[raw.index(b'{"message"'):-1],
                                     headers={"A2A-Version": "1.0", "Content-Type": "application/json"})
                    answers[(depth, "rest")] = (r.status_code, r.json())
    for (depth, method), (status, doc) in answers.items():
        assert status < 500, (depth, method, doc)
        if method == "rest":
            assert depth <= 63 or status == 400, (depth, doc)
            continue
        if depth <= 63:  # params.message.metadata plus 62 levels: inside the limit of 64
            assert "result" in doc or doc["error"]["code"] != -32603, (depth, method, doc)
            continue
        err = doc["error"]
        assert err["code"] in (-32600, -32602), (depth, method, err)
        if depth <= 1000:
            assert err["message"].startswith("params.message.metadata.a.a.a") and "nested deeper than 64 levels" in err[
                "message"], (depth, method, err)
        else:
            assert err["code"] == -32600 and err["message"] == "request body nests deeper than 64 levels", err
            assert error_field(err) == "body"


async def _closed(reader: "asyncio.StreamReader") -> bytes:
    """Everything the server sends until it closes the connection (a generous guard against a hang)."""
    data = b""
    while True:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), 60)
        except ConnectionError as exc:
            return data + f"<{type(exc).__name__}>".encode()
        if not chunk:
            return data
        data += chunk


async def test_answers_carry_a_date_and_never_name_the_server_software() -> None:
    """No `server: uvicorn` on any answer (a JSON-RPC answer, the card, an error, the SDK's): it named the software to
    whoever probed. `date` stays (RFC 9110 6.6.1)."""
    specs = {"text": agent("text", ["text/plain"])}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": "text", "url": urls["text"]}], "features": False}) as (_, url):
            async with httpx.AsyncClient(timeout=60) as c:
                answers = [
                    await c.post(url + "/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}},
                        headers={"A2A-Version": "1.0"}),
                    await c.get(url + "/.well-known/agent-card.json"),
                    await c.post(url + "/", content=b"{", headers={"A2A-Version": "1.0"}),
                    await c.get(url + "/no/such/path"),
                    await c.post(url + "/", json={"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {}},
                                 headers={"A2A-Version": "1.0"}),
                ]
    assert [a.status_code for a in answers] == [200, 200, 200, 404, 200], [a.text[:200] for a in answers]
    assert "result" in answers[0].json() and "error" in answers[2].json()
    for a in answers:
        assert "server" not in a.headers, (a.request.url, a.headers)
        assert a.headers.get("date"), (a.request.url, a.headers)


async def test_stalled_clients_are_cut_off_slow_headers_slow_bodies_idle_connections() -> None:
    """Finding 7, as the attack: clients that never finish their headers (150 of them, and one trickling a byte
    at a time), one that stops halfway through a body, an idle kept-alive connection. Deadlines from gateway.yaml."""
    specs = {"text": agent("text", ["text/plain"])}
    async with agents(specs) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}], "features": False,
               "server": {"header_timeout_s": 0.5, "body_timeout_s": 0.5, "keep_alive_s": 0.5}}
        async with gateway(cfg) as (gw, url):
            host, port = url.removeprefix("http://").split(":")
            slow = []
            for _ in range(150):
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(b"POST / HTTP/1.1\r\nHost: gateway\r\nX-Slow: ")
                slow.append((reader, writer))
            silent_r, silent_w = await asyncio.open_connection(host, int(port))  # connects, sends nothing
            trickle_r, trickle_w = await asyncio.open_connection(host, int(port))
            trickled = 0
            for ch in b"GET /healthz HTTP/1.1\r\nHost: gateway\r\nX-Pad: " + b"a" * 200:
                if trickle_r.at_eof() or trickle_w.is_closing():
                    break
                try:
                    trickle_w.write(bytes([ch]))
                    await trickle_w.drain()
                except ConnectionError:
                    break
                trickled += 1
                await asyncio.sleep(0.05)  # a byte every 50 ms: never idle, never done
            body_r, body_w = await asyncio.open_connection(host, int(port))
            body_w.write(b"POST / HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
                         b"A2A-Version: 1.0\r\n\r\n" + b'{"jsonrpc": "2.0", ')
            idle_r, idle_w = await asyncio.open_connection(host, int(port))
            idle_w.write(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n")
            answers = [await _closed(r) for r, _ in slow]
            silent, trickle, body, idle = (await _closed(silent_r), await _closed(trickle_r), await _closed(body_r),
                                           await _closed(idle_r))
            async with httpx.AsyncClient(timeout=30) as c:
                still = await c.get(url + "/healthz")  # the server itself is fine
            for _, w in [*slow, (None, silent_w), (None, trickle_w), (None, body_w), (None, idle_w)]:
                w.close()
    assert all(a.startswith(b"HTTP/1.1 408 Request Timeout") for a in answers)  # each was closed, with a 408
    assert silent.startswith(b"HTTP/1.1 408")
    assert trickle.startswith(b"HTTP/1.1 408") or trickle.endswith((b"<BrokenPipeError>", b"<ConnectionResetError>"))
    assert trickled < 240  # cut off before it ever finished (a total deadline, not an idle one)
    assert body == b""  # closed mid-body: no answer, the app saw a disconnect
    assert idle.startswith(b"HTTP/1.1 200") and idle.count(b"HTTP/1.1") == 1  # answered, then closed when idle
    assert still.status_code == 200
    assert not specs["text"][1].received


@pytest.mark.parametrize("parser", ["httptools", "h11"])
async def test_deadlines_hold_on_both_parsers_and_spare_a_slow_app(parser: str) -> None:
    """The same deadlines with uvicorn's h11 parser; a request whose app takes longer than every deadline
    (the client waits, it does not stall) and a body paused by flow control are not cut."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from mma2a.deadlines import Timeouts, http_protocol
    from mma2a.serving import Server, free_port

    async def slow(request: Request) -> Response:
        await asyncio.sleep(1.5)  # three header/body deadlines
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            await asyncio.sleep(0.001)
        return Response(str(size).encode())

    t = Timeouts(header_s=0.4, body_s=0.4, keep_alive_s=0.4)
    port = free_port()
    server = Server(uvicorn.Config(Starlette(routes=[Route("/", slow, methods=["POST"])]), host="127.0.0.1", port=port,
                                   http=http_protocol(t, parser), log_level="warning", **t.uvicorn_options()))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        async with httpx.AsyncClient(timeout=30) as c:
            ok = await c.post(f"http://127.0.0.1:{port}/", content=b"x" * (4 * 1024 * 1024))  # paused, then read
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-")
        cut = await _closed(reader)
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345")
        mid_body = await _closed(reader)
        writer.close()
    finally:
        server.exit()
        await task
    assert ok.status_code == 200 and ok.text == str(4 * 1024 * 1024)
    assert cut.startswith(b"HTTP/1.1 408")
    assert mid_body == b"" or mid_body.startswith(b"HTTP/1.1 ")  # closed (h11 may answer the cut-off request)


async def test_a_media_type_is_bounded_on_every_way_a_client_names_one() -> None:
    """Session 15 (probe6, S15-11): a media type was bounded only by the body or header cap, and the text was kept as
    it came (task records, history rows, the parser's cache of 4,096 media types, a stream's info): 20 messages whose
    part named a 5 MB media type (`text/plain; x=…`) grew a gateway from 433 to 1,227 MB, and kept it. Now a media
    type is at most `modality.MAX_MEDIA_TYPE` (256) characters, wherever a client names one: a message part, a blob's
    Content-Type, a stream's mediaType — refused naming the field, the gateway's memory unchanged."""
    from mma2a.modality import _CACHE, MAX_MEDIA_TYPE, parse_modality

    longest = "text/plain; x=" + "a" * (MAX_MEDIA_TYPE - 14)
    too_long = longest + "b"
    bearer = {"Authorization": "Bearer alice-t", "A2A-Version": "1.0"}

    def message(mid: str, media_type: str) -> dict[str, object]:
        return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": mid, "role": "ROLE_USER", "parts": [{"text": "hi", "mediaType": media_type}]}}}

    async with agents({"text": agent("text", ["text/plain"], echo=True)}) as urls:
        cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()],
               "auth": {"clients": [{"name": "alice", "token": "alice-t"}]}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            served = (await c.post(url + "/", json=message("m-1", longest), headers=bearer)).json()
            refused = [(await c.post(url + "/", json=message(f"m-{n}", too_long + "c" * n), headers=bearer)).json()
                       for n in (0, 5_000_000)]
            blob = await c.post(url + "/blobs", content=b"hi", headers={**bearer, "Content-Type": too_long})
            stream = await c.post(url + "/streams", json={"mediaType": too_long}, headers=bearer)
    assert served["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    for doc, n in zip(refused, (MAX_MEDIA_TYPE + 1, MAX_MEDIA_TYPE + 1 + 5_000_000)):
        assert doc["error"]["code"] == -32602, doc  # before: taken, and the 5 MB text kept
        assert doc["error"]["message"] == (f"message.parts[0].mediaType: a media type of {n} characters, the most is "
                                           f"{MAX_MEDIA_TYPE} ('text/plain; x=aaaaaaaaaaaaaaaaaaaaaaaaaa'…)")
        assert error_field(doc["error"]) == "message.parts[0].mediaType"
    assert blob.status_code == 400 and blob.json()["error"]["message"].startswith(
        f"Content-Type: a media type of {MAX_MEDIA_TYPE + 1} characters, the most is {MAX_MEDIA_TYPE}")
    assert stream.status_code == 400 and stream.json()["error"]["data"]["field"] == "mediaType"
    assert max(map(len, _CACHE)) <= MAX_MEDIA_TYPE and parse_modality(longest).params == (("x", "a" * 242),)


async def test_a_streams_session_id_is_bounded_as_a_messages_is() -> None:
    """Session 15 (probe6, S15-12): `POST /streams` kept its `sessionId` (and `stream.sessionId` in a message's part
    was read) whatever its length: bob's 20 streams with a 10 MB session id each grew a gateway by 211 MB, and a client
    may hold a quarter of the 1,024 streams (256 x the 64 MiB body cap: ~16 GB). Now at most `ext.MAX_SESSION_ID`
    (256) characters, as a message's `session.id` (S15-7)."""
    from mma2a.ext import MAX_SESSION_ID

    bearer = {"Authorization": "Bearer bob-t", "A2A-Version": "1.0"}
    async with agents({"text": agent("text", ["text/plain"], echo=True)}) as urls:
        cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()],
               "auth": {"clients": [{"name": "bob", "token": "bob-t"}]}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            made = await c.post(url + "/streams", json={"mediaType": "audio/ogg", "sessionId": "s" * MAX_SESSION_ID},
                                headers=bearer)
            refused = [await c.post(url + "/streams", json={"mediaType": "audio/ogg", "sessionId": "s" * n},
                                    headers=bearer) for n in (MAX_SESSION_ID + 1, 10_000_000)]
            ref = {**made.json()["stream"], "sessionId": "s" * 1000}  # the gateway's own stream, a longer session
            part = {"text": "hi", "metadata": {EXTENSION_URI: {"stream": ref}}}
            sent = (await c.post(url + "/", headers=bearer, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                    "params": {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [part]}}})).json()
    assert made.status_code == 201 and made.json()["sessionId"] == "s" * MAX_SESSION_ID
    for answer, n in zip(refused, (MAX_SESSION_ID + 1, 10_000_000)):
        assert answer.status_code == 400, answer.text  # before: 201, the id kept with the stream
        assert answer.json()["error"]["message"] == f"sessionId: at most {MAX_SESSION_ID} characters, got {n}"
    assert sent["error"]["code"] == -32602, sent
    assert sent["error"]["message"] == (f"message.parts[0].metadata[{EXTENSION_URI}].stream.sessionId: at most "
                                        f"{MAX_SESSION_ID} characters, got 1000")
