"""One client's large bodies and answers do not queue another's (docs/security.md LN1): the JSON body worker took one
job at a time, whoever sent it, so mallory's answers of many values (a REST GetTask of 300,000 values takes it ~1.3 s)
queued there with everyone's large bodies and answers, and alice's one large body waited behind all of mallory's.
Now each caller's jobs wait apart (`body_queue.FairQueue`) and are taken in turn across callers: alice's job runs after
at most one of mallory's, and past her own bounds mallory's next is refused 429 + Retry-After, never alice's."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mma2a.gateway.access.clients import Client, current_client
from mma2a.gateway.access.peers import current_address
from mma2a.gateway.bindings.body_parser import WorkerLane, caller_key
from mma2a.gateway.bindings.body_queue import FairQueue
from tests.gateway.conftest import agent, agents, gateway, until

MALLORY, ALICE = "tok-mallory-90c1d7", "tok-alice-3e5a77"
MANY = 20_000  # empty objects in a message's metadata: 60 KB of JSON, ~10x what is converted on the loop


def message(mid: str, n: int = MANY) -> dict[str, Any]:
    return {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": "hi"}], "metadata": {"a": [{} for _ in range(n)]}}


# --- the queue --------------------------------------------------------------------------------------------------------


def drain(q: FairQueue[str]) -> list[str]:
    """Run every job to its end one at a time (one lane), in the order `take` gives them."""
    order = []
    while (taken := q.take()) is not None:
        caller, item, size = taken
        order.append(item)
        q.done(caller, size)
    return order


def test_callers_are_served_in_turn_and_each_callers_jobs_in_order() -> None:
    q: FairQueue[str] = FairQueue(max_jobs=10, max_bytes=1 << 30)
    for i in range(4):
        assert q.put("mallory", f"m{i}", 100) is None
    assert q.put("alice", "a0", 100) is None
    assert q.put("bob", "b0", 100) is None
    assert q.put("alice", "a1", 100) is None
    assert drain(q) == ["m0", "a0", "b0", "m1", "a1", "m2", "m3"]
    assert q.held("mallory") == (0, 0) and q.waiting == 0


def test_a_caller_arriving_while_anothers_job_runs_is_next() -> None:
    """One lane: mallory's first job runs, her others wait; alice's job, come after, runs right after it; and a caller
    sending one job at a time waits its turn behind those waiting (no fresh start to jump the line)."""
    q: FairQueue[str] = FairQueue(max_jobs=10, max_bytes=1 << 30)
    for i in range(3):
        q.put("mallory", f"m{i}", 1)
    caller, item, size = q.take()  # type: ignore[misc]
    assert item == "m0"
    q.put("alice", "a0", 1)
    q.done(caller, size)
    assert drain(q) == ["a0", "m1", "m2"]
    q.put("mallory", "m3", 1)
    caller, item, size = q.take()  # type: ignore[misc]
    q.put("mallory", "m4", 1)
    q.put("alice", "a1", 1)
    q.put("alice", "a2", 1)
    q.done(caller, size)
    assert drain(q) == ["a1", "m4", "a2"]


def test_with_two_lanes_one_caller_may_use_both_and_a_newcomer_takes_the_next_free_one() -> None:
    q: FairQueue[str] = FairQueue(max_jobs=10, max_bytes=1 << 30)
    for i in range(4):
        q.put("mallory", f"m{i}", 1)
    first, second = q.take(), q.take()
    assert first is not None and second is not None and (first[1], second[1]) == ("m0", "m1")
    q.put("alice", "a0", 1)
    q.done("mallory", 1)
    third = q.take()
    assert third is not None and third[1] == "a0"


def test_a_caller_past_its_own_bounds_is_refused_naming_them_and_no_one_else_is() -> None:
    q: FairQueue[str] = FairQueue(max_jobs=3, max_bytes=1000)
    for i in range(3):
        assert q.put("mallory", f"m{i}", 10) is None
    why = q.put("mallory", "m3", 10)
    assert why == ("this caller has 3 large bodies and answers in the gateway's JSON body worker already (at most 3 a "
                   "caller: limits.body_worker_jobs_per_client)")
    assert q.put("alice", "a0", 10) is None
    assert q.put("bob", "b0", 5000) is None  # a caller's first job always fits, however large
    why = q.put("bob", "b1", 1)
    assert why is not None and "5000 bytes" in why and "limits.body_worker_bytes_per_client" in why
    assert q.held("mallory") == (3, 30) and q.held("bob") == (1, 5000)


def test_a_waiting_job_whose_request_went_is_dropped() -> None:
    q: FairQueue[str] = FairQueue(max_jobs=2, max_bytes=1000)
    q.put("mallory", "m0", 10)
    q.put("mallory", "m1", 10)
    taken = q.take()
    assert taken is not None and not q.drop("mallory", "m0")  # running: it ends anyway
    assert q.drop("mallory", "m1") and q.held("mallory") == (1, 10)
    assert q.put("mallory", "m2", 10) is None  # room again
    q.done("mallory", 10)
    assert drain(q) == ["m2"] and q.held("mallory") == (0, 0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("put take".split()), st.sampled_from("abcd")), max_size=120))
def test_with_one_lane_a_job_waits_for_at_most_one_of_each_other_callers(steps: list[tuple[str, str]]) -> None:
    """Any arrivals and completions, one lane: each caller's jobs run in the order they came, and from a job's arrival
    to its run each other caller runs at most one job — the one running when it came counted — plus one for each job of
    its own caller that was waiting ahead of it (which run first)."""
    q: FairQueue[tuple[str, int]] = FairQueue(max_jobs=1000, max_bytes=1 << 40)
    running: tuple[str, tuple[str, int], int] | None = None
    events: list[tuple[str, str, int, str]] = []  # ("put" | "run", caller, its job's number, the caller running)
    numbers = dict.fromkeys("abcd", 0)

    def step_take() -> None:
        nonlocal running
        if running is not None:
            q.done(running[0], running[2])
        running = q.take()
        if running is not None:
            events.append(("run", running[0], running[1][1], ""))

    for what, caller in steps:
        if what == "put":
            q.put(caller, (caller, numbers[caller]), 1)
            events.append(("put", caller, numbers[caller], running[0] if running is not None else ""))
            numbers[caller] += 1
        else:
            step_take()
    while running is not None or q.waiting:
        step_take()
    for caller in "abcd":
        assert [n for e, c, n, _ in events if e == "run" and c == caller] == list(range(numbers[caller]))
    for i, (e, caller, n, busy) in enumerate(events):
        if e != "put":
            continue
        ran = next(j for j in range(i, len(events)) if events[j][:3] == ("run", caller, n))
        before = events[:i]
        ahead = sum(1 for e2, c2, _, _ in before if c2 == caller and e2 == "put") - sum(
            1 for e2, c2, _, _ in before if c2 == caller and e2 == "run")  # its own, waiting when it came
        for other in "abcd":
            if other != caller:
                runs = sum(1 for e2, c2, _, _ in events[i:ran] if e2 == "run" and c2 == other) + (busy == other)
                assert runs <= 1 + ahead, events


# --- the total across callers (session 18, edges; docs/security.md ED4) -----------------------------------------------


def test_many_callers_each_within_their_share_are_held_to_the_total() -> None:
    """40 callers each within its own bounds (2 jobs of 40 bytes, at most 100 a caller) held 3,200 bytes in all before;
    with a total of 300 the queue never holds more, and the jobs past it are refused naming the bound."""
    q: FairQueue[str] = FairQueue(max_jobs=10, max_bytes=100, max_total=300)
    refused = []
    for i in range(40):
        for j in range(2):
            why = q.put(f"c{i}", f"c{i}-{j}", 40)
            if why is not None:
                refused.append((f"c{i}-{j}", why))
            assert q.total <= 300 and q.total == sum(q.held(f"c{k}")[1] for k in range(40))
    assert refused and all("(at most 300 in all: limits.body_worker_bytes_total)" in why for _, why in refused)
    assert q.total <= 300
    before = FairQueue[str](max_jobs=10, max_bytes=100)  # (no total: all of them)
    for i in range(40):
        for j in range(2):
            assert before.put(f"c{i}", f"c{i}-{j}", 40) is None
    assert before.total == 3200


def test_past_the_total_a_caller_within_its_share_takes_the_room_of_the_heaviest_callers_newest_waiting_job() -> None:
    displaced: list[tuple[str, str, str]] = []
    q: FairQueue[str] = FairQueue(max_jobs=10, max_bytes=1000, max_total=400,
                                  displaced=lambda c, job, why: displaced.append((c, job, why)))
    for i in range(3):
        assert q.put("mallory", f"m{i}", 100) is None
    assert q.put("bob", "b0", 100) is None  # 400: full
    assert q.put("alice", "a0", 100) is None  # even share 400 // 3 = 133: hers fits, mallory's newest goes
    assert displaced == [("mallory", "m2", (
        "the gateway's JSON body worker holds 400 bytes of large bodies and answers at most in all "
        "(limits.body_worker_bytes_total); this caller held 300, past its even share of 133 (3 callers), and its "
        "newest waiting job made room for another caller's"))]
    assert q.total == 400 and q.held("mallory") == (2, 200) and q.held("bob") == (1, 100)
    why = q.put("mallory", "m3", 100)  # past her even share: her own next is refused, no one else's taken out
    assert why == ("the gateway's JSON body worker holds 400 bytes of large bodies and answers already, and this one "
                   "is 100 (at most 400 in all: limits.body_worker_bytes_total); this caller holds 200 of them, past "
                   "its even share of 133 (3 callers)")
    assert len(displaced) == 1 and drain(q) == ["m0", "b0", "a0", "m1"]
    assert q.total == 0


def test_past_the_total_with_the_heavy_callers_jobs_running_a_newcomer_is_refused_and_nothing_taken_out() -> None:
    displaced: list[tuple[str, str, str]] = []
    q: FairQueue[str] = FairQueue(max_jobs=10, max_bytes=1000, max_total=300,
                                  displaced=lambda c, job, why: displaced.append((c, job, why)))
    assert q.put("mallory", "m0", 250) is None
    assert q.take() == ("mallory", "m0", 250)  # running: not taken out
    assert q.put("alice", "a0", 100) == (
        "the gateway's JSON body worker holds 250 bytes of large bodies and answers already, and this one is 100 (at "
        "most 300 in all: limits.body_worker_bytes_total); what is past the callers' even shares is running, none of "
        "it waiting")
    assert displaced == [] and q.put("alice", "a1", 50) is None  # what fits, fits
    assert q.put("bob", "b0", 301) is not None  # more than the total: never
    q.done("mallory", 250)
    assert q.put("alice", "a2", 150) is None and q.total == 200


def test_the_total_is_the_body_budgets_by_default_and_holds_a_page_of_task_records() -> None:
    from mma2a.gateway import parse_config
    from mma2a.gateway.app import body_worker_total

    assert body_worker_total(parse_config({})) == 8 * 64 * 1024 * 1024  # max_body_bytes_in_flight's default
    assert body_worker_total(parse_config({"max_body_bytes_in_flight": 1 << 20})) == 16 * 1024 * 1024  # task_bytes
    assert body_worker_total(parse_config({"limits": {"body_worker_bytes_total": 12345}})) == 12345


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("put take".split()), st.sampled_from("abcd"), st.integers(1, 120)),
                max_size=120))
def test_the_total_is_never_passed_and_a_caller_within_its_share_loses_no_job(
        steps: list[tuple[str, str, int]]) -> None:
    """Any arrivals (of any size) and completions, one lane, a total of 300: the queue never holds more; a job taken
    out was its caller's newest waiting one while that caller held more than its even share; and each caller's jobs
    that run, run in the order they came."""
    holding: dict[str, int] = {}
    out: list[tuple[str, tuple[str, int]]] = []

    def displaced(caller: str, job: tuple[str, int], why: str) -> None:
        out.append((caller, job))
        assert "past its even share" in why and "limits.body_worker_bytes_total" in why

    q: FairQueue[tuple[str, int]] = FairQueue(max_jobs=1000, max_bytes=1 << 40, max_total=300, displaced=displaced)
    running: tuple[str, tuple[str, int], int] | None = None
    ran: dict[str, list[int]] = {c: [] for c in "abcd"}
    numbers = dict.fromkeys("abcd", 0)
    for what, caller, size in steps:
        if what == "put":
            holding = {c: q.held(c)[1] for c in "abcd"}
            callers = sum(1 for c in "abcd" if q.held(c)[0]) + (q.held(caller)[0] == 0)
            before = len(out)
            why = q.put(caller, (caller, numbers[caller]), size)
            for victim, _ in out[before:]:
                assert holding[victim] > 300 // callers and victim != caller
            if why is not None:
                assert len(out) == before
            numbers[caller] += 1
        else:
            if running is not None:
                q.done(running[0], running[2])
            running = q.take()
            if running is not None:
                ran[running[0]].append(running[1][1])
        assert q.total <= 300 and q.total == sum(q.held(c)[1] for c in "abcd")
    for c in "abcd":
        assert ran[c] == sorted(ran[c])


def test_a_job_is_its_clients_else_its_callers_address() -> None:
    assert caller_key() == "?"
    token = current_client.set(Client(name="alice", scheme="bearer"))
    try:
        assert caller_key() == "alice"
    finally:
        current_client.reset(token)
    where = current_address.set("2001:db8::7")
    try:
        assert caller_key() == "ip:2001:db8::/64"  # as anonymous rate limits, body bytes and stream slots key it
    finally:
        current_address.reset(where)


# --- the attack, live -------------------------------------------------------------------------------------------------


async def test_mallorys_many_answers_do_not_queue_alices_large_body(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mallory keeps a task of 20,000 values (stored cheaply on JSON-RPC's fast path) and asks for it 6 times at once
    on REST: each answer is converted in the worker, and the first holds it (the test's gate) until her others wait
    and alice's large REST send (20,000 values: read in the worker, then its answer converted there) waits too. Alice's
    jobs each run after at most one of mallory's; mallory holds at most her 4 and is refused the rest with 429, naming
    the limit; everyone's answer is whole. Before: one line for everyone, alice's body behind all of mallory's."""
    gate = threading.Event()
    events: list[tuple[str, str]] = []  # ("put" | "run", caller), in the order the queue saw them
    put, take = FairQueue.put, FairQueue.take
    exchange = WorkerLane._exchange

    def putting(self: FairQueue[Any], caller: str, item: Any, size: int) -> str | None:
        why = put(self, caller, item, size)
        if why is None:
            events.append(("put", caller))
        return why

    def taking(self: FairQueue[Any]) -> Any:
        taken = take(self)
        if taken is not None:
            events.append(("run", taken[0]))
        return taken

    def gated(self: WorkerLane, data: bytes, job: int) -> object:
        gate.wait(60)  # (the lane's thread, not the loop) released once everyone's jobs are queued
        return exchange(self, data, job)

    monkeypatch.setattr(FairQueue, "put", putting)
    monkeypatch.setattr(FairQueue, "take", taking)
    monkeypatch.setattr(WorkerLane, "_exchange", gated)
    card, executor = agent("text", ["text/plain"])
    async with agents({"text": (card, executor)}) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}],
               "auth": {"clients": [{"name": "mallory", "token": MALLORY}, {"name": "alice", "token": ALICE}]},
               "limits": {"body_worker_jobs_per_client": 4}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=60) as c:
            queue = gw._body_parser.queue
            as_mallory = {"Authorization": f"Bearer {MALLORY}", "A2A-Version": "1.0"}
            as_alice = {"Authorization": f"Bearer {ALICE}", "A2A-Version": "1.0"}
            stored = await c.post(url + "/", headers=as_mallory, json={
                "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message("m-mallory")}})
            tid = stored.json()["result"]["task"]["id"]  # (the fast path: read and answered by orjson, no job)
            assert events == []
            asks = [asyncio.create_task(c.get(url + f"/tasks/{tid}", headers=as_mallory)) for _ in range(6)]
            await until(lambda: sum(a.done() for a in asks) == 2 and queue.held("mallory")[0] == 4,
                        "mallory's 4 answers held, 2 refused")
            refused = [a.result() for a in asks if a.done()]
            send = asyncio.create_task(c.post(url + "/message:send", headers=as_alice,
                                              content=orjson.dumps({"message": message("m-alice")})))
            await until(lambda: queue.held("alice")[0] == 1, "alice's body queued")
            gate.set()
            sent = await send
            served = [await a for a in asks]
    for r in refused:
        assert r.status_code == 429 and r.headers["Retry-After"] == "1"
        assert r.json()["error"]["message"] == (
            "this caller has 4 large bodies and answers in the gateway's JSON body worker already (at most 4 a caller: "
            "limits.body_worker_jobs_per_client); retry when they are answered, or send large media by reference "
            "(POST /blobs)")
    answered = [r for r in served if r.status_code == 200]
    assert len(answered) == 4 and all(len(r.json()["history"][0]["metadata"]["a"]) == MANY for r in answered)
    assert sent.status_code == 200 and len(sent.json()["task"]["history"][0]["metadata"]["a"]) == MANY
    # alice's two jobs (her body read, her answer converted): each ran after at most one of mallory's
    alice = [i for i, e in enumerate(events) if e == ("put", "alice")]
    assert len(alice) == 2 and [e for e in events if e[0] == "run"].count(("run", "alice")) == 2
    for at in alice:
        ran = events.index(("run", "alice"), at)
        between = [e for e in events[at:ran] if e == ("run", "mallory")]
        assert len(between) <= 1, events
    assert events.count(("run", "mallory")) == 4 and queue.held("mallory") == (0, 0) == queue.held("alice")


async def test_a_caller_past_its_bound_is_refused_429_on_every_binding_and_another_served(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Mallory may hold one job (`body_worker_jobs_per_client: 1`), and holds it (the test's gate): her next large
    body or answer of many values is refused on every way into the worker — the JSON-RPC ingress's parse of a body
    past 1 MiB, the SDK's dispatcher's read of a body and conversion of an answer (ListTasks), REST's read of a send,
    gRPC's conversion of an answer (GetTask) — with 429 + Retry-After (gRPC RESOURCE_EXHAUSTED, `retry-after`),
    naming the limit (a JSON-RPC body of many values the SDK's dispatcher reads — SendStreamingMessage — is not then
    read on the loop instead, as it was when the worker stopped); alice's large send meanwhile waits and is served."""
    import grpc
    import grpc.aio
    from a2a.types import GetTaskRequest, a2a_pb2_grpc

    from tests.security.test_grpc_admission import grpc_gateway

    gate = threading.Event()
    exchange = WorkerLane._exchange

    def gated(self: WorkerLane, data: bytes, job: int, *prefix: bytes) -> object:
        gate.wait(60)
        return exchange(self, data, job, *prefix)

    monkeypatch.setattr(WorkerLane, "_exchange", gated)
    from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher

    read_by_sdk: list[object] = []  # requests the SDK's dispatcher read itself, on the loop
    handle = JsonRpcDispatcher.handle_requests

    async def recorded(self: Any, request: Any) -> Any:
        if b"m-sse" in await request.body():  # (the small requests are the SDK's to read)
            read_by_sdk.append(request)
        return await handle(self, request)

    monkeypatch.setattr(JsonRpcDispatcher, "handle_requests", recorded)
    auth = {"clients": [{"name": "mallory", "token": MALLORY}, {"name": "alice", "token": ALICE}]}
    limit = ("this caller has 1 large bodies and answers in the gateway's JSON body worker already (at most 1 a caller: "
             "limits.body_worker_jobs_per_client); retry when they are answered, or send large media by reference "
             "(POST /blobs)")
    async with grpc_gateway({"auth": auth, "limits": {"body_worker_jobs_per_client": 1}}) as (gw, url, port, _):
        queue = gw._body_parser.queue
        as_mallory = {"Authorization": f"Bearer {MALLORY}", "A2A-Version": "1.0"}
        as_alice = {"Authorization": f"Bearer {ALICE}", "A2A-Version": "1.0"}
        async with httpx.AsyncClient(timeout=60) as c:
            stored = await c.post(url + "/", headers=as_mallory, json={
                "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message("m-mallory")}})
            tid = stored.json()["result"]["task"]["id"]
            held = asyncio.create_task(c.get(url + f"/tasks/{tid}", headers=as_mallory))
            await until(lambda: queue.held("mallory")[0] == 1, "mallory's first job held")
            large = orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {
                "message": message("m-large", 0) | {"parts": [{"text": "x" * (1 << 20)}]}}})
            ingress = await c.post(url + "/", headers=as_mallory, content=large)
            listed = await c.post(url + "/", headers=as_mallory, json={
                "jsonrpc": "2.0", "id": 3, "method": "ListTasks", "params": {}})
            sent = await c.post(url + "/message:send", headers=as_mallory,
                                content=orjson.dumps({"message": message("m-rest")}))
            streamed = await c.post(url + "/", headers={**as_mallory, "Accept": "text/event-stream"}, json={
                "jsonrpc": "2.0", "id": 4, "method": "SendStreamingMessage", "params": {"message": message("m-sse")}})
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]
                with pytest.raises(grpc.aio.AioRpcError) as grpc_refused:
                    await stub.GetTask(GetTaskRequest(id=tid), timeout=60, metadata=[
                        ("a2a-version", "1.0"), ("authorization", f"Bearer {MALLORY}")])
            alice = asyncio.create_task(c.post(url + "/message:send", headers=as_alice,
                                               content=orjson.dumps({"message": message("m-alice")})))
            await until(lambda: queue.held("alice")[0] == 1, "alice's body queued")
            gate.set()
            first, served = await held, await alice
            scraped = (await c.get(url + "/metrics", headers=as_alice)).text  # an operator sees the refusals
    assert read_by_sdk == []  # (the stream's body: before, the SDK's dispatcher read it on the loop instead)
    for r in (ingress, listed, streamed):
        assert r.status_code == 429 and r.headers["Retry-After"] == "1", r.text[:300]
        assert r.json()["error"]["message"] == limit
    assert sent.status_code == 429 and sent.headers["Retry-After"] == "1" and sent.json()["error"]["message"] == limit
    exc = grpc_refused.value
    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and exc.details() == limit
    assert ("retry-after", "1") in tuple(exc.trailing_metadata() or ())
    assert first.status_code == 200 and len(first.json()["history"][0]["metadata"]["a"]) == MANY
    assert served.status_code == 200 and len(served.json()["task"]["history"][0]["metadata"]["a"]) == MANY
    assert "\nmma2a_body_worker_refused_total 5.0\n" in scraped, scraped  # the five 429s above, gRPC's included
    assert f"\nmma2a_body_worker_jobs_total {float(gw._body_parser.taken)}\n" in scraped
    assert gw._body_parser.taken >= 2  # mallory's held job, alice's body


async def test_past_the_total_a_caller_is_refused_429_on_every_binding_and_another_takes_its_waiting_jobs_room(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`limits.body_worker_bytes_total` (session 18, edges; docs/security.md ED4), set just above what mallory's large
    JSON-RPC body (held running by the test's gate) and one more job of hers take: her REST send's check waits, then
    alice's REST send needs room: alice is within her even share, mallory past hers, so mallory's waiting job makes
    room (her send answered 429 naming the bound) and alice's is served. Mallory's next on every way into the worker —
    JSON-RPC's ingress, the SDK's dispatcher's read of a stream's body and conversion of ListTasks, gRPC's GetTask — is
    refused 429 + Retry-After: 1 (gRPC RESOURCE_EXHAUSTED, `retry-after`) naming the bound and her share. Before: no
    total; many callers each within their share held any sum."""
    import grpc
    import grpc.aio
    from a2a.types import GetTaskRequest, a2a_pb2_grpc

    from tests.security.test_grpc_admission import grpc_gateway

    gate = threading.Event()
    exchange = WorkerLane._exchange

    def gated(self: WorkerLane, data: bytes, job: int, *prefix: bytes) -> object:
        gate.wait(60)
        return exchange(self, data, job, *prefix)

    monkeypatch.setattr(WorkerLane, "_exchange", gated)
    large = orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {
        "message": message("m-large", 0) | {"parts": [{"text": "x" * (1 << 20)}]}}})
    rest_send = orjson.dumps({"message": message("m-rest")})
    total = len(large) + len(rest_send) + len(rest_send) // 2
    auth = {"clients": [{"name": "mallory", "token": MALLORY}, {"name": "alice", "token": ALICE}]}
    bound = "(at most %d in all: limits.body_worker_bytes_total)" % total
    async with grpc_gateway({"auth": auth, "limits": {"body_worker_bytes_total": total}}) as (gw, url, port, _):
        queue = gw._body_parser.queue
        as_mallory = {"Authorization": f"Bearer {MALLORY}", "A2A-Version": "1.0"}
        as_alice = {"Authorization": f"Bearer {ALICE}", "A2A-Version": "1.0"}
        async with httpx.AsyncClient(timeout=60) as c:
            stored = await c.post(url + "/", headers=as_mallory, json={
                "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message("m-mallory")}})
            tid = stored.json()["result"]["task"]["id"]  # (the fast path: no job)
            held = asyncio.create_task(c.post(url + "/", headers=as_mallory, content=large))
            await until(lambda: queue.held("mallory") == (1, len(large)), "mallory's large body held")
            waiting = asyncio.create_task(c.post(url + "/message:send", headers=as_mallory, content=rest_send))
            await until(lambda: queue.held("mallory")[0] == 2, "mallory's REST send waiting")
            alice = asyncio.create_task(c.post(url + "/message:send", headers=as_alice, content=rest_send))
            await until(lambda: queue.held("alice")[0] == 1, "alice's body queued")
            displaced = await waiting
            again = await c.post(url + "/", headers=as_mallory, content=large.replace(b"m-large", b"m-again"))
            listed = await c.post(url + "/", headers=as_mallory, json={
                "jsonrpc": "2.0", "id": 3, "method": "ListTasks", "params": {}})
            streamed = await c.post(url + "/", headers={**as_mallory, "Accept": "text/event-stream"}, json={
                "jsonrpc": "2.0", "id": 4, "method": "SendStreamingMessage", "params": {"message": message("m-sse")}})
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]
                with pytest.raises(grpc.aio.AioRpcError) as grpc_refused:
                    await stub.GetTask(GetTaskRequest(id=tid), timeout=60, metadata=[
                        ("a2a-version", "1.0"), ("authorization", f"Bearer {MALLORY}")])
            assert queue.total <= total
            gate.set()
            first, served = await held, await alice
    assert displaced.status_code == 429 and displaced.headers["Retry-After"] == "1", displaced.text[:300]
    assert displaced.json()["error"]["message"] == (
        f"the gateway's JSON body worker holds {total} bytes of large bodies and answers at most in all "
        f"(limits.body_worker_bytes_total); this caller held {len(large) + len(rest_send)}, past its even share of "
        f"{total // 2} (2 callers), and its newest waiting job made room for another caller's; retry when they are "
        "answered, or send large media by reference (POST /blobs)")
    for r in (again, listed, streamed):
        assert r.status_code == 429 and r.headers["Retry-After"] == "1", r.text[:300]
        why = r.json()["error"]["message"]
        assert bound in why and f"this caller holds {len(large)} of them, past its even share of {total // 2}" in why
    exc = grpc_refused.value
    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and bound in (exc.details() or "")
    assert ("retry-after", "1") in tuple(exc.trailing_metadata() or ())
    assert first.status_code == 200 and first.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert served.status_code == 200 and len(served.json()["task"]["history"][0]["metadata"]["a"]) == MANY


# --- an answer counted as what its request holds (docs/security.md S18-1) ---------------------------------------------


def test_one_job_larger_than_the_total_fits_in_an_empty_queue_and_holds_it_alone() -> None:
    q: FairQueue[str] = FairQueue(max_jobs=8, max_bytes=1000, max_total=300)
    assert q.put("alice", "a0", 500) is None and q.total == 500  # (her task's answer: it would never be read else)
    taken = q.take()
    assert taken is not None
    why = q.put("bob", "b0", 10)  # past the total while hers runs
    assert why is not None and "(at most 300 in all: limits.body_worker_bytes_total)" in why
    q.done(*taken[::2])
    assert q.total == 0 and q.put("bob", "b0", 10) is None


def test_an_answers_job_counts_what_its_document_holds_while_it_waits() -> None:
    """The pickle of 20,000 empty objects is ~20 KB; parsed, the document its request holds is ~1.4 MB."""
    import tracemalloc

    from mma2a.sdk_answers import many_values

    raw = orjson.dumps({"id": "t", "history": [message("m")]})
    tracemalloc.start()
    doc = orjson.loads(raw)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    many = many_values(doc)
    assert many is not None
    pickled, counted = many
    assert len(pickled) < 64_000 and held > 1_000_000
    assert held <= counted <= 4 * held
    bignum = many_values({"a": [{} for _ in range(3000)], "b": 1 << 70})  # orjson writes no such integer
    assert bignum is not None and bignum[1] >= 3000 * 64


async def test_answers_waiting_are_counted_as_their_documents_and_held_to_the_total(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Mallory, bob and carol each keep a task of 20,000 values and ask for it 3 times at once on REST, the worker's
    first conversion held (the test's gate): each waiting request holds its answer's document (~1.4 MB parsed), which
    was counted by its pickle (~41 KB), so the queue's bounds (`limits.body_worker_bytes_total` here 16 MB) held any
    number of documents. Now each job counts at least what its document holds, the queue stays within the total, and
    the jobs past it are refused 429 + Retry-After naming the bound, the others answered whole. Before: all 9 taken,
    369 KB counted for ~12 MB held (a live gateway: 8 clients' 8 answers of 499,000 values, 117 -> 2,212 MB)."""
    import tracemalloc

    gate = threading.Event()
    sizes: list[int] = []  # of the jobs queued
    totals: list[int] = []  # what the queue held after each
    put = FairQueue.put
    exchange = WorkerLane._exchange

    def putting(self: FairQueue[Any], caller: str, item: Any, size: int) -> str | None:
        why = put(self, caller, item, size)
        if why is None:
            sizes.append(size)
            totals.append(self.total)
        return why

    def gated(self: WorkerLane, data: bytes, job: int) -> object:
        gate.wait(60)
        return exchange(self, data, job)

    monkeypatch.setattr(FairQueue, "put", putting)
    monkeypatch.setattr(WorkerLane, "_exchange", gated)
    names = ("mallory", "bob", "carol")
    card, executor = agent("text", ["text/plain"])
    async with agents({"text": (card, executor)}) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}],
               "auth": {"clients": [{"name": n, "token": f"tok-{n}-0123456789"} for n in names]},
               "limits": {"body_worker_jobs_per_client": 4, "body_worker_bytes_total": 16_000_000}}
        async with gateway(cfg) as (_, url), httpx.AsyncClient(timeout=60) as c:
            asks = []
            for n in names:
                h = {"Authorization": f"Bearer tok-{n}-0123456789", "A2A-Version": "1.0"}
                stored = await c.post(url + "/", headers=h, json={
                    "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message(f"m-{n}")}})
                tid = stored.json()["result"]["task"]["id"]
                asks += [asyncio.create_task(c.get(url + f"/tasks/{tid}", headers=h)) for _ in range(3)]
            await until(lambda: sum(a.done() for a in asks) + len(sizes) >= len(asks), "every answer queued or refused")
            gate.set()
            answers = [await a for a in asks]
    refused = [r for r in answers if r.status_code == 429]
    served = [r for r in answers if r.status_code == 200]
    assert len(served) + len(refused) == 9 and refused, [r.status_code for r in answers]
    assert max(totals) <= 16_000_000
    for r in refused:
        assert r.headers["Retry-After"] == "1"
        said = r.json()["error"]["message"]  # refused, or its waiting job's room taken by another caller's
        assert "16000000" in said and "limits.body_worker_bytes_total" in said, said
    for r in served:
        assert len(r.json()["history"][0]["metadata"]["a"]) == MANY
    tracemalloc.start()
    doc = orjson.loads(served[0].content)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del doc
    assert min(sizes) >= held  # each job counted at least what its document holds (before: 41,023 of ~1.4 MB)
