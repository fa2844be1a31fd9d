"""Large JSON bodies are parsed in a worker process (security round 4, finding 10's remainder): three 26.7 MB bodies
parsed and value-counted on the event loop held another client's text message up to ~250 ms. Whichever side of the
inline limit a body is, the document and every refusal are the same."""

from __future__ import annotations

import base64
import os
import signal

import httpx
import orjson
import pytest

from mma2a import json_worker, sdk_requests
from mma2a.errors import InvalidRequest, MMA2AError, ParseError
from mma2a.gateway.bindings.body_parser import INLINE_PARSE_BYTES, JSONBodyParser, WorkerLane
from mma2a.request_body import MAX_JSON_VALUES
from tests.security.conftest import PNG_1PX, TOKEN, bearer, secured, send_body

BODIES = [
    b'{"jsonrpc":"2.0","id":1,"params":{"a":[1,2.5,"x",null,true,{"b":[]}]}}',  # a document
    b"[" + b"," * MAX_JSON_VALUES + b"]",  # too many values (refused before it is parsed)
    b'{"a": [1, 2,,]}',  # not JSON
    b"[" * 1100 + b"]" * 1100,  # nests past orjson's limit
    b"[" * 500 + b"]" * 500,  # within it: the worker pickles it back (S15-10: it stopped there)
]


def outcome(result: tuple[object, ...] | MMA2AError) -> tuple[object, ...]:
    if isinstance(result, MMA2AError):
        return type(result), result.message, result.field
    return result


async def test_the_worker_answers_as_the_inline_parse_for_every_body_and_refusal() -> None:
    inline, worker = JSONBodyParser(64), JSONBodyParser(64, inline_bytes=0)
    try:
        for body in BODIES:
            answers = []
            for parser in (inline, worker):
                try:
                    answers.append(outcome(await parser.parse(body)))
                except MMA2AError as exc:
                    answers.append(outcome(exc))
            assert answers[0] == answers[1], body[:40]
        assert inline.worker_pid is None  # small bodies never start it
        pid = worker.worker_pid
        assert pid is not None and pid != os.getpid()
    finally:
        await worker.close()
    assert worker.worker_pid is None
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # exited and reaped


async def test_the_refusals_are_the_ones_the_client_reads() -> None:
    worker = JSONBodyParser(64, inline_bytes=0)
    try:
        with pytest.raises(InvalidRequest) as many:
            await worker.parse(BODIES[1])
        with pytest.raises(ParseError) as broken:
            await worker.parse(BODIES[2])
        with pytest.raises(InvalidRequest) as deep:
            await worker.parse(BODIES[3])
    finally:
        await worker.close()
    assert many.value.field == "body" and many.value.message.startswith(
        f"request body has {MAX_JSON_VALUES + 1} commas and opening brackets")
    assert broken.value.message.startswith("request body is not valid JSON: ")
    assert deep.value.message == "request body nests deeper than 64 levels" and deep.value.field == "body"


async def test_a_killed_worker_is_replaced_and_the_body_still_parsed() -> None:
    worker = JSONBodyParser(64, inline_bytes=0)
    try:
        assert await worker.parse(b"[1]") == ([1], None, None)  # small: not counted
        pid = worker.worker_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert await worker.parse(b'{"a": 2}') == ({"a": 2}, None, None)
        assert worker.worker_pid not in (None, pid)
    finally:
        await worker.close()


async def test_a_large_body_on_json_rpc_is_served_or_refused_as_a_small_one() -> None:
    big_png = {"raw": PNG_1PX, "mediaType": "image/png",
               "metadata": {"pad": base64.b64encode(os.urandom(INLINE_PARSE_BYTES)).decode()}}
    broken = orjson.dumps(send_body("m-big", [big_png]))[:-1]  # cut: not JSON
    async with secured({"max_body_bytes": 8 << 20}) as (gw, url, _):
        async with httpx.AsyncClient(timeout=60) as c:
            served = await c.post(url + "/", json=send_body("m-big", [big_png]), headers=bearer(TOKEN))
            cut = await c.post(url + "/", content=broken, headers=bearer(TOKEN))
            small_cut = await c.post(url + "/", content=orjson.dumps(send_body("m-small"))[:-1], headers=bearer(TOKEN))
    assert len(broken) > INLINE_PARSE_BYTES
    task = served.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    for answer in (cut, small_cut):
        err = answer.json()["error"]
        assert answer.status_code == 200 and err["code"] == -32700
        assert err["message"].startswith("request body is not valid JSON: unexpected end of data")


async def test_a_large_body_nested_within_orjsons_limit_is_refused_by_its_depth_not_the_workers_end(
        caplog: pytest.LogCaptureFixture) -> None:
    """Session 15 (probe6, S15-10): a JSON-RPC body past the inline limit nested 500 deep (within orjson's 1,024) was
    parsed in the worker, then pickled back with Python's recursion limit of 1,000: `RecursionError`, the worker
    process stopped, the request got `-32600 the gateway could not parse the request body (its parser process
    stopped); retry` and the next large body a new worker process. Now the worker pickles any document orjson reads,
    and the body is refused for its depth as a small one is."""
    deep = "[" * 500 + "]" * 500
    pad = "a" * INLINE_PARSE_BYTES
    bodies = [f'{{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{{"message":{{"messageId":"m-{i}","role":'
              f'"ROLE_USER","parts":[{{"text":"hi"}}]}},"x":{deep},"pad":"{pad}"}}}}'.encode() for i in range(2)]
    async with secured({"max_body_bytes": 8 << 20}) as (gw, url, _):
        async with httpx.AsyncClient(timeout=60) as c:
            answers = [await c.post(url + "/", content=body, headers=bearer(TOKEN)) for body in bodies]
    for answer in answers:
        err = answer.json()["error"]
        assert err["code"] == -32602, err  # before: -32600 … (its parser process stopped); retry …
        assert err["message"].endswith(": nested deeper than 64 levels (A2A agents parse at most about 100)"), err
        assert err["message"].startswith("params.x[0][0]")
    assert "the JSON body worker process stopped" not in caplog.text


async def test_large_sdk_jsonrpc_sends_are_read_off_the_loop_and_answered_as_small_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SendStreamingMessage (and every 1.0 method past the fast path, push configs included, and v0.3's sends) is
    answered by the SDK's JSON-RPC dispatcher, which parsed the whole body again on the loop (`json.loads`, then
    `ParseDict` of the params or v0.3's pydantic model): the chunk-walk PNGs sent that way held another client's text
    up to 1.9 s. Past 1 MiB the worker reads it now; every answer equals the small body's, and nothing past 1 MiB
    reaches the dispatcher's `ParseDict` or v0.3's model in the gateway's process."""
    import json

    from a2a.server.routes import jsonrpc_dispatcher

    seen: list[int] = []
    real = jsonrpc_dispatcher.ParseDict

    def recording(js: object, *a: object, **kw: object) -> object:
        seen.append(len(json.dumps(js)))
        return real(js, *a, **kw)

    monkeypatch.setattr(jsonrpc_dispatcher, "ParseDict", recording)
    from a2a.compat.v0_3.jsonrpc_adapter import JSONRPC03Adapter

    for v03_method in ("message/send", "message/stream"):  # v0.3's adapter validates the whole request
        model = JSONRPC03Adapter.METHOD_TO_MODEL[v03_method]

        class Recording:
            @staticmethod
            def model_validate(doc: object, _model: object = model) -> object:
                seen.append(len(json.dumps(doc)))
                return _model.model_validate(doc)  # type: ignore[attr-defined]

        monkeypatch.setitem(JSONRPC03Adapter.METHOD_TO_MODEL, v03_method, Recording)
    pad = "p" * (INLINE_PARSE_BYTES + 10)

    def body(method: str, params: object, **members: object) -> tuple[bytes, bytes]:
        small = {"jsonrpc": "2.0", "id": "r1", "method": method, "params": params, **members}
        large = {**small, "params": {**params, "pad": pad}} if isinstance(params, dict) else {**small, "x": pad}
        return orjson.dumps(small), orjson.dumps(large)

    msg = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    msg03 = {"kind": "message", "messageId": "m-3", "role": "user", "parts": [{"kind": "text", "text": "hi"}]}
    cases = {
        "served": body("SendStreamingMessage", {"message": msg}),
        "SendMessage spelled with proto field names": body("SendMessage", {"message": {
            "message_id": "m-2", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}),
        "no message id": body("SendStreamingMessage", {"message": {**msg, "messageId": ""}}),
        "messageId a list": body("SendStreamingMessage", {"message": {**msg, "messageId": [5]}}),
        "unknown tenant": body("SendStreamingMessage", {"message": msg, "tenant": "nope"}),
        "an extra member": body("SendStreamingMessage", {"message": msg}, extra=1),
        "an extra member, bad params": body("SendStreamingMessage", {"message": {**msg, "role": 5.5}}, extra=1),
        "push config, unknown task": body("CreateTaskPushNotificationConfig", {"taskId": "t-none",
                                                                              "url": "https://example.com/h"}),
        "push config, url a number": body("CreateTaskPushNotificationConfig", {"taskId": "t-none", "url": 5}),
        "v0.3 send": body("message/send", {"message": msg03}),
        "v0.3 stream": body("message/stream", {"message": msg03}),
        "v0.3 send, role unknown": body("message/send", {"message": {**msg03, "role": "nobody"}}),
        "v0.3 send, an extra member": body("message/send", {"message": msg03}, extra=1),
    }
    jobs: list[int] = []  # each exchange with the JSON body worker: one per large body, parsed there once
    exchange = WorkerLane._exchange

    def counted(self: WorkerLane, data: bytes, job: int) -> object:
        jobs.append(job)
        return exchange(self, data, job)

    monkeypatch.setattr(WorkerLane, "_exchange", counted)
    got = {}
    async with secured({"max_body_bytes": 8 << 20}) as (gw, url, _):
        async with httpx.AsyncClient(timeout=60) as c:
            for name, (small, large) in cases.items():
                answers = []
                for data, version in ((small, "1.0"), (large, "1.0"), (small, "0.3"), (large, "0.3")):
                    del jobs[:]
                    r = await c.post(url + "/", content=data, headers={**bearer(TOKEN), "A2A-Version": version})
                    assert jobs == ([] if data is small else [json_worker.RPC if version == "1.0" else json_worker.RPC_SDK]), \
                        (name, version)
                    text = r.text
                    if text.startswith("data:"):  # a stream: the kinds of its events (their ids and times differ)
                        events = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
                        text = "stream: " + ",".join(next(iter(e["result"])) if "result" in e else "error"
                                                     for e in events)
                    elif '"result"' in text:  # served: what it is, not its ids and times
                        result = json.loads(text)["result"]
                        text = "result: " + str(result.get("kind") or next(iter(result)))
                    answers.append((r.status_code, text))
                got[name] = answers
    for name, (small, large, small03, large03) in got.items():
        assert small == large and small03 == large03, name
    assert got["served"][0][1].startswith("stream: ")
    assert '"code":-32602' in got["messageId a list"][0][1] and "parseError" in got["messageId a list"][0][1]
    assert '"code":-32600' in got["an extra member"][0][1] and "Extra fields" in got["an extra member"][0][1]
    assert got["an extra member, bad params"][0] == got["an extra member"][0]  # the members checked first
    assert got["v0.3 send"][2][1] == "result: task" and got["v0.3 stream"][2][1].startswith("stream: ")
    assert "error" not in got["v0.3 stream"][2][1]
    assert '"code":-32600' in got["v0.3 send, role unknown"][2][1] and "role" in got["v0.3 send, role unknown"][2][1]
    assert '"code":-32001' in got["push config, unknown task"][0][1]
    assert '"code":-32602' in got["push config, url a number"][0][1] and "parseError" in got["push config, url a number"][0][1]
    assert seen and max(seen) <= INLINE_PARSE_BYTES


@pytest.mark.parametrize("wide", [False, True])
def test_a_large_jsonrpc_body_is_parsed_once_in_the_worker_for_the_ingress_and_the_sdk(
        monkeypatch: pytest.MonkeyPatch, wide: bool) -> None:
    """The worker's job for a large JSON-RPC body the SDK's dispatcher answers (`json_worker.read_rpc_as_data`, run
    here in process): one `orjson.loads` serves the ingress's checks and the dispatcher's read, which is the one
    `read_jsonrpc_as_data` (a `json.loads` of its own) gave. An integer past 64 bits, which orjson reads as a float
    and `json.loads` whole, is read with `json.loads` (`wide`), as the dispatcher reads it."""
    import json

    msg = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}],
           "metadata": {"n": 123456789012345678901234 if wide else 12, "x": 2.5}}
    body = json.dumps({"jsonrpc": "2.0", "id": "r1", "method": "SendStreamingMessage",
                       "params": {"message": msg, "tenant": "t", "pad": "p" * 4096}}).encode()
    expected = sdk_requests.read_jsonrpc_as_data(body)
    calls = {"orjson": 0, "json": 0}
    real_orjson, real_json = orjson.loads, json.loads

    def counting_orjson(data: object) -> object:
        calls["orjson"] += 1
        return real_orjson(data)  # type: ignore[arg-type]

    def counting_json(data: object, **kw: object) -> object:
        calls["json"] += 1
        return real_json(data, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(orjson, "loads", counting_orjson)
    monkeypatch.setattr(json, "loads", counting_json)
    ok, doc, brackets, read = json_worker.run(json_worker.RPC, body, 64)
    assert calls == ({"orjson": 1, "json": 1} if wide else {"orjson": 1, "json": 0})
    assert ok is True and read == expected and read[0] == "read"
    assert doc == {"jsonrpc": "2.0", "id": "r1", "method": "SendStreamingMessage", "params": {"tenant": "t"}}
    assert brackets is None  # (a body under MAX_JSON_VALUES bytes is not counted)
    # a method the ingress answers itself is parsed for it alone, its document whole
    fast = body.replace(b"SendStreamingMessage", b"SendMessage")
    calls.update(orjson=0, json=0)
    ok, doc, _, read = json_worker.run(json_worker.RPC, fast, 64)
    assert (calls, read) == ({"orjson": 1, "json": 0}, None) and doc["params"]["message"]["messageId"] == "m-1"
    # ... unless the request's version, its proto field names or its id past 64 bits send it to the SDK's dispatcher
    ok, doc, _, read = json_worker.run(json_worker.RPC_SDK, fast, 64)
    assert read == sdk_requests.read_jsonrpc_as_data(fast) and doc["params"] == {"tenant": "t"}
    for sent in (fast.replace(b'"messageId"', b'"message_id"'), fast.replace(b'"id": "r1"', b'"id": 18446744073709551616')):
        ok, doc, _, read = json_worker.run(json_worker.RPC, sent, 64)
        assert read == sdk_requests.read_jsonrpc_as_data(sent) and read[0] == "read" and doc["params"] == {"tenant": "t"}


async def test_a_large_body_of_a_method_that_carries_no_media_is_refused_naming_the_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """v0.3's methods but its sends (and a method no binding knows) are read by the SDK whole, on the event loop
    (`json.loads`, then v0.3's pydantic models), wherever the body is: past 1 MiB (padding: they carry ids, a push
    config) such a body is refused, 413 and -32600 naming the limit, before anything reads it in the gateway's
    process; small ones are answered as before."""
    from starlette.requests import Request

    read: list[int] = []
    real = Request.json

    async def recording(self: Request) -> object:
        read.append(len(await self.body()))
        return await real(self)

    monkeypatch.setattr(Request, "json", recording)
    pad = "p" * (INLINE_PARSE_BYTES + 10)
    cases = [("tasks/get", "0.3", {"id": "t-none"}), ("tasks/pushNotificationConfig/set", "0.3",
              {"taskId": "t-none", "pushNotificationConfig": {"url": "https://example.com/h"}}),
             ("tasks/cancel", "0.3", {"id": "t-none"}), ("NoSuchMethod", "1.0", {})]
    async with secured({"max_body_bytes": 8 << 20}) as (gw, url, _):
        async with httpx.AsyncClient(timeout=60) as c:
            for method, version, params in cases:
                headers = {**bearer(TOKEN), "A2A-Version": version}
                small = await c.post(url + "/", headers=headers, json={"jsonrpc": "2.0", "id": 7, "method": method,
                                                                       "params": params})
                large = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": method,
                                      "params": {**params, "metadata": {"pad": pad}}})
                refused = await c.post(url + "/", headers=headers, content=large)
                assert small.status_code == 200 and "error" in small.json(), method  # (no such task; no such method)
                assert small.json()["error"]["code"] != -32600, method
                assert refused.status_code == 413, method
                err = refused.json()
                assert (err["id"], err["error"]["code"]) == (7, -32600), method
                assert err["error"]["message"] == (
                    f"request body of {len(large)} bytes exceeds {INLINE_PARSE_BYTES} bytes, the most a {method} "
                    "request may carry (only A2A 1.0's methods and v0.3's message/send and message/stream carry "
                    "more); send large media by reference (POST /blobs)"), method
                assert err["error"]["data"][0]["metadata"] == {"field": "body"}, method
            # an id past 64 bits sends the request to the SDK's dispatcher before its method is looked at: one that
            # names no method is refused past 1 MiB too
            nameless = b'{"jsonrpc":"2.0","id":123456789012345678901234,"method":5,"params":{"pad":"%s"}}'
            small = await c.post(url + "/", headers=bearer(TOKEN), content=nameless % b"p")
            large = nameless % pad.encode()
            refused = await c.post(url + "/", headers=bearer(TOKEN), content=large)
            assert small.status_code == 200 and small.json()["error"]["code"] == -32600
            assert refused.status_code == 413 and refused.json()["error"]["message"].startswith(
                f"request body of {len(large)} bytes exceeds {INLINE_PARSE_BYTES} bytes, the most a request that "
                "names no method may carry")
    assert read and max(read) <= INLINE_PARSE_BYTES  # the small ones were read by the SDK; no large one was
