"""Answers of many values are converted off the event loop (security probe S16-3): the SDK's bindings converted every
answer on the loop, in pure Python (`json_format.ParseDict` of the pipeline's JSON into the SDK's protobuf, then for
REST and the SDK's JSON-RPC dispatcher `MessageToDict`). A client stores a task cheaply through JSON-RPC's fast path
with 300,000 empty objects in its message's metadata; then each REST GetTask of it held every client 1.7 s, a gRPC
GetTask 1.1 s, a REST ListTasks 1.6 s, and an accepted 780 KB REST send 1.3-1.7 s (its answer holds the message).
An answer of more than `sdk_answers.INLINE_ANSWER_VALUES` values is now converted in the JSON body worker; every
answer is what the SDK made of it before, byte for byte."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import grpc
import grpc.aio
import httpx
import orjson
import pytest
from a2a.compat.v0_3 import conversions, rest_handler
from a2a.compat.v0_3 import proto_utils as v03_proto_utils
from a2a.server.routes import common, jsonrpc_dispatcher, rest_dispatcher
from a2a.server.routes.common import serialize_list_tasks_response
from a2a.types import GetTaskRequest, ListTasksResponse, Message, SendMessageResponse, StreamResponse, Task, a2a_pb2_grpc
from a2a.utils import proto_utils
from google.protobuf import json_format
from starlette.responses import JSONResponse

from mma2a import sdk_answers
from mma2a.request_body import json_values
from mma2a.sdk_answers import (
    DICT,
    EVENT,
    INLINE_ANSWER_VALUES,
    LIST,
    LIST_ARTIFACTS,
    LIST_TASKS,
    PROTO,
    SEND_RESPONSE,
    STREAM_EVENT,
    TASK,
    V03_DICT,
    V03_EVENT,
    V03_EVENT_DICT,
    V03_MODEL,
    convert,
    convert_as_data,
    job_body,
    many_values,
    raise_failure,
)
from tests.security.test_grpc_admission import grpc_gateway

V1 = {"A2A-Version": "1.0"}
MANY = 20_000  # empty objects in a message's metadata: 60 KB of JSON, ~10x INLINE_ANSWER_VALUES
_PARSE, _TO_DICT = json_format.ParseDict, json_format.MessageToDict  # the SDK's, before the test records them


def message(mid: str, n: int = 0) -> dict[str, Any]:
    return {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": "hi"}], "metadata": {"a": [{} for _ in range(n)]}}


def task_doc(n: int, **over: Any) -> dict[str, Any]:
    return {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_COMPLETED", "timestamp":
            "2026-12-05T19:00:00.123Z"}, "history": [message("m-1", n)], "metadata": {"x": 1.5, "n": None},
            "artifacts": [{"artifactId": "a-1", "parts": [{"text": "ok"}]}], **over}


# --- the conversion: the SDK's, wherever it runs ---------------------------------------------------------------------


def sdk_form(doc: Any, kind: int, mode: int, rendered: bool) -> Any:
    """What the SDK's bindings made of an answer before (their own expressions, sdk_binding and a2a.server.routes)."""
    proto = _PARSE(doc, sdk_answers.KINDS[kind](), ignore_unknown_fields=True)
    if mode == PROTO:
        return proto.SerializeToString()
    if mode in (V03_EVENT, V03_EVENT_DICT):  # (the SDK's v0.3 handlers: its request's id is set on the loop)
        which = proto.WhichOneof("payload")
        if which is None:
            return None
        result = conversions.to_compat_stream_response(proto_utils.to_stream_response(getattr(proto, which)), 7).result
        return result if mode == V03_EVENT else _TO_DICT(v03_proto_utils.ToProto.stream_response(result))
    if mode in (V03_MODEL, V03_DICT):
        inner = proto.message if kind == SEND_RESPONSE and proto.HasField("message") else (
            proto.task if kind == SEND_RESPONSE else proto)
        compat = (conversions.to_compat_message(inner) if isinstance(inner, Message)
                  else conversions.to_compat_task(inner))
        if mode == V03_MODEL:
            return compat
        to_proto = v03_proto_utils.ToProto.task_or_message if kind == SEND_RESPONSE else v03_proto_utils.ToProto.task
        content = _TO_DICT(to_proto(compat))
    elif mode == EVENT:
        which = proto.WhichOneof("payload")
        content = None if which is None else _TO_DICT(proto_utils.to_stream_response(getattr(proto, which)))
    elif mode == DICT:
        content = _TO_DICT(proto)
    else:
        content = serialize_list_tasks_response(proto, mode == LIST_ARTIFACTS)
    return JSONResponse(content).body if rendered and content is not None else content  # (no event is rendered)


def in_worker(doc: Any, kind: int, mode: int, rendered: bool) -> Any:
    many = many_values(doc)
    assert many is not None  # a document of many values, or one orjson cannot write: for the worker
    return raise_failure(convert_as_data(job_body(kind, mode, rendered, many[0])))


CASES = {
    "task": (task_doc(3000), TASK, DICT),
    "task with unknown fields": (task_doc(3000, unknown={"x": 1}), TASK, DICT),
    "send response": ({"task": task_doc(3000)}, SEND_RESPONSE, DICT),
    "message": (message("m-2", 3000), sdk_answers.MESSAGE, DICT),
    "page": ({"tasks": [task_doc(3000)], "nextPageToken": "", "pageSize": 1, "totalSize": 1}, LIST_TASKS, LIST),
    "page with artifacts": ({"tasks": [task_doc(3000)], "pageSize": 1, "totalSize": 1}, LIST_TASKS, LIST_ARTIFACTS),
    "event": ({"task": task_doc(3000)}, STREAM_EVENT, EVENT),
    "status event": ({"statusUpdate": {"taskId": "t-1", "contextId": "c-1", "status": {
        "state": "TASK_STATE_WORKING", "message": message("m-3", 3000)}}}, STREAM_EVENT, EVENT),
    "event of no payload": ({"unknown": [{} for _ in range(3000)]}, STREAM_EVENT, EVENT),
    "non-ASCII": (task_doc(3000, metadata={"é": "日本 \u2028"}), TASK, DICT),
    "integer past 64 bits": (task_doc(3000, metadata={"big": 1 << 70}), TASK, DICT),
    "v0.3 task": (task_doc(3000), TASK, V03_DICT),
    "v0.3 send's task": ({"task": task_doc(3000)}, SEND_RESPONSE, V03_DICT),
    "v0.3 send's message": ({"message": message("m-4", 3000)}, SEND_RESPONSE, V03_DICT),
}

V03_MODELS = {
    "v0.3 task": (task_doc(3000), TASK),
    "v0.3 send's task": ({"task": task_doc(3000)}, SEND_RESPONSE),
    "v0.3 send's message": ({"message": message("m-4", 3000)}, SEND_RESPONSE),
}


V03_EVENTS = {
    "task": {"task": task_doc(3000)},
    "message": {"message": message("m-5", 3000)},
    "status": {"statusUpdate": {"taskId": "t-1", "contextId": "c-1", "status": {
        "state": "TASK_STATE_WORKING", "message": message("m-3", 3000)}}},
    "artifact": {"artifactUpdate": {"taskId": "t-1", "contextId": "c-1", "artifact": {
        "artifactId": "a-2", "parts": [{"data": {"a": [{} for _ in range(3000)]}}]}}},
    "no payload": {"unknown": [{} for _ in range(3000)]},
}


@pytest.mark.parametrize("mode", [V03_EVENT, V03_EVENT_DICT], ids=["JSON-RPC", "REST"])
@pytest.mark.parametrize("case", list(V03_EVENTS))
def test_a_v03_event_made_in_the_worker_is_the_sdks(case: str, mode: int) -> None:
    doc = V03_EVENTS[case]
    expected = sdk_form(doc, STREAM_EVENT, mode, False)
    assert convert(doc, STREAM_EVENT, mode) == expected and in_worker(doc, STREAM_EVENT, mode, False) == expected
    assert (expected is None) == (case == "no payload")


@pytest.mark.parametrize("case", list(V03_MODELS))
def test_a_v03_model_made_in_the_worker_is_the_sdks(case: str) -> None:
    doc, kind = V03_MODELS[case]
    expected = sdk_form(doc, kind, V03_MODEL, False)
    for got in (convert(doc, kind, V03_MODEL), in_worker(doc, kind, V03_MODEL, False)):
        assert got == expected and got.model_dump_json(by_alias=True) == expected.model_dump_json(by_alias=True)


@pytest.mark.parametrize("rendered", [False, True], ids=["dict", "rendered"])
@pytest.mark.parametrize("case", list(CASES))
def test_an_answer_converted_in_the_worker_is_the_sdks_byte_for_byte(case: str, rendered: bool) -> None:
    doc, kind, mode = CASES[case]
    expected = sdk_form(doc, kind, mode, rendered)
    assert convert(doc, kind, mode, rendered) == expected
    assert in_worker(doc, kind, mode, rendered) == expected
    assert in_worker(doc, kind, PROTO, False) == sdk_form(doc, kind, PROTO, False)


@pytest.mark.parametrize("bad", [
    ("not a number", {"id": "t-1", "status": {"state": "TASK_STATE_NOPE"}, "history": [message("m", 3000)]}),
    ("NaN", task_doc(3000, metadata={"nan": math.nan})),  # read by json.loads (agents' answers); no JSON for REST
    ("infinity", task_doc(3000, metadata={"inf": -math.inf})),
], ids=lambda b: b[0])
def test_a_conversion_that_fails_fails_alike_in_the_worker(bad: tuple[str, dict[str, Any]]) -> None:
    _, doc = bad
    for mode in (PROTO, DICT):
        try:
            expected: Any = sdk_form(doc, TASK, mode, True)
        except Exception as exc:  # noqa: BLE001
            expected = (type(exc), str(exc))
        try:
            got: Any = in_worker(doc, TASK, mode, True)
        except Exception as exc:  # noqa: BLE001
            got = (type(exc), str(exc))
        assert got == expected


def test_only_answers_of_many_values_are_counted_and_sent() -> None:
    small = task_doc(10)
    assert len(orjson.dumps(small)) < 2048 and many_values(small) is None  # one length check
    assert many_values({"a": "x" * 100_000}) is None  # many bytes, few values
    edge = {"a": [0] * (INLINE_ANSWER_VALUES - 1)}
    assert json_values(orjson.dumps(edge)) == INLINE_ANSWER_VALUES and many_values(edge) is None
    edge["a"].append(0)
    assert many_values(edge) is not None
    assert many_values({"a": 1 << 70}) is not None  # (orjson writes no such integer: sent to be exact)


# --- live: the gateway's bindings convert no answer of many values on its loop ---------------------------------------


def _record(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every `ParseDict` and `MessageToDict` the gateway's SDK bindings run in this process, with its JSON's size
    (the agents behind the gateway, in this process too, and the test's own calls are not the bindings')."""
    from mma2a.gateway.bindings.sdk_binding import (
        LargeBodyJsonRpcDispatcher,
        LargeBodyRestDispatcher,
        PipelineRequestHandler,
    )

    from a2a.compat.v0_3.jsonrpc_adapter import JSONRPC03Adapter
    from a2a.compat.v0_3.request_handler import RequestHandler03
    from a2a.compat.v0_3.rest_adapter import REST03Adapter
    from a2a.compat.v0_3.rest_handler import REST03Handler

    # (the agents in this process answer A2A 1.0 only: the v0.3 classes here are the gateway's)
    ours = (PipelineRequestHandler, LargeBodyRestDispatcher, LargeBodyJsonRpcDispatcher, JSONRPC03Adapter,
            RequestHandler03, REST03Adapter, REST03Handler)
    seen: list[tuple[str, int]] = []

    def bindings() -> bool:
        frame: Any = sys._getframe(2)
        while frame is not None:
            if isinstance(frame.f_locals.get("self"), ours):
                return True
            frame = frame.f_back
        return False

    def parse(doc: Any, *a: Any, **kw: Any) -> Any:
        if bindings():
            seen.append(("ParseDict", len(orjson.dumps(doc))))
        return _PARSE(doc, *a, **kw)

    def to_dict(msg: Any, *a: Any, **kw: Any) -> Any:
        out = _TO_DICT(msg, *a, **kw)
        if bindings():
            seen.append(("MessageToDict", len(orjson.dumps(out))))
        return out

    monkeypatch.setattr(json_format, "ParseDict", parse)
    monkeypatch.setattr(json_format, "MessageToDict", to_dict)
    for module in (rest_dispatcher, jsonrpc_dispatcher, common, conversions, rest_handler, v03_proto_utils):
        for name, recording in (("MessageToDict", to_dict), ("ParseDict", parse)):  # (imported by name there)
            if hasattr(module, name):
                monkeypatch.setattr(module, name, recording)
    return seen


async def test_answers_of_many_values_are_converted_in_the_worker_and_answered_as_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _record(monkeypatch)
    async with grpc_gateway({}) as (gw, url, port, _executor):
        async with httpx.AsyncClient(timeout=60) as c:
            async def rpc(method: str, params: dict[str, Any]) -> Any:
                r = await c.post(url + "/", headers=V1, json={"jsonrpc": "2.0", "id": 1, "method": method,
                                                              "params": params})
                return r.json()["result"]

            stored = await rpc("SendMessage", {"message": message("m-many", MANY)})  # the fast path: orjson
            tid = stored["task"]["id"]
            doc = await rpc("GetTask", {"id": tid})  # the fast path: the pipeline's JSON as it is
            assert len(doc["history"][0]["metadata"]["a"]) == MANY
            before = list(seen)
            rest_task = await c.get(url + f"/tasks/{tid}", headers=V1)
            rest_list = await c.get(url + "/tasks", headers=V1)
            rpc_list = await rpc("ListTasks", {})  # the SDK's dispatcher answers it
            rest_sent = await c.post(url + "/message:send", headers=V1,
                                     content=orjson.dumps({"message": message("m-sent", MANY)}))
            rest_stream = await c.post(url + "/message:stream", headers=V1,
                                       content=orjson.dumps({"message": message("m-stream", MANY)}))
            rpc_stream = await c.post(url + "/", headers={**V1, "Accept": "text/event-stream"}, json={
                "jsonrpc": "2.0", "id": 2, "method": "SendStreamingMessage",
                "params": {"message": message("m-rpc-stream", MANY)}})
            v03_rest = await c.get(url + f"/v1/tasks/{tid}", headers={"A2A-Version": "0.3"})
            v03_rpc = await c.post(url + "/", headers={"A2A-Version": "0.3"}, json={
                "jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"id": tid}})
            v03_stream = await c.post(url + "/v1/message:stream", headers={"A2A-Version": "0.3"},
                                      content=orjson.dumps({"message": {"messageId": "m-v03", "role": "ROLE_USER",
                                                                        "content": [{"text": "hi"}],
                                                                        "metadata": {"a": [{}] * MANY}}}))
            v03_rpc_stream = await c.post(url + "/", headers={"A2A-Version": "0.3", "Accept": "text/event-stream"},
                                          json={"jsonrpc": "2.0", "id": 4, "method": "message/stream", "params": {
                                              "message": {"messageId": "m-v03-rpc", "role": "user", "kind": "message",
                                                          "parts": [{"kind": "text", "text": "hi"}],
                                                          "metadata": {"a": [{}] * MANY}}}})
            healthz = await c.get(url + "/healthz")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]
            grpc_task = await stub.GetTask(GetTaskRequest(id=tid), metadata=[("a2a-version", "1.0")], timeout=60)
        worker = gw._body_parser.worker_pid
    assert before == [] and worker is not None and healthz.status_code == 200
    # the answers: what the SDK made of the same task before
    # (the keys of a free-form object come in the order of protobuf's map, which upb seeds per process: it differed
    # between two gateways, or one restarted, before too; the worker is another process)
    expected = JSONResponse(_TO_DICT(_PARSE(doc, Task()))).body
    assert rest_task.status_code == 200 and json.loads(rest_task.content) == json.loads(expected)
    assert len(rest_task.content) == len(expected)
    assert rest_task.headers["content-type"] == "application/a2a+json"
    assert grpc_task == _PARSE(doc, Task())
    listed = rest_list.json()["tasks"]
    assert rest_list.status_code == 200 and rpc_list == rest_list.json()
    in_list = serialize_list_tasks_response(ListTasksResponse(tasks=[_PARSE(doc, Task())]), False)["tasks"]
    (got,) = [t for t in listed if t["id"] == tid]  # (a page's task carries its own metadata: not GetTask's)
    assert got["history"] == in_list[0]["history"] and len(got["history"][0]["metadata"]["a"]) == MANY
    sent = rest_sent.json()["task"]
    assert rest_sent.status_code == 200 and len(sent["history"][0]["metadata"]["a"]) == MANY
    for stream in (rest_stream, rpc_stream):
        events = [json.loads(line[5:]) for line in stream.text.splitlines() if line.startswith("data:")]
        tasks = [e.get("result", e)["task"] for e in events if "task" in e.get("result", e)]
        assert stream.status_code == 200 and tasks and len(tasks[0]["history"][0]["metadata"]["a"]) == MANY
    assert v03_rest.status_code == 200 and v03_rest.json() == sdk_form(doc, TASK, V03_DICT, False)
    assert len(v03_rpc.json()["result"]["history"][0]["metadata"]["a"]) == MANY
    for stream in (v03_stream, v03_rpc_stream):
        events = [json.loads(line[5:]) for line in stream.text.splitlines() if line.startswith("data:")]
        found = [e for e in events if len(json.dumps(e)) > 2 * MANY]  # the task, the message of MANY values kept
        assert stream.status_code == 200 and found, stream.text[:300]
    # ... none of them converted on the loop past INLINE_ANSWER_VALUES (before: each of these, ~60 KB apiece)
    big = [s for s in seen if s[1] > INLINE_ANSWER_VALUES * 3]
    assert big == [], big
