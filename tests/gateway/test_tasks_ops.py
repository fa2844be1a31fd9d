"""Task ids through the gateway, the directory (drain), metrics, decision logs, and `mma2a serve`."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import signal
import sys

import httpx

from mma2a.ext import EXTENSION_URI
from mma2a.gateway.server import JsonLogFormatter
from mma2a.gateway.state.tasks import TaskRecord
from mma2a.request_body import read_body, replaying
from mma2a.serving import free_port
from tests.agents import Stepper, streaming_card
from tests.gateway.conftest import ADMIN, agent, agents, gateway, rpc
from tests.media import png_bytes

PNG = base64.b64encode(png_bytes()).decode()
AUTH = {"Authorization": f"Bearer {ADMIN}"}


def img(mid: str) -> dict:
    return {"messageId": mid, "role": "ROLE_USER", "parts": [{"raw": PNG, "mediaType": "image/png"}]}


async def test_get_and_cancel_reach_the_agents_behind_single_and_fan_out_tasks():
    specs = {n: agent(n, ["image/*"]) for n in ("a", "b")}
    rules = {"version": 1, "rules": [{"name": "both", "match": {"modality": "image/*"}, "action": {"clone_and_route_to": ["a", "b"]}}]}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": n, "url": u} for n, u in urls.items()]}) as (gw, url):
            single = (await rpc(url, "SendMessage", {"message": img("t1")}, path="/agents/a/"))["result"]["task"]
            got = await rpc(url, "GetTask", {"id": single["id"]})
            cancel = await rpc(url, "CancelTask", {"id": single["id"]})
            async with httpx.AsyncClient() as c:
                await c.put(url + "/admin/rules", json=rules, headers=AUTH)
            fan = (await rpc(url, "SendMessage", {"message": img("t2")}))["result"]["task"]
            got_fan = await rpc(url, "GetTask", {"id": fan["id"]})
    assert got["result"]["id"] == single["id"] and got["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert got["result"]["metadata"][EXTENSION_URI]["route"][0]["targets"] == ["a"]
    # the agent's own answer comes back: a completed task cannot be canceled
    assert cancel["error"]["code"] == -32002
    assert fan["id"].startswith("gw-")
    legs = got_fan["result"]["metadata"][EXTENSION_URI]["downstream"]
    assert sorted(leg["agent"] for leg in legs) == ["a", "b"] and all(leg["state"] == "TASK_STATE_COMPLETED" for leg in legs)
    assert got_fan["result"]["id"] == fan["id"]


async def test_drained_agent_gets_no_new_work_from_capability_routing():
    specs = {n: agent(n, ["image/*"]) for n in ("a", "b")}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": n, "url": u} for n, u in urls.items()]}) as (gw, url):
            first = await rpc(url, "SendMessage", {"message": img("d1")})
            chosen = first["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]["targets"][0]
            async with httpx.AsyncClient() as c:
                drained = await c.post(url + f"/admin/agents/{chosen}/drain", headers=AUTH)
            after = await rpc(url, "SendMessage", {"message": img("d2")})
            card = (await httpx.AsyncClient().get(url + "/.well-known/agent-card.json")).json()
    other = "b" if chosen == "a" else "a"
    assert drained.json()["draining"] is True
    assert after["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]["targets"] == [other]
    assert all(not s["id"].startswith(chosen + "/") for s in card["skills"])


async def test_metrics_count_requests_parts_rules_and_agents():
    specs = {"a": agent("a", ["image/*"])}
    rules = {"version": 1, "rules": [{"name": "to-a", "match": {"modality": "image/*"}, "action": {"route_to": "a"}}]}
    async with agents(specs) as urls:
        async with gateway({"rules": rules, "agents": [{"name": "a", "url": urls["a"]}]}) as (gw, url):
            for i in range(3):
                await rpc(url, "SendMessage", {"message": img(f"m{i}")})
            text = (await httpx.AsyncClient().get(url + "/metrics")).text
    assert 'mma2a_requests_total{outcome="ok"} 3.0' in text
    assert 'mma2a_parts_total{modality="image/png"} 3.0' in text
    assert 'mma2a_rule_matches_total{rule="to-a"} 3.0' in text
    assert 'mma2a_agent_seconds_count{agent="a"} 3.0' in text
    assert 'mma2a_agents{health="healthy"} 1.0' in text
    assert "mma2a_task_records" not in text  # a lone gateway shares no task records (tests/cluster: those that do)


async def test_decisions_are_logged_as_json_lines():
    records: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(JsonLogFormatter().format(record))

    handler = Capture()
    logging.getLogger("mma2a.decisions").addHandler(handler)
    logging.getLogger("mma2a.decisions").setLevel(logging.INFO)
    try:
        async with agents({"a": agent("a", ["image/*"])}) as urls:
            async with gateway({"agents": [{"name": "a", "url": urls["a"]}]}) as (gw, url):
                await rpc(url, "SendMessage", {"message": img("log1")})
    finally:
        logging.getLogger("mma2a.decisions").removeHandler(handler)
    doc = json.loads(records[-1])
    assert doc["msg"] == "decision" and doc["decision"]["messageId"] == "log1"
    assert doc["decision"]["route"][0]["targets"] == ["a"]


async def test_serve_command_runs_a_gateway_from_a_config_file(tmp_path):
    async with agents({"a": agent("a", ["image/*"])}) as urls:
        port = free_port()
        cfg = tmp_path / "gateway.yaml"
        cfg.write_text(f"listen: 127.0.0.1:{port}\nagents:\n  - {{name: a, url: {urls['a']}}}\nfeatures: false\n")
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "mma2a.cli", "serve", "--config", str(cfg),
                                                    stderr=asyncio.subprocess.PIPE)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(200):
                try:
                    health = (await httpx.AsyncClient().get(url + "/healthz")).json()
                    break
                except httpx.HTTPError:
                    await asyncio.sleep(0.05)
            doc = await rpc(url, "SendMessage", {"message": img("s1")})
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert health == {"status": "ok", "agents": 1, "healthy": 1, "configuredAgents": 1, "rulesVersion": 0, "mode": "native"}
    assert doc["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # uvicorn re-raises the caught SIGTERM after its graceful shutdown, as supervisors expect
    assert proc.returncode == -signal.SIGTERM
    assert f"mma2a gateway on http://127.0.0.1:{port}" in err.decode() and "Traceback" not in err.decode()


async def test_serve_with_a_bad_config_names_the_field(tmp_path):
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text("listen: nowhere\n")
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "mma2a.cli", "serve", "--config", str(cfg),
                                                stderr=asyncio.subprocess.PIPE, env={**os.environ})
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2 and err.decode() == f"error: {cfg}: listen: Value error, must be HOST:PORT\n"


async def test_fan_out_streams_each_legs_artifacts_then_the_final_status():
    specs = {n: agent(n, ["image/*"]) for n in ("a", "b")}
    rules = {"version": 1, "rules": [{"name": "both", "match": {"modality": "image/*"}, "action": {"clone_and_route_to": ["a", "b"]}}]}
    async with agents(specs) as urls:
        async with gateway({"rules": rules, "agents": [{"name": n, "url": u} for n, u in urls.items()]}) as (gw, url):
            async with httpx.AsyncClient(timeout=30) as c:
                async with c.stream("POST", url + "/", json={"jsonrpc": "2.0", "id": 7, "method": "SendStreamingMessage",
                                                          "params": {"message": img("fs1")}},
                                    headers={"A2A-Version": "1.0", "Accept": "text/event-stream"}) as sse:
                    events = [json.loads(ln[5:])["result"] async for ln in sse.aiter_lines() if ln.startswith("data:")]
            got = await rpc(url, "GetTask", {"id": events[0]["task"]["id"]})
    first, *updates, last = events
    tid = first["task"]["id"]
    assert tid.startswith("gw-") and first["task"]["status"]["state"] == "TASK_STATE_WORKING"
    assert sorted(u["artifactUpdate"]["artifact"]["name"].split("/")[0] for u in updates) == ["a", "b"]
    assert all(u["artifactUpdate"]["taskId"] == tid for u in updates)
    assert last["statusUpdate"]["taskId"] == tid and last["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert got["result"]["id"] == tid and len(got["result"]["metadata"][EXTENSION_URI]["downstream"]) == 2


async def test_a_fan_out_stream_dropped_after_its_first_event_is_found_and_finishes_on_one_gateway():
    """The `gw-…` id reaches the client first: before this, GetTask answered not found until every leg had answered,
    and a stream dropped then cancelled the legs, so the task was never recorded."""
    steppers = {n: Stepper() for n in ("a", "b")}
    rules = {"version": 1, "rules": [{"name": "both", "match": {"modality": "*/*"}, "action": {"clone_and_route_to": ["a", "b"]}}]}
    async with agents({n: (streaming_card(n), ex) for n, ex in steppers.items()}) as urls:
        async with gateway({"rules": rules, "agents": [{"name": n, "url": u} for n, u in urls.items()]}) as (gw, url):
            async with httpx.AsyncClient(timeout=30) as c:
                async with c.stream("POST", url + "/", json={"jsonrpc": "2.0", "id": 7, "method": "SendStreamingMessage",
                                                          "params": {"message": {"messageId": "drop-1", "role": "ROLE_USER",
                                                                                 "parts": [{"text": "go"}]}}},
                                    headers={"A2A-Version": "1.0", "Accept": "text/event-stream"}) as sse:
                    first = json.loads(await anext(ln[5:] async for ln in sse.aiter_lines() if ln.startswith("data:")))
            tid = first["result"]["task"]["id"]  # the stream is closed: the client is gone
            while not all("go" in ex.gates for ex in steppers.values()):  # both legs reached their agents
                await asyncio.sleep(0.01)
            working = await rpc(url, "GetTask", {"id": tid})
            assert working["result"]["status"]["state"] == "TASK_STATE_WORKING", working
            refused = await rpc(url, "CancelTask", {"id": tid})
            assert refused["error"]["code"] == -32002 and tid in refused["error"]["message"], refused
            for ex in steppers.values():
                ex.gate("go").set()
            while not (gw.pipeline.tasks.find(tid) or TaskRecord(tid, [])).legs:  # the outcome recorded
                await asyncio.sleep(0.01)
            done = await rpc(url, "GetTask", {"id": tid})
    assert done["result"]["status"]["state"] == "TASK_STATE_COMPLETED", done
    names = sorted(a["name"].split("/")[0] for a in done["result"]["artifacts"])
    assert names == ["a", "a", "b", "b"], done



async def test_a_client_leaves_at_most_its_stream_limit_of_fan_outs_running():
    """A fan-out whose client closed its stream runs on (above), but a client may leave at most
    `limits.max_response_streams_per_client` of them running: past it, the one it leaves is cancelled and recorded
    as canceled with the reason, so dropping streams is no way around the client's stream bound."""
    steppers = {n: Stepper() for n in ("a", "b")}
    rules = {"version": 1, "rules": [{"name": "both", "match": {"modality": "*/*"}, "action": {"clone_and_route_to": ["a", "b"]}}]}
    async with agents({n: (streaming_card(n), ex) for n, ex in steppers.items()}) as urls:
        async with gateway({"rules": rules, "agents": [{"name": n, "url": u} for n, u in urls.items()],
                            "limits": {"max_response_streams_per_client": 2}}) as (gw, url):
            detached = gw.pipeline.streaming.detached
            tids = []
            try:
                async with httpx.AsyncClient(timeout=30) as c:
                    for n, text in enumerate(("one", "two", "three")):
                        async with c.stream("POST", url + "/", json={
                                "jsonrpc": "2.0", "id": 7, "method": "SendStreamingMessage",
                                "params": {"message": {"messageId": f"drop-{text}", "role": "ROLE_USER",
                                                       "parts": [{"text": text}]}}},
                                headers={"A2A-Version": "1.0", "Accept": "text/event-stream"}) as sse:
                            first = json.loads(await anext(ln[5:] async for ln in sse.aiter_lines() if ln.startswith("data:")))
                        tids.append(first["result"]["task"]["id"])  # the stream is closed: the client is gone
                        while n < 2 and sum(detached.holds().values()) < n + 1:  # the gateway saw it go (its stream slot back)
                            await asyncio.sleep(0.01)
                while (canceled := await rpc(url, "GetTask", {"id": tids[2]}))["result"]["status"]["state"] == "TASK_STATE_WORKING":
                    await asyncio.sleep(0.01)  # the gateway learns the stream is closed when it next writes to it
                assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED", canceled
                why = canceled["result"]["status"]["message"]["parts"][0]["text"]
                assert "2 fan-outs of its own still running (limits.max_response_streams_per_client: 2)" in why, why
                metrics = (await httpx.AsyncClient().get(url + "/metrics")).text
                assert 'mma2a_requests_total{outcome="canceled"} 1.0' in metrics  # counted, as every other end is
                while not all(t in ex.gates for ex in steppers.values() for t in ("one", "two")):  # those legs run on
                    await asyncio.sleep(0.01)
            finally:
                for ex in steppers.values():  # the agents' own tasks end (the cancelled legs left theirs waiting)
                    for t in ("one", "two", "three"):
                        ex.gate(t).set()
            for tid in tids[:2]:
                while not (gw.pipeline.tasks.find(tid) or TaskRecord(tid, [])).legs:
                    await asyncio.sleep(0.01)
                done = await rpc(url, "GetTask", {"id": tid})
                assert done["result"]["status"]["state"] == "TASK_STATE_COMPLETED", done
            while detached.holds():  # each count given back when its legs ended
                await asyncio.sleep(0.01)

def _get_task_answers(result: object):
    """ASGI middleware around a real agent: its JSON-RPC GetTask answer's `result` replaced by `result`."""

    def wrap(app):
        async def middleware(scope, receive, send):
            if scope["type"] != "http" or scope["method"] != "POST":
                return await app(scope, receive, send)
            body = await read_body(receive, 1 << 20) or b""
            request = json.loads(body or b"{}")
            if request.get("method") != "GetTask":
                return await app(scope, replaying(body, receive), send)
            answer = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "result": result}).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]})
            await send({"type": "http.response.body", "body": answer})

        return middleware

    return wrap


async def test_an_agent_answering_get_task_with_no_task_is_a_clear_invalid_agent_response():
    from tests.agents import run_agent

    card, executor = agent("odd", ["image/*"])
    async with run_agent(card, executor, wrap=_get_task_answers(["not", "a", "task"])) as agent_url:
        async with gateway({"agents": [{"name": "odd", "url": agent_url.rstrip("/")}]}) as (gw, url):
            sent = (await rpc(url, "SendMessage", {"message": img("o1")}))["result"]["task"]
            got = await rpc(url, "GetTask", {"id": sent["id"]})
    assert sent["status"]["state"] == "TASK_STATE_COMPLETED"
    assert got["error"]["code"] == -32006  # InvalidAgentResponse
    assert got["error"]["message"] == "agent odd answered GetTask with list, not a task"
