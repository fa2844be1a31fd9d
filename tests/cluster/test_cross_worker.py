"""Correctness across the gateways of one cluster, as `mma2a serve --workers 2` runs them: two gateway processes with
the same config (each seeds the cluster, as workers do) on one real nats-server, driven by real a2a-sdk clients.
Each call is sent to a chosen gateway, so "the other worker" is certain, not left to the kernel's choice: a task
streamed on one is read, listed, cancelled and resumed (SubscribeToTask after its SSE connection dropped) on the
other; a gateway killed mid-stream and restarted loses no task; a rule swap reaches the other gateway (within 1 s on a
quiet host: bench/cluster_apply.py; here only a safety net, as a CI host can be slowed past any bound).
Last, the pair behind a literal round-robin balancer: each new connection to the next gateway, so a task's
follow-ups alternate gateways, on every binding."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc.aio
import httpx
import pytest
import pytest_asyncio
from google.protobuf import json_format
from a2a.client import Client, ClientCallContext, ClientConfig, create_client
from a2a.client.interceptors import AfterArgs, BeforeArgs, ClientCallInterceptor
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)

from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

from mma2a.cluster.server import NatsServer
from tests.agents import RecordingExecutor, Stepper, make_card, run_agent, streaming_card

from .conftest import GatewayProc, admin, cluster_name, gateways
from .test_security import TOKENS, bearer

# one pair of gateways (and its agents) for the module: starting gateway processes is what these tests cost most
pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]

SWAP_DEADLINE_S = 60.0  # a safety net: the bound, a rule change in force on every other gateway within 1 s, is
# a time on a quiet host, measured by bench/cluster_apply.py (0.05-0.08 s at load 7, docs/benchmarks.md); a test on a
# CI host two test files share can be slowed past any such bound, so it asserts the swap arrives and its order


async def until_true(check: Callable[[], bool], deadline_s: float = 30.0) -> None:
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < deadline_s, f"not true within {deadline_s} s"
        await asyncio.sleep(0.01)


def rules(name: str, action: dict[str, Any]) -> str:
    return json.dumps({"version": 1, "rules": [{"name": name, "match": {"modality": "*/*"}, "action": action}]})


@dataclass
class Pair:
    """Two gateways of one cluster, configured alike (as the workers of `serve --workers 2`), and their agents."""

    gws: list[GatewayProc]
    steppers: dict[str, Stepper]
    recorders: dict[str, RecordingExecutor]
    http: httpx.AsyncClient
    swaps: int = 0

    @property
    def urls(self) -> tuple[str, str]:
        return self.gws[0].url, self.gws[1].url

    async def in_force(self, url: str) -> list[str]:
        """The names of the rules a gateway routes by."""
        return [r["name"] for r in (await self.http.get(url + "/admin/rules", headers=admin())).json()["rules"]["rules"]]

    async def swap(self, action: dict[str, Any]) -> float:
        """Put a rule set through the first gateway; poll the second until it is in force there (within
        `SWAP_DEADLINE_S` of the first gateway's answer); the seconds it took."""
        self.swaps += 1
        name = f"swap-{self.swaps}"
        gw1, gw2 = self.urls
        put = await self.http.put(gw1 + "/admin/rules", content=rules(name, action),
                                  headers={**admin(), "Content-Type": "application/json"})
        assert put.status_code == 200, put.text
        swapped = time.monotonic()
        while await self.in_force(gw2) != [name]:
            assert time.monotonic() - swapped < SWAP_DEADLINE_S, f"{name}: not in force on gw2 within {SWAP_DEADLINE_S} s"
            await asyncio.sleep(0.01)
        return time.monotonic() - swapped


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pair(nats_server: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pair]:
    steppers = {n: Stepper() for n in ("stepper", "s1", "s2")}
    recorders = {n: RecordingExecutor(reply=f"{n} ok") for n in ("a", "b")}
    async with contextlib.AsyncExitStack() as stack:
        urls = {n: await stack.enter_async_context(run_agent(streaming_card(n), ex)) for n, ex in steppers.items()}
        urls |= {n: await stack.enter_async_context(run_agent(make_card(n), ex)) for n, ex in recorders.items()}
        cfg: dict[str, Any] = {  # what every worker of `serve --workers` gets: the same file, agents and rules included
            "auth": {"clients": [{"name": n, "token": t} for n, t in TOKENS.items()]},
            "timeout_s": 20, "retries": 0, "grpc_listen": "127.0.0.1:0",
            "agents": [{"name": n, "url": u} for n, u in urls.items()],
            "rules": rules("start", {"route_to": "stepper"}),
            "cluster": {"nats": nats_server.url, "name": cluster_name(), "heartbeat_s": 0.5, "member_ttl_s": 2},
        }
        gws = await stack.enter_async_context(gateways([cfg, cfg], tmp_path_factory.mktemp("pair")))
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        yield Pair(gws, steppers, recorders, http)


@contextlib.asynccontextmanager
async def sdk(url: str, who: str) -> AsyncIterator[Client]:
    """A real a2a-sdk client of `who` on one gateway (its own HTTP connections: closing it drops them)."""
    async with httpx.AsyncClient(headers=bearer(who), timeout=30) as http:
        client = await create_client(url, ClientConfig(streaming=True, httpx_client=http))
        try:
            yield client
        finally:
            await client.close()


def user(text: str) -> SendMessageRequest:
    return SendMessageRequest(message=Message(message_id=f"m-{text}-{time.monotonic_ns()}", role=Role.ROLE_USER,
                                              parts=[Part(text=text)]))


def texts(event: StreamResponse) -> list[str]:
    """The artifact texts (and the final message's) an event carries."""
    if event.HasField("artifact_update"):
        return [p.text for p in event.artifact_update.artifact.parts]
    if event.HasField("task"):
        return [p.text for a in event.task.artifacts for p in a.parts]
    return []


def state(event: StreamResponse) -> int | None:
    if event.HasField("status_update"):
        return event.status_update.status.state
    if event.HasField("task"):
        return event.task.status.state
    return None


def task_id(event: StreamResponse) -> str:
    for field in ("task", "status_update", "artifact_update"):
        if event.HasField(field):
            got = getattr(event, field)
            return str(got.id if field == "task" else got.task_id)
    raise AssertionError(f"no task id in {event}")


async def stream_until_first(client: Client, text: str) -> str:
    """Send `text` as a stream, read up to the artifact `first: TEXT`, then drop the stream (its connection closes
    with the client); the task's id."""
    tid = None
    stream = client.send_message(user(text))
    try:
        async for event in stream:
            tid = tid or task_id(event)
            if f"first: {text}" in texts(event):
                break
    finally:
        await stream.aclose()
    assert tid is not None
    return tid


async def test_a_stream_dropped_on_one_gateway_resumes_on_the_other_and_every_call_finds_its_task(pair: Pair) -> None:
    await pair.swap({"route_to": "stepper"})
    stepper, (gw1, gw2) = pair.steppers["stepper"], pair.urls
    async with sdk(gw1, "alice") as a1, sdk(gw2, "alice") as a2, sdk(gw2, "bob") as b2:
        # the stream starts on gw1 and its connection drops after the first artifact
        tid = await stream_until_first(a1, "job-1")
        # another client cannot see it on the other gateway, on any call
        with pytest.raises(TaskNotFoundError):
            await b2.get_task(GetTaskRequest(id=tid))
        with pytest.raises(TaskNotFoundError):
            await b2.cancel_task(CancelTaskRequest(id=tid))
        with pytest.raises(TaskNotFoundError):
            async for _ in b2.subscribe(SubscribeToTaskRequest(id=tid)):
                pass
        assert tid not in {t.id for t in (await b2.list_tasks(ListTasksRequest())).tasks}
        # its owner, on the other gateway: the task as it stands, listed, and the rest of the stream
        got = await a2.get_task(GetTaskRequest(id=tid))
        assert got.status.state == TaskState.TASK_STATE_WORKING
        assert [p.text for a in got.artifacts for p in a.parts] == ["first: job-1"]
        assert tid in {t.id for t in (await a2.list_tasks(ListTasksRequest())).tasks}
        resumed = a2.subscribe(SubscribeToTaskRequest(id=tid))
        first = await anext(resumed)  # the task as it stands, then its events from now on
        assert task_id(first) == tid and state(first) == TaskState.TASK_STATE_WORKING, first
        stepper.gate("job-1").set()
        rest = [e async for e in resumed]
        assert "second: job-1" in [t for e in rest for t in texts(e)], rest
        assert state(rest[-1]) == TaskState.TASK_STATE_COMPLETED, rest[-1]
        # and back on the gateway that started it: complete, with both artifacts
        done = await a1.get_task(GetTaskRequest(id=tid))
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        assert [p.text for a in done.artifacts for p in a.parts] == ["first: job-1", "second: job-1"]

        # a stream open on gw2 is cancelled through gw1: the agent cancels, the open stream says so
        live = a2.send_message(user("job-2"))
        events = []
        async for event in live:
            events.append(event)
            if "first: job-2" in texts(event):
                break
        tid2 = task_id(events[0])
        with pytest.raises(TaskNotFoundError):
            await b2.cancel_task(CancelTaskRequest(id=tid2))
        cancelled = await a1.cancel_task(CancelTaskRequest(id=tid2))
        assert cancelled.id == tid2 and cancelled.status.state == TaskState.TASK_STATE_CANCELED
        tail = [e async for e in live]
        assert tail and state(tail[-1]) == TaskState.TASK_STATE_CANCELED, tail
        assert (await a2.get_task(GetTaskRequest(id=tid2))).status.state == TaskState.TASK_STATE_CANCELED

        # gw1 is killed with a stream of its own in flight and started again: no task is lost
        tid3 = await stream_until_first(a1, "job-3")
        pair.gws[0].kill()
        pair.gws[0].start()
        await pair.gws[0].ready()
        assert await pair.in_force(gw1) == [f"swap-{pair.swaps}"]  # the cluster's rules, not its config's again
    async with sdk(gw1, "alice") as a1:
        for t, want in ((tid, TaskState.TASK_STATE_COMPLETED), (tid2, TaskState.TASK_STATE_CANCELED),
                        (tid3, TaskState.TASK_STATE_WORKING)):
            assert (await a1.get_task(GetTaskRequest(id=t))).status.state == want
        listed = {t.id for t in (await a1.list_tasks(ListTasksRequest())).tasks}
        assert {tid, tid2, tid3} <= listed, listed
        resumed = a1.subscribe(SubscribeToTaskRequest(id=tid3))
        assert state(await anext(resumed)) == TaskState.TASK_STATE_WORKING
        stepper.gate("job-3").set()
        rest = [e async for e in resumed]
        assert state(rest[-1]) == TaskState.TASK_STATE_COMPLETED, rest[-1]
    for gw in (gw1, gw2):  # and still nobody else's
        for t in (tid, tid2, tid3):
            body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": t}}
            reply = (await pair.http.post(gw + "/", json=body, headers=bearer("bob"))).json()
            assert reply["error"]["code"] == -32001, reply


async def test_a_fan_out_stream_dropped_on_one_gateway_is_found_followed_and_finished_on_the_other(pair: Pair) -> None:
    """A fan-out's task id (`gw-…`) reaches the client first: it is recorded before, and its legs run on after the
    client's stream drops (its id was unknown to GetTask until every leg had answered, and a dropped stream cancelled
    the legs: the task was lost)."""
    await pair.swap({"clone_and_route_to": ["s1", "s2"]})
    gw1, gw2 = pair.urls
    async with sdk(gw1, "alice") as a1, sdk(gw2, "alice") as a2, sdk(gw2, "bob") as b2:
        stream = a1.send_message(user("fan"))
        first = await anext(stream)
        await stream.aclose()  # the client's stream drops with the task's first event
        tid = task_id(first)
        assert tid.startswith("gw-") and state(first) == TaskState.TASK_STATE_WORKING
        for name in ("s1", "s2"):  # both agents have the message (the legs run on)
            await until_true(lambda ex=pair.steppers[name]: "fan" in ex.gates)
        got = await a2.get_task(GetTaskRequest(id=tid))
        assert got.id == tid and got.status.state == TaskState.TASK_STATE_WORKING
        with pytest.raises(TaskNotFoundError):
            await b2.get_task(GetTaskRequest(id=tid))
        with pytest.raises(TaskNotCancelableError):  # its legs' task ids are not known yet
            await a2.cancel_task(CancelTaskRequest(id=tid))
        followed = a2.subscribe(SubscribeToTaskRequest(id=tid))
        assert state(await anext(followed)) == TaskState.TASK_STATE_WORKING
        for name in ("s1", "s2"):
            pair.steppers[name].gate("fan").set()
        final = [e async for e in followed]
        assert [state(e) for e in final] == [TaskState.TASK_STATE_COMPLETED], final
        done = await a1.get_task(GetTaskRequest(id=tid))
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        assert sorted(p.text for a in done.artifacts for p in a.parts) == [
            "first: fan", "first: fan", "second: fan", "second: fan"]


async def test_a_rule_swap_through_one_gateway_comes_in_force_on_the_other(pair: Pair) -> None:
    for n, agent in enumerate(("a", "b", "a")):
        await pair.swap({"route_to": agent})
        async with sdk(pair.urls[1], "alice") as client:  # in force there: the next message goes to the new agent
            reply = [e async for e in client.send_message(user(f"after swap {n}"))]
        assert [p.text for p in reply[-1].task.status.message.parts] == [f"{agent} ok"], reply[-1]


class Bearer(ClientCallInterceptor):
    """The client's token as a service parameter of every call: the SDK's gRPC transport sends service parameters as
    call metadata (its HTTP transports as headers)."""

    def __init__(self, who: str) -> None:
        self.token = bearer(who)["Authorization"]

    async def before(self, args: BeforeArgs) -> None:
        args.context = args.context or ClientCallContext()
        args.context.service_parameters = {**(args.context.service_parameters or {}), "authorization": self.token}

    async def after(self, args: AfterArgs) -> None:
        return None


def own_channel(target: str) -> grpc.aio.Channel:
    """A gRPC channel with a connection of its own (gRPC shares one between channels to the same address by default:
    a new client behind a balancer would reuse the last one's connection, so its gateway)."""
    return grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])


@contextlib.asynccontextmanager
async def sdk_over(url: str | AgentCard, who: str, binding: str) -> AsyncIterator[Client]:
    """A real a2a-sdk client of `who` following a gateway's card over one binding (JSONRPC, HTTP+JSON or GRPC)."""
    async with httpx.AsyncClient(headers=bearer(who), timeout=30) as http:
        config = ClientConfig(streaming=True, httpx_client=http, supported_protocol_bindings=[binding],
                              grpc_channel_factory=own_channel)
        client = await create_client(url, config, interceptors=[Bearer(who)])
        try:
            yield client
        finally:
            await client.close()


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON", "GRPC"])
async def test_on_every_binding_a_stream_dropped_on_one_gateway_is_its_owners_on_the_other(pair: Pair, binding: str) -> None:
    """The same follow-ups over each binding the gateways serve: made and dropped on gw1, then on gw2 read, listed and
    resumed to completion by its owner, unknown to another client."""
    await pair.swap({"route_to": "stepper"})
    gw1, gw2 = pair.urls
    text = f"over-{binding}"
    async with sdk_over(gw1, "alice", binding) as a1:
        tid = await stream_until_first(a1, text)
    async with sdk_over(gw2, "alice", binding) as a2, sdk_over(gw2, "bob", binding) as b2:
        with pytest.raises(TaskNotFoundError):
            await b2.get_task(GetTaskRequest(id=tid))
        assert tid not in {t.id for t in (await b2.list_tasks(ListTasksRequest())).tasks}
        assert (await a2.get_task(GetTaskRequest(id=tid))).status.state == TaskState.TASK_STATE_WORKING
        assert tid in {t.id for t in (await a2.list_tasks(ListTasksRequest())).tasks}
        resumed = a2.subscribe(SubscribeToTaskRequest(id=tid))
        assert state(await anext(resumed)) == TaskState.TASK_STATE_WORKING
        pair.steppers["stepper"].gate(text).set()
        rest = [e async for e in resumed]
        assert f"second: {text}" in [t for e in rest for t in texts(e)], rest
        assert state(rest[-1]) == TaskState.TASK_STATE_COMPLETED, rest[-1]



class RoundRobin:
    """A real round-robin TCP balancer (layer 4, as a cloud load balancer without affinity): each connection it
    accepts goes to the next backend in turn, its bytes piped both ways; `served` lists each connection's backend. It
    listens on `port` (0: a free one, known once entered)."""

    def __init__(self, backends: list[tuple[str, int]], port: int = 0) -> None:
        self.backends = backends
        self.served: list[int] = []
        self.port = port
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> RoundRobin:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._open):
            writer.close()
        await self._server.wait_closed()

    @property
    def next(self) -> int:
        """The backend the next connection goes to."""
        return len(self.served) % len(self.backends)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = self.next
        self.served.append(index)
        up_reader, up_writer = await asyncio.open_connection(*self.backends[index])
        self._open |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                dst.close()
                self._open.discard(dst)

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def skip_to(self, index: int) -> None:
        """Another client's connection (a health check's) until the next one goes to backend `index`."""
        while self.next != index:
            known = len(self.served)
            _, w = await asyncio.open_connection("127.0.0.1", self.port)
            await until_true(lambda: len(self.served) > known)  # accepted (and counted) by the balancer
            w.close()
            await w.wait_closed()


def behind(card: dict[str, Any], http: RoundRobin, grpc_lb: RoundRobin) -> AgentCard:
    """The card as the deployment advertises it: every interface at the balancers' addresses."""
    for iface in card["supportedInterfaces"]:
        grpc_binding = iface["protocolBinding"] == "GRPC"
        iface["url"] = f"127.0.0.1:{grpc_lb.port}" if grpc_binding else f"http://127.0.0.1:{http.port}"
    return json_format.ParseDict(card, AgentCard(), ignore_unknown_fields=True)


async def test_behind_a_round_robin_balancer_every_follow_up_finds_its_task_on_every_binding(pair: Pair) -> None:
    """Two gateways behind a literal round-robin balancer (one for HTTP, one for gRPC). Each call is made by a new
    client, so on a new connection, so by the next gateway in turn: a task's follow-ups alternate gateways, and every
    one of them (GetTask and ListTasks on each gateway, SubscribeToTask on both at once, CancelTask on the gateway that
    did not make the task) finds it for its owner, on JSON-RPC, HTTP+JSON and gRPC; another client is told it does not
    exist."""
    await pair.swap({"route_to": "stepper"})
    stepper = pair.steppers["stepper"]
    cards = [(await pair.http.get(u + "/.well-known/agent-card.json")).json() for u in pair.urls]
    grpc_ports = [int(next(i["url"] for i in c["supportedInterfaces"] if i["protocolBinding"] == "GRPC").rsplit(":", 1)[1])
                  for c in cards]
    async with RoundRobin([("127.0.0.1", gw.port) for gw in pair.gws]) as http_lb, \
            RoundRobin([("127.0.0.1", p) for p in grpc_ports]) as grpc_lb:
        card = behind(cards[0], http_lb, grpc_lb)
        for binding in ("JSONRPC", "HTTP+JSON", "GRPC"):
            lb = grpc_lb if binding == "GRPC" else http_lb

            @contextlib.asynccontextmanager
            async def call(who: str, lb: RoundRobin = lb, binding: str = binding) -> AsyncIterator[tuple[Client, int]]:
                """A new client of `who` through the balancer, and the gateway its one connection went to."""
                before = len(lb.served)
                async with sdk_over(card, who, binding) as client:
                    yield client, lb.next
                assert len(lb.served) >= before + 1

            text = f"rr-{binding}"
            async with call("alice") as (a, _):
                tid = await stream_until_first(a, text)
            seen: dict[str, set[int]] = {"GetTask": set(), "ListTasks": set(), "bob": set()}
            for _ in range(2):  # each call on the next connection, so each kind of call once on each gateway
                async with call("alice") as (a, on):
                    assert (await a.get_task(GetTaskRequest(id=tid))).status.state == TaskState.TASK_STATE_WORKING
                    assert lb.served[-1] == on, (binding, lb.served)
                    seen["GetTask"].add(on)
                async with call("alice") as (a, on):
                    assert tid in {t.id for t in (await a.list_tasks(ListTasksRequest())).tasks}
                    assert lb.served[-1] == on, (binding, lb.served)
                    seen["ListTasks"].add(on)
                async with call("bob") as (b, on):
                    with pytest.raises(TaskNotFoundError):
                        await b.get_task(GetTaskRequest(id=tid))
                    assert lb.served[-1] == on, (binding, lb.served)
                    seen["bob"].add(on)
            assert seen == {"GetTask": {0, 1}, "ListTasks": {0, 1}, "bob": {0, 1}}, seen
            # SubscribeToTask on both gateways at once: each stream follows the task to its end
            async with call("alice") as (s1, _), call("alice") as (s2, _):
                followed = [s1.subscribe(SubscribeToTaskRequest(id=tid))]
                assert state(await anext(followed[0])) == TaskState.TASK_STATE_WORKING
                followed.append(s2.subscribe(SubscribeToTaskRequest(id=tid)))
                assert state(await anext(followed[1])) == TaskState.TASK_STATE_WORKING
                assert lb.served[-2:] in ([0, 1], [1, 0]), lb.served
                stepper.gate(text).set()
                for f in followed:
                    rest = [e async for e in f]
                    assert f"second: {text}" in [t for e in rest for t in texts(e)], rest
                    assert state(rest[-1]) == TaskState.TASK_STATE_COMPLETED, rest[-1]
            # CancelTask on the gateway that did not make the task (another client's refused first), then read on both
            async with call("alice") as (a, _):
                tid2 = await stream_until_first(a, text + "-2")
                made_on = lb.served[-1]
            for who in ("bob", "alice"):
                await lb.skip_to(1 - made_on)
                async with call(who) as (c, on):
                    if who == "bob":
                        with pytest.raises(TaskNotFoundError):
                            await c.cancel_task(CancelTaskRequest(id=tid2))
                    else:
                        cancelled = await c.cancel_task(CancelTaskRequest(id=tid2))
                        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
                    assert lb.served[-1] == on == 1 - made_on
            for _ in range(2):
                async with call("alice") as (a, _):
                    assert (await a.get_task(GetTaskRequest(id=tid2))).status.state == TaskState.TASK_STATE_CANCELED
            assert set(lb.served) == {0, 1}
