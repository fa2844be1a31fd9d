"""A client that has gone is not served: its leg, waiting in the gateway's queue for a slow agent at its limit, leaves
the queue unsent when the client closes its connection (JSON-RPC, REST, an SSE stream) or cancels its gRPC call.

The agent is `test_overload`'s: a real a2a-sdk agent that serves one message at a time and finishes each only when
the test says so, behind a gateway with `max_concurrency: 1`. H takes the slot, A's message queues, then B's; A's
client goes; the slot frees: the agent never receives A's message (it counts what it starts), B is served, and
the metrics and the history count A's leg as `client_gone` (on every binding: an SSE stream's and a gRPC call's
task is cancelled by its server, and the stage records the leg as the cancel passes). A leg whose client has gone by
the time it would take a free slot is not sent either (`transformed`). No timing: every step waits for a state."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import orjson
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.protobuf import json_format

from mma2a.card import declare_extension
from mma2a.ext import EXTENSION_URI
from mma2a.gateway import Gateway
from mma2a.serving import free_port
from tests.agents import Stepper, make_card, streaming_card
from tests.gateway.conftest import ADMIN, agents, gateway
from tests.gateway.test_overload import ROUTINE, GatedExecutor, loaded, message, send, until
from tests.media import wav_bytes

ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}
GONE = 'mma2a_agent_shed_total{agent="slow",priority="5",reason="client_gone"} 1.0'


def queued(gw: Gateway) -> int:
    slots = gw.pipeline.slots.get("slow")
    return slots.queued if slots is not None else 0


def raw_request(path: str, body: dict[str, Any], *, stream: bool = False) -> bytes:
    data = orjson.dumps(body)
    accept = b"text/event-stream" if stream else b"application/json"
    return (b"POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nAccept: %s\r\nA2A-Version: 1.0\r\n"
            b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s"
            % (path.encode(), accept, ROUTINE.encode(), len(data), data))


def request_of(binding: str, text: str) -> bytes:
    msg = message(text, 5)
    if binding == "rest":
        return raw_request("/message:send", {"message": msg})
    method = "SendStreamingMessage" if binding == "sse" else "SendMessage"
    return raw_request("/", {"jsonrpc": "2.0", "id": text, "method": method, "params": {"message": msg}},
                       stream=binding == "sse")


async def metrics(http: httpx.AsyncClient, url: str) -> str:
    return (await http.get(url + "/metrics", headers=ADMIN_HEADERS)).text


async def served_after_a_leaves(gw: Gateway, url: str, executor: GatedExecutor, http: httpx.AsyncClient,
                                leave: Any) -> None:
    """H holds the slot, A and B queue; `leave()` makes A's client go; then the slot frees."""
    holder = asyncio.create_task(send(http, url, ROUTINE, "H", 1))
    await until(lambda: len(executor.started) == 1, "H reaches the agent")
    await leave.queue()
    await until(lambda: queued(gw) == 1, "A queues")
    second = asyncio.create_task(send(http, url, ROUTINE, "B", 5))
    await until(lambda: queued(gw) == 2, "B queues")
    await leave.go()
    await until(lambda: queued(gw) == 1, "A's leg leaves the queue")
    slots = gw.pipeline.slots.get("slow")
    assert slots is not None
    await until(lambda: slots.shed[5] == 1, "A's leg is counted")  # (gRPC: once grpc says the call was cancelled)
    assert GONE in await metrics(http, url)  # counted as it left, before any slot freed
    executor.go.release()  # H done: the slot goes to B, not to A
    executor.go.release()
    answers = [await holder, await second]
    assert [a.status_code for a in answers] == [200, 200]
    assert [a.json()["result"]["task"]["status"]["state"] for a in answers] == ["TASK_STATE_COMPLETED"] * 2
    assert executor.started == [("H", 1), ("B", 5)]  # the agent never received A's message
    assert (slots.inflight, slots.queued, slots.shed[5]) == (0, 0, 1)  # nothing held for A, counted once
    await shed_recorded(http, url, "its client went away while it waited for agent slow")


async def shed_recorded(http: httpx.AsyncClient, url: str, why: str) -> None:
    """A's message is in the history, once, as shed `client_gone` (the history writes every 20 ms)."""
    async def recorded() -> list[dict[str, Any]]:
        got = await http.get(url + "/admin/history", params={"outcome": "shed"}, headers=ADMIN_HEADERS)
        return got.json()["decisions"]  # type: ignore[no-any-return]

    for _ in range(2_000):
        if rows := await recorded():
            break
        await asyncio.sleep(0.005)
    assert [r["messageId"] for r in rows] == ["m-A"]
    assert rows[0]["error"] == f"client_gone: agent slow is overloaded: a leg of priority 5 was shed ({why}); retry in " \
                               "about 1.00 s"


class ClosesItsConnection:
    """A client on a raw socket: sends its request, then closes the connection without reading the answer."""

    def __init__(self, url: str, binding: str) -> None:
        self.url, self.binding = url, binding
        self.writer: asyncio.StreamWriter | None = None

    async def queue(self) -> None:
        host, port = self.url.removeprefix("http://").split(":")
        _, self.writer = await asyncio.open_connection(host, int(port))
        self.writer.write(request_of(self.binding, "A"))
        await self.writer.drain()

    async def go(self) -> None:
        assert self.writer is not None
        self.writer.close()
        await self.writer.wait_closed()


class GivesUpOnItsStream:
    """An SSE client (httpx) that gives up: it asks for SendStreamingMessage's stream, and is cancelled while it waits
    for the answer (the gateway sends the stream's headers with its first event), as a client's own timeout does."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx.AsyncClient(timeout=60)
        self.waiting: asyncio.Task[httpx.Response] | None = None

    async def queue(self) -> None:
        body = {"jsonrpc": "2.0", "id": "A", "method": "SendStreamingMessage", "params": {"message": message("A", 5)}}
        request = self.client.build_request("POST", self.url + "/", json=body, headers={
            "Authorization": f"Bearer {ROUTINE}", "A2A-Version": "1.0", "Accept": "text/event-stream"})
        self.waiting = asyncio.create_task(self.client.send(request, stream=True))

    async def go(self) -> None:
        assert self.waiting is not None
        self.waiting.cancel()  # httpx closes the connection of a request it was cancelled in
        with pytest.raises(asyncio.CancelledError):
            await self.waiting
        await self.client.aclose()


@pytest.mark.parametrize("binding", ["jsonrpc", "rest", "sse", "sse_client"])
async def test_a_queued_leg_whose_client_closed_its_connection_is_never_sent(tmp_path: Path, binding: str) -> None:
    async with loaded(tmp_path) as (gw, url, executor), httpx.AsyncClient(timeout=60) as http:
        leaving = GivesUpOnItsStream(url) if binding == "sse_client" else ClosesItsConnection(url, binding)
        await served_after_a_leaves(gw, url, executor, http, leaving)


class CancelsItsCall:
    """A gRPC client: sends SendMessage (or SendStreamingMessage), then cancels the call."""

    def __init__(self, port: int, method: str) -> None:
        self.port, self.method = port, method
        self.call: Any = None
        self.channel: grpc.aio.Channel | None = None

    async def queue(self) -> None:
        msg = a2a_pb2.Message(message_id="m-A", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="A")])
        json_format.ParseDict({EXTENSION_URI: {"priority": 5}}, msg.metadata)
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")
        stub = a2a_pb2_grpc.A2AServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.call = getattr(stub, self.method)(
            a2a_pb2.SendMessageRequest(message=msg), timeout=60,
            metadata=(("a2a-version", "1.0"), ("authorization", f"Bearer {ROUTINE}")))

    async def go(self) -> None:
        assert self.call is not None and self.channel is not None
        self.call.cancel()
        with pytest.raises(asyncio.CancelledError):
            if self.method == "SendMessage":
                await self.call
            else:
                await self.call.read()
        await self.channel.close()


@pytest.mark.parametrize("method", ["SendMessage", "SendStreamingMessage"])
async def test_a_queued_leg_whose_grpc_call_was_cancelled_is_never_sent(tmp_path: Path, method: str) -> None:
    port = free_port()
    async with loaded(tmp_path, grpc_listen=f"127.0.0.1:{port}") as (gw, url, executor), \
            httpx.AsyncClient(timeout=60) as http:
        await served_after_a_leaves(gw, url, executor, http, CancelsItsCall(port, method))


async def test_a_leg_already_sent_when_its_client_goes_runs_on_and_its_task_can_be_found(tmp_path: Path) -> None:
    """The decision for a leg the agent already works on: nothing is cancelled (the agent's `cancel` would raise),
    the agent's answer is recorded as on any request, and the client that dropped its connection comes back
    (ListTasks, then GetTask) and finds its task done."""
    async with loaded(tmp_path) as (gw, url, executor), httpx.AsyncClient(timeout=60) as http:
        gone = ClosesItsConnection(url, "jsonrpc")
        await gone.queue()  # the slot is free: A's message goes to the agent
        await until(lambda: executor.started == [("A", 5)], "A reaches the agent")
        await gone.go()
        slots = gw.pipeline.slots.get("slow")
        assert slots is not None and slots.inflight == 1  # the agent works on it: its slot stays taken
        executor.go.release()  # the agent finishes what it was given
        await until(lambda: slots.inflight == 0, "the agent answers")
        headers = {"Authorization": f"Bearer {ROUTINE}", "A2A-Version": "1.0"}

        async def tasks() -> list[dict[str, Any]]:
            got = await http.post(url + "/", headers=headers,
                                  json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}})
            return got.json()["result"].get("tasks") or []  # type: ignore[no-any-return]

        for _ in range(2_000):
            if found := await tasks():
                break
            await asyncio.sleep(0.005)
        assert [t["status"]["state"] for t in found] == ["TASK_STATE_COMPLETED"]
        got = await http.post(url + "/", headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "GetTask",
                                                                 "params": {"id": found[0]["id"]}})
        task = got.json()["result"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["status"]["message"]["parts"] == [{"text": "done A"}]
        assert executor.started == [("A", 5)] and slots.shed[5] == 0  # sent once, never shed nor cancelled


async def test_a_streaming_fan_outs_queued_leg_is_sent_after_its_client_leaves(tmp_path: Path) -> None:
    """A streaming fan-out's legs belong to the task whose id the client was given first (it may come back for it):
    its leg queued for a busy agent is not let go when the client's connection is; it is sent once a slot frees,
    and the task completes."""
    steppers = {n: Stepper() for n in ("a", "b")}
    rules = {"version": 1, "rules": [{"name": "both", "match": {"modality": "*/*"},
                                      "action": {"clone_and_route_to": ["a", "b"]}}]}
    async with agents({n: (streaming_card(n), ex) for n, ex in steppers.items()}) as urls:
        cfg = {"rules": rules, "data_dir": str(tmp_path),
               "agents": [{"name": n, "url": u, "max_concurrency": 1} for n, u in urls.items()]}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=60) as http:
            hold = asyncio.create_task(http.post(url + "/agents/a/", headers={"A2A-Version": "1.0"}, json={
                "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": {"messageId": "hold", "role": "ROLE_USER", "parts": [{"text": "hold"}]}}}))
            await until(lambda: "hold" in steppers["a"].gates, "agent a is busy")
            slots = gw.pipeline.slots.get("a")
            assert slots is not None
            body = {"jsonrpc": "2.0", "id": 7, "method": "SendStreamingMessage",
                    "params": {"message": {"messageId": "fan", "role": "ROLE_USER", "parts": [{"text": "go"}]}}}
            async with httpx.AsyncClient(timeout=60) as leaving, leaving.stream(
                    "POST", url + "/", json=body, headers={"A2A-Version": "1.0", "Accept": "text/event-stream"}) as sse:
                first = orjson.loads(await anext(ln[5:] async for ln in sse.aiter_lines() if ln.startswith("data:")))
                await until(lambda: slots.queued == 1, "the fan-out's leg to a queues")
            tid = first["result"]["task"]["id"]  # the stream is closed: the client is gone
            detached = gw.pipeline.streaming.detached
            await until(lambda: sum(detached.holds().values()) == 1, "the gateway saw the client go")
            assert slots.queued == 1 and sum(slots.shed) == 0  # still waiting, not shed
            steppers["a"].gate("hold").set()
            await until(lambda: "go" in steppers["a"].gates, "the fan-out's leg reaches agent a")
            for ex in steppers.values():
                ex.gate("go").set()
            assert (await hold).status_code == 200
            await until(lambda: not detached.holds(), "the fan-out's legs end")

            async def state() -> str:
                got = await http.post(url + "/", headers={"A2A-Version": "1.0"}, json={
                    "jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": tid}})
                return str(got.json()["result"]["status"]["state"])

            assert await state() == "TASK_STATE_COMPLETED"


def tcp_entry(local: int, remote: int) -> list[str] | None:
    """The kernel's line of the loopback TCP connection from port `local` to port `remote`, split (/proc/net/tcp;
    both ends named: another connection may hold the same local port to elsewhere)."""
    ends = (f"0100007F:{local:04X}", f"0100007F:{remote:04X}")
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if (fields[1], fields[2]) == ends:
                return fields
    return None


def tcp_state(local: int, remote: int) -> str | None:
    """The state of that connection ('06' is TIME_WAIT)."""
    fields = tcp_entry(local, remote)
    return fields[3] if fields is not None else None


@contextlib.asynccontextmanager
async def transformed(tmp_path: Path, limited: bool) -> AsyncIterator[tuple[Gateway, str, GatedExecutor, GatedExecutor]]:
    """Audio goes through a transformer (`stt`, the test's: it answers when released) to `slow` (a free slot; not
    `limited`: agent limits off, no slot at all)."""
    stt, slow = GatedExecutor(), GatedExecutor()
    cards = {"stt": make_card("stt", input_modes=["audio/*"]), "slow": make_card("slow")}
    declare_extension(cards["slow"])
    rules = {"version": 1, "rules": [{"name": "speech", "match": {"modality": "audio/*"},
                                      "action": {"transform": "text/plain", "then": {"route_to": "slow"}}}]}
    async with agents({"stt": (cards["stt"], stt), "slow": (cards["slow"], slow)}) as urls:
        cfg = {"rules": rules, "data_dir": str(tmp_path), "history": {"flush_interval_s": 0.02},
               "agents": [{"name": "stt", "url": urls["stt"], "transformer": True},
                          {"name": "slow", "url": urls["slow"], **({"max_concurrency": 1} if limited else {})}],
               "auth": {"clients": [{"name": "routine", "token": ROUTINE}]},
               **({} if limited else {"limits": {"agent_concurrency": "off"}})}
        async with gateway(cfg) as (gw, url):
            try:
                yield gw, url, stt, slow
            finally:
                for _ in range(4):
                    stt.go.release()
                    slow.go.release()


@pytest.mark.parametrize(("binding", "limited"), [("jsonrpc", True), ("rest", True), ("jsonrpc", False)])
async def test_a_leg_whose_client_has_gone_is_not_sent_at_a_free_slot(tmp_path: Path, binding: str,
                                                                       limited: bool) -> None:
    """The fast path: `slow`'s slot is free, but by the time the leg would take it (after the transformer answered)
    its client has closed the connection: the leg is never sent, counted and recorded as a queued one is. Then a
    client that stays is served through the same slot. The same with agent limits off (no slot to take)."""
    audio = {"raw": base64.b64encode(wav_bytes()).decode(), "mediaType": "audio/wav"}
    msg = {"messageId": "m-A", "role": "ROLE_USER", "parts": [audio],
           "metadata": {EXTENSION_URI: {"priority": 5}}, "extensions": [EXTENSION_URI]}
    request = raw_request("/message:send", {"message": msg}) if binding == "rest" else raw_request(
        "/", {"jsonrpc": "2.0", "id": "A", "method": "SendMessage", "params": {"message": msg}})
    async with transformed(tmp_path, limited) as (gw, url, stt, slow), httpx.AsyncClient(timeout=60) as http:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(request)
        await writer.drain()
        await until(lambda: len(stt.started) == 1, "A's audio reaches the transformer")
        own = writer.get_extra_info("sockname")[1]
        writer.close()
        await writer.wait_closed()
        # the gateway closed its end (TIME_WAIT on ours): it has seen the client go (`connection_lost` marks the
        # link before the socket is closed)
        await until(lambda: tcp_state(own, int(port)) == "06", "the gateway closes the connection")
        assert gw.pipeline.slots.get("slow") is None  # nothing was ever sent to slow: its slots are made on first use
        stt.go.release()  # the transformer answers: A's leg to slow would take its free slot now
        for _ in range(2_000):
            if GONE in await metrics(http, url):
                break
            await asyncio.sleep(0.005)
        assert GONE in await metrics(http, url)
        slots = gw.pipeline.slots.get("slow")
        if limited:
            assert slots is not None and (slots.inflight, slots.queued, slots.shed[5]) == (0, 0, 1)
        else:
            assert slots is None
        await shed_recorded(http, url, "its client went away before its leg was sent to agent slow")
        stt.go.release()
        slow.go.release()
        staying = await http.post(url + "/", headers={"Authorization": f"Bearer {ROUTINE}", "A2A-Version": "1.0"},
                                  json={"jsonrpc": "2.0", "id": "B", "method": "SendMessage",
                                        "params": {"message": {**msg, "messageId": "m-B"}}})
        assert staying.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert slow.started == [("done ", 5)]  # B's transformed leg alone: A's was never sent
        if slots is not None:
            assert (slots.inflight, slots.queued, slots.shed[5]) == (0, 0, 1)


async def test_a_cancelled_grpc_fan_outs_queued_legs_are_counted_and_recorded_as_shed(tmp_path: Path) -> None:
    """A gRPC SendMessage cloned to two busy agents: its legs wait, each in a task of its own, in both agents'
    queues; the client cancels the call. Each leg leaves its queue unsent and is counted `client_gone` (as before),
    and the message is in the history as shed `client_gone`, once, as a JSON-RPC fan-out's is (before: counted, not
    recorded — each leg's note stayed in its own task's context)."""
    executors = {"slow": GatedExecutor(), "other": GatedExecutor()}
    cards = {name: make_card(name) for name in executors}
    for card in cards.values():
        declare_extension(card)
    rules = {"version": 1, "rules": [{"name": "both", "match": {"modality": "*/*"},
                                      "action": {"clone_and_route_to": ["slow", "other"]}}]}
    port = free_port()
    async with agents({n: (cards[n], ex) for n, ex in executors.items()}) as urls:
        cfg = {"rules": rules, "data_dir": str(tmp_path), "history": {"flush_interval_s": 0.02},
               "grpc_listen": f"127.0.0.1:{port}",
               "agents": [{"name": n, "url": u, "max_concurrency": 1} for n, u in urls.items()],
               "limits": {"max_queue_per_agent": 2, "queue_timeout_s": 600, "routine_queue_timeout_s": 600},
               "auth": {"clients": [{"name": "routine", "token": ROUTINE}]}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=60) as http:
            try:
                holders = [asyncio.create_task(http.post(f"{url}/agents/{n}/", headers={
                    "Authorization": f"Bearer {ROUTINE}", "A2A-Version": "1.0"}, json={
                    "jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": message(f"H-{n}", 1)}}))
                    for n in executors]
                await until(lambda: all(len(ex.started) == 1 for ex in executors.values()), "both agents are busy")
                leaving = CancelsItsCall(port, "SendMessage")
                await leaving.queue()
                slots = [gw.pipeline.slots.get(n) for n in executors]
                assert all(s is not None for s in slots)
                await until(lambda: all(s.queued == 1 for s in slots if s is not None), "A's two legs queue")
                await leaving.go()
                await until(lambda: all(s.shed[5] == 1 and s.queued == 0 for s in slots if s is not None),
                            "both legs leave their queues, counted")
                text = await metrics(http, url)
                assert all(f'mma2a_agent_shed_total{{agent="{n}",priority="5",reason="client_gone"}} 1.0' in text
                           for n in executors)
                for _ in range(2_000):
                    got = await http.get(url + "/admin/history", params={"outcome": "shed"}, headers=ADMIN_HEADERS)
                    if rows := got.json()["decisions"]:
                        break
                    await asyncio.sleep(0.005)
                assert [r["messageId"] for r in rows] == ["m-A"]
                assert rows[0]["error"].startswith("client_gone: agent ")
                assert "(its client went away while it waited for agent " in rows[0]["error"]
                for ex in executors.values():
                    ex.go.release()
                assert [(await h).status_code for h in holders] == [200, 200]
                assert [ex.started for ex in executors.values()] == [[("H-slow", 1)], [("H-other", 1)]]
            finally:
                for ex in executors.values():
                    for _ in range(2):
                        ex.go.release()
