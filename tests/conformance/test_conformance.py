"""One scenario list, run against a plain a2a-sdk agent directly and through the gateway (at
`/agents/{name}` and at the root), on JSON-RPC and HTTP+JSON: the observable results must be the
same, except the differences documented in docs/operations.md ("Transparency"), listed in
`DIFFERENCES` with the reason for each.

Each scenario returns the observables a client sees (HTTP status, result kind and state, reply
text, error code / message / ErrorInfo reasons, history lengths, stream event order, headers),
never ids, which differ per task.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import httpx
import orjson
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2

from tests.conformance.sut import Way, own_channel, sample_agent
from tests.gateway.conftest import gateway

V1 = {"A2A-Version": "1.0"}
_ids = itertools.count(1)


Scenario = Callable[[httpx.AsyncClient, Way, str], Awaitable[dict[str, Any]]]


def message(text: str, **fields: Any) -> dict[str, Any]:
    return {"messageId": f"c-{next(_ids)}", "role": "ROLE_USER", "parts": [{"text": text}], **fields}


async def call(c: httpx.AsyncClient, s: Way, binding: str, method: str, params: dict[str, Any],
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """One unary call on a binding; returns (HTTP status, the result or the error object)."""
    headers = headers or V1
    if binding == "grpc":
        return await grpc_call(s, method, params, headers["A2A-Version"])
    if binding == "jsonrpc":
        r = await c.post(s.rpc, json={"jsonrpc": "2.0", "id": 7, "method": method, "params": params}, headers=headers)
        doc = r.json()
        assert doc["jsonrpc"] == "2.0" and doc["id"] == 7, doc
        return r.status_code, doc["error"] if "error" in doc else {"result": doc["result"]}
    if method == "SendMessage":
        r = await c.post(f"{s.rest}/message:send", json=params, headers=headers)
    elif method == "GetTask":
        query = {k: v for k, v in params.items() if k != "id"}
        r = await c.get(f"{s.rest}/tasks/{params['id']}", params=query, headers=headers)
    elif method == "CancelTask":
        r = await c.post(f"{s.rest}/tasks/{params['id']}:cancel", json={}, headers=headers)
    elif method == "ListTasks":
        r = await c.get(f"{s.rest}/tasks", params=params, headers=headers)
    else:
        raise AssertionError(method)
    doc = r.json()
    return r.status_code, doc["error"] if r.status_code >= 400 else {"result": doc}


GRPC_REQUESTS = {"SendMessage": a2a_pb2.SendMessageRequest, "GetTask": a2a_pb2.GetTaskRequest,
                 "CancelTask": a2a_pb2.CancelTaskRequest, "ListTasks": a2a_pb2.ListTasksRequest}


async def grpc_call(s: Way, method: str, params: dict[str, Any], version: str) -> tuple[int, dict[str, Any]]:
    """A unary gRPC call; errors read back as their status name, message and ErrorInfo details."""
    assert s.grpc
    request = json_format.ParseDict({**params, **({"tenant": s.tenant} if s.tenant else {})}, GRPC_REQUESTS[method]())
    async with own_channel(s.grpc) as channel:
        try:
            reply = await getattr(a2a_pb2_grpc.A2AServiceStub(channel), method)(request, metadata=[("a2a-version", version)])
        except grpc.aio.AioRpcError as exc:
            return 0, {"code": exc.code().name, "message": exc.details(), "data": grpc_details(exc)}
    return 200, {"result": json_format.MessageToDict(reply)}


def grpc_details(exc: grpc.aio.AioRpcError) -> list[dict[str, Any]]:
    out = []
    for key, value in exc.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    out.append({"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": info.reason})
    return out


def error_view(status: int, err: dict[str, Any]) -> dict[str, Any]:
    """What a client reads from an error on either binding."""
    details = err.get("data") if "data" in err else err.get("details")
    assert isinstance(details, list), f"error details must be an array of typed details: {err}"
    return {"http": status, "code": err.get("code"), "message": err.get("message"),
            "reasons": [d.get("reason") for d in details if d.get("@type", "").endswith("google.rpc.ErrorInfo")]}


def task_of(doc: dict[str, Any]) -> dict[str, Any]:
    result = doc["result"]
    return result["task"] if "task" in result else result


def task_view(task: dict[str, Any]) -> dict[str, Any]:
    status = task.get("status") or {}
    reply = [p.get("text") for p in ((status.get("message") or {}).get("parts") or [])]
    arts = [(a.get("name"), [p.get("text") for p in a.get("parts") or []]) for a in task.get("artifacts") or []]
    return {"state": status.get("state"), "reply": reply, "artifacts": arts}


async def sent_task(c: httpx.AsyncClient, s: Way, binding: str, text: str = "hello") -> dict[str, Any]:
    status, doc = await call(c, s, binding, "SendMessage", {"message": message(text)})
    assert status == 200, doc
    return task_of(doc)


# --- the scenarios --------------------------------------------------------------------------------
async def send(c: httpx.AsyncClient, s: Way, binding: str) -> dict[str, Any]:
    status, doc = await call(c, s, binding, "SendMessage", {"message": message("hello")})
    return {"http": status, "kind": next(iter(doc["result"])), **task_view(task_of(doc))}


async def send_proto_names(c: httpx.AsyncClient, s: Way, binding: str) -> dict[str, Any]:
    """Params spelled with proto field names (`message_id`, `media_type`), which the SDK also reads."""
    msg = {"message_id": f"c-{next(_ids)}", "role": "ROLE_USER", "parts": [{"text": "snake", "media_type": "text/plain"}]}
    status, doc = await call(c, s, binding, "SendMessage", {"message": msg, "configuration": {"history_length": 0}})
    task = task_of(doc) if "result" in doc else {}
    return {"http": status, **task_view(task), "history": len(task.get("history") or [])}


async def stream(c: httpx.AsyncClient, s: Way, binding: str) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message("streamed")}
    headers = {**V1, "Accept": "text/event-stream"}
    if binding == "grpc":
        assert s.grpc
        request = json_format.ParseDict({**body, **({"tenant": s.tenant} if s.tenant else {})}, a2a_pb2.SendMessageRequest())
        async with own_channel(s.grpc) as channel:
            call = a2a_pb2_grpc.A2AServiceStub(channel).SendStreamingMessage(request, metadata=[("a2a-version", "1.0")])
            events = [json_format.MessageToDict(e) async for e in call]
        final = events[-1].get("statusUpdate", {}).get("status", {}).get("state")
        return {"events": [next(iter(e)) for e in events], "final": final}
    if binding == "jsonrpc":
        req = c.stream("POST", s.rpc, json={"jsonrpc": "2.0", "id": 3, "method": "SendStreamingMessage",
                                                "params": body}, headers=headers)
    else:
        req = c.stream("POST", f"{s.rest}/message:stream", json=body, headers=headers)
    events = []
    async with req as r:
        ctype = r.headers.get("content-type")
        async for line in r.aiter_lines():
            if line.startswith("data:"):
                doc = orjson.loads(line[5:])
                events.append(doc["result"] if binding == "jsonrpc" else doc)
    kinds = [next(iter(e)) for e in events]
    final = events[-1].get("statusUpdate", {}).get("status", {}).get("state")
    return {"http": r.status_code, "contentType": ctype, "events": kinds, "final": final}


async def get_with_history(c: httpx.AsyncClient, s: Way, binding: str) -> dict[str, Any]:
    task = await sent_task(c, s, binding)
    lengths = {}
    for label, params in [("absent", {}), ("0", {"historyLength": 0}), ("1", {"historyLength": 1}),
                          ("snake 0", {"history_length": 0})]:
        status, doc = await call(c, s, binding, "GetTask", {"id": task["id"], **params})
        assert status == 200, doc
        lengths[label] = len(task_of(doc).get("history") or [])
    status, doc = await call(c, s, binding, "GetTask", {"id": task["id"], "historyLength": -1})
    return {"lengths": lengths, "negative": error_view(status, doc)}


async def cancel(c: httpx.AsyncClient, s: Way, binding: str) -> dict[str, Any]:
    waiting = await sent_task(c, s, binding, "wait")
    status, doc = await call(c, s, binding, "CancelTask", {"id": waiting["id"]})
    return {"before": waiting["status"]["state"], "http": status, "after": task_of(doc)["status"]["state"]}


async def cancel_terminal(c: httpx.AsyncClient, s: Way, binding: str) -> dict[str, Any]:
    done = await sent_task(c, s, binding)
    return error_view(*await call(c, s, binding, "CancelTask", {"id": done["id"]}))


async def list_tasks(c: httpx.AsyncClient, s: Way, binding: str) -> dict[str, Any]:
    task = await sent_task(c, s, binding)
    status, doc = await call(c, s, binding, "ListTasks", {"pageSize": 100})
    if status != 200 or "result" not in doc:
        return error_view(status, doc)
    listed = doc["result"]["tasks"]
    mine = [t for t in listed if t["id"] == task["id"]]
    return {"http": status, "listed": len(mine) == 1, "state": mine[0]["status"]["state"] if mine else None}


async def follow_up_unknown_task(c: httpx.AsyncClient, s: Way, binding: str) -> dict[str, Any]:
    return error_view(*await call(c, s, binding, "SendMessage", {"message": message("more", taskId="no-such-task")}))


async def follow_up_terminal_task(c: httpx.AsyncClient, s: Way, binding: str) -> dict[str, Any]:
    done = await sent_task(c, s, binding)
    err = error_view(*await call(c, s, binding, "SendMessage", {"message": message("more", taskId=done["id"])}))
    return {**err, "message": err["message"].replace(done["id"], "<task>")}


async def mismatched_context(c: httpx.AsyncClient, s: Way, binding: str) -> dict[str, Any]:
    waiting = await sent_task(c, s, binding, "wait")
    err = error_view(*await call(c, s, binding, "SendMessage",
                                 {"message": message("more", taskId=waiting["id"], contextId="another-context")}))
    return {**err, "message": err["message"].replace(waiting["id"], "<task>").replace(waiting["contextId"], "<ctx>")}


async def get_unknown_task(c: httpx.AsyncClient, s: Way, binding: str) -> dict[str, Any]:
    return error_view(*await call(c, s, binding, "GetTask", {"id": "no-such-task"}))


async def unsupported_version(c: httpx.AsyncClient, s: Way, binding: str) -> dict[str, Any]:
    status, doc = await call(c, s, binding, "SendMessage", {"message": message("hi")}, {"A2A-Version": "9.9"})
    if "result" in doc:  # the SDK's gRPC binding does not check the version header
        return {"http": status, "accepted": task_of(doc)["status"]["state"]}
    return error_view(status, doc)


async def bad_content_type(c: httpx.AsyncClient, s: Way, binding: str) -> dict[str, Any]:
    if binding != "rest":
        return {"skipped": "only the REST binding reads a Content-Type"}
    out: dict[str, Any] = {}
    json_body = orjson.dumps({"message": message("typed")})
    for label, body, ctype in [("text", b"hello", "text/plain"), ("json as text", json_body, "text/plain"),
                               ("json as xml", json_body, "application/xml"), ("xml", b"<m/>", "application/xml"),
                               ("json, no type", json_body, None), ("a2a+json", json_body, "application/a2a+json"),
                               ("not utf-8", b'{"message": "\xff"}', "application/json")]:
        r = await c.post(f"{s.rest}/message:send", content=body, headers={**V1, **({"Content-Type": ctype} if ctype else {})})
        doc = r.json()
        out[label] = (r.status_code, [d.get("reason") for d in doc["error"].get("details", [])] if "error" in doc else
                      doc["task"]["status"]["state"])
    return out


async def card_caching(c: httpx.AsyncClient, s: Way, binding: str) -> dict[str, Any]:
    if binding == "grpc":
        return {"skipped": "cards are HTTP documents; see the JSON-RPC and REST cases"}
    first = await c.get(s.card + CARD)
    again = await c.get(s.card + CARD, headers={"If-None-Match": first.headers.get("etag", '"none"')})
    since = (await c.get(s.card + CARD, headers={"If-Modified-Since": first.headers["last-modified"]})).status_code \
        if "last-modified" in first.headers else None  # (through workers or a cluster: another process answers it)
    url = next(i["url"] for i in first.json()["supportedInterfaces"] if i["protocolBinding"] == "HTTP+JSON")
    sent = await c.post(f"{url}/message:send", json={"message": message("via card")}, headers=V1)
    return {"etag": "etag" in first.headers, "conditional": again.status_code, "sendViaCardUrl": sent.status_code,
            "cacheControl": "max-age" in first.headers.get("cache-control", ""),
            "lastModified": "last-modified" in first.headers, "ifModifiedSince": since}


def v03_view(status: int, doc: Any) -> Any:
    """A v0.3 answer's observables: the error code, or the result's kind and state (v0.3 results carry `kind`)."""
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        return {"http": status, "code": doc["error"].get("code")}
    result = doc.get("result", doc) if isinstance(doc, dict) else doc
    result = result.get("task", result)
    return {"http": status, "kind": result.get("kind"), "state": (result.get("status") or {}).get("state")}


async def v03(c: httpx.AsyncClient, s: Way, binding: str) -> dict[str, Any]:
    """A v0.3 client (no A2A-Version header, v0.3 names and shapes): send, get, cancel a terminal task, an unknown
    task, push config (unsupported), a stream and a resubscribe to a terminal task."""
    if binding == "grpc":
        return {"skipped": "v0.3 is an HTTP compat layer"}
    msg = {"messageId": f"c-{next(_ids)}", "role": "user", "parts": [{"kind": "text", "text": "old"}]}
    out: dict[str, Any] = {}
    if binding == "jsonrpc":
        async def rpc03(method: str, params: dict[str, Any]) -> tuple[int, Any]:
            r = await c.post(s.rpc, json={"jsonrpc": "2.0", "id": 3, "method": method, "params": params})
            if r.headers.get("content-type", "").startswith("text/event-stream"):
                return r.status_code, [orjson.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
            return r.status_code, r.json()
        status, sent = await rpc03("message/send", {"message": msg})
        tid = sent["result"]["id"]
        out["send"] = v03_view(status, sent)
        out["get"] = v03_view(*await rpc03("tasks/get", {"id": tid, "historyLength": 0}))
        out["cancel terminal"] = v03_view(*await rpc03("tasks/cancel", {"id": tid}))
        out["get unknown"] = v03_view(*await rpc03("tasks/get", {"id": "no-such-task"}))
        out["push set"] = v03_view(*await rpc03("tasks/pushNotificationConfig/set", {
            "taskId": tid, "pushNotificationConfig": {"url": "http://127.0.0.1:9/hook"}}))
        status, events = await rpc03("message/stream", {"message": {**msg, "messageId": f"c-{next(_ids)}"}})
        out["stream"] = [v03_view(status, e) for e in events]
        status, events = await rpc03("tasks/resubscribe", {"id": tid})
        out["resubscribe terminal"] = [v03_view(status, e) for e in events]
        return out
    rest_msg = {"messageId": f"c-{next(_ids)}", "role": "ROLE_USER", "content": [{"text": "old"}]}  # v0.3 proto JSON
    sent = await c.post(f"{s.rest}/v1/message:send", json={"message": rest_msg})
    out["send"] = v03_view(sent.status_code, sent.json())
    if sent.status_code == 200:
        tid = sent.json().get("id") or sent.json().get("task", {}).get("id")
        got = await c.get(f"{s.rest}/v1/tasks/{tid}")
        out["get"] = v03_view(got.status_code, got.json())
        done = await c.post(f"{s.rest}/v1/tasks/{tid}:cancel", json={})
        out["cancel terminal"] = v03_view(done.status_code, done.json())
    unknown = await c.get(f"{s.rest}/v1/tasks/no-such-task")
    out["get unknown"] = {"http": unknown.status_code}
    return out


SCENARIOS: dict[str, Scenario] = {
    "send": send, "send_proto_names": send_proto_names, "stream": stream, "get_with_history": get_with_history, "cancel": cancel,
    "cancel_terminal": cancel_terminal, "list_tasks": list_tasks, "follow_up_unknown_task": follow_up_unknown_task,
    "follow_up_terminal_task": follow_up_terminal_task, "mismatched_context": mismatched_context,
    "get_unknown_task": get_unknown_task, "unsupported_version": unsupported_version,
    "bad_content_type": bad_content_type, "card_caching": card_caching, "v03": v03,
}

# (scenario, binding, surface kind) -> the fields where the gateway answers differently, and why.
# Each is in docs/operations.md, "Transparency".
DIFFERENCES: dict[tuple[str, str, str], tuple[dict[str, Any], str]] = {
    **{("cancel_terminal", "rest", k): ({"http": 409, "code": 409},
                                        "REST statuses follow the A2A error table (409); the SDK agent answers 400")
       for k in ("agent-path", "root")},
    **{("bad_content_type", "rest", k): ({"not utf-8": (400, ["INVALID_REQUEST"])},
                                         "a body that is not UTF-8 JSON is the gateway's 400; the SDK agent answers 500")
       for k in ("agent-path", "root")},
    **{("v03", "jsonrpc", k): ({"push set": {"http": 200, "code": -32602}},
                               "the gateway gives push notifications for agents without them (gateway/push), and its "
                               "SSRF guard refuses a webhook on a loopback address (`urls`); the agent has no push")
       for k in ("agent-path", "root")},
    **{("v03", "rest", k): ({"cancel terminal": {"http": 409, "code": 409}},
                            "REST statuses follow the A2A error table (409) on the v0.3 paths too; the SDK agent answers 400")
       for k in ("agent-path", "root")},
    **{("card_caching", b, k): ({"cacheControl": True, "lastModified": True, "ifModifiedSince": 304},
                                "the gateway's cards carry Cache-Control and Last-Modified (a conditional GET by it is "
                                "304); the sample agent's only an ETag") for b in ("jsonrpc", "rest") for k in ("agent-path", "root")},
    **{("get_unknown_task", b, "root"): (
        {"message": "task 'no-such-task' not found"},
        "at the root the gateway cannot know which agent owns an unknown task id: its own TaskNotFound answers")
       for b in ("jsonrpc", "rest", "grpc")},
}


# What the agent itself answers (directly), so a scenario that measures nothing cannot pass.
DIRECT: dict[tuple[str, str], dict[str, Any]] = {
    ("send", "jsonrpc"): {"http": 200, "kind": "task", "state": "TASK_STATE_COMPLETED", "reply": ["read: hello"]},
    ("send", "rest"): {"http": 200, "kind": "task", "state": "TASK_STATE_COMPLETED", "reply": ["read: hello"]},
    ("send_proto_names", "jsonrpc"): {"http": 200, "state": "TASK_STATE_COMPLETED", "reply": ["read: snake"], "history": 0},
    ("send_proto_names", "rest"): {"http": 200, "state": "TASK_STATE_COMPLETED", "reply": ["read: snake"], "history": 0},
    ("stream", "jsonrpc"): {"events": ["task", "artifactUpdate", "statusUpdate"], "final": "TASK_STATE_COMPLETED"},
    ("stream", "rest"): {"events": ["task", "artifactUpdate", "statusUpdate"], "final": "TASK_STATE_COMPLETED"},
    ("get_with_history", "jsonrpc"): {"lengths": {"absent": 1, "0": 0, "1": 1, "snake 0": 0}},
    ("get_with_history", "rest"): {"lengths": {"absent": 1, "0": 0, "1": 1, "snake 0": 1}},  # REST query: camelCase
    ("cancel", "jsonrpc"): {"before": "TASK_STATE_INPUT_REQUIRED", "after": "TASK_STATE_CANCELED"},
    ("cancel_terminal", "jsonrpc"): {"code": -32002, "reasons": ["TASK_NOT_CANCELABLE"]},
    ("list_tasks", "jsonrpc"): {"http": 200, "listed": True},
    ("list_tasks", "rest"): {"http": 200, "listed": True},
    ("follow_up_unknown_task", "jsonrpc"): {"code": -32001, "reasons": ["TASK_NOT_FOUND"]},
    ("follow_up_unknown_task", "rest"): {"http": 404, "reasons": ["TASK_NOT_FOUND"]},
    ("follow_up_terminal_task", "jsonrpc"): {"code": -32004, "reasons": ["UNSUPPORTED_OPERATION"]},
    ("mismatched_context", "jsonrpc"): {"code": -32602, "reasons": ["INVALID_PARAMS"]},
    ("get_unknown_task", "rest"): {"http": 404, "reasons": ["TASK_NOT_FOUND"]},
    ("unsupported_version", "jsonrpc"): {"code": -32009, "reasons": ["VERSION_NOT_SUPPORTED"]},
    ("unsupported_version", "rest"): {"http": 400, "reasons": ["VERSION_NOT_SUPPORTED"]},
    ("bad_content_type", "rest"): {"text": (400, ["INVALID_REQUEST"]), "json as text": (200, "TASK_STATE_COMPLETED"),
                                   "json as xml": (200, "TASK_STATE_COMPLETED"), "xml": (400, ["INVALID_REQUEST"]),
                                   "json, no type": (200, "TASK_STATE_COMPLETED"), "a2a+json": (200, "TASK_STATE_COMPLETED"),
                                   "not utf-8": (500, [])},
    ("v03", "jsonrpc"): {"send": {"http": 200, "kind": "task", "state": "completed"}, "cancel terminal": {"http": 200, "code": -32002},
                         "get unknown": {"http": 200, "code": -32001}, "push set": {"http": 200, "code": -32003},
                         "stream": [{"http": 200, "kind": "task", "state": "submitted"},
                                    {"http": 200, "kind": "artifact-update", "state": None},
                                    {"http": 200, "kind": "status-update", "state": "completed"}],
                         "resubscribe terminal": [{"http": 200, "code": -32004}]},
    ("v03", "rest"): {"send": {"http": 200, "kind": None, "state": "TASK_STATE_COMPLETED"},
                      "cancel terminal": {"http": 400, "code": 400}, "get unknown": {"http": 404}},
    ("card_caching", "jsonrpc"): {"etag": True, "conditional": 304, "sendViaCardUrl": 200},
    ("send", "grpc"): {"http": 200, "kind": "task", "state": "TASK_STATE_COMPLETED", "reply": ["read: hello"]},
    ("stream", "grpc"): {"events": ["task", "artifactUpdate", "statusUpdate"], "final": "TASK_STATE_COMPLETED"},
    ("get_with_history", "grpc"): {"lengths": {"absent": 1, "0": 0, "1": 1, "snake 0": 0}},
    ("follow_up_unknown_task", "grpc"): {"code": "NOT_FOUND", "reasons": ["TASK_NOT_FOUND"]},
    ("cancel_terminal", "grpc"): {"code": "FAILED_PRECONDITION", "reasons": ["TASK_NOT_CANCELABLE"]},
    ("list_tasks", "grpc"): {"http": 200, "listed": True},
}

CARD = "/.well-known/agent-card.json"


@contextlib.asynccontextmanager
async def surfaces(*, grpc_only: bool = False) -> AsyncIterator[dict[str, Way]]:
    """The sample agent (with gRPC; with `grpc_only` a card naming gRPC alone, which the gateway then
    uses to reach it), and a gateway in front of it with its gRPC binding on: the three ways to reach it."""
    async with sample_agent("sut", grpc=True, grpc_only=grpc_only) as sut:
        cfg = {"agents": [{"name": "sut", "url": sut.url}], "grpc_listen": "127.0.0.1:0"}
        async with gateway(cfg) as (gw_, gw):
            g = gw_.grpc_url
            yield {
                "direct": Way("direct", sut.url + "/", sut.url, sut.url, sut.grpc or ""),
                "agent-path": Way("agent-path", f"{gw}/agents/sut", f"{gw}/agents/sut", f"{gw}/agents/sut", g, "sut"),
                "root": Way("root", gw + "/", gw, gw, g),
            }


@pytest.mark.parametrize("binding", ["jsonrpc", "rest", "grpc"])
@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_same_answers_directly_and_through_the_gateway(name: str, binding: str) -> None:
    await compare(name, binding)


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n not in ("bad_content_type", "card_caching", "v03")])
async def test_an_agent_whose_card_names_only_grpc_is_reached_over_grpc(name: str) -> None:
    await compare(name, "grpc", grpc_only=True)


async def compare(name: str, binding: str, *, grpc_only: bool = False) -> None:
    async with surfaces(grpc_only=grpc_only) as ways, httpx.AsyncClient(timeout=30) as client:
        results = {kind: await SCENARIOS[name](client, way, binding) for kind, way in ways.items()}
    direct = results.pop("direct")
    check_direct(name, binding, direct)
    for kind, got in results.items():
        assert got == through_gateway(name, binding, kind, direct), f"{kind} differs from the agent's own answer {direct}"


def check_direct(name: str, binding: str, direct: dict[str, Any]) -> None:
    """What the agent answered directly is what `DIRECT` pins."""
    expected = DIRECT.get((name, binding), {})
    assert {k: direct.get(k) for k in expected} == expected, direct


def through_gateway(name: str, binding: str, kind: str, direct: dict[str, Any]) -> dict[str, Any]:
    """What a client of a gateway observes (way `kind`: "root" or "agent-path") where the agent directly gave `direct`."""
    override, _why = DIFFERENCES.get((name, binding, kind), ({}, ""))
    return {**direct, **override}


_TENANT_SCENARIOS = ("send", "stream", "get_with_history", "cancel", "cancel_terminal", "list_tasks", "get_unknown_task")


async def test_the_rest_tenant_form_reaches_the_agent_the_tenant_names() -> None:
    """A2A 1.0's HTTP+JSON paths with a tenant (`/{tenant}/message:send`, `/{tenant}/tasks/{id}`, ...): the agent
    takes any tenant; at the gateway's root the tenant names the agent (as `tenant` on gRPC), so the answers
    are those of `/agents/{name}`. The v0.3 paths (`/v1/...`) have no tenant form, as on the SDK."""
    async with surfaces() as ways, httpx.AsyncClient(timeout=30) as client:
        tenanted = {kind: dataclasses.replace(ways[kind], rest=ways[kind].rest.rstrip("/") + "/sut") for kind in ("direct", "root")}
        results = {kind: {name: await SCENARIOS[name](client, way, "rest") for name in _TENANT_SCENARIOS}
                   for kind, way in tenanted.items()}
        v03 = [(await client.get(way.rest + "/v1/tasks/x")).status_code for way in tenanted.values()]
    for name in _TENANT_SCENARIOS:
        expected = DIRECT.get((name, "rest"), {})
        assert {k: results["direct"][name].get(k) for k in expected} == expected, results["direct"][name]
        override, _why = DIFFERENCES.get((name, "rest", "agent-path"), ({}, ""))
        assert results["root"][name] == {**results["direct"][name], **override}, name
    assert v03 == [404, 404]


async def test_subscribing_on_an_agent_that_does_not_stream() -> None:
    """STREAM-SUB, CORE-CAP-002: an agent whose card declares no streaming answers SubscribeToTask (and
    SendStreamingMessage) with UnsupportedOperationError, on a live task, a terminal one (which A2A 1.0 refuses
    so anyway) and an unknown one. Through the gateway a task of that agent is refused the same, at the root
    too (where the card declares streaming: the agent cannot deliver the task's events). The root's own
    answers differ where no agent is asked: an unknown id is its TaskNotFound, and a new message is streamed
    for the agent (one event: the task), as the root card promises."""
    from tests.conformance.test_tck import stream_view

    async with sample_agent("quiet", streaming=False) as agent:
        async with gateway({"agents": [{"name": "quiet", "url": agent.url}]}) as (_, gw):
            ways = [Way("direct", agent.url + "/", agent.url, agent.url), Way("root", gw + "/", gw, gw),
                    Way("agent-path", f"{gw}/agents/quiet", f"{gw}/agents/quiet", f"{gw}/agents/quiet")]
            seen: dict[str, dict[str, Any]] = {}
            async with httpx.AsyncClient(timeout=30) as c:
                for way in ways:
                    for binding in ("jsonrpc", "rest"):
                        live, done = await sent_task(c, way, binding, "wait"), await sent_task(c, way, binding)
                        seen[f"{way.kind} {binding}"] = {
                            "live": await stream_view(c, way, binding, "SubscribeToTask", {"id": live["id"]}),
                            "terminal": await stream_view(c, way, binding, "SubscribeToTask", {"id": done["id"]}),
                            "unknown": await stream_view(c, way, binding, "SubscribeToTask", {"id": "no-such-task"}),
                            "stream": await stream_view(c, way, binding, "SendStreamingMessage", {"message": message("s")})}
    refused = {"jsonrpc": {"http": 200, "id": 5, "code": -32004, "reasons": ["UNSUPPORTED_OPERATION"]},
               "rest": {"http": 400, "type": "application/json", "code": 400, "status": "FAILED_PRECONDITION",
                        "reasons": ["UNSUPPORTED_OPERATION"]}}
    unknown = {"jsonrpc": {"http": 200, "id": 5, "code": -32001, "reasons": ["TASK_NOT_FOUND"]},
               "rest": {"http": 404, "type": "application/json", "code": 404, "status": "NOT_FOUND", "reasons": ["TASK_NOT_FOUND"]}}
    for binding in ("jsonrpc", "rest"):
        direct = seen[f"direct {binding}"]
        assert direct == dict.fromkeys(("live", "terminal", "unknown", "stream"), refused[binding]), direct
        assert seen[f"agent-path {binding}"] == direct
        root = seen[f"root {binding}"]
        assert {k: root[k] for k in ("live", "terminal")} == {"live": refused[binding], "terminal": refused[binding]}, root
        assert root["unknown"] == unknown[binding]
        assert root["stream"]["events"] == [("task", "TASK_STATE_COMPLETED", [["text"]], 1)], root
