"""The checks of the A2A conformance kit (a2aproject/a2a-tck; its requirement ids in each test's doc), run
with raw HTTP against an agent shaped like the kit's system under test (`tck_agent`) directly, through
the gateway's root and through `/agents/{name}`, on JSON-RPC and HTTP+JSON: what a client observes must
be the same, except the differences listed in `DIFFERENCES` (docs/operations.md, "Transparency").

One agent and one gateway serve the whole module; every check names its own message ids, so checks
do not see each other's tasks.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
import httpx
import orjson
import pytest
import pytest_asyncio
from a2a.types import AgentCard, AgentCardSignature, a2a_pb2, a2a_pb2_grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2

from tests.conformance.sut import Way, own_channel
from tests.conformance.tck_agent import TckAgent, tck_agent
from tests.agents import RecordingExecutor, make_card, run_agent
from tests.gateway.conftest import gateway
from tests.webhooks import WebhookReceiver, webhook_receiver

pytestmark = pytest.mark.asyncio(loop_scope="module")

V1 = {"A2A-Version": "1.0"}
CARD = "/.well-known/agent-card.json"
_n = itertools.count(1)


@dataclass(frozen=True)
class Stack:
    agent: TckAgent
    ways: dict[str, Way]
    hook: WebhookReceiver  # the kit's webhook receiver, on loopback (the gateway's `urls` allow it)


@contextlib.asynccontextmanager
async def kit_stack() -> AsyncIterator[Stack]:
    """The kit's agent (push on), the kit's webhook receiver and a gateway in front (also `bench/transparency.py --kit`)."""
    async with webhook_receiver() as hook, tck_agent("tck", push=True) as agent:
        cfg = {"agents": [{"name": "tck", "url": agent.url}], "grpc_listen": "127.0.0.1:0",
               "urls": {"allow_hosts": [hook.url.removeprefix("http://")]}}
        async with gateway(cfg) as (gw_, url):
            gw, g = url.rstrip("/"), gw_.grpc_url
            yield Stack(agent, hook=hook, ways={
                "direct": Way("direct", agent.url + "/", agent.rest, agent.url, agent.grpc),
                "root": Way("root", gw + "/", gw, gw, g),
                "agent-path": Way("agent-path", f"{gw}/agents/tck", f"{gw}/agents/tck", f"{gw}/agents/tck", g, "tck"),
            })


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack() -> AsyncIterator[Stack]:
    async with kit_stack() as s:
        yield s


def mid(prefix: str) -> str:
    return f"{prefix}-{next(_n)}"


def message(prefix: str, **fields: Any) -> dict[str, Any]:
    return {"messageId": mid(prefix), "role": "ROLE_USER", "parts": [{"text": "from the kit"}], **fields}


def media_type(response: httpx.Response) -> str:
    return response.headers.get("content-type", "").split(";")[0].strip()


def reasons(details: Any) -> list[Any]:
    return [d.get("reason") for d in details if isinstance(d, dict) and "reason" in d] if isinstance(details, list) else []


def result_view(result: Any) -> dict[str, Any]:
    """Kind, state and what each artifact carries, of a SendMessage/GetTask/stream result (never ids)."""
    if not isinstance(result, dict):
        return {"result": repr(result)}
    kind = next(iter(result)) if len(result) == 1 and isinstance(next(iter(result.values())), dict) else "task"
    inner = result[kind] if kind in result else result
    out: dict[str, Any] = {"kind": kind, "state": (inner.get("status") or {}).get("state")}
    if "artifacts" in inner:
        out["artifacts"] = [sorted(k for p in a.get("parts", []) for k in p) for a in inner["artifacts"]]
    if "artifact" in inner:
        art = inner["artifact"]
        out["artifact"] = ([p.get("text", sorted(p)) for p in art.get("parts", [])], inner.get("append"), inner.get("lastChunk"))
    if "history" in inner:
        out["history"] = len(inner["history"])
    return out


def rpc_view(status: int, doc: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"http": status, "id": doc.get("id")}
    if "error" in doc:
        return {**out, "code": doc["error"].get("code"), "reasons": reasons(doc["error"].get("data"))}
    return {**out, **result_view(doc.get("result"))}


def rest_view(response: httpx.Response) -> dict[str, Any]:
    out: dict[str, Any] = {"http": response.status_code, "type": media_type(response)}
    try:
        doc = response.json()
    except ValueError:
        return out
    if response.status_code >= 400 and isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        err = doc["error"]
        return {**out, "code": err.get("code"), "status": err.get("status"), "reasons": reasons(err.get("details"))}
    return {**out, **result_view(doc)}


async def rpc(c: httpx.AsyncClient, way: Way, method: str | None, params: Any = None, *, rid: Any = 1,
              headers: dict[str, str] | None = None, raw: bytes | None = None) -> dict[str, Any]:
    body = raw if raw is not None else orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    r = await c.post(way.rpc, content=body, headers={"Content-Type": "application/json", **(V1 if headers is None else headers)})
    assert media_type(r) == "application/json", r.text  # JSONRPC-FMT-002
    return rpc_view(r.status_code, r.json())


async def rest(c: httpx.AsyncClient, way: Way, verb: str, path: str, body: Any = None, *,
               headers: dict[str, str] | None = None, query: dict[str, Any] | None = None) -> dict[str, Any]:
    content = orjson.dumps(body) if body is not None else None
    h = {**(V1 if headers is None else headers), **({"Content-Type": "application/json"} if content else {})}
    return rest_view(await c.request(verb, way.rest + path, content=content, headers=h, params=query))


async def call(c: httpx.AsyncClient, way: Way, binding: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One A2A call on either binding, by its JSON-RPC method name."""
    if binding == "jsonrpc":
        return await rpc(c, way, method, params)
    tid = params.get("id") or params.get("taskId")
    if method == "SendMessage":
        return await rest(c, way, "POST", "/message:send", params)
    if method == "GetTask":
        return await rest(c, way, "GET", f"/tasks/{tid}", query={k: v for k, v in params.items() if k != "id"})
    if method == "CancelTask":
        return await rest(c, way, "POST", f"/tasks/{tid}:cancel", {})
    if method == "ListTasks":
        return await rest(c, way, "GET", "/tasks", query=params)
    raise AssertionError(method)


async def task_id(c: httpx.AsyncClient, way: Way, prefix: str = "tck-complete-task", **config: Any) -> str:
    r = await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": message(prefix), **({"configuration": config} if config else {})}}, headers=V1)
    return str(r.json()["result"]["task"]["id"])


@contextlib.asynccontextmanager
async def sse(c: httpx.AsyncClient, way: Way, binding: str, method: str, params: dict[str, Any]
              ) -> AsyncIterator[tuple[httpx.Response, AsyncIterator[dict[str, Any]]]]:
    """A stream on either binding: the response and its events (each `data:` line's JSON, unwrapped)."""
    if binding == "jsonrpc":
        req = c.stream("POST", way.rpc, json={"jsonrpc": "2.0", "id": 5, "method": method, "params": params},
                       headers={**V1, "Accept": "text/event-stream"})
    elif method == "SendStreamingMessage":
        req = c.stream("POST", way.rest + "/message:stream", json=params, headers={**V1, "Accept": "text/event-stream"})
    else:
        req = c.stream("POST", way.rest + f"/tasks/{params['id']}:subscribe", json={},
                       headers={**V1, "Accept": "text/event-stream"})
    async with req as r:
        async def events() -> AsyncIterator[dict[str, Any]]:
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    doc = orjson.loads(line[5:])
                    yield doc if binding == "rest" else ({"error": doc["error"]} if "error" in doc else doc["result"])
        yield r, events()


def event_view(event: dict[str, Any]) -> Any:
    if "error" in event:
        err = event["error"]
        return ("error", err.get("code"), reasons(err.get("data", err.get("details"))))
    return tuple(result_view(event).values())


async def stream_view(c: httpx.AsyncClient, way: Way, binding: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    async with sse(c, way, binding, method, params) as (r, events):
        if media_type(r) != "text/event-stream":
            await r.aread()
            return rest_view(r) if binding == "rest" else rpc_view(r.status_code, r.json())
        return {"http": r.status_code, "type": media_type(r), "events": [event_view(e) async for e in events]}


Check = Callable[[httpx.AsyncClient, Way, str, Stack], Awaitable[Any]]
CHECKS: dict[str, Check] = {}


def check(name: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        CHECKS[name] = fn
        return fn
    return register


# --- SendMessage / execution mode / multi-turn (CORE-SEND-*, CORE-EXECUTION-MODE-*, CORE-MULTI-*) ---------
@check("send_shapes")
async def _send_shapes(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """CORE-SEND-001, DM artifacts: a task, a bare Message, text/file/url/data artifacts, an input request."""
    out = {}
    for prefix in ("tck-complete-task", "tck-message-response", "tck-artifact-text", "tck-artifact-file",
                   "tck-artifact-file-url", "tck-artifact-data", "tck-input-required"):
        out[prefix] = await call(c, way, b, "SendMessage", {"message": message(prefix)})
    return out


@check("agent_error")
async def _agent_error(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """CORE-ERR-001: an agent's own error (an a2a-sdk `A2AError`) arrives with its code, status and reason."""
    return {"send": await call(c, way, b, "SendMessage", {"message": message("tck-reject-task")}),
            "stream": await stream_view(c, way, b, "SendStreamingMessage", {"message": message("tck-reject-task")})}


@check("return_immediately")
async def _return_immediately(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """CORE-EXECUTION-MODE-001/002: blocking waits for an interrupted state; returnImmediately answers at once."""
    s.agent.executor.release.clear()
    try:
        quick = await call(c, way, b, "SendMessage", {"message": message("tck-slow"), "configuration": {"returnImmediately": True}})
    finally:
        s.agent.executor.release.set()
    blocking = await call(c, way, b, "SendMessage", {"message": message("tck-input-required"),
                                                      "configuration": {"returnImmediately": False}})
    return {"quick": quick, "blocking": blocking}


@check("context_ids")
async def _context_ids(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """CORE-MULTI-001a/002/005: a generated contextId is returned, a client's is kept, a follow-up by taskId
    alone continues the task's context."""
    r = await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                    "params": {"message": message("tck-input-required")}}, headers=V1)
    first = r.json()["result"]["task"]
    mine = await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {
        "message": message("tck-complete-task", contextId="tck-client-context")}}, headers=V1)
    more = await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {
        "message": message("tck-complete-task", taskId=first["id"])}}, headers=V1)
    follow = more.json()["result"]["task"]
    return {"generated": bool(first.get("contextId")), "kept": mine.json()["result"]["task"]["contextId"],
            "same task": follow["id"] == first["id"], "same context": follow["contextId"] == first["contextId"],
            "state": follow["status"]["state"]}


@check("history_content")
async def _history_content(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """CORE-HIST-004..006: a two-turn task's history holds the exchanged messages in order, as they were sent
    (part and message metadata, extensions)."""
    if b != "jsonrpc":
        return None
    first = {**message("tck-input-required"), "parts": [{"text": "hello", "metadata": {"k": "v"}}],
             "metadata": {"m": "1"}, "extensions": ["https://example.com/ext/v1"]}
    r = await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": first}}, headers=V1)
    tid = r.json()["result"]["task"]["id"]
    second = message("tck-complete-task", taskId=tid)
    await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": second}}, headers=V1)
    task = (await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": tid}}, headers=V1)).json()
    history = task["result"]["history"]
    sent = [{k: v for k, v in m.items() if k not in ("contextId", "taskId")} for m in (first, second)]
    kept = [{k: v for k, v in m.items() if k not in ("contextId", "taskId")} for m in history if m["role"] == "ROLE_USER"]
    return {"roles": [m["role"] for m in history], "as sent": kept == sent}


# --- streaming (CORE-STREAM-*, STREAM-ORDER-*, STREAM-SUB-*, JSONRPC-SSE-001, HTTP_JSON-SSE-001) --------------
@check("stream_shapes")
async def _stream_shapes(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """A task stream begins with the Task and ends at its terminal state, events in order; a message-only
    stream is one Message; chunked artifacts keep append/lastChunk."""
    return {p: await stream_view(c, way, b, "SendStreamingMessage", {"message": message(p)})
            for p in ("tck-stream", "tck-message-response", "tck-stream-chunked", "tck-stream-artifact-chunked",
                      "tck-stream-artifact-file", "tck-stream-002", "tck-quiet-input")}


@check("subscribe")
async def _subscribe(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """STREAM-SUB-001..004, STREAM-ORDER-002..004: subscribers to a running task each get the Task first, then
    the same events, and their streams close at the terminal state, one closed early taking nothing from the
    others; terminal and unknown tasks are refused."""
    s.agent.executor.release.clear()
    try:
        tid = await task_id(c, way, "tck-slow", returnImmediately=True)
        async with sse(c, way, b, "SubscribeToTask", {"id": tid}) as (_, one), \
                sse(c, way, b, "SubscribeToTask", {"id": tid}) as (_, two):
            async with sse(c, way, b, "SubscribeToTask", {"id": tid}) as (_, early):
                firsts = [event_view(await anext(one)), event_view(await anext(two)), event_view(await anext(early))]
            s.agent.executor.release.set()  # all three were subscribed; the third is closed now
            rests = [[event_view(e) async for e in one], [event_view(e) async for e in two]]
    finally:
        s.agent.executor.release.set()
    return {"first": firsts, "rest": rests,
            "terminal": await stream_view(c, way, b, "SubscribeToTask", {"id": await task_id(c, way)}),
            "unknown": await stream_view(c, way, b, "SubscribeToTask", {"id": "tck-no-such-task"})}


# --- GetTask / history / ListTasks / CancelTask (CORE-GET-*, CORE-HIST-*, CORE-LIST-*, CORE-CANCEL-*) -------
@check("get_and_history")
async def _get_and_history(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """CORE-GET-001/002, CORE-HIST-001/002/003: history cut to historyLength on GetTask and SendMessage."""
    tid = await task_id(c, way)
    return {"0": await call(c, way, b, "GetTask", {"id": tid, "historyLength": 0}),
            "1": await call(c, way, b, "GetTask", {"id": tid, "historyLength": 1}),
            "send 0": await call(c, way, b, "SendMessage", {"message": message("tck-complete-task"),
                                                            "configuration": {"historyLength": 0}}),
            "1 as a string": await call(c, way, b, "GetTask", {"id": tid, "historyLength": "1"}),
            "1 as 1.0": await call(c, way, b, "GetTask", {"id": tid, "historyLength": 1.0}),
            "1.5": await call(c, way, b, "GetTask", {"id": tid, "historyLength": 1.5}),
            "unknown": await call(c, way, b, "GetTask", {"id": "tck-no-such-task"}),
            "unknown, negative length": await call(c, way, b, "GetTask", {"id": "tck-no-such-task", "historyLength": -1})}


async def list_page(c: httpx.AsyncClient, way: Way, b: str, query: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    if b == "jsonrpc":
        r = await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": query}, headers=V1)
        doc = r.json()
        return r.status_code, doc.get("result", doc)
    r = await c.get(way.rest + "/tasks", params=query, headers=V1)
    return r.status_code, r.json()


@check("list")
async def _list(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """CORE-LIST-002..005: by contextId, cursor pages, nextPageToken empty on the last page, newest status first,
    artifacts only when asked for."""
    ctx = f"tck-ctx-{next(_n)}"
    for _ in range(3):
        await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": message("tck-artifact-text", contextId=ctx)}}, headers=V1)
    status, page = await list_page(c, way, b, {"contextId": ctx, "pageSize": 2})
    _, last = await list_page(c, way, b, {"contextId": ctx, "pageSize": 2, "pageToken": page.get("nextPageToken", "")})
    _, whole = await list_page(c, way, b, {"contextId": ctx, "includeArtifacts": True})
    stamps = [t["status"]["timestamp"] for t in whole.get("tasks", [])]
    return {"http": status, "first page": len(page["tasks"]), "token": bool(page.get("nextPageToken")),
            "last page": len(last.get("tasks", [])), "last token": last.get("nextPageToken"), "total": page.get("totalSize"),
            "newest first": stamps == sorted(stamps, reverse=True),
            "artifacts": ["artifacts" in t for t in whole.get("tasks", [])],
            "no artifacts": ["artifacts" in t for t in page["tasks"] + last.get("tasks", [])]}


@check("list_filters")
async def _list_filters(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """CORE-LIST-*: ListTasks filters by status and by `statusTimestampAfter`, and cuts each task's history to
    `historyLength` (at the root too, where the gateway merges the agents' lists)."""
    ctx = f"tck-ctx-{next(_n)}"
    for prefix in ("tck-complete-task", "tck-input-required", "tck-input-required"):
        await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": message(prefix, contextId=ctx)}}, headers=V1)
    _, waiting = await list_page(c, way, b, {"contextId": ctx, "status": "TASK_STATE_INPUT_REQUIRED"})
    _, later = await list_page(c, way, b, {"contextId": ctx, "statusTimestampAfter": "2999-01-01T00:00:00Z"})
    _, earlier = await list_page(c, way, b, {"contextId": ctx, "statusTimestampAfter": "2000-01-01T00:00:00Z"})
    _, cut = await list_page(c, way, b, {"contextId": ctx, "historyLength": 0})
    _, one = await list_page(c, way, b, {"contextId": ctx, "historyLength": 1})
    return {"waiting": [t["status"]["state"] for t in waiting.get("tasks", [])], "waiting total": waiting.get("totalSize"),
            "later": len(later.get("tasks", [])), "earlier": len(earlier.get("tasks", [])),
            "history 0": [len(t.get("history", [])) for t in cut.get("tasks", [])],
            "history 1": [len(t.get("history", [])) for t in one.get("tasks", [])]}


@check("cancel")
async def _cancel(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """CORE-CANCEL-001/002/003: an interrupted task is canceled; a completed one and an unknown one are refused."""
    return {"input required": await call(c, way, b, "CancelTask", {"id": await task_id(c, way, "tck-input-required")}),
            "completed": await call(c, way, b, "CancelTask", {"id": await task_id(c, way)}),
            "unknown": await call(c, way, b, "CancelTask", {"id": "tck-no-such-task"})}


@check("list_invalid")
async def _list_invalid(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """CORE-LIST-*, CORE-ERR-002: ListTasks params out of range are InvalidParams (at the root too, where the
    gateway merges the agents' lists and no agent's error would surface)."""
    return {label: await call(c, way, b, "ListTasks", params) for label, params in [
        ("negative history", {"historyLength": -1}), ("page size 0", {"pageSize": 0}), ("page size 101", {"pageSize": 101}),
        ("status and history", {"status": "TASK_STATE_COMPLETED", "historyLength": -5})]}


@check("empty_part")
async def _empty_part(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """A part carrying none of text, raw, url, data: the SDK agent runs the task; the gateway refuses it."""
    empty = {**message("tck-complete-task"), "parts": [{}]}
    return {"send": await call(c, way, b, "SendMessage", {"message": empty}),
            "stream": await stream_view(c, way, b, "SendStreamingMessage", {"message": empty})}


@check("required_params")
async def _required_params(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """CORE-ERR-002: a request without its required fields is InvalidParams on every method, the streaming
    ones too (a SubscribeToTask without an id was a 500 on `/agents/{name}`)."""
    if b == "rest":
        return {"stream, no message": await stream_view(c, way, b, "SendStreamingMessage", {})}
    out = {m: await rpc(c, way, m, {}) for m in ("SendMessage", "GetTask", "CancelTask")}
    for m in ("SendStreamingMessage", "SubscribeToTask"):
        out[m] = await stream_view(c, way, b, m, {})
    return out


# --- capabilities the agent does not have (CORE-CAP-001/003) ---------------------------------------------
@check("push_configs")
async def _push_configs(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """The push config methods on a task nobody has: TaskNotFound (CORE-ERR-002: after their params are checked);
    with capabilities.pushNotifications false they are refused (CORE-CAP-001: `test_push_off_…`)."""
    if b == "jsonrpc":
        answers = [await rpc(c, way, m, p) for m, p in [
            ("CreateTaskPushNotificationConfig", {"taskId": "tck-x", "url": "https://example.com/hook"}),
            ("GetTaskPushNotificationConfig", {"taskId": "tck-x", "id": "c1"}),
            ("ListTaskPushNotificationConfigs", {"taskId": "tck-x"}),
            ("DeleteTaskPushNotificationConfig", {"taskId": "tck-x", "id": "c1"}),
            ("CreateTaskPushNotificationConfig", {}), ("GetTaskPushNotificationConfig", {})]]
    else:
        answers = [await rest(c, way, "POST", "/tasks/tck-x/pushNotificationConfigs", {"url": "https://example.com/hook"}),
                   await rest(c, way, "GET", "/tasks/tck-x/pushNotificationConfigs/c1"),
                   await rest(c, way, "GET", "/tasks/tck-x/pushNotificationConfigs"),
                   await rest(c, way, "DELETE", "/tasks/tck-x/pushNotificationConfigs/c1"),
                   await rest(c, way, "POST", "/tasks/tck-x/pushNotificationConfigs", {})]
    return {str(i): a for i, a in enumerate(answers)}


# --- push notifications (the kit's PUSH-CREATE/GET/LIST/DEL/DELIVER-*) ------------------------------------
async def push_call(c: httpx.AsyncClient, way: Way, b: str, method: str, tid: str, body: dict[str, Any] | None = None,
                    cid: str | None = None) -> dict[str, Any]:
    """One push config method on either binding: `ok` and what came back (config ids and URLs), or the error view."""
    if b == "jsonrpc":
        params = {"taskId": tid, **({"id": cid} if cid is not None else {}), **(body or {})}
        r = await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=V1)
        doc = r.json()
        if "error" in doc:
            return {"ok": False, "code": doc["error"]["code"], "reasons": reasons(doc["error"].get("data"))}
        result = doc.get("result")
    else:
        base = f"{way.rest}/tasks/{tid}/pushNotificationConfigs"
        verb, url = {"CreateTaskPushNotificationConfig": ("POST", base), "ListTaskPushNotificationConfigs": ("GET", base),
                     "GetTaskPushNotificationConfig": ("GET", f"{base}/{cid}"),
                     "DeleteTaskPushNotificationConfig": ("DELETE", f"{base}/{cid}")}[method]
        r = await c.request(verb, url, json=body, headers=V1)
        if r.status_code >= 400:
            err = r.json()["error"]
            return {"ok": False, "http": r.status_code, "reasons": reasons(err.get("details"))}
        result = r.json() if r.content else None
    if isinstance(result, dict) and "configs" in result:
        return {"ok": True, "ids": sorted(cfg.get("id") for cfg in result["configs"])}
    if isinstance(result, dict) and "url" in result:
        return {"ok": True, "id": result.get("id"), "taskId": result.get("taskId") == tid, "url": bool(result["url"])}
    return {"ok": True}


@check("push_crud")
async def _push_crud(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """PUSH-CREATE-001/002, PUSH-GET-001/002, PUSH-LIST-001, PUSH-DEL-001/002 on a completed task, as the kit runs
    them (its webhook URL here is the loopback receiver's: the sandbox resolves no public name, and the gateway
    checks a webhook's host when it is given)."""
    tid = await task_id(c, way)
    cid = mid("tck-push")
    cfg = {"id": cid, "url": f"{s.hook.url}/crud"}
    out = {"create": await push_call(c, way, b, "CreateTaskPushNotificationConfig", tid, cfg)}
    out["get"] = await push_call(c, way, b, "GetTaskPushNotificationConfig", tid, cid=cid)
    out["get nonexistent"] = await push_call(c, way, b, "GetTaskPushNotificationConfig", tid, cid=mid("tck-nonexistent"))
    out["list"] = await push_call(c, way, b, "ListTaskPushNotificationConfigs", tid)
    out["list"]["ids"] = [i == cid for i in out["list"].get("ids", [])]
    out["delete"] = await push_call(c, way, b, "DeleteTaskPushNotificationConfig", tid, cid=cid)
    out["get deleted"] = await push_call(c, way, b, "GetTaskPushNotificationConfig", tid, cid=cid)
    out["delete again"] = await push_call(c, way, b, "DeleteTaskPushNotificationConfig", tid, cid=cid)
    for k in ("create", "get"):
        if out[k].get("id") == cid:
            out[k]["id"] = True
    return out


DELIVERY_TIMEOUT_S = 15.0  # the kit's wait for a webhook call


@check("push_delivery")
async def _push_delivery(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """PUSH-DELIVER-001/002/003: a task created with `configuration.taskPushNotificationConfig` (a token and Bearer
    credentials) and completed by a follow-up: the webhook is called at least once, with the client's
    `Authorization`, and its body is a StreamResponse about the task the client knows."""
    path = f"/deliver/{mid(way.kind)}"
    cfg = {"id": mid("tck-push"), "url": s.hook.url + path, "token": "tck-token",
           "authentication": {"scheme": "Bearer", "credentials": "tck-test-token-auth"}}
    send = {"message": message("tck-input-required"), "configuration": {"taskPushNotificationConfig": cfg}}
    if b == "jsonrpc":
        r = await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": send}, headers=V1)
        task = r.json()["result"]["task"]
    else:
        r = await c.post(way.rest + "/message:send", json=send, headers=V1)
        task = r.json()["task"]
    tid, first = task["id"], task["status"]["state"]
    done = await call(c, way, b, "SendMessage", {"message": message("tck-complete-task", taskId=tid)})
    hits = await s.hook.wait_until(lambda h: h.path == path, timeout=DELIVERY_TIMEOUT_S)
    hit = next(h for h in hits if h.path == path)
    try:
        event = json_format.ParseDict(hit.body, a2a_pb2.StreamResponse())  # the kit's schema check, as protobuf reads it
        kind, about = event.WhichOneof("payload"), event_task(event)
    except json_format.ParseError as exc:
        kind, about = f"not a StreamResponse: {exc}", None
    return {"first": first, "follow-up": done.get("state"),
            "delivered": True, "authorization": hit.headers.get("authorization"), "payload": kind,
            "about the client's task": about == tid}


def event_task(event: a2a_pb2.StreamResponse) -> str | None:
    which = event.WhichOneof("payload")
    inner = getattr(event, which) if which else None
    return (inner.id if which == "task" else getattr(inner, "task_id", None)) if inner is not None else None


@check("extended_card")
async def _extended_card(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """CORE-CAP-003: with no capabilities.extendedAgentCard, GetExtendedAgentCard is UnsupportedOperationError."""
    card = (await c.get(way.card + CARD)).json()
    answer = await rpc(c, way, "GetExtendedAgentCard", {}) if b == "jsonrpc" else await rest(c, way, "GET", "/extendedAgentCard")
    return {"declared": bool(card["capabilities"].get("extendedAgentCard")), "answer": answer}


# --- versions and service parameters (VER-*, JSONRPC-SVC-002, HTTP_JSON-SVC-002) --------------------------
@check("versions")
async def _versions(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """VER-SERVER-002/003, VER-CLIENT-002: an unknown version is refused, a patch number ignored, an absent or
    empty header read as 0.3 (which this agent does not serve); A2A-Extensions is accepted."""
    async def send(headers: dict[str, str]) -> dict[str, Any]:
        if b == "jsonrpc":
            return await rpc(c, way, "SendMessage", {"message": message("tck-complete-task")}, headers=headers)
        return await rest(c, way, "POST", "/message:send", {"message": message("tck-complete-task")}, headers=headers)
    return {v: await send(h) for v, h in [
        ("99.0", {"A2A-Version": "99.0"}), ("1.0.3", {"A2A-Version": "1.0.3"}), ("absent", {}), ("empty", {"A2A-Version": ""}),
        ("a list", {"A2A-Version": "1.0, 0.3"}),
        ("extensions", {**V1, "A2A-Extensions": "https://example.com/ext/v1,https://example.com/ext/v2"})]}


# --- JSON-RPC envelope (JSONRPC-FMT-001, JSONRPC-ERR-*, JSON-RPC 2.0 §4-5) -----------------------------------
@check("jsonrpc_envelope")
async def _jsonrpc_envelope(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """-32700 on broken JSON, -32600 on a bad envelope (version, method, id of a wrong type, a batch), -32601 on
    an unknown method (with a slash too), -32602 on bad params; the id comes back as sent (string, number, null)."""
    if b != "jsonrpc":
        return None
    get = {"id": "tck-no-such-task"}
    out: dict[str, Any] = {}
    for label, raw in [("broken", b'{"jsonrpc": "2.0", "method": "SendMessage", "params": {'), ("empty", b""),
                       ("string", b'"hello"'), ("batch", b"[]"),
                       ("batch of one", orjson.dumps([{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": get}])),
                       ("jsonrpc 1.0", orjson.dumps({"jsonrpc": "1.0", "id": 1, "method": "GetTask", "params": get})),
                       ("no method", orjson.dumps({"jsonrpc": "2.0", "id": 1, "params": {}})),
                       ("notification", orjson.dumps({"jsonrpc": "2.0", "method": "GetTask", "params": get}))]:
        out[label] = await rpc(c, way, None, raw=raw)
    for label, rid in [("id object", {"bad": "type"}), ("id array", [1]), ("id true", True), ("id 1.5", 1.5),
                       ("id string", "abc"), ("id number", 42), ("id null", None)]:
        out[label] = await rpc(c, way, "GetTask", get, rid=rid)
    out["id past 64 bits"] = await rpc(c, way, None, raw=b'{"jsonrpc": "2.0", "id": 1180591620717411303424, '
                                       b'"method": "GetTask", "params": {"id": "tck-no-such-task"}}')
    out["unknown method"] = await rpc(c, way, "SendMessageXXX", {}, rid="3")
    out["unknown slash method"] = await rpc(c, way, "nonexistent/method", {})
    out["parts not a list"] = await rpc(c, way, "SendMessage", {"message": {"parts": "invalid"}})
    out["no message"] = await rpc(c, way, "SendMessage", {})
    out["params an array"] = await rpc(c, way, "GetTask", ["x"])
    for label, params in [("params a string", "x"), ("params a number", 5), ("params true", True), ("params null", None)]:
        out[label] = await rpc(c, way, "GetTask", params)  # JSON-RPC 2.0 §4.2: params, if present, are structured
    out["unknown fields"] = await rpc(c, way, "SendMessage", {"message": {**message("tck-complete-task"), "tckExtra": 1},
                                                               "tckExtra": {"a": 1}})
    return out


# --- HTTP+JSON binding (HTTP_JSON-URL-*, HTTP_JSON-STATUS-001, HTTP_JSON-ERR-*) ------------------------------
@check("rest_binding")
async def _rest_binding(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """Paths and verbs, the A2A media type on answers, errors as AIP-193 objects with the table's statuses."""
    if b != "rest":
        return None
    broken = await c.post(way.rest + "/message:send", content=b'{"message": ', headers={**V1, "Content-Type": "application/json"})
    return {"a2a+json body": await rest(c, way, "POST", "/message:send", {"message": message("tck-complete-task")},
                                        headers={**V1, "Content-Type": "application/a2a+json"}),
            "broken json": rest_view(broken), "no message": await rest(c, way, "POST", "/message:send", {}),
            "page size not a number": await rest(c, way, "GET", "/tasks", query={"pageSize": "abc"})}


_CARD_FIELDS = ("name", "description", "version", "supportedInterfaces", "capabilities", "defaultInputModes",
                "defaultOutputModes", "skills")


@check("card")
async def _card(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """CARD-DISC-001, CARD-STRUCT-001, CARD-PROTO-001/002: the card at the well-known path has every required
    field, each interface a URL, a binding and a version, each skill an id, a name, a description and tags;
    the interface of this binding answers a SendMessage at its URL."""
    r = await c.get(way.card + CARD)
    card = r.json()
    interfaces = card.get("supportedInterfaces") or []
    url = next(i["url"] for i in interfaces if i.get("protocolBinding") == {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON"}[b])
    reached = Way(way.kind, url, url, way.card)
    return {"http": r.status_code, "type": media_type(r), "missing": [f for f in _CARD_FIELDS if not card.get(f)],
            "interfaces": sorted(i.get("protocolBinding") for i in interfaces if i.get("url") and i.get("protocolVersion")),
            "skills complete": all(sk.get("id") and sk.get("name") and sk.get("description") and "tags" in sk
                                   for sk in card.get("skills") or []),
            "sent at its url": await call(c, reached, b, "SendMessage", {"message": message("tck-complete-task")})}


_SNAKE = re.compile(r"^[a-z]+(_[a-z]+)+$")
_ISO_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")


def serial_view(doc: Any) -> dict[str, Any]:
    """DM-SERIAL-001..003 over a whole answer (metadata too, as the kit walks it): snake_case keys, enum values
    that are not strings, timestamps that are not ISO 8601 with `Z`."""
    keys: set[str] = set()
    enums: list[Any] = []
    stamps: list[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                keys.add(k)
                if k in ("state", "role"):
                    enums.append(v)
                if k in ("timestamp", "createdAt", "updatedAt", "statusTimestamp") and v is not None:
                    stamps.append(v)
                walk(v)
        elif isinstance(node, list):
            for item in node:
                walk(item)
    walk(doc)
    return {"snake_case": sorted(k for k in keys if _SNAKE.match(k)),
            "enums not strings": [e for e in enums if not isinstance(e, str)],
            "timestamps not ISO Z": [t for t in stamps if not (isinstance(t, str) and _ISO_Z.match(t))],
            "timestamps": bool(stamps)}


@check("data_model")
async def _data_model(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """DM-TASK/MSG/PART/ART/STATUS-001, DM-SERIAL-001..005: answers (a task with artifacts, a stream, a task read
    back) use camelCase keys, string enums and ISO 8601 timestamps with `Z`, and parse as A2A types; unknown
    fields in a request are ignored."""
    params = {"message": {**message("tck-artifact-data"), "tckUnknownField": "ignored"}, "tckExtraParam": 42}
    if b == "jsonrpc":
        r = await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}, headers=V1)
        sent = r.json().get("result")
    else:
        r = await c.post(way.rest + "/message:send", json=params, headers=V1)
        sent = r.json()
    tid = sent["task"]["id"]
    json_format.ParseDict(sent, a2a_pb2.SendMessageResponse())  # the schema: it parses as an A2A type
    got = await c.get(way.rest + f"/tasks/{tid}", headers=V1) if b == "rest" else await c.post(
        way.rpc, json={"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": tid}}, headers=V1)
    read = got.json() if b == "rest" else got.json()["result"]
    json_format.ParseDict(read, a2a_pb2.Task())
    async with sse(c, way, b, "SendStreamingMessage", {"message": message("tck-stream")}) as (_, events):
        streamed = [e async for e in events]
    for e in streamed:
        json_format.ParseDict(e, a2a_pb2.StreamResponse())
    return {"http": r.status_code, "sent": serial_view(sent), "read": serial_view(read), "streamed": serial_view(streamed)}


@check("unsupported_media")
async def _unsupported_media(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """CORE-SEND-003: a part whose media type the agent's card does not accept is ContentTypeNotSupportedError."""
    part = {"raw": "dGNr", "mediaType": "application/x-unsupported-tck-type"}
    return await call(c, way, b, "SendMessage", {"message": {**message("tck-send-003"), "parts": [part]}})


@check("no_parts")
async def _no_parts(c: httpx.AsyncClient, way: Way, b: str, s: Stack) -> Any:
    """CORE-ERR-002: a message without parts is InvalidParams, sent or streamed."""
    empty = {**message("tck-complete-task"), "parts": []}
    return {"send": await call(c, way, b, "SendMessage", {"message": empty}),
            "stream": await stream_view(c, way, b, "SendStreamingMessage", {"message": empty})}


_NO_CONTENT = "a part with nothing in it has no modality to route by; the a2a-sdk agent runs the task with an empty part"

# (check, binding, way) -> the fields where the gateway answers differently, and why (docs/operations.md)
DIFFERENCES: dict[tuple[str, str, str], tuple[dict[str, Any], str]] = {
    **{("empty_part", "jsonrpc", k): ({"send": {"http": 200, "id": 1, "code": -32602, "reasons": ["INVALID_PARAMS"]},
                                       "stream": {"http": 200, "id": 5, "code": -32600, "reasons": ["INVALID_REQUEST"]}},
                                      _NO_CONTENT) for k in ("root", "agent-path")},
    **{("empty_part", "rest", k): ({b: {"http": 400, "type": "application/json", "code": 400, "status": "INVALID_ARGUMENT",
                                        "reasons": ["INVALID_REQUEST"]} for b in ("send", "stream")}, _NO_CONTENT)
       for k in ("root", "agent-path")},
    **{("unsupported_media", b, k): (
        {"jsonrpc": {"http": 200, "id": 1, "code": -32005, "reasons": ["CONTENT_TYPE_NOT_SUPPORTED"], "kind": None,
                     "state": None, "history": None},
         "rest": {"http": 415, "type": "application/json", "code": 415, "status": "INVALID_ARGUMENT",
                  "reasons": ["CONTENT_TYPE_NOT_SUPPORTED"], "kind": None, "state": None, "history": None}}[b],
        "the gateway routes by what cards accept and refuses a part no agent takes (as A2A 1.0 and the kit ask); "
        "a2a-sdk 1.3 does not check input modes and runs the task") for b in ("jsonrpc", "rest") for k in ("root", "agent-path")},
    **{("cancel", "rest", k): ({"completed": {"http": 409, "type": "application/json", "code": 409,
                                              "status": "FAILED_PRECONDITION", "reasons": ["TASK_NOT_CANCELABLE"]}},
                               "A2A 1.0's error table (and the kit) give TaskNotCancelableError HTTP 409; a2a-sdk 1.3 answers 400")
       for k in ("root", "agent-path")},
    **{("jsonrpc_envelope", "jsonrpc", k): (
        {label: {"http": 200, "id": None, "code": -32700, "reasons": ["PARSE_ERROR"]} for label in ("broken", "empty")},
        "the gateway's parse errors carry an ErrorInfo (reason PARSE_ERROR), as every other A2A 1.0 error does; "
        "a2a-sdk's have no data") for k in ("root", "agent-path")},
    **{("rest_binding", "rest", k): (
        {"broken json": {"http": 400, "type": "application/json", "code": 400, "status": "INVALID_ARGUMENT",
                         "reasons": ["INVALID_REQUEST"]}},
        "same status and reason; only the message differs (the gateway names the JSON error)") for k in ("root", "agent-path")},
}

_PUSH_NOT_FOUND = {"jsonrpc": {"ok": False, "code": -32001, "reasons": ["TASK_NOT_FOUND"]},
                   "rest": {"ok": False, "http": 404, "reasons": ["TASK_NOT_FOUND"]}}
# What the agent answers directly, pinned, so a check that measures nothing cannot pass.
_ERR_RPC = {"http": 200, "id": 1}
DIRECT: dict[tuple[str, str], dict[str, Any]] = {
    ("send_shapes", "jsonrpc"): {
        "tck-complete-task": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_COMPLETED", "history": 1},
        "tck-message-response": {**_ERR_RPC, "kind": "message", "state": None},
        "tck-artifact-file": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_COMPLETED",
                              "artifacts": [["filename", "mediaType", "raw"]], "history": 1},
        "tck-artifact-file-url": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_COMPLETED",
                                  "artifacts": [["filename", "mediaType", "url"]], "history": 1},
        "tck-artifact-data": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_COMPLETED", "artifacts": [["data"]], "history": 1},
        "tck-input-required": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_INPUT_REQUIRED", "history": 1}},
    ("agent_error", "rest"): {"send": {"http": 500, "type": "application/json", "code": 500, "status": "INTERNAL",
                                       "reasons": ["UNKNOWN_ERROR"]}},
    ("agent_error", "jsonrpc"): {"send": {**_ERR_RPC, "code": -32603, "reasons": ["UNKNOWN_ERROR"]}},
    ("return_immediately", "jsonrpc"): {"quick": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_SUBMITTED", "history": 1},
                                        "blocking": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_INPUT_REQUIRED", "history": 1}},
    ("context_ids", "jsonrpc"): {"generated": True, "kept": "tck-client-context", "same task": True, "same context": True,
                                 "state": "TASK_STATE_COMPLETED"},
    ("history_content", "jsonrpc"): {"roles": ["ROLE_USER", "ROLE_AGENT", "ROLE_USER"], "as sent": True},
    ("stream_shapes", "jsonrpc"): {
        "tck-stream": {"http": 200, "type": "text/event-stream", "events": [
            ("task", "TASK_STATE_SUBMITTED", 1), ("statusUpdate", "TASK_STATE_WORKING"),
            ("artifactUpdate", None, (["streamed"], None, None)), ("statusUpdate", "TASK_STATE_COMPLETED")]},
        "tck-message-response": {"http": 200, "type": "text/event-stream", "events": [("message", None)]},
        "tck-stream-chunked": {"http": 200, "type": "text/event-stream", "events": [
            ("task", "TASK_STATE_SUBMITTED", 1), ("statusUpdate", "TASK_STATE_WORKING"),
            ("artifactUpdate", None, (["one "], None, None)), ("artifactUpdate", None, (["two"], True, True)),
            ("statusUpdate", "TASK_STATE_COMPLETED")]},
        # the kit's agent sends its first chunk with `append` to an artifact not yet sent: a2a-sdk 1.3 ends the
        # stream with InvalidAgentResponse, and the gateway passes that on as it came
        "tck-stream-artifact-chunked": {"http": 200, "type": "text/event-stream", "events": [
            ("task", "TASK_STATE_SUBMITTED", 1), ("statusUpdate", "TASK_STATE_WORKING"), ("error", -32006, ["INVALID_AGENT_RESPONSE"])]},
        "tck-stream-artifact-file": {"http": 200, "type": "text/event-stream", "events": [
            ("task", "TASK_STATE_SUBMITTED", 1), ("statusUpdate", "TASK_STATE_WORKING"),
            ("artifactUpdate", None, ([["filename", "mediaType", "raw"]], None, None)), ("statusUpdate", "TASK_STATE_COMPLETED")]},
        "tck-stream-002": {"http": 200, "type": "text/event-stream", "events": [
            ("task", "TASK_STATE_SUBMITTED", 1), ("statusUpdate", "TASK_STATE_COMPLETED")]},
        "tck-quiet-input": {"http": 200, "type": "text/event-stream", "events": [
            ("task", "TASK_STATE_SUBMITTED", 1), ("statusUpdate", "TASK_STATE_INPUT_REQUIRED")]}},
    ("subscribe", "jsonrpc"): {
        "first": [("task", "TASK_STATE_WORKING", 1)] * 3,
        "rest": [[("artifactUpdate", None, (["late"], None, None)), ("statusUpdate", "TASK_STATE_COMPLETED")]] * 2,
        "unknown": {"http": 200, "id": 5, "code": -32001, "reasons": ["TASK_NOT_FOUND"]}},
    ("get_and_history", "jsonrpc"): {
        "0": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_COMPLETED"},
        "1": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_COMPLETED", "history": 1},
        "1 as a string": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_COMPLETED", "history": 1},
        "1 as 1.0": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_COMPLETED", "history": 1},
        "1.5": {**_ERR_RPC, "code": -32602, "reasons": ["INVALID_PARAMS"]},
        "unknown": {**_ERR_RPC, "code": -32001, "reasons": ["TASK_NOT_FOUND"]},
        "unknown, negative length": {**_ERR_RPC, "code": -32602, "reasons": ["INVALID_PARAMS"]}},
    ("empty_part", "jsonrpc"): {"send": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_COMPLETED", "history": 1},
                                "stream": {"http": 200, "type": "text/event-stream",
                                           "events": [("task", "TASK_STATE_SUBMITTED", 1), ("statusUpdate", "TASK_STATE_COMPLETED")]}},
    ("empty_part", "rest"): {"send": {"http": 200, "type": "application/a2a+json", "kind": "task", "state": "TASK_STATE_COMPLETED",
                                      "history": 1}},
    ("required_params", "jsonrpc"): {
        **{m: {**_ERR_RPC, "code": -32602, "reasons": ["INVALID_PARAMS"]} for m in ("SendMessage", "GetTask", "CancelTask")},
        **{m: {"http": 200, "id": 5, "code": -32602, "reasons": ["INVALID_PARAMS"]}
           for m in ("SendStreamingMessage", "SubscribeToTask")}},
    ("required_params", "rest"): {"stream, no message": {"http": 400, "type": "application/json", "code": 400,
                                                         "status": "INVALID_ARGUMENT", "reasons": ["INVALID_PARAMS"]}},
    ("list", "jsonrpc"): {"http": 200, "first page": 2, "token": True, "last page": 1, "last token": "", "total": 3,
                          "newest first": True, "artifacts": [True] * 3, "no artifacts": [False] * 3},
    ("list", "rest"): {"http": 200, "first page": 2, "last page": 1, "total": 3, "artifacts": [True] * 3},
    ("list_invalid", "jsonrpc"): {label: {**_ERR_RPC, "code": -32602, "reasons": ["INVALID_PARAMS"]} for label in
                                  ("negative history", "page size 0", "page size 101", "status and history")},
    ("list_invalid", "rest"): {label: {"http": 400, "type": "application/json", "code": 400, "status": "INVALID_ARGUMENT",
                                       "reasons": ["INVALID_PARAMS"]} for label in
                               ("negative history", "page size 0", "page size 101", "status and history")},
    ("cancel", "jsonrpc"): {"input required": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_CANCELED", "history": 2},
                            "completed": {**_ERR_RPC, "code": -32002, "reasons": ["TASK_NOT_CANCELABLE"]},
                            "unknown": {**_ERR_RPC, "code": -32001, "reasons": ["TASK_NOT_FOUND"]}},
    ("cancel", "rest"): {"completed": {"http": 400, "type": "application/json", "code": 400, "status": "FAILED_PRECONDITION",
                                       "reasons": ["TASK_NOT_CANCELABLE"]}},
    ("push_configs", "jsonrpc"): {**{str(i): {**_ERR_RPC, "code": -32001, "reasons": ["TASK_NOT_FOUND"]} for i in range(4)},
                                  **{str(i): {**_ERR_RPC, "code": -32602, "reasons": ["INVALID_PARAMS"]} for i in (4, 5)}},
    ("push_configs", "rest"): {str(i): {"http": 404, "type": "application/json", "code": 404, "status": "NOT_FOUND",
                                        "reasons": ["TASK_NOT_FOUND"]} for i in range(4)},
    **{("push_crud", b): {"create": {"ok": True, "id": True, "taskId": True, "url": True},
                          "get": {"ok": True, "id": True, "taskId": True, "url": True},
                          "get nonexistent": _PUSH_NOT_FOUND[b], "list": {"ok": True, "ids": [True]}, "delete": {"ok": True},
                          "get deleted": _PUSH_NOT_FOUND[b], "delete again": {"ok": True}} for b in ("jsonrpc", "rest")},
    **{("push_delivery", b): {"delivered": True, "authorization": "Bearer tck-test-token-auth", "about the client's task": True,
                              "follow-up": "TASK_STATE_COMPLETED"} for b in ("jsonrpc", "rest")},
    ("extended_card", "jsonrpc"): {"declared": False, "answer": {**_ERR_RPC, "code": -32004, "reasons": ["UNSUPPORTED_OPERATION"]}},
    ("extended_card", "rest"): {"declared": False, "answer": {"http": 400, "type": "application/json", "code": 400,
                                                              "status": "FAILED_PRECONDITION", "reasons": ["UNSUPPORTED_OPERATION"]}},
    ("versions", "jsonrpc"): {"99.0": {**_ERR_RPC, "code": -32009, "reasons": ["VERSION_NOT_SUPPORTED"]},
                              "1.0.3": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_COMPLETED", "history": 1},
                              "absent": {**_ERR_RPC, "code": -32009, "reasons": ["VERSION_NOT_SUPPORTED"]},
                              "a list": {**_ERR_RPC, "code": -32009, "reasons": ["VERSION_NOT_SUPPORTED"]},
                              "extensions": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_COMPLETED", "history": 1}},
    ("versions", "rest"): {"99.0": {"http": 400, "type": "application/json", "code": 400, "status": "FAILED_PRECONDITION",
                                    "reasons": ["VERSION_NOT_SUPPORTED"]}},
    ("jsonrpc_envelope", "jsonrpc"): {
        "batch": {"http": 200, "id": None, "code": -32600, "reasons": ["INVALID_REQUEST"]},
        "jsonrpc 1.0": {**_ERR_RPC, "code": -32600, "reasons": ["INVALID_REQUEST"]},
        "id object": {"http": 200, "id": None, "code": -32600, "reasons": ["INVALID_REQUEST"]},
        "id true": {"http": 200, "id": None, "code": -32600, "reasons": ["INVALID_REQUEST"]},
        "id string": {"http": 200, "id": "abc", "code": -32001, "reasons": ["TASK_NOT_FOUND"]},
        "id number": {"http": 200, "id": 42, "code": -32001, "reasons": ["TASK_NOT_FOUND"]},
        "unknown method": {"http": 200, "id": "3", "code": -32601, "reasons": []},
        "id past 64 bits": {"http": 200, "id": 2 ** 70, "code": -32001, "reasons": ["TASK_NOT_FOUND"]},
        **{label: {**_ERR_RPC, "code": -32600, "reasons": ["INVALID_REQUEST"]}
           for label in ("params a string", "params a number", "params true")},
        "params null": {**_ERR_RPC, "code": -32602, "reasons": ["INVALID_PARAMS"]},
        "params an array": {**_ERR_RPC, "code": -32602, "reasons": ["INVALID_PARAMS"]},
        "unknown slash method": {**_ERR_RPC, "code": -32601, "reasons": []},
        "parts not a list": {**_ERR_RPC, "code": -32602, "reasons": ["INVALID_PARAMS"]},
        "unknown fields": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_COMPLETED", "history": 1}},
    ("card", "jsonrpc"): {"http": 200, "type": "application/json", "missing": [], "interfaces": ["GRPC", "HTTP+JSON", "JSONRPC"],
                          "skills complete": True,
                          "sent at its url": {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_COMPLETED", "history": 1}},
    ("unsupported_media", "jsonrpc"): {**_ERR_RPC, "kind": "task", "state": "TASK_STATE_COMPLETED", "history": 1},
    ("no_parts", "jsonrpc"): {"send": {**_ERR_RPC, "code": -32602, "reasons": ["INVALID_PARAMS"]},
                              "stream": {"http": 200, "id": 5, "code": -32602, "reasons": ["INVALID_PARAMS"]}},
    ("no_parts", "rest"): {"send": {"http": 400, "type": "application/json", "code": 400, "status": "INVALID_ARGUMENT",
                                    "reasons": ["INVALID_PARAMS"]}},
    **{("data_model", b): {"http": 200, "sent": {"snake_case": [], "enums not strings": [], "timestamps not ISO Z": [], "timestamps": True}, "read": {"snake_case": [], "enums not strings": [], "timestamps not ISO Z": [], "timestamps": True}, "streamed": {"snake_case": [], "enums not strings": [], "timestamps not ISO Z": [], "timestamps": True}}
       for b in ("jsonrpc", "rest")},
    **{("list_filters", b): {"waiting": ["TASK_STATE_INPUT_REQUIRED"] * 2, "waiting total": 2, "later": 0, "earlier": 3,
                             "history 0": [0, 0, 0], "history 1": [1, 1, 1]} for b in ("jsonrpc", "rest")},
    ("rest_binding", "rest"): {
        "a2a+json body": {"http": 200, "type": "application/a2a+json", "kind": "task", "state": "TASK_STATE_COMPLETED", "history": 1},
        "no message": {"http": 400, "type": "application/json", "code": 400, "status": "INVALID_ARGUMENT", "reasons": ["INVALID_PARAMS"]}},
}


assert {n for n, _ in DIRECT} == set(CHECKS), "every check pins what the agent answers directly"


def check_direct(name: str, binding: str, direct: Any) -> None:
    """What the agent answered directly is what `DIRECT` pins."""
    pinned = DIRECT.get((name, binding), {})
    if pinned:
        assert isinstance(direct, dict) and {k: direct.get(k) for k in pinned} == pinned, direct


def through_gateway(name: str, binding: str, kind: str, direct: Any) -> Any:
    """What a client of a gateway must observe (way `kind`: "root" or "agent-path") where the agent directly gave
    `direct`: the same, but for the fields `DIFFERENCES` names (a None there: the field is absent)."""
    override, _why = DIFFERENCES.get((name, binding, kind), ({}, ""))
    return {k: v for k, v in {**direct, **override}.items() if v is not None or k not in override} if override else direct


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
@pytest.mark.parametrize("name", list(CHECKS))
async def test_the_kits_checks_see_the_same_agent_through_the_gateway(stack: Stack, name: str, binding: str) -> None:
    async with httpx.AsyncClient(timeout=30) as c:
        seen = {kind: await CHECKS[name](c, way, binding, stack) for kind, way in stack.ways.items()}
    direct = seen.pop("direct")
    check_direct(name, binding, direct)
    for kind, got in seen.items():
        assert got == through_gateway(name, binding, kind, direct), f"{kind} differs from the agent's own {direct}"


async def test_an_agents_card_through_the_gateway_claims_only_what_the_gateway_relays() -> None:
    """CORE-CAP-001/002/003, CARD-SIGN-* on `/agents/{name}`: an agent whose card claims push notifications and an
    extended card (and no streaming) is published with push on (the gateway's own, gateway/push) and the extended
    card off (not relayed), without the agent's signatures; the methods answer as the published card says, and
    streaming is refused as the agent refuses it."""
    card = make_card("claims", input_modes=["text"])
    card.capabilities.push_notifications = True
    card.capabilities.extended_agent_card = True
    card.signatures.append(AgentCardSignature(protected="e30", signature="c2lnbmVk"))  # over the agent's own URLs
    async with run_agent(card, RecordingExecutor()) as url:
        async with gateway({"agents": [{"name": "claims", "url": url}]}) as (_, gw):
            way = Way("agent-path", f"{gw}/agents/claims", f"{gw}/agents/claims", f"{gw}/agents/claims")
            direct = Way("direct", url, url, url.rstrip("/"))
            async with httpx.AsyncClient(timeout=30) as c:
                served = (await c.get(way.card + CARD)).json()
                published = served["capabilities"]
                push = await rpc(c, way, "CreateTaskPushNotificationConfig", {"taskId": "t", "url": "https://example.com/h"})
                extended = await rpc(c, way, "GetExtendedAgentCard", {})
                streams = {w.kind: await stream_view(c, w, "jsonrpc", "SendStreamingMessage", {"message": message("tck-stream")})
                           for w in (direct, way)}
    assert published["pushNotifications"] is True and published["extendedAgentCard"] is False  # push: the gateway's
    assert published["streaming"] is False
    assert "signatures" not in served  # a signature over the agent's URLs would not verify over the gateway's
    assert push == {"http": 200, "id": 1, "code": -32001, "reasons": ["TASK_NOT_FOUND"]}  # the method runs: no task "t"
    assert extended == {"http": 200, "id": 1, "code": -32004, "reasons": ["UNSUPPORTED_OPERATION"]}
    assert streams["agent-path"] == streams["direct"], streams


async def test_push_off_the_cards_say_so_and_the_config_methods_refuse() -> None:
    """CORE-CAP-001 with `push.enabled: false`: the root card and each agent's card say pushNotifications false (the
    agent's claim too), and every push config method is PushNotificationNotSupported (-32003; REST 400
    FAILED_PRECONDITION), after its params are checked; a SendMessage's push config is dropped, never passed on."""
    async with tck_agent("tck", push=True) as agent:
        async with gateway({"agents": [{"name": "tck", "url": agent.url}], "push": {"enabled": False}}) as (_, gw):
            gw = gw.rstrip("/")
            ways = [Way("root", gw + "/", gw, gw), Way("agent-path", f"{gw}/agents/tck", f"{gw}/agents/tck", f"{gw}/agents/tck")]
            async with httpx.AsyncClient(timeout=30) as c:
                cards = [(await c.get(w.card + CARD)).json()["capabilities"].get("pushNotifications") for w in ways]
                answers = [await push_call(c, w, b, m, "tck-x", {"url": "https://example.com/h"} if "Create" in m else None,
                                           cid=None if "List" in m or "Create" in m else "c1")
                           for w in ways for b in ("jsonrpc", "rest")
                           for m in ("CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig",
                                     "ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig")]
                missing = await rpc(c, ways[0], "CreateTaskPushNotificationConfig", {})
                sent = await rpc(c, ways[1], "SendMessage", {"message": message("tck-complete-task"), "configuration": {
                    "taskPushNotificationConfig": {"url": "https://example.com/h", "token": "never-to-the-agent"}}})
                tid = (await c.post(ways[1].rpc, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                    "message": message("tck-complete-task"), "configuration": {
                        "taskPushNotificationConfig": {"url": "https://example.com/h", "token": "t"}}}},
                                    headers=V1)).json()["result"]["task"]["id"]
    assert agent.push_configs is not None
    assert cards == [False, False]
    assert answers == [{"ok": False, "code": -32003, "reasons": ["PUSH_NOTIFICATION_NOT_SUPPORTED"]}] * 4 \
        + [{"ok": False, "http": 400, "reasons": ["PUSH_NOTIFICATION_NOT_SUPPORTED"]}] * 4 \
        + [{"ok": False, "code": -32003, "reasons": ["PUSH_NOTIFICATION_NOT_SUPPORTED"]}] * 4 \
        + [{"ok": False, "http": 400, "reasons": ["PUSH_NOTIFICATION_NOT_SUPPORTED"]}] * 4
    assert missing["code"] == -32602
    assert sent["state"] == "TASK_STATE_COMPLETED"
    assert await agent.push_configs.get_info_for_dispatch(tid) == []  # the client's config never reached the agent


_GRPC_REQUESTS = {
    "SendMessage": a2a_pb2.SendMessageRequest, "SendStreamingMessage": a2a_pb2.SendMessageRequest,
    "GetTask": a2a_pb2.GetTaskRequest, "CancelTask": a2a_pb2.CancelTaskRequest, "ListTasks": a2a_pb2.ListTasksRequest,
    "SubscribeToTask": a2a_pb2.SubscribeToTaskRequest, "CreateTaskPushNotificationConfig": a2a_pb2.TaskPushNotificationConfig,
    "GetTaskPushNotificationConfig": a2a_pb2.GetTaskPushNotificationConfigRequest,
    "ListTaskPushNotificationConfigs": a2a_pb2.ListTaskPushNotificationConfigsRequest,
    "DeleteTaskPushNotificationConfig": a2a_pb2.DeleteTaskPushNotificationConfigRequest,
    "GetExtendedAgentCard": a2a_pb2.GetExtendedAgentCardRequest,
}


async def grpc_view(way: Way, method: str, params: dict[str, Any], version: str | None = "1.0") -> Any:
    """A gRPC call's observables: the result's (or each streamed event's) kind and state, or the status code
    and ErrorInfo reasons."""
    request = json_format.ParseDict({**params, **({"tenant": way.tenant} if way.tenant else {})}, _GRPC_REQUESTS[method]())
    metadata = [("a2a-version", version)] if version is not None else []
    async with own_channel(way.grpc) as channel:
        rpc_ = getattr(a2a_pb2_grpc.A2AServiceStub(channel), method)
        try:
            if method in ("SendStreamingMessage", "SubscribeToTask"):
                return [tuple(result_view(json_format.MessageToDict(e)).values()) async for e in rpc_(request, metadata=metadata)]
            return result_view(json_format.MessageToDict(await rpc_(request, metadata=metadata)))
        except grpc.aio.AioRpcError as exc:
            found = []
            for key, value in exc.trailing_metadata() or ():
                if key == "grpc-status-details-bin":
                    for detail in status_pb2.Status.FromString(value).details:
                        info = error_details_pb2.ErrorInfo()
                        if detail.Unpack(info):
                            found.append(info.reason)
            return (exc.code().name, found)


async def grpc_checks(way: Way) -> dict[str, Any]:
    """GRPC-SVC-001, GRPC-META-001, GRPC-ERR-001/002/003 and the core checks on gRPC, through `way`."""
    out: dict[str, Any] = {}
    for prefix in ("tck-complete-task", "tck-message-response", "tck-reject-task", "tck-input-required", "tck-artifact-file"):
        out[f"send {prefix}"] = await grpc_view(way, "SendMessage", {"message": message(prefix)})
    for prefix in ("tck-stream", "tck-stream-chunked", "tck-message-response", "tck-reject-task", "tck-stream-artifact-chunked",
                   "tck-stream-artifact-file", "tck-stream-002", "tck-quiet-input"):
        out[f"stream {prefix}"] = await grpc_view(way, "SendStreamingMessage", {"message": message(prefix)})
    out["no parts"] = await grpc_view(way, "SendMessage", {"message": {**message("tck-complete-task"), "parts": []}})
    for method in ("GetTask", "CancelTask", "SubscribeToTask"):
        out[f"{method} unknown"] = await grpc_view(way, method, {"id": "tck-no-such-task"})
    done = await grpc_view(way, "SendMessage", {"message": message("tck-complete-task"), "configuration": {"historyLength": 0}})
    out["history 0 on send"] = done
    out["push"] = [await grpc_view(way, m, p) for m, p in [
        ("CreateTaskPushNotificationConfig", {"taskId": "tck-x", "url": "https://example.com/hook"}),
        ("GetTaskPushNotificationConfig", {"taskId": "tck-x", "id": "c1"}),
        ("ListTaskPushNotificationConfigs", {"taskId": "tck-x"}),
        ("DeleteTaskPushNotificationConfig", {"taskId": "tck-x", "id": "c1"})]]
    out["extended card"] = await grpc_view(way, "GetExtendedAgentCard", {})
    out["version 99"] = await grpc_view(way, "SendMessage", {"message": message("tck-complete-task")}, "99.0")
    out["no version"] = await grpc_view(way, "SendMessage", {"message": message("tck-complete-task")}, None)
    return out


def check_grpc_direct(direct: dict[str, Any]) -> None:
    """What the agent's own gRPC binding answered (`grpc_checks`), pinned."""
    assert direct["send tck-message-response"] == {"kind": "message", "state": None}
    assert direct["send tck-reject-task"] == ("UNKNOWN", [])  # a2a-sdk 1.3 sends its own A2AError so on gRPC
    assert direct["stream tck-stream-chunked"][-1] == ("statusUpdate", "TASK_STATE_COMPLETED")
    assert direct["GetTask unknown"] == direct["CancelTask unknown"] == ("NOT_FOUND", ["TASK_NOT_FOUND"])
    assert direct["push"] == [("NOT_FOUND", ["TASK_NOT_FOUND"])] * 4  # a push agent, on a task it does not have
    assert direct["extended card"] == ("FAILED_PRECONDITION", ["UNSUPPORTED_OPERATION"])
    assert direct["version 99"]["state"] == "TASK_STATE_COMPLETED"  # a2a-sdk 1.3's gRPC binding reads no version
    assert direct["no parts"] == ("INVALID_ARGUMENT", ["INVALID_PARAMS"])


async def test_the_kits_grpc_checks_see_the_same_agent_through_the_gateway(stack: Stack) -> None:
    """The gateway's gRPC binding (at the root, and with `tenant` naming the agent) answers the kit's gRPC checks as the
    agent's own gRPC binding."""
    seen = {kind: await grpc_checks(way) for kind, way in stack.ways.items()}
    direct = seen.pop("direct")
    check_grpc_direct(direct)
    for kind, got in seen.items():
        assert got == direct, f"{kind} differs from the agent's own gRPC answers"


async def grpc_call(way: Way, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One unary gRPC call: `ok` and the answer as JSON, or the status code and ErrorInfo reasons."""
    request = json_format.ParseDict({**params, **({"tenant": way.tenant} if way.tenant else {})}, _GRPC_REQUESTS[method]())
    async with own_channel(way.grpc) as channel:
        try:
            answer = await getattr(a2a_pb2_grpc.A2AServiceStub(channel), method)(request, metadata=[("a2a-version", "1.0")])
        except grpc.aio.AioRpcError as exc:
            return {"ok": False, "code": exc.code().name}
    return {"ok": True, "answer": json_format.MessageToDict(answer)}


async def grpc_push_checks(way: Way, hook: WebhookReceiver) -> dict[str, Any]:
    """PUSH-CREATE/GET/LIST/DEL-* and PUSH-DELIVER-001..003 on gRPC through `way`: the config methods on a completed
    task, and a task created with a push config and completed by a follow-up (its webhook: `hook`'s)."""
    tid = (await grpc_call(way, "SendMessage", {"message": message("tck-complete-task")}))["answer"]["task"]["id"]
    cid = mid("tck-push")
    out: dict[str, Any] = {}
    for label, method, params in [
            ("create", "CreateTaskPushNotificationConfig", {"taskId": tid, "id": cid, "url": f"{hook.url}/grpc"}),
            ("get", "GetTaskPushNotificationConfig", {"taskId": tid, "id": cid}),
            ("get nonexistent", "GetTaskPushNotificationConfig", {"taskId": tid, "id": mid("tck-none")}),
            ("list", "ListTaskPushNotificationConfigs", {"taskId": tid}),
            ("delete", "DeleteTaskPushNotificationConfig", {"taskId": tid, "id": cid}),
            ("get deleted", "GetTaskPushNotificationConfig", {"taskId": tid, "id": cid}),
            ("delete again", "DeleteTaskPushNotificationConfig", {"taskId": tid, "id": cid})]:
        got = await grpc_call(way, method, params)
        answer = got.pop("answer", {})
        if "configs" in answer:
            got["ids"] = [c.get("id") == cid for c in answer["configs"]]
        elif "url" in answer:
            got["id"], got["task"] = answer.get("id") == cid, answer.get("taskId") == tid
        out[label] = got
    path = f"/grpc-deliver/{mid(way.kind)}"
    cfg = {"id": mid("tck-push"), "url": hook.url + path,
           "authentication": {"scheme": "Bearer", "credentials": "tck-test-token-auth"}}
    first = await grpc_call(way, "SendMessage", {"message": message("tck-input-required"),
                                                 "configuration": {"taskPushNotificationConfig": cfg}})
    tid = first["answer"]["task"]["id"]
    await grpc_call(way, "SendMessage", {"message": message("tck-complete-task", taskId=tid)})
    hit = next(h for h in await hook.wait_until(lambda h: h.path == path, timeout=DELIVERY_TIMEOUT_S) if h.path == path)
    event = json_format.ParseDict(hit.body, a2a_pb2.StreamResponse())
    out["delivery"] = {"authorization": hit.headers.get("authorization"), "payload": bool(event.WhichOneof("payload")),
                       "about the task": event_task(event) == tid}
    return out


def check_grpc_push_direct(direct: dict[str, Any]) -> None:
    """What the agent's own gRPC binding answered (`grpc_push_checks`), pinned."""
    assert direct["create"] == direct["get"] == {"ok": True, "id": True, "task": True}
    assert direct["get nonexistent"] == direct["get deleted"] == {"ok": False, "code": "NOT_FOUND"}
    assert direct["list"] == {"ok": True, "ids": [True]} and direct["delete again"] == {"ok": True}
    assert direct["delivery"] == {"authorization": "Bearer tck-test-token-auth", "payload": True, "about the task": True}


async def test_the_kits_push_checks_on_grpc_see_the_same_agent_through_the_gateway(stack: Stack) -> None:
    """The push checks on gRPC through the gateway's gRPC binding (root, and `tenant` naming the agent) as on the
    agent's own."""
    seen = {kind: await grpc_push_checks(way, stack.hook) for kind, way in stack.ways.items()}
    direct = seen.pop("direct")
    check_grpc_push_direct(direct)
    for kind, got in seen.items():
        assert got == direct, f"{kind} differs from the agent's own gRPC answers"


async def test_cards_declare_the_credentials_the_gateway_checks() -> None:
    """AUTH-SERVER-002 and the card's `securitySchemes`: with auth on, the root card and each agent's card through
    the gateway declare the gateway's own schemes (bearer token, API key header) in place of the agent's (which
    the gateway satisfies itself), skills keep no requirement naming the agent's schemes, each card still parses
    as an A2A AgentCard, and a call with the declared credential goes through while one without is refused."""
    card = make_card("guarded", input_modes=["text"])
    card.security_schemes["oauth"].oauth2_security_scheme.oauth2_metadata_url = "https://idp.example.com/.well-known"
    card.security_requirements.add().schemes["oauth"].list.append("a2a")
    card.skills[0].security_requirements.add().schemes["oauth"].list.append("a2a")
    clients = [{"name": "kit", "token": "tck-token-1"}, {"name": "keyed", "api_key": "tck-key-1"}]
    async with run_agent(card, RecordingExecutor()) as url:
        async with gateway({"agents": [{"name": "guarded", "url": url}], "auth": {"clients": clients}}) as (_, gw):
            async with httpx.AsyncClient(timeout=30) as c:
                root, through = [(await c.get(base + CARD)).json() for base in (gw.rstrip("/"), f"{gw}/agents/guarded")]
                way = Way("agent-path", f"{gw}/agents/guarded", f"{gw}/agents/guarded", f"{gw}/agents/guarded")
                anonymous = await rpc(c, way, "GetTask", {"id": "tck-x"})
                bearer = await rpc(c, way, "GetTask", {"id": "tck-x"}, headers={**V1, "Authorization": "Bearer tck-token-1"})
                keyed = await rpc(c, way, "GetTask", {"id": "tck-x"}, headers={**V1, "X-API-Key": "tck-key-1"})
    schemes = {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer", "description": "a client token of this gateway"}},
               "apiKey": {"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key",
                                                   "description": "a client API key of this gateway"}}}
    for served in (root, through):
        assert served["securitySchemes"] == schemes
        assert served["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}, {"schemes": {"apiKey": {"list": []}}}]
        assert all("securityRequirements" not in skill for skill in served["skills"])
        json_format.ParseDict(served, AgentCard())  # still an A2A AgentCard
    assert anonymous["code"] == -32600 and anonymous["reasons"] == ["UNAUTHENTICATED"]
    assert bearer == keyed == {"http": 200, "id": 1, "code": -32001, "reasons": ["TASK_NOT_FOUND"]}  # the agent's answer


async def grpc_error_info(way: Way, method: str, params: dict[str, Any], tenant: str | None = None) -> Any:
    """A gRPC call's status name and the ErrorInfo it carries (reason, domain, metadata), or the result's view."""
    request = json_format.ParseDict({**params, **({"tenant": tenant or way.tenant} if tenant or way.tenant else {})},
                                    _GRPC_REQUESTS[method]())
    async with own_channel(way.grpc) as channel:
        rpc_ = getattr(a2a_pb2_grpc.A2AServiceStub(channel), method)
        try:
            if method in ("SendStreamingMessage", "SubscribeToTask"):
                return [tuple(result_view(json_format.MessageToDict(e)).values()) async for e in rpc_(request, metadata=[("a2a-version", "1.0")])]
            return result_view(json_format.MessageToDict(await rpc_(request, metadata=[("a2a-version", "1.0")])))
        except grpc.aio.AioRpcError as exc:
            for key, value in exc.trailing_metadata() or ():
                if key == "grpc-status-details-bin":
                    for detail in status_pb2.Status.FromString(value).details:
                        info = error_details_pb2.ErrorInfo()
                        if detail.Unpack(info):
                            return exc.code().name, info.reason, info.domain, dict(info.metadata)
            return exc.code().name, None, None, None


def first_info(details: Any) -> tuple[Any, ...]:
    info = details[0] if isinstance(details, list) and details else {}
    return info.get("reason"), info.get("domain"), info.get("metadata")


async def tenant_answers(root: Way) -> dict[str, Any]:
    """Through a gateway's root: a gRPC `tenant` naming no agent on every method, the REST tenant path naming none, and
    gRPC with the agent's tenant."""
    task = {"message": message("tck-complete-task")}
    grpc_answers = {m: await grpc_error_info(root, m, p, tenant="tck-nobody") for m, p in [
        ("SendMessage", task), ("SendStreamingMessage", task), ("GetTask", {"id": "x"}), ("ListTasks", {}),
        ("CancelTask", {"id": "x"}), ("SubscribeToTask", {"id": "x"}), ("GetExtendedAgentCard", {}),
        ("CreateTaskPushNotificationConfig", {"taskId": "x", "url": "https://example.com/hook"})]}
    async with httpx.AsyncClient(timeout=30) as c:
        rest_answers = [await c.get(root.rest + "/tck-nobody/tasks/x", headers=V1),
                        await c.post(root.rest + "/tck-nobody/message:send", json=task, headers=V1)]
    return {"grpc": grpc_answers, "rest": [(r.status_code, r.json()["error"]["status"], first_info(r.json()["error"]["details"]))
                                          for r in rest_answers],
            "named": await grpc_error_info(root, "GetTask", {"id": "tck-no-such-task"}, tenant="tck")}


def check_tenant_answers(seen: dict[str, Any]) -> None:
    assert seen["grpc"] == dict.fromkeys(seen["grpc"], ("NOT_FOUND", "INVALID_PARAMS", "a2a-protocol.org", {"field": "tenant"}))
    assert seen["rest"] == [(404, "NOT_FOUND", ("INVALID_PARAMS", "a2a-protocol.org", {"field": "agent"}))] * 2
    assert seen["named"] == ("NOT_FOUND", "TASK_NOT_FOUND", "a2a-protocol.org", {})  # a registered tenant: the agent's answer


async def test_a_tenant_naming_no_agent_is_not_found_on_grpc_as_on_rest(stack: Stack) -> None:
    """The gateway's tenants are its agents: a `tenant` naming none is NOT_FOUND on gRPC on every method (was
    INVALID_ARGUMENT, and the push config and extended card methods answered as if it named one), as the REST
    tenant path `/{tenant}/...` is 404 NOT_FOUND; the ErrorInfo (INVALID_PARAMS, the field at fault) alike."""
    check_tenant_answers(await tenant_answers(stack.ways["root"]))


async def error_infos(way: Way, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """An error's ErrorInfo (reason, domain, metadata) on JSON-RPC, HTTP+JSON and gRPC through `way`."""
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=V1)
        if method == "GetTask":
            rr = await c.get(way.rest + f"/tasks/{params['id']}", headers=V1)
        else:
            rr = await c.post(way.rest + "/message:send", json=params, headers=V1)
    return {"jsonrpc": first_info(r.json()["error"]["data"]), "rest": first_info(rr.json()["error"]["details"]),
            "grpc": (await grpc_error_info(way, method, params))[1:]}


UNKNOWN_TASK_INFO = ("TASK_NOT_FOUND", "a2a-protocol.org", {"field": "id"})  # the root's own answer
AGENT_SAYS = ("INVALID_PARAMS", "a2a-protocol.org", {"field": "message.parts", "hint": "say it in words"})


async def test_the_error_info_metadata_is_the_same_on_every_binding(stack: Stack) -> None:
    """CORE-ERR-001, GRPC-ERR-001: an error's google.rpc.ErrorInfo carries the same reason, domain and metadata on
    JSON-RPC, HTTP+JSON and gRPC through the gateway — the gateway's own errors (at the root: the field at
    fault) and an agent's, with the metadata the agent gave it. The a2a-sdk's gRPC binding sends every ErrorInfo
    with empty metadata (its JSON-RPC and REST bindings send it), so the agent's own gRPC answer is the one
    that differs; the gateway's gRPC binding used to drop the metadata the same way."""
    unknown = await error_infos(stack.ways["root"], "GetTask", {"id": "tck-no-such-task"})
    assert unknown == dict.fromkeys(("jsonrpc", "rest", "grpc"), UNKNOWN_TASK_INFO)
    direct = await error_infos(stack.ways["direct"], "SendMessage", {"message": message("tck-error-metadata")})
    assert direct == {"jsonrpc": AGENT_SAYS, "rest": AGENT_SAYS, "grpc": AGENT_SAYS[:2] + ({},)}  # a2a-sdk 1.3's gRPC
    for kind in ("root", "agent-path"):
        seen = await error_infos(stack.ways[kind], "SendMessage", {"message": message("tck-error-metadata")})
        assert seen == dict.fromkeys(("jsonrpc", "rest", "grpc"), AGENT_SAYS), kind


REQUIRED_EXT = "https://example.com/ext/tck-required/v1"
OTHER_EXT = "https://example.com/ext/tck-other/v1"


async def extension_view(c: httpx.AsyncClient, way: Way) -> dict[str, Any]:
    """What a client observes of the agent `needs` (its card marks REQUIRED_EXT required) through `way`: the card's
    declaration, and a SendMessage activating none, the required one, both, on JSON-RPC, HTTP+JSON, a REST stream and
    gRPC (the state and what the agent read, the answering `A2A-Extensions`)."""
    card = (await c.get(way.card + CARD)).json()
    out: dict[str, Any] = {"declared": [(e["uri"], e.get("required", False))
                                        for e in card["capabilities"].get("extensions", [])
                                        if e["uri"] == REQUIRED_EXT]}
    for label, value in [("none", None), ("required", REQUIRED_EXT), ("both", f"{OTHER_EXT}, {REQUIRED_EXT}")]:
        h = {**V1, **({"A2A-Extensions": value} if value else {})}
        sent = {"message": message("tck-extensions")}
        r = await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": sent}, headers=h)
        doc = r.json()
        out[f"jsonrpc {label}"] = (doc["error"]["code"], reasons(doc["error"]["data"])) if "error" in doc else (
            doc["result"]["task"]["status"]["state"], doc["result"]["task"]["status"]["message"]["parts"][0]["text"])
        rr = await c.post(way.rest + "/message:send", json={"message": message("tck-extensions")}, headers=h)
        out[f"rest {label}"] = (rr.status_code, rest_view(rr).get("status"), rest_view(rr).get("reasons"),
                                rr.json().get("task", {}).get("status", {}).get("message", {}).get("parts"))
        out[f"echoed {label}"] = (r.headers.get("a2a-extensions"), rr.headers.get("a2a-extensions"))
        async with c.stream("POST", way.rest + "/message:stream", json={"message": message("tck-extensions")},
                            headers={**h, "Accept": "text/event-stream"}) as streamed:
            events = [line async for line in streamed.aiter_lines() if line.startswith("data:")]
            out[f"stream {label}"] = (streamed.status_code, len(events), streamed.headers.get("a2a-extensions"))
        request = json_format.ParseDict({"message": message("tck-extensions"),
                                         **({"tenant": way.tenant} if way.tenant else {})}, a2a_pb2.SendMessageRequest())
        md = [("a2a-version", "1.0"), *([("a2a-extensions", value)] if value else [])]
        async with own_channel(way.grpc) as channel:
            call = a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(request, metadata=md)
            try:
                reply = await call
                out[f"grpc {label}"] = (reply.task.status.state, reply.task.status.message.parts[0].text)
            except grpc.aio.AioRpcError as exc:
                out[f"grpc {label}"] = exc.code().name
            out[f"grpc echoed {label}"] = dict(await call.initial_metadata() or ()).get("a2a-extensions")
    out["stream, none"] = await stream_view(c, way, "rest", "SendStreamingMessage", {"message": message("tck-extensions")})
    return out


async def test_a_required_extension_the_client_activates_reaches_the_agent() -> None:
    """CORE-CAP-004, JSONRPC-SVC-002, HTTP_JSON-SVC-002, GRPC-META-001: an agent whose card marks an extension
    `required` refuses a request that does not activate it (ExtensionSupportRequiredError) and serves one that
    does. Through the gateway the client's `A2A-Extensions` (gRPC: `a2a-extensions` metadata) reach the agent
    as sent, on every binding, at the root and at `/agents/{name}`: the gateway used to send the agent only its
    own extension, so such an agent refused every request through it. An agent that answers with the extension
    it activated (`A2A-Extensions`, as newer a2a-sdk releases do) is relayed: the client gets the same header,
    on streams too."""
    async with tck_agent("needs", required_extension=REQUIRED_EXT) as agent:
        async with gateway({"agents": [{"name": "needs", "url": agent.url}], "grpc_listen": "127.0.0.1:0"}) as (gw_, url):
            gw, g = url.rstrip("/"), gw_.grpc_url
            ways = [Way("direct", agent.url + "/", agent.rest, agent.url, agent.grpc), Way("root", gw + "/", gw, gw, g),
                    Way("agent-path", f"{gw}/agents/needs", f"{gw}/agents/needs", f"{gw}/agents/needs", g, "needs")]
            async with httpx.AsyncClient(timeout=30) as c:
                seen: dict[str, Any] = {way.kind: await extension_view(c, way) for way in ways}
    direct = seen.pop("direct")
    assert direct["declared"] == [(REQUIRED_EXT, True)]
    assert direct["jsonrpc none"] == (-32008, ["EXTENSION_SUPPORT_REQUIRED"])
    assert direct["jsonrpc required"] == ("TASK_STATE_COMPLETED", REQUIRED_EXT)
    assert direct["jsonrpc both"] == ("TASK_STATE_COMPLETED", f"{OTHER_EXT} {REQUIRED_EXT}")
    assert direct["rest none"][:3] == (400, "FAILED_PRECONDITION", ["EXTENSION_SUPPORT_REQUIRED"])
    assert direct["grpc none"] == "FAILED_PRECONDITION" and direct["grpc both"][1] == f"{OTHER_EXT} {REQUIRED_EXT}"
    assert direct["echoed none"] == (None, None) and direct["echoed both"] == (REQUIRED_EXT, REQUIRED_EXT)
    assert direct["stream required"] == (200, 2, REQUIRED_EXT)  # the task, its completion
    # a2a-sdk 1.3's gRPC binding never answers with the extensions it activated; the gateway, which reaches this
    # agent over JSON-RPC, answers on gRPC with what the agent said there
    assert direct["grpc echoed required"] is None
    relayed = {"grpc echoed required": REQUIRED_EXT, "grpc echoed both": REQUIRED_EXT}
    assert seen["agent-path"] == {**direct, **relayed}
    # the root card declares the gateway's own extension only: routing picks the agent, whose card says what it needs
    assert seen["root"] == {**direct, **relayed, "declared": []}


async def test_the_extensions_a_request_activates_go_on_to_a_grpc_agent_too() -> None:
    """The gRPC transport to an agent whose card prefers gRPC sends the client's extensions in `a2a-extensions`
    metadata, with the gateway's own extension only when the agent's card declares it."""
    from mma2a.ext import EXTENSION_URI
    from mma2a.gateway.downstream.grpc_transport import GrpcAgents
    from mma2a.gateway.downstream.service_params import requested_extensions

    token = requested_extensions.set((OTHER_EXT, EXTENSION_URI, REQUIRED_EXT))
    try:
        plain, declared = GrpcAgents._metadata(False, None), GrpcAgents._metadata(True, {"Authorization": "Bearer t"})
    finally:
        requested_extensions.reset(token)
    assert plain == [("a2a-version", "1.0"), ("a2a-extensions", f"{OTHER_EXT}, {REQUIRED_EXT}")]
    assert declared == [("a2a-version", "1.0"), ("authorization", "Bearer t"),
                        ("a2a-extensions", f"{OTHER_EXT}, {REQUIRED_EXT}, {EXTENSION_URI}")]
    assert GrpcAgents._metadata(False, None) == [("a2a-version", "1.0")]  # nothing asked, nothing sent
