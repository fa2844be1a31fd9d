"""Large REST bodies are read off the event loop (security round 4, finding 10 on REST): `POST /message:send` with a
26.7 MB body was value-counted, checked and parsed (`json_format.Parse`, then `MessageToDict`) on the loop, and held
another client's text message up to 0.6-1.9 s. Past `INLINE_PARSE_BYTES` the gate's check and the SDK's read of the
body run in the JSON body worker; every answer a REST client gets is the one it got before, byte for byte."""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any

import httpx
import orjson
import pytest
from a2a.types import SendMessageRequest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st

from mma2a.errors import InvalidRequest, MMA2AError, PayloadTooLarge
from mma2a.gateway.bindings.body_parser import INLINE_PARSE_BYTES, JSONBodyParser
from mma2a.request_body import MAX_JSON_VALUES
from mma2a.sdk_requests import MAX_STRUCT_BYTES, SET_ASIDE_BYTES, canonical_base64, send_request_json
from tests.security.conftest import PNG_1PX, TOKEN, bearer, secured

REST = {**bearer(TOKEN), "Content-Type": "application/json"}
PAD = b"p" * (INLINE_PARSE_BYTES + 1)


def message(mid: str, **over: Any) -> dict[str, Any]:
    return {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": "hi"}], **over}


def padded(body: bytes) -> bytes:
    """The same request past the inline limit: an unknown top-level field (which the SDK's parse ignores) in an
    object, trailing white space after anything else."""
    if body.endswith(b"}"):
        return body[:-1] + b',"pad":"' + PAD + b'"}'
    return body + b" " * len(PAD)


# requests the SDK's REST binding refuses (or serves), each as bytes: the small and the padded form must answer alike
REFUSED = {
    "required field missing": orjson.dumps({"message": {"role": "ROLE_USER", "parts": [{"text": "hi"}]}}),
    "no parts": orjson.dumps({"message": message("m-np", parts=[])}),
    "unknown role": orjson.dumps({"message": message("m-role", role="ROLE_NOBODY")}),
    "raw not base64": orjson.dumps({"message": message("m-b64", parts=[{"raw": "Q", "mediaType": "image/png"}])}),
    "messageId a number": orjson.dumps({"message": message("m-num", messageId=[5])}),
    "duplicate key": b'{"message": {"messageId": "m-dup", "messageId": "again", "role": "ROLE_USER", '
                     b'"parts": [{"text": "hi"}]}}',
    "message not an object": b'{"message": "hello"}',
    "a JSON list": b'[{"message": 1}]',
    "push config in send": orjson.dumps({"message": message("m-push"), "configuration": {
        "taskPushNotificationConfig": {"url": "https://example.com/hook"}}}),
}


def reference(body: bytes) -> tuple[Any, ...]:
    """What the SDK's REST binding and the gateway's handler make of a body, read on the loop as before."""
    try:
        params = SendMessageRequest()
        json_format.Parse(body, params, ignore_unknown_fields=True)
        return ("ok", *send_request_json(params))
    except Exception as exc:  # noqa: BLE001 (the refusal's class and text are what is compared)
        return outcome(exc)


def outcome(exc: BaseException) -> tuple[Any, ...]:
    if isinstance(exc, MMA2AError):
        return type(exc).__name__, exc.message, exc.field
    return type(exc).__name__, str(exc), getattr(exc, "data", None)


def with_raw(raw: str, **over: Any) -> bytes:
    parts = [{"text": "t"}, {"raw": raw, "mediaType": "image/png"}]
    return orjson.dumps({"message": {**message("m-raw", parts=parts), **over}})


BIG = base64.b64encode(os.urandom(3 * SET_ASIDE_BYTES + 1)).decode()  # canonical, padded
RAW_BODIES = [
    with_raw(BIG), with_raw(BIG[:-4]),  # canonical (the shortcut)
    with_raw(BIG.replace("+", "-").replace("/", "_")), with_raw(BIG.rstrip("=")), with_raw(BIG[:2000] + "\n" + BIG[2000:]),
    with_raw(BIG[:-3] + "B=="[-3:] if BIG.endswith("=") else BIG[:-1] + "B"),  # unused bits set: not canonical
    with_raw(BIG[:-4] + "Q"),  # cannot decode: the SDK's ParseError
    with_raw(BIG, role="ROLE_NOBODY"), with_raw(BIG, parts=[{"raw": BIG, "text": "both"}]),  # refused beside it
    b'{"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"raw": "' + BIG.encode() + b'", "raw": "AAAA"}]}}',
]


@given(st.binary(max_size=64))
def test_canonical_base64_is_what_the_sdk_gives_back_unchanged(data: bytes) -> None:
    text = base64.b64encode(data).decode()
    assert canonical_base64(text)
    for other in (text.replace("+", "-"), text.rstrip("="), text + "====", " " + text, text[:-1] + "B"):
        if other == text:
            continue
        try:
            back = base64.b64encode(base64.urlsafe_b64decode(other.encode() + b"=" * (4 - len(other) % 4))).decode()
        except (binascii.Error, ValueError):
            back = None
        assert canonical_base64(other) == (back == other), other


async def test_the_worker_reads_a_send_body_as_the_sdk_does() -> None:
    bodies = [*REFUSED.values(), *RAW_BODIES, orjson.dumps({"message": message("m-ok", parts=[
        {"raw": PNG_1PX, "mediaType": "image/png", "metadata": {"k": [1, 2.5, None, True]}},
        {"data": {"x": {"y": [1, "z"]}}}, {"url": "https://example.com/a.png", "filename": "a.png"}],
        metadata={"m": 1}), "configuration": {"acceptedOutputModes": ["text/plain"], "historyLength": 3},
        "metadata": {"top": "level"}, "unknown": {"ignored": True}})]
    worker = JSONBodyParser(64, inline_bytes=0)
    try:
        for body in bodies:
            try:
                got: tuple[Any, ...] = ("ok", *await worker.read_send(body))
            except Exception as exc:  # noqa: BLE001
                got = outcome(exc)
            assert got == reference(body), body[:60]
    finally:
        await worker.close()


async def test_the_gate_refuses_a_large_body_from_the_worker_as_it_did() -> None:
    broken = b'{"message": {"messageId": "m", "parts": [}' + b" " * INLINE_PARSE_BYTES
    many = b'{"message": {"metadata": {"a": [' + b",".join([b"{}"] * (MAX_JSON_VALUES // 2 + 10)) + b"]}}}"
    worker = JSONBodyParser(64, inline_bytes=0)
    try:
        with pytest.raises(InvalidRequest) as not_json:
            await worker.check(broken)
        with pytest.raises(InvalidRequest) as too_many:
            await worker.check(many)
        await worker.check(b"")  # the binding answers an empty body
        await worker.check(padded(REFUSED["unknown role"]))
    finally:
        await worker.close()
    try:
        orjson.loads(broken)
    except orjson.JSONDecodeError as exc:
        assert not_json.value.message == f"request body is not valid JSON: {exc}" and not_json.value.field == "body"
    n = many.count(b",") + many.count(b"{") + many.count(b"[")
    assert too_many.value.message.startswith(f"request body has {n} commas and opening brackets")


async def answers(c: httpx.AsyncClient, url: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    r = await c.post(url + path, content=body, headers=headers)
    if r.headers["content-type"].startswith("text/event-stream"):
        return r.status_code, "stream"
    try:
        doc = r.json()
    except ValueError:  # the SDK's v0.3 stream refused mid-way: a plain 500
        return r.status_code, r.text
    if "task" in doc:  # served: its ids and times are its own
        return r.status_code, {"task": doc["task"]["status"]["state"]}
    return r.status_code, doc


async def test_large_rest_bodies_get_the_answers_small_ones_get() -> None:
    v1 = {**REST, "A2A-Version": "1.0"}
    async with secured({"max_body_bytes": 4 << 20}) as (gw, url, _):
        async with httpx.AsyncClient(timeout=60) as c:
            for path in ("/message:send", "/message:stream", "/agents/text/message:send"):
                for name, body in REFUSED.items():
                    small = await answers(c, url, path, body, v1)
                    large = await answers(c, url, path, padded(body), v1)
                    assert small == large, (path, name)
                    assert 400 <= small[0] < 500, (path, name, small)
                # no A2A-Version: a 0.3 request on a 1.0 route, refused before the body is read
                old = orjson.dumps({"message": message(f"m-old{path}")})
                assert await answers(c, url, path, old, REST) == await answers(c, url, path, padded(old), REST)
                for mid, parts in (("plain", [{"text": "hi"}]), ("lenient", [{"raw": "aGk@=", "mediaType": "text/plain"}])):
                    small_ok = await answers(c, url, path, orjson.dumps({"message": message(f"s{mid}{path}",
                                                                                            parts=parts)}), v1)
                    large_ok = await answers(c, url, path, padded(orjson.dumps({"message": message(
                        f"l{mid}{path}", parts=parts)})), v1)
                    assert small_ok == large_ok
                    assert small_ok[1] in ("stream", {"task": "TASK_STATE_COMPLETED"})
            assert gw._body_parser.worker_pid is not None  # the large ones went through the worker


async def test_large_rest_bodies_are_refused_with_the_exact_error() -> None:
    v1 = {**REST, "A2A-Version": "1.0"}
    broken = b'{"message": {"messageId": "m", "parts": [}' + b" " * INLINE_PARSE_BYTES
    many = b'{"message": {"metadata": {"a": [' + b",".join([b"{}"] * (MAX_JSON_VALUES // 2 + 10)) + b"]}}}"
    big_struct = orjson.dumps({"message": message("m-struct", metadata={"blob": "x" * (MAX_STRUCT_BYTES + 10)})})
    size = json_format.Parse(big_struct, SendMessageRequest()).message.metadata.ByteSize()  # its bytes on the wire
    async with secured({"max_body_bytes": 4 << 20}) as (gw, url, _):
        async with httpx.AsyncClient(timeout=60) as c:
            for path in ("/message:send", "/message:stream"):
                oversize = await c.post(url + path, content=b"{" + b" " * (4 << 20) + b"}", headers=v1)
                assert oversize.status_code == 413
                assert oversize.json() == PayloadTooLarge(
                    f"request body exceeds {4 << 20} bytes; send large media by reference (POST /blobs)").to_rest()
                not_json = await c.post(url + path, content=broken, headers=v1)
                try:
                    orjson.loads(broken)
                except orjson.JSONDecodeError as exc:
                    assert not_json.status_code == 400
                    assert not_json.json() == InvalidRequest(f"request body is not valid JSON: {exc}",
                                                             field="body").to_rest()
                too_many = await c.post(url + path, content=many, headers=v1)
                n = many.count(b",") + many.count(b"{") + many.count(b"[")
                assert too_many.status_code == 400 and too_many.json() == InvalidRequest(
                    f"request body has {n} commas and opening brackets (about one JSON value each), the most is "
                    f"{MAX_JSON_VALUES}; send large data by reference (POST /blobs)", field="body").to_rest()
                struct = await c.post(url + path, content=big_struct, headers=v1)
                assert struct.status_code == 400
                err = struct.json()["error"]
                assert err["status"] == "INVALID_ARGUMENT" and err["message"] == (
                    f"message.metadata: the request's metadata, data and configuration take "
                    f"{size} bytes, the most is {MAX_STRUCT_BYTES}; send large data by reference "
                    "(POST /blobs)")
                assert err["details"][0]["reason"] == "INVALID_PARAMS"
                assert err["details"][0]["metadata"] == {"field": "message.metadata"}


async def test_a_refused_large_body_is_not_kept_after_its_answer() -> None:
    """The SDK's traced wrappers keep a refusal in a cycle through its traceback, which held the request's frames (its
    body, the message read from it) until the collector ran: three rounds of three 26.7 MB bodies, +533 MB."""
    import gc
    import types

    from mma2a.gateway.access.security import AccessControl
    from mma2a.request_body import READ_BODY

    from mma2a.gateway.bindings.sdk_binding import LargeBodyRestDispatcher

    # frames that hold the body or the message read from it while the route answers
    body_frames = {AccessControl._checked.__code__, JSONBodyParser.read_send_answer.__code__,
                   LargeBodyRestDispatcher._read.__code__, LargeBodyRestDispatcher._request.__code__,
                   LargeBodyRestDispatcher._send.__wrapped__.__code__,
                   LargeBodyRestDispatcher._send_stream.__wrapped__.__code__}

    v1 = {**REST, "A2A-Version": "1.0"}
    refused = padded(orjson.dumps({"message": message("m-kept", parts=[{"raw": "Q", "mediaType": "image/png"}])}))
    async with secured({"max_body_bytes": 4 << 20}) as (gw, url, _):
        async with httpx.AsyncClient(timeout=60) as c:
            await c.post(url + "/message:send", content=refused, headers=v1)  # warm: the SDK's stack loaded
            gc.collect()
            gc.disable()  # garbage in a cycle stays findable
            try:
                for path in ("/message:send", "/message:stream"):
                    answer = await c.post(url + path, content=refused, headers=v1)
                    assert answer.status_code == 400
                live = gc.get_objects()
                kept = [(o.get("path"), o.get("method")) for o in live if isinstance(o, dict) and READ_BODY in o]
                frames = [o.f_code.co_name for o in live if isinstance(o, types.FrameType) and o.f_code in body_frames]
                del live
            finally:
                gc.enable()
    assert kept == [] and frames == []


async def test_a_refused_small_body_is_freed_with_its_answer_on_every_body_route() -> None:
    """The same cycle held refused bodies up to 1 MiB (the SDK's own endpoints, which read them) until the collector
    ran, on the 1.0 routes (send, stream, push config) and the v0.3 ones: each is now freed with its answer."""
    import gc

    from mma2a.request_body import ReadRequest

    v1, v03 = {**REST, "A2A-Version": "1.0"}, {**REST, "A2A-Version": "0.3"}
    small = orjson.dumps({"message": message("m-small", parts=[{"raw": "Q", "mediaType": "image/png"}]),
                          "pad": "p" * 200_000})
    cases = [("/message:send", small, v1), ("/message:stream", small, v1),
             ("/tasks/t-none/pushNotificationConfigs", b'{"url": 5, "pad": "' + b"p" * 200_000 + b'"}', v1),
             ("/tasks/t-none/pushNotificationConfigs", b'{"url": "https://example.com/h"}', v1),
             ("/v1/message:send", b'{"message": {"messageId": 5}, "pad": "' + b"p" * 200_000 + b'"}', v03),
             ("/v1/tasks/t-none/pushNotificationConfigs", b'{"config": 5}', v03)]
    async with secured({"max_body_bytes": 4 << 20}) as (gw, url, _):
        async with httpx.AsyncClient(timeout=60) as c:
            for path, body, headers in cases:  # warm: the SDK's stack loaded, each route once
                await c.post(url + path, content=body, headers=headers)
            gc.collect()
            gc.disable()  # garbage in a cycle stays findable
            try:
                statuses = [(await c.post(url + path, content=body, headers=headers)).status_code
                            for path, body, headers in cases]
                live = gc.get_objects()
                kept = [o.url.path for o in live if isinstance(o, ReadRequest)]
                del live
            finally:
                gc.enable()
    assert all(400 <= s < 500 for s in statuses), statuses
    assert kept == []


def v03_message(mid: str, **over: Any) -> dict[str, Any]:
    return {"messageId": mid, "role": "ROLE_USER", "content": [{"text": "hi"}], **over}  # v0.3's proto JSON


async def test_large_v03_and_push_config_bodies_are_read_off_the_loop_and_answered_as_small_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The v0.3 REST send/stream routes and the push-config POSTs (1.0 and v0.3): the gate checked a large body in the
    worker but the SDK parsed it on the loop (`json_format.Parse`, then v0.3's types). Past 1 MiB the worker reads it
    now; every answer equals the one the small body gets from the SDK's own endpoint, and no body past 1 MiB reaches
    the SDK's `Parse` in the gateway's process (before: every padded body here did)."""
    from a2a.compat.v0_3 import rest_handler as v03_rest
    from a2a.server.routes import rest_dispatcher

    parsed: list[int] = []
    for module in (rest_dispatcher, v03_rest):
        real = module.Parse

        def recording(text: Any, *a: Any, _real: Any = real, **kw: Any) -> Any:
            parsed.append(len(text))
            return _real(text, *a, **kw)

        monkeypatch.setattr(module, "Parse", recording)
    v1, v03 = {**REST, "A2A-Version": "1.0"}, {**REST, "A2A-Version": "0.3"}
    sends = {"ok": orjson.dumps({"message": v03_message("m-v03")}),
             "no message id": orjson.dumps({"message": v03_message("")}),
             "no content": orjson.dumps({"message": v03_message("m-nc", content=[])}),
             "unknown role": orjson.dumps({"message": v03_message("m-r", role="ROLE_NOBODY")}),
             "messageId a list": orjson.dumps({"message": v03_message("m-l", messageId=[5])}),
             "bytes not base64": orjson.dumps({"message": v03_message("m-b", content=[
                 {"file": {"fileWithBytes": "Q", "mimeType": "image/png"}}])}),
             "a JSON list": b'[{"message": 1}]'}
    pushes = {"url a number": b'{"url": 5}', "unknown task": b'{"url": "https://example.com/hook"}',
              "token a list": b'{"url": "https://example.com/hook", "token": [1]}'}
    pushes03 = {"config a number": b'{"config": 5}', "unknown task": orjson.dumps(
        {"parent": "tasks/t-none", "configId": "c1", "config": {"pushNotificationConfig": {"url": "https://example.com/h"}}})}
    got = {}
    async with secured({"max_body_bytes": 4 << 20, "urls": {"allow_hosts": ["127.0.0.1:9"]}}) as (gw, url, _):
        async with httpx.AsyncClient(timeout=60) as c:
            for path in ("/v1/message:send", "/v1/message:stream"):
                for name, body in sends.items():
                    got[path, name] = (await answers(c, url, path, body, v03),
                                       await answers(c, url, path, padded(body), v03))
                got[path, "1.0 version"] = (await answers(c, url, path, sends["ok"], v1),
                                            await answers(c, url, path, padded(sends["ok"]), v1))
            sent = await c.post(url + "/message:send", content=orjson.dumps({"message": message("m-task")}), headers=v1)
            tid = sent.json()["task"]["id"]
            pushes["ok"] = orjson.dumps({"id": "c1", "url": "http://127.0.0.1:9/hook", "token": "t"})
            pushes03["ok"] = orjson.dumps({"parent": f"tasks/{tid}", "configId": "c2", "config": {
                "pushNotificationConfig": {"id": "c2", "url": "http://127.0.0.1:9/hook"}}})
            for path, cases, headers in (("/tasks/TID/pushNotificationConfigs", pushes, v1),
                                         ("/v1/tasks/TID/pushNotificationConfigs", pushes03, v03)):
                for name, body in cases.items():
                    at = path.replace("TID", tid if name == "ok" else "t-none")
                    got[path, name] = (await answers(c, url, at, body, headers),
                                       await answers(c, url, at, padded(body), headers))
    for key, (small, large) in got.items():
        assert small == large, key
    assert got["/v1/message:send", "ok"][0][0] == 200 and got["/v1/message:stream", "ok"][0][1] == "stream"
    refused = ["no message id", "no content", "messageId a list", "bytes not base64", "a JSON list", "1.0 version"]
    assert [got["/v1/message:send", name][0][0] for name in refused] == [400] * len(refused)  # 1.0 version: first
    assert all(400 <= small[0] < 500 for key, (small, _) in got.items() if "pushNotificationConfigs" in key[0]
               and key[1] != "ok")
    assert got["/tasks/TID/pushNotificationConfigs", "ok"][0][0] == 200, got["/tasks/TID/pushNotificationConfigs", "ok"]
    assert got["/v1/tasks/TID/pushNotificationConfigs", "ok"][0][0] == 200, got["/v1/tasks/TID/pushNotificationConfigs", "ok"]
    assert parsed and max(parsed) <= INLINE_PARSE_BYTES


def empties(n: int) -> dict[str, Any]:
    """Message metadata of `n` empty objects (3 bytes each in JSON, 4 on the protobuf wire)."""
    return {"a": [{} for _ in range(n)]}


def test_a_body_of_many_values_is_read_in_the_worker_however_small() -> None:
    from mma2a.gateway.bindings.body_parser import INLINE_SDK_VALUES

    parser = JSONBodyParser(64)
    assert parser.inline(b"{}" * (INLINE_SDK_VALUES // 2)) and parser.inline(b"x" * INLINE_PARSE_BYTES)
    assert parser.inline(b"," * INLINE_SDK_VALUES) and not parser.inline(b"," * (INLINE_SDK_VALUES + 1))
    assert not parser.inline(b" " * (INLINE_PARSE_BYTES + 1))


async def test_a_small_body_of_many_values_is_read_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Security probe S16-2: the SDK's reads of a request (`json_format`'s `Parse`/`ParseDict`, then `MessageToDict`,
    pure Python, ~5 us a JSON value) ran on the event loop for every body up to 1 MiB, which was taken as cheap: a
    786 KB REST body of 262,000 empty objects held every client 1.2 s, refused or not (the struct bound is checked
    after the parse); JSON-RPC's SendStreamingMessage likewise. Such a body is now read in the worker: answered as
    before (served; the struct bound's refusal, exact), and never parsed by the SDK in the gateway's process."""
    import sys

    from a2a.server.routes import jsonrpc_dispatcher, rest_dispatcher

    from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
    from a2a.server.routes.rest_dispatcher import RestDispatcher

    from mma2a.gateway.bindings.sdk_binding import LargeBodyJsonRpcDispatcher, LargeBodyRestDispatcher

    parsed: list[int] = []  # what the gateway's SDK dispatchers parsed (not the agents' behind it)
    for module, name in ((rest_dispatcher, "Parse"), (jsonrpc_dispatcher, "ParseDict")):
        real = getattr(module, name)

        def recording(doc: Any, *a: Any, _real: Any = real, **kw: Any) -> Any:
            caller = sys._getframe(1)  # up to the dispatcher's frame: the gateway's, or an agent's
            while caller.f_back is not None and not isinstance(caller.f_locals.get("self"), (
                    JsonRpcDispatcher, RestDispatcher)):
                caller = caller.f_back
            if isinstance(caller.f_locals.get("self"), (LargeBodyJsonRpcDispatcher, LargeBodyRestDispatcher)):
                parsed.append(len(doc) if isinstance(doc, (str, bytes)) else len(orjson.dumps(doc)))
            return _real(doc, *a, **kw)

        monkeypatch.setattr(module, name, recording)
    v1 = {**REST, "A2A-Version": "1.0"}
    many = orjson.dumps({"message": message("m-many", metadata=empties(20_000))})  # 60 KB
    over = 262_145  # past MAX_STRUCT_BYTES on the wire, 786 KB of JSON
    refused = orjson.dumps({"message": message("m-over", metadata=empties(over))})
    size = json_format.Parse(refused, SendMessageRequest()).message.metadata.ByteSize()
    stream = orjson.dumps({"jsonrpc": "2.0", "id": 3, "method": "SendStreamingMessage",
                           "params": {"message": message("m-stream", metadata=empties(20_000))}})
    async with secured() as (gw, url, _):
        async with httpx.AsyncClient(timeout=60) as c:
            served = await answers(c, url, "/message:send", many, v1)
            struct = await c.post(url + "/message:send", content=refused, headers=v1)
            streamed = await c.post(url + "/", content=stream, headers={**v1, "Accept": "text/event-stream"})
            small = await answers(c, url, "/message:send", orjson.dumps({"message": message("m-few")}), v1)
        worker = gw._body_parser.worker_pid
    assert served == small == (200, {"task": "TASK_STATE_COMPLETED"})
    assert struct.status_code == 400 and struct.json()["error"]["message"] == (
        f"message.metadata: the request's metadata, data and configuration take {size} bytes, the most is "
        f"{MAX_STRUCT_BYTES}; send large data by reference (POST /blobs)")
    assert streamed.status_code == 200 and "TASK_STATE_COMPLETED" in streamed.text
    assert worker is not None and parsed and max(parsed) < 1000, parsed  # m-few's, the stream's stub (before: m-many's
    # 60,080 bytes, m-over's 786,099, the stream's 60,2xx)
