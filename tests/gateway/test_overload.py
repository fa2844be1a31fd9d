"""Under overload, urgent messages first: a real a2a-sdk agent that serves one message at a time and finishes each
only when the test says so, a gateway in front of it with `max_concurrency: 1` and a queue of two. The test
fills the slot and the queue, then checks who is served in what order, who is shed and exactly what each binding
answers a shed message with (503 + Retry-After, ErrorInfo reason OVERLOADED naming the agent; gRPC UNAVAILABLE
with RetryInfo), the history and the metrics. No timing: every step waits for a state, never for a clock."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.helpers import new_task_from_user_message
from a2a.types import Part, a2a_pb2, a2a_pb2_grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2

from mma2a.card import declare_extension
from mma2a.ext import EXTENSION_URI
from mma2a.gateway import Gateway
from mma2a.serving import free_port
from tests.agents import make_card, run_agent
from tests.gateway.conftest import ADMIN, gateway, until

URGENT, ROUTINE = "urgent-token", "routine-token"


@dataclass
class GatedExecutor(AgentExecutor):
    """Starts each message (noting its text and the priority it carries) and finishes it when `go` is released."""

    started: list[tuple[str, int | None]] = field(default_factory=list)
    go: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(0))

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        meta = json_format.MessageToDict(context.message.metadata) if context.message.HasField("metadata") else {}
        priority = (meta.get(EXTENSION_URI) or {}).get("priority")
        self.started.append((context.message.parts[0].text, int(priority) if priority is not None else None))
        task = context.current_task or new_task_from_user_message(context.message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        await self.go.acquire()
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.complete(updater.new_agent_message([Part(text="done " + context.message.parts[0].text)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError



def message(text: str, priority: int) -> dict[str, Any]:
    return {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}],
            "metadata": {EXTENSION_URI: {"priority": priority}}, "extensions": [EXTENSION_URI]}


@contextlib.asynccontextmanager
async def loaded(tmp_path: Path, **extra: Any) -> AsyncIterator[tuple[Gateway, str, GatedExecutor]]:
    """The gated agent behind a gateway (one slot, a queue of two, a deadline nobody reaches), two clients."""
    card = make_card("slow", input_modes=["text/plain"], output_modes=["text/plain"])
    declare_extension(card)
    executor = GatedExecutor()
    async with run_agent(card, executor) as url:
        cfg = {"agents": [{"name": "slow", "url": url.rstrip("/"), "max_concurrency": 1}],
               "limits": {"max_queue_per_agent": 2, "queue_timeout_s": 600, "routine_queue_timeout_s": 600},
               "auth": {"clients": [{"name": "urgent", "token": URGENT, "max_priority": 9},
                                    {"name": "routine", "token": ROUTINE}]},
               "data_dir": str(tmp_path), "history": {"flush_interval_s": 0.02}, **extra}
        async with gateway(cfg) as (gw, gw_url):
            try:
                yield gw, gw_url, executor
            finally:
                for _ in range(8):
                    executor.go.release()


async def send(http: httpx.AsyncClient, url: str, token: str, text: str, priority: int) -> httpx.Response:
    return await http.post(url + "/", headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"},
                           json={"jsonrpc": "2.0", "id": text, "method": "SendMessage",
                                 "params": {"message": message(text, priority)}})


async def fill(gw: Gateway, url: str, executor: GatedExecutor, http: httpx.AsyncClient) -> list[asyncio.Task[Any]]:
    """The slot taken by A (priority 1), the queue by B (routine asks 9, honoured as 5) and C (urgent, 8)."""
    slots = gw.pipeline.slots
    first = asyncio.create_task(send(http, url, ROUTINE, "A", 1))
    await until(lambda: len(executor.started) == 1, "A reaches the agent")
    queued = [asyncio.create_task(send(http, url, ROUTINE, "B", 9))]
    await until(lambda: (s := slots.get("slow")) is not None and s.queued == 1, "B queues")
    queued.append(asyncio.create_task(send(http, url, URGENT, "C", 8)))
    await until(lambda: (s := slots.get("slow")) is not None and s.queued == 2, "C queues")
    return [first, *queued]


def assert_overloaded_info(details: list[dict[str, Any]], priority: int) -> None:
    info = details[0]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert info["reason"] == "OVERLOADED"
    assert info["metadata"]["agent"] == "slow"
    assert info["metadata"]["priority"] == str(priority)
    assert info["metadata"]["shed"] == "outranked"


async def test_urgent_first_the_rest_shed_with_503_on_jsonrpc_and_rest(tmp_path: Path) -> None:
    async with loaded(tmp_path) as (gw, url, executor), httpx.AsyncClient(timeout=60) as http:
        sent = await fill(gw, url, executor, http)
        assert gw.pipeline.slots.get("slow").routine_timeout_s == 600  # type: ignore[union-attr]  # (limits.routine_queue_timeout_s)
        # a privileged leg (C) waits: D (3) is not queued behind it but shed at once, answered 503 + Retry-After
        shed = await send(http, url, ROUTINE, "D", 3)
        assert shed.status_code == 503
        assert int(shed.headers["retry-after"]) >= 1
        doc = shed.json()
        assert doc["id"] == "D" and doc["error"]["code"] == -32603
        assert doc["error"]["message"].startswith("agent slow is overloaded: a leg of priority 3 was shed (legs of "
                                                  "higher priority wait for agent slow)")
        assert_overloaded_info(doc["error"]["data"], 3)
        # REST: the same refusal in the REST error shape
        rest = await http.post(url + "/message:send", headers={"Authorization": f"Bearer {ROUTINE}", "A2A-Version": "1.0"},
                               json={"message": message("E", 0)})
        assert rest.status_code == 503 and int(rest.headers["retry-after"]) >= 1
        err = rest.json()["error"]
        assert err["code"] == 503 and err["status"] == "UNAVAILABLE"
        assert_overloaded_info(err["details"], 0)
        # JSON-RPC through the SDK's dispatcher (a stream): 503 as well, not an error inside HTTP 200
        stream = await http.post(url + "/", headers={"Authorization": f"Bearer {ROUTINE}", "A2A-Version": "1.0"},
                                 json={"jsonrpc": "2.0", "id": 7, "method": "SendStreamingMessage",
                                       "params": {"message": message("F", 2)}})
        assert stream.status_code == 503 and int(stream.headers["retry-after"]) >= 1
        assert stream.json()["id"] == 7
        assert_overloaded_info(stream.json()["error"]["data"], 2)
        assert [t for t, _ in executor.started] == ["A"]  # nothing shed ever reached the agent
        # the slot frees: C (urgent, 8) goes before the older B (honoured as 5, not the 9 it asked)
        executor.go.release()
        await until(lambda: len(executor.started) == 2, "the next leg starts")
        executor.go.release()
        await until(lambda: len(executor.started) == 3, "the last leg starts")
        executor.go.release()
        answers = await asyncio.gather(*sent)
        assert executor.started == [("A", 1), ("C", 8), ("B", 5)]
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert all(a.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED" for a in answers)
        # the history says shed, the metrics count by agent, priority and reason
        admin = {"Authorization": f"Bearer {ADMIN}"}
        hist = (await http.get(url + "/admin/history", params={"outcome": "shed"}, headers=admin)).json()
        rows = hist["decisions"]
        assert sorted(r["messageId"] for r in rows) == ["m-D", "m-E", "m-F"]
        assert all(r["outcome"] == "shed" and r["error"].startswith("outranked: agent slow is overloaded") for r in rows)
        metrics = (await http.get(url + "/metrics", headers=admin)).text
        for p in ("0", "2", "3"):
            assert f'mma2a_agent_shed_total{{agent="slow",priority="{p}",reason="outranked"}} 1.0' in metrics
        assert 'mma2a_agent_queue_depth{agent="slow",priority="8"} 0.0' in metrics
        assert 'mma2a_agent_concurrency_limit{agent="slow"} 1.0' in metrics
        assert 'mma2a_agent_queue_wait_seconds_count{agent="slow",priority="8"} 1.0' in metrics
        # what the console's Agents tab shows
        listed = (await http.get(url + "/admin/agents", headers=admin)).json()["agents"]
        over = listed[0]["overload"]
        assert (over["kind"], over["limit"], over["queued"]) == ("fixed", 1, 0)
        assert over["shedByPriority"] == {"0": 1, "2": 1, "3": 1}


async def test_a_more_urgent_message_displaces_the_least_urgent_waiting(tmp_path: Path) -> None:
    async with loaded(tmp_path) as (gw, url, executor), httpx.AsyncClient(timeout=60) as http:
        sent = await fill(gw, url, executor, http)
        late = asyncio.create_task(send(http, url, URGENT, "G", 9))  # B (5) is the least urgent waiting: it leaves
        displaced = await sent[1]
        assert displaced.status_code == 503
        assert displaced.json()["error"]["data"][0]["metadata"]["shed"] == "displaced"
        for _ in range(3):
            executor.go.release()
        await asyncio.gather(sent[0], sent[2], late)
        assert [t for t, _ in executor.started] == ["A", "G", "C"]


async def test_the_clients_deadline_sheds_at_once_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    async with loaded(tmp_path) as (gw, url, executor), httpx.AsyncClient(timeout=60) as http:
        sent = await fill(gw, url, executor, http)
        headers = {"Authorization": f"Bearer {URGENT}", "A2A-Version": "1.0"}
        bad = await http.post(url + "/", headers={**headers, "X-Request-Timeout": "soon"},
                              json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message("H", 9)}})
        assert bad.status_code == 400
        assert bad.json()["error"]["message"] == "X-Request-Timeout: must be a number of seconds above 0, got 'soon'"
        # a deadline already gone by the time the leg would queue (a microsecond): shed at once, the queue untouched
        late = await http.post(url + "/", headers={**headers, "X-Request-Timeout": "0.000001"},
                               json={"jsonrpc": "2.0", "id": 2, "method": "SendMessage",
                                     "params": {"message": message("H", 9)}})
        assert late.status_code == 503
        assert late.json()["error"]["data"][0]["metadata"]["shed"] == "deadline"
        assert gw.pipeline.slots.get("slow").queued == 2  # type: ignore[union-attr]
        for _ in range(3):
            executor.go.release()
        await asyncio.gather(*sent)


async def test_a_routine_message_is_answered_503_once_its_queue_timeout_passes(tmp_path: Path) -> None:
    limits = {"max_queue_per_agent": 2, "queue_timeout_s": 600, "routine_queue_timeout_s": 0.05}
    async with loaded(tmp_path, limits=limits) as (gw, url, executor), httpx.AsyncClient(timeout=60) as http:
        first = asyncio.create_task(send(http, url, ROUTINE, "A", 1))
        await until(lambda: len(executor.started) == 1, "A reaches the agent")
        # B (routine) queues behind the busy slot; nothing frees it: its 50 ms pass and it is answered 503
        shed = await send(http, url, ROUTINE, "B", 5)
        assert shed.status_code == 503 and int(shed.headers["retry-after"]) >= 1
        err = shed.json()["error"]
        assert err["data"][0]["metadata"] == {**err["data"][0]["metadata"], "shed": "expired", "priority": "5"}
        assert err["message"].startswith("agent slow is overloaded: a leg of priority 5 was shed (it waited 0.05 s "
                                          "for agent slow (limits.routine_queue_timeout_s, or the client's deadline))")
        assert gw.pipeline.slots.get("slow").queued == 0  # type: ignore[union-attr]
        executor.go.release()
        assert (await first).status_code == 200 and executor.started == [("A", 1)]


async def test_grpc_answers_a_shed_message_unavailable_with_retry_info(tmp_path: Path) -> None:
    port = free_port()
    async with loaded(tmp_path, grpc_listen=f"127.0.0.1:{port}") as (gw, url, executor), \
            httpx.AsyncClient(timeout=60) as http:
        sent = await fill(gw, url, executor, http)
        msg = a2a_pb2.Message(message_id="m-grpc", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="I")])
        json_format.ParseDict({EXTENSION_URI: {"priority": 1}}, msg.metadata)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(  # type: ignore[no-untyped-call]
                    a2a_pb2.SendMessageRequest(message=msg), timeout=30,
                    metadata=(("a2a-version", "1.0"), ("authorization", f"Bearer {ROUTINE}")))
        err = info.value
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        assert err.details().startswith("agent slow is overloaded: a leg of priority 1 was shed")
        trailers = dict(err.trailing_metadata() or ())
        assert int(trailers["retry-after"]) >= 1
        status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
        error_info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
        assert status.details[0].Unpack(error_info) and status.details[1].Unpack(retry)
        assert error_info.reason == "OVERLOADED" and error_info.metadata["agent"] == "slow"
        assert retry.retry_delay.seconds >= 1
        for _ in range(3):
            executor.go.release()
        await asyncio.gather(*sent)


async def test_an_agents_refusal_for_now_reaches_the_client_with_its_status_and_retry_after() -> None:
    """An agent that answers HTTP 503 (or 429) with a JSON-RPC error — a peer gateway that shed the message, or past a
    client's rate — is passed on as the refusal it is: the agent's code, message and ErrorInfo with its status and
    `Retry-After` (its `retryAfter`, rounded up), on JSON-RPC and REST at `/agents/{name}` and the root (before: HTTP 200
    on JSON-RPC, REST the code's status, and no `Retry-After`); a 500 with an error stays the agent's error."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from tests.agents import make_card, serve_app

    info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "OVERLOADED", "domain": "a2a-protocol.org",
            "metadata": {"agent": "inner", "retryAfter": "2.5"}}
    answers = {"busy": (503, -32603), "slow down": (429, -32600), "broken": (500, -32603)}

    async def rpc_(request: Request) -> JSONResponse:
        doc = await request.json()
        text = doc["params"]["message"]["parts"][0]["text"]
        status, code = answers[text]
        return JSONResponse({"jsonrpc": "2.0", "id": doc["id"], "error": {"code": code, "message": f"{text}: not now",
                                                                           "data": [info]}}, status_code=status)

    async def card_(request: Request) -> JSONResponse:
        card = make_card("peer")
        declare_extension(card)
        return JSONResponse(json_format.MessageToDict(card))

    app = Starlette(routes=[Route("/", rpc_, methods=["POST"]), Route("/.well-known/agent-card.json", card_)])
    async with serve_app(app) as agent_url, gateway({"agents": [{"name": "peer", "url": agent_url}]}) as (_, url):
        seen = {}
        async with httpx.AsyncClient(timeout=30) as c:
            for base in (url.rstrip("/"), f"{url.rstrip('/')}/agents/peer"):
                for text in answers:
                    msg = {"messageId": f"m-{text}-{len(seen)}", "role": "ROLE_USER", "parts": [{"text": text}]}
                    r = await c.post(base, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                                 "params": {"message": msg}}, headers={"A2A-Version": "1.0"})
                    rr = await c.post(base + "/message:send", json={"message": {**msg, "messageId": msg["messageId"] + "r"}},
                                      headers={"A2A-Version": "1.0"})
                    seen[(base.endswith("peer"), text)] = (
                        r.status_code, r.headers.get("retry-after"), r.json()["error"]["code"], r.json()["error"]["data"][0]["reason"],
                        rr.status_code, rr.headers.get("retry-after"), rr.json()["error"]["details"][0]["reason"])
    for at_path in (False, True):
        assert seen[(at_path, "busy")] == (503, "3", -32603, "OVERLOADED", 503, "3", "OVERLOADED")
        assert seen[(at_path, "slow down")] == (429, "3", -32600, "OVERLOADED", 429, "3", "OVERLOADED")
        assert seen[(at_path, "broken")][:3] == (200, None, -32603)  # the agent's error, as before
        assert seen[(at_path, "broken")][4:6] == (500, None)
