"""Feedback through a live gateway: clients rate their tasks (REST and JSON-RPC), learned routing follows the ratings,
another client's task is not found, bad input names its field, ratings are limited per client."""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import AgentCapabilities, Part

from mma2a.ext import EXTENSION_URI
from mma2a.gateway.stages.feedback import FEEDBACK_METHOD
from mma2a.gateway.state.learning import LearnedPart, LearnedTask, Learner, failed_agents
from tests.agents import RecordingExecutor, make_card
from tests.gateway.conftest import ADMIN, agent, agents, gateway
from tests.media import png_bytes

ALICE, BOB = {"Authorization": "Bearer alice-token-1"}, {"Authorization": "Bearer bob-token-22"}
RULES = {"version": 1, "default": {"learn": {"explore": 0}}, "rules": []}


def config(urls: dict[str, str], tmp_path: Any, **extra: Any) -> dict[str, Any]:
    return {"agents": [{"name": n, "url": u} for n, u in urls.items()], "rules": orjson.dumps(RULES).decode(),
            "data_dir": str(tmp_path), "auth": {"clients": [{"name": "alice", "token": "alice-token-1"},
                                                            {"name": "bob", "token": "bob-token-22"}]}, **extra}


async def send(c: httpx.AsyncClient, url: str, mid: str, text: str, who: dict[str, str]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}]}}}
    r = await c.post(url + "/", json=body, headers={**who, "A2A-Version": "1.0"})
    task: dict[str, Any] = r.json()["result"]["task"]
    return task


def agent_of(task: dict[str, Any]) -> str:
    return str(task["metadata"][EXTENSION_URI]["route"][0]["targets"][0])


async def rpc(c: httpx.AsyncClient, url: str, params: Any, who: dict[str, str], path: str = "/") -> dict[str, Any]:
    r = await c.post(url + path, json={"jsonrpc": "2.0", "id": 7, "method": FEEDBACK_METHOD, "params": params},
                     headers={**who, "A2A-Version": "1.0"})
    out: dict[str, Any] = r.json()
    return out


async def test_ratings_steer_the_raters_own_traffic_and_are_kept_in_history(tmp_path: Any) -> None:
    specs = {n: agent(n, ["text/plain"]) for n in ("desk-a", "desk-b", "desk-c")}
    async with agents(specs) as urls, gateway(config(urls, tmp_path)) as (gw, url), httpx.AsyncClient(timeout=30) as c:
        first = await send(c, url, "q-1", "I was charged twice for my subscription this month", ALICE)
        assert agent_of(first) == "desk-a"  # no ratings yet: capability routing (the first of equals)
        r = await c.post(f"{url}/tasks/{first['id']}:feedback", json={"score": 0, "comment": "wrong answer"}, headers=ALICE)
        assert r.status_code == 200 and r.json() == {"taskId": first["id"], "agent": "desk-a", "score": 0.0,
                                                     "learnedParts": 1}
        second = await send(c, url, "q-2", "Why was my card charged twice for the subscription?", ALICE)
        assert agent_of(second) == "desk-b"  # desk-a rated badly on a similar part: an untried desk next
        done = await rpc(c, url, {"id": second["id"], "score": 1, "agent": "desk-b"}, ALICE)
        assert done["result"]["agent"] == "desk-b" and done["result"]["learnedParts"] == 1
        third = await send(c, url, "q-3", "A double charge for my subscription appeared on my card", ALICE)
        assert agent_of(third) == "desk-b"
        # bob's traffic is not steered by alice's ratings (feedback: own)
        assert agent_of(await send(c, url, "q-4", "I was charged twice for my subscription", BOB)) == "desk-a"
        # a dry run as alice shows the evidence; as bob, none
        admin = {"Authorization": f"Bearer {ADMIN}"}
        sample = {"messageId": "d-1", "role": "ROLE_USER", "parts": [{"text": "charged twice for my subscription"}]}
        dry = (await c.post(url + "/admin/explain", headers=admin, json={"message": sample,
                                                                          "client": {"id": "alice"}})).json()
        notes = dry["explanation"]["parts"][0]["notes"]
        assert dry["parts"][0]["targets"] == ["desk-b"]
        assert any(n.startswith("learned: 2 similar parts") and n.endswith("chose desk-b") for n in notes), notes
        dry = (await c.post(url + "/admin/explain", headers=admin, json={"message": sample,
                                                                          "client": {"id": "bob"}})).json()
        assert "learned: no ratings of similar parts yet; capability routing" in dry["explanation"]["parts"][0]["notes"]
        assert gw.history is not None and await asyncio.to_thread(gw.history.flush, 10.0)
        rows = (await c.get(url + "/admin/history?limit=50", headers={"Authorization": f"Bearer {ADMIN}"})).json()
    by_id = {}
    for row in rows["decisions"]:
        by_id.setdefault(row["messageId"], []).append(row)
    learned_note = by_id["q-3"][-1]["parts"][0]["learned"] if "q-3" in by_id else None
    assert learned_note is not None and learned_note.startswith("learned: 2 similar parts")
    assert "desk-a 0/1 good, desk-b 1/1 good, desk-c untried; chose desk-b" in learned_note
    feedback = [r for rs in by_id.values() for r in rs if r["outcome"] == "feedback"]
    assert len(feedback) == 2 and {r["sender"] for r in feedback} == {"alice"}
    assert any(r.get("error") == f"task {first['id']}: desk-a rated 0 (wrong answer)" for r in feedback)


async def test_another_clients_task_is_not_found_and_bad_input_names_the_field(tmp_path: Any) -> None:
    specs = {n: agent(n, ["text/plain"]) for n in ("desk-a", "desk-b")}
    async with agents(specs) as urls, gateway(config(urls, tmp_path)) as (gw, url), httpx.AsyncClient(timeout=30) as c:
        task = await send(c, url, "q-1", "hello there", ALICE)
        tid = task["id"]
        r = await c.post(f"{url}/tasks/{tid}:feedback", json={"score": 1}, headers=BOB)
        assert r.status_code == 404 and r.json()["error"]["message"] == f"task {tid!r} not found"
        assert (await rpc(c, url, {"id": tid, "score": 1}, BOB))["error"]["code"] == -32001
        r = await c.post(f"{url}/agents/desk-b/tasks/{tid}:feedback", json={"score": 1}, headers=ALICE)
        assert r.status_code == 404  # not a task of desk-b
        r = await c.post(f"{url}/agents/desk-a/tasks/{tid}:feedback", json={"score": 0.5}, headers=ALICE)
        assert r.status_code == 200 and r.json()["agent"] == "desk-a"
        cases = [({"score": 1.5}, "body.score: required, a number from 0 to 1, got 1.5"),
                 ({"score": True}, "body.score: required, a number from 0 to 1, got True"),
                 ({}, "body.score: required, a number from 0 to 1, got None"),
                 ({"score": 1, "agent": "desk-b"}, "body.agent: 'desk-b' is not an agent of this task (desk-a)"),
                 ({"score": 1, "comment": "x" * 1025}, "body.comment: at most 1024 bytes"),
                 ({"score": 1, "rating": 5}, "body.rating: unknown field (expected score, agent, comment)"),
                 ([1], "body: must be an object with score (0..1), agent and comment (optional)")]
        for body, message in cases:
            r = await c.post(f"{url}/tasks/{tid}:feedback", json=body, headers=ALICE)
            assert (r.status_code, r.json()["error"]["message"]) == (400, message)
        r = await c.post(f"{url}/tasks/{tid}:feedback", content=b"{nope", headers=ALICE)
        assert r.status_code == 400 and r.json()["error"]["message"].startswith("request body is not valid JSON")
        bad = await rpc(c, url, {"id": tid, "score": -1}, ALICE)
        assert bad["error"]["code"] == -32602
        assert bad["error"]["message"] == "params.score: required, a number from 0 to 1, got -1"
        assert (await rpc(c, url, {"score": 1}, ALICE))["error"]["message"] == "params.id: required, must be a task id string"


async def test_ratings_are_limited_per_client(tmp_path: Any) -> None:
    specs = {"desk-a": agent("desk-a", ["text/plain"])}
    tiny = {"limits": {"feedback_per_s": 0.001, "feedback_burst": 3}}  # a tiny budget, no refill in the test
    async with agents(specs) as urls, gateway(config(urls, tmp_path, **tiny)) as (gw, url), \
            httpx.AsyncClient(timeout=30) as c:
        tid = (await send(c, url, "q-1", "hello", ALICE))["id"]
        bob_tid = (await send(c, url, "q-2", "hello", BOB))["id"]
        codes = [(await c.post(f"{url}/tasks/{tid}:feedback", json={"score": 1}, headers=ALICE)).status_code
                 for _ in range(4)]
        r = await c.post(f"{url}/tasks/{tid}:feedback", json={"score": 1}, headers=ALICE)
        bob = await c.post(f"{url}/tasks/{bob_tid}:feedback", json={"score": 1}, headers=BOB)
    assert codes == [200, 200, 200, 429]
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
    assert r.json()["error"]["message"].startswith("feedback: at most 0.001 ratings a second per client (burst 3)")
    assert bob.status_code == 200  # another client's budget is its own


@dataclass
class FailingExecutor(AgentExecutor):
    """Fails every task it is given (`raise_`: raises instead, an agent error the gateway sees as a failed leg)."""

    raise_: bool = False
    calls: int = 0

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        self.calls += 1
        if self.raise_:
            raise RuntimeError("desk is down")
        task = context.current_task or new_task_from_user_message(context.message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.failed(updater.new_agent_message([Part(text="cannot answer")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


@pytest.mark.parametrize("raise_", [False, True], ids=["failed-task", "agent-error"])
async def test_a_failed_task_counts_as_a_bad_outcome_without_any_rating(tmp_path: Any, raise_: bool) -> None:
    failing = FailingExecutor(raise_=raise_)
    specs = {"desk-a": (make_card("desk-a", input_modes=["text/plain"], output_modes=["text/plain"]), failing),
             **{n: agent(n, ["text/plain"]) for n in ("desk-b", "desk-c")}}
    async with agents(specs) as urls, gateway(config(urls, tmp_path)) as (gw, url), httpx.AsyncClient(timeout=30) as c:
        async def raw(mid: str, who: dict[str, str]) -> dict[str, Any]:
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                "messageId": mid, "role": "ROLE_USER", "parts": [{"text": "My parcel was delivered to the wrong address"}]}}}
            out: dict[str, Any] = (await c.post(url + "/", json=body, headers={**who, "A2A-Version": "1.0"})).json()
            return out

        first = await raw("f-1", ALICE)
        second = await send(c, url, "f-2", "The parcel went to a wrong delivery address", ALICE)
        bob = await raw("f-3", BOB)
    for reply in (first, bob):  # both to desk-a: bob's traffic is his own (feedback: own), alice's outcome is hers
        if raise_:  # one agent, one leg: its JSON-RPC error is the answer, no task
            assert reply["error"] == {"code": -32603, "message": "desk is down"}
        else:
            assert agent_of(reply["result"]["task"]) == "desk-a"
            assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_FAILED"
    assert agent_of(second) == "desk-b"  # desk-a's failure was rated 0 for alice, with no call from her
    assert failing.calls == 2


def test_failed_agents_are_read_from_the_legs_or_the_tasks_state() -> None:
    def task(state: str, legs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        meta = {EXTENSION_URI: {"route": [], **({"downstream": legs} if legs is not None else {})}}
        return {"id": "t", "status": {"state": state}, "metadata": meta}

    fan_out = task("TASK_STATE_FAILED", [{"agent": "a", "state": "TASK_STATE_COMPLETED"},
                                         {"agent": "b", "state": "TASK_STATE_FAILED", "error": "timeout"},
                                         {"agent": "c", "state": "TASK_STATE_REJECTED"}])
    assert failed_agents(fan_out) == {"b", "c"}
    assert failed_agents(task("TASK_STATE_REJECTED")) is None  # one agent's own task: that agent failed
    assert failed_agents(task("TASK_STATE_COMPLETED")) == set()


async def stream_send(c: httpx.AsyncClient, url: str, mid: str, text: str, who: dict[str, str]) -> list[dict[str, Any]]:
    """SendStreamingMessage over JSON-RPC: every event's `result`, in order."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": {
        "messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}]}}}
    async with c.stream("POST", url + "/", json=body,
                        headers={**who, "A2A-Version": "1.0", "Accept": "text/event-stream"}) as sse:
        return [orjson.loads(ln[5:])["result"] async for ln in sse.aiter_lines() if ln.startswith("data:")]


@pytest.mark.parametrize("streams", [True, False], ids=["streamed-through", "answered-as-one-event"])
async def test_streamed_learned_tasks_are_outcomes_and_can_be_rated(tmp_path: Any, streams: bool) -> None:
    """SendStreamingMessage: a learned task that fails is rated 0 with no call from its client, and a streamed task
    can be rated like a sent one — whether the agent's stream is passed through or the answer comes as one event."""
    def card(name: str) -> Any:
        c = make_card(name, input_modes=["text/plain"], output_modes=["text/plain"])
        c.capabilities.CopyFrom(AgentCapabilities(streaming=streams))
        return c

    failing, b, c_ = FailingExecutor(), RecordingExecutor(reply="desk-b ok"), RecordingExecutor(reply="desk-c ok")
    specs = {"desk-a": (card("desk-a"), failing), "desk-b": (card("desk-b"), b), "desk-c": (card("desk-c"), c_)}
    async with agents(specs) as urls, gateway(config(urls, tmp_path)) as (gw, url), httpx.AsyncClient(timeout=30) as c:
        first = await stream_send(c, url, "s-1", "My parcel was delivered to the wrong address", ALICE)
        second = await stream_send(c, url, "s-2", "The parcel went to a wrong delivery address", ALICE)
        tid = second[0]["task"]["id"]
        r = await c.post(f"{url}/tasks/{tid}:feedback", json={"score": 0}, headers=ALICE)
        third = await stream_send(c, url, "s-3", "My parcel went to the wrong address again", ALICE)
    states = [str((e.get("task") or e.get("statusUpdate") or {}).get("status", {}).get("state")) for e in first]
    assert failing.calls == 1 and states[-1] == "TASK_STATE_FAILED"  # desk-a (capability order) failed: rated 0
    assert len(b.received) == 1  # so the second went to an untried desk
    assert r.status_code == 200 and r.json() == {"taskId": tid, "agent": "desk-b", "score": 0.0, "learnedParts": 1}
    assert len(c_.received) == 1 and third  # desk-a and desk-b rated 0 for alice: desk-c, untried


def test_one_clients_flood_of_learned_tasks_forgets_only_its_own() -> None:
    """Security probe P2: the learner remembers the parts of its last `max_tasks` learned tasks for their ratings;
    a flood of mallory's learned messages pushed alice's out and her rating then learned nothing (`learnedParts: 0`).
    One client keeps at most a quarter of them; its own oldest go past it."""
    learner = Learner(max_tasks=40)
    part_ = LearnedPart(0, ("text/plain", None, (), False, "test"), None, "desk-a")
    learner.take([("alice-1", LearnedTask("m-a", "alice", (part_,)))], [])
    learner.take([(f"mallory-{i}", LearnedTask(f"m-{i}", "mallory", (part_,))) for i in range(500)], [])
    assert learner.task("alice-1") is not None and learner.task("mallory-489") is None
    assert learner.task("mallory-499") is not None and len([i for i in range(500) if learner.task(f"mallory-{i}")]) == 10
    assert learner.rate("alice-1", "alice", "desk-a", 1.0) == 1


async def test_callers_without_a_client_each_have_their_own_budget_of_ratings(tmp_path: Any) -> None:
    """Security probe P10: with authentication off every caller's ratings came out of one budget (the client ""), so
    one caller rating at the limit left every other caller 429. Callers without a client are limited by address, as
    the gateway's rate limits key them (`ip:ADDRESS`, from `X-Forwarded-For` through a trusted proxy)."""
    tiny = {"limits": {"feedback_per_s": 0.001, "feedback_burst": 2}}
    cfg = {"agents": [], "rules": orjson.dumps(RULES).decode(), "data_dir": str(tmp_path), **tiny}
    async with agents({"desk-a": agent("desk-a", ["text/plain"])}) as urls, \
            gateway({**cfg, "agents": [{"name": "desk-a", "url": urls["desk-a"]}]}) as (gw, url), \
            httpx.AsyncClient(timeout=30) as c:
        tid = (await send(c, url, "q-1", "hello", {}))["id"]

        async def rate(address: str, path: str = f"/tasks/{tid}:feedback") -> int:
            r = await c.post(url + path, json={"score": 1}, headers={"X-Forwarded-For": address})
            return r.status_code

        first = [await rate("10.0.0.1") for _ in range(3)]
        other = await rate("10.0.0.2")
        on_rpc = (await rpc(c, url, {"id": tid, "score": 1}, {"X-Forwarded-For": "10.0.0.1"}))["error"]["code"]
    assert first == [200, 200, 429]
    assert other == 200  # before: 429, the first caller had spent everyone's budget
    assert on_rpc == -32600  # the same budget on JSON-RPC


def test_remembered_learned_tasks_are_bounded_in_bytes_per_client_and_in_all() -> None:
    """Security probe P11: the learner kept the parts of its last 100,000 learned tasks whatever their size, and a
    message may have 64 text parts, each with its sentence vector (1,758 bytes a part with MiniLM's 384 floats): one
    client's 25,000 such messages (its quarter) held ~2.8 GB, 100,000 ~11 GB. The memory is bounded in bytes
    (`max_bytes`, 128 MiB), a quarter of it per client, its own oldest out first."""
    import numpy as np

    learner = Learner(max_bytes=1 << 20)
    vector = np.ones(384, dtype=np.float32)
    one = LearnedPart(0, ("text/plain", None, (), False, "minilm"), vector, "desk-a")
    learner.take([("alice-1", LearnedTask("m-a", "alice", (one,)))], [])
    many = tuple(LearnedPart(i, one.key, vector, "desk-a") for i in range(64))
    learner.take([(f"mallory-{i}", LearnedTask(f"m-{i}", "mallory", many)) for i in range(500)], [])
    kept = [i for i in range(500) if learner.task(f"mallory-{i}") is not None]
    assert learner.bytes <= 1 << 20 and kept == [498, 499]  # (224 + 1,536) x 64 a task: two fit in her 256 KiB
    assert learner.task("alice-1") is not None and learner.rate("alice-1", "alice", "desk-a", 1.0) == 1
    learner.take([(f"anon-{i}", LearnedTask(f"n-{i}", "", many)) for i in range(100)], [])  # auth off: all of it
    assert learner.bytes <= 1 << 20 and learner.task("anon-99") is not None and learner.task("alice-1") is None


async def test_a_streamed_learned_fan_outs_failed_leg_is_an_outcome_and_its_task_can_be_rated(tmp_path: Any) -> None:
    """SendStreamingMessage of a text and an image learned to two agents (a fan-out, task `gw-...`): the image leg's
    failure rates its agent 0 with no call from the client, and the client rates the text leg on the fan-out's task."""
    png = base64.b64encode(png_bytes()).decode()
    failing, other = FailingExecutor(), RecordingExecutor(reply="img-b ok")
    specs = {"desk-a": agent("desk-a", ["text/plain"]),
             "img-a": (make_card("img-a", input_modes=["image/png"], output_modes=["text/plain"]), failing),
             "img-b": (make_card("img-b", input_modes=["image/png"], output_modes=["text/plain"]), other)}

    async def fan_out(mid: str, text: str) -> list[dict[str, Any]]:
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": {
            "messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}, {"raw": png, "mediaType": "image/png"}]}}}
        async with c.stream("POST", url + "/", json=body,
                            headers={**ALICE, "A2A-Version": "1.0", "Accept": "text/event-stream"}) as sse:
            return [orjson.loads(ln[5:])["result"] async for ln in sse.aiter_lines() if ln.startswith("data:")]

    async with agents(specs) as urls, gateway(config(urls, tmp_path)) as (gw, url), httpx.AsyncClient(timeout=30) as c:
        first = await fan_out("fo-1", "What does this receipt say about my refund?")
        tid = first[0]["task"]["id"]
        r = await c.post(f"{url}/tasks/{tid}:feedback", json={"score": 1, "agent": "desk-a"}, headers=ALICE)
        await fan_out("fo-2", "Is the refund on this receipt right?")
    assert tid.startswith("gw-") and first[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_FAILED"
    assert failing.calls == 1 and len(other.received) == 1  # img-a failed the first: rated 0, the second went to img-b
    assert r.status_code == 200 and r.json() == {"taskId": tid, "agent": "desk-a", "score": 1.0, "learnedParts": 1}
