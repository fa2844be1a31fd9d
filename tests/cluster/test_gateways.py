"""Three gateway processes on one NATS: shared rules, agents, modalities, payloads, session pins, status."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from mma2a.cli import app
from mma2a.cli.main import _register
from mma2a.cluster.server import NatsServer
from tests.agents import RecordingExecutor, make_card, run_agent

from .conftest import admin, cluster_name, gateways, send, task_state, text_message

pytestmark = pytest.mark.timeout(300)  # gateway processes and nats-server: minutes on a loaded 2-core box


def rules_to(agent: str) -> str:
    return json.dumps({"version": 1, "rules": [
        {"name": f"all-to-{agent}", "match": {"modality": "text/plain"}, "action": {"route_to": agent}}]})


LB_RULES = json.dumps({"version": 1, "rules": [
    {"name": "pool", "match": {"modality": "text/plain"},
     "action": {"load_balance": "pool", "strategy": "round_robin", "pin_session": True}}]})


def received_by(executors: dict[str, RecordingExecutor], text: str) -> list[str]:
    return [name for name, ex in executors.items() for r in ex.received if any(p.text == text for p in r.message.parts)]


@pytest.fixture(scope="module")
def nats_url(nats_server: NatsServer) -> str:
    return nats_server.url


@pytest.fixture
async def cluster(nats_url: str, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    executors = {n: RecordingExecutor(reply=f"{n} ok") for n in ("a1", "a2", "a3")}
    async with run_agent(make_card("a1"), executors["a1"]) as u1, run_agent(make_card("a2"), executors["a2"]) as u2, \
            run_agent(make_card("a3"), executors["a3"]) as u3:
        name = cluster_name()
        agents = [{"name": "a1", "url": u1, "groups": ["pool"]}, {"name": "a2", "url": u2, "groups": ["pool"]}]
        base = {"cluster": {"nats": nats_url, "name": name, "heartbeat_s": 0.5, "member_ttl_s": 3}}
        configs = [{**base, "agents": agents, "rules": rules_to("a1")}, {**base}, {**base}]
        async with gateways(configs, tmp_path) as gws:
            async with httpx.AsyncClient(timeout=10) as client:
                yield {"gws": gws, "urls": [g.url for g in gws], "executors": executors, "client": client,
                       "a3": u3.rstrip("/"), "name": name, "nats": nats_url}


# Propagation normally takes well under a second (bench/, docs/benchmarks.md); the tests assert that it
# happens, with a deadline a loaded CI machine cannot miss, not how fast.
SETTLE_S = 20.0


async def until(check: Any, deadline_s: float = SETTLE_S) -> float:
    """Poll `check()` until true; the seconds it took (fails past the deadline)."""
    t0 = time.monotonic()
    while not await check():
        if time.monotonic() - t0 > deadline_s:
            raise AssertionError(f"not true within {deadline_s} s")
        await asyncio.sleep(0.01)
    return time.monotonic() - t0


async def test_agents_and_rules_of_the_first_gateway_seed_the_cluster(cluster: dict[str, Any]) -> None:
    client, urls, ex = cluster["client"], cluster["urls"], cluster["executors"]
    for url in urls:  # gateways 2 and 3 were configured with no agents and no rules
        agents = (await client.get(url + "/admin/agents", headers=admin())).json()["agents"]
        assert sorted(a["name"] for a in agents) == ["a1", "a2"]
        rules = (await client.get(url + "/admin/rules", headers=admin())).json()["rules"]
        assert [r["name"] for r in rules["rules"]] == ["all-to-a1"]
    reply = await send(client, urls[2], text_message("seeded"))
    assert task_state(reply) == "TASK_STATE_COMPLETED"
    assert received_by(ex, "seeded") == ["a1"]


async def test_rules_changed_on_one_gateway_apply_on_the_others(cluster: dict[str, Any]) -> None:
    client, urls, ex = cluster["client"], cluster["urls"], cluster["executors"]
    r = await client.put(urls[0] + "/admin/rules", content=rules_to("a2"), headers=admin())
    assert r.status_code == 200, r.text

    async def applied_everywhere() -> bool:
        for url in urls[1:]:
            rules = (await client.get(url + "/admin/rules", headers=admin())).json()["rules"]
            if [x["name"] for x in rules["rules"]] != ["all-to-a2"]:
                return False
        return True

    await until(applied_everywhere)
    for i, url in enumerate(urls):
        reply = await send(client, url, text_message(f"after-{i}"))
        assert task_state(reply) == "TASK_STATE_COMPLETED"
        assert received_by(ex, f"after-{i}") == ["a2"]


async def test_a_bad_rule_set_is_refused_and_the_cluster_keeps_the_old_one(cluster: dict[str, Any]) -> None:
    client, urls = cluster["client"], cluster["urls"]
    r = await client.put(urls[1] + "/admin/rules", content=rules_to("nobody"), headers=admin())
    assert r.status_code == 400
    assert "unknown agent or group 'nobody'" in r.text
    await asyncio.sleep(0.2)
    for url in urls:
        rules = (await client.get(url + "/admin/rules", headers=admin())).json()["rules"]
        assert [x["name"] for x in rules["rules"]] == ["all-to-a1"]


async def test_agents_and_modalities_registered_on_one_gateway_appear_on_all(cluster: dict[str, Any]) -> None:
    client, urls = cluster["client"], cluster["urls"]
    r = await client.post(urls[1] + "/admin/agents", json={"name": "a3", "url": cluster["a3"]}, headers=admin())
    assert r.status_code == 201, r.text
    r = await client.post(urls[2] + "/admin/modalities", headers=admin(),
                          json={"modality": "application/x-lidar", "schema": {"type": "object"}, "version": 2})
    assert r.status_code == 201, r.text

    async def everywhere() -> bool:
        for url in urls:
            names = {a["name"] for a in (await client.get(url + "/admin/agents", headers=admin())).json()["agents"]}
            mods = {m["modality"]: m for m in (await client.get(url + "/admin/modalities", headers=admin())).json()["modalities"]}
            if "a3" not in names or mods.get("application/x-lidar", {}).get("featureSchema") != "application/x-lidar/2":
                return False
        return True

    await until(everywhere)
    # rules naming the new agent, set through a third gateway, route there from the first
    r = await client.put(urls[2] + "/admin/rules", content=rules_to("a3"), headers=admin())
    assert r.status_code == 200, r.text

    async def routed() -> bool:
        rules = (await client.get(urls[0] + "/admin/rules", headers=admin())).json()["rules"]
        return [x["name"] for x in rules["rules"]] == ["all-to-a3"]

    await until(routed)
    reply = await send(client, urls[0], text_message("to-a3"))
    assert received_by(cluster["executors"], "to-a3") == ["a3"], reply
    # drain and removal travel too
    r = await client.post(urls[0] + "/admin/agents/a2/drain", headers=admin())
    assert r.status_code == 200
    r = await client.delete(urls[0] + "/admin/agents/a1", headers=admin())
    assert r.status_code == 204

    async def removed() -> bool:
        for url in urls[1:]:
            agents = {a["name"]: a for a in (await client.get(url + "/admin/agents", headers=admin())).json()["agents"]}
            if "a1" in agents or not agents.get("a2", {}).get("draining"):
                return False
        return True

    await until(removed)


async def test_a_payload_uploaded_through_one_gateway_is_read_through_another(cluster: dict[str, Any]) -> None:
    client, urls = cluster["client"], cluster["urls"]
    data = bytes(range(256)) * 2000 + b"tail"  # 512 004 bytes: several object-store chunks
    r = await client.post(urls[0] + "/blobs", content=data, headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 201, r.text
    url = r.json()["url"]
    assert url.startswith(urls[0])
    other = urls[1] + url[len(urls[0]):]  # the same signed path and query, on another gateway
    got = await client.get(other)
    assert got.status_code == 200 and got.content == data
    part = await client.get(urls[2] + url[len(urls[0]):], headers={"Range": "bytes=131070-131080"})
    assert part.status_code == 206 and part.content == data[131070:131081]
    forged = other.replace("sig=", "sig=x")
    assert (await client.get(forged)).status_code == 403


async def test_a_resumable_upload_begun_on_one_gateway_finishes_on_another(cluster: dict[str, Any]) -> None:
    client, urls = cluster["client"], cluster["urls"]
    data = b"0123456789abcdef" * 20_000
    r = await client.post(urls[0] + "/blobs/uploads", headers={"Content-Type": "text/plain"})
    assert r.status_code == 201, r.text
    uid = r.json()["uploadId"]
    r = await client.patch(f"{urls[0]}/blobs/uploads/{uid}", content=data[:200_000], headers={"Upload-Offset": "0"})
    assert r.status_code in (200, 204), r.text
    r = await client.patch(f"{urls[1]}/blobs/uploads/{uid}", content=data[1000:], headers={"Upload-Offset": "1000"})
    assert r.status_code == 409 and "expected offset 200000" in r.text
    r = await client.patch(f"{urls[1]}/blobs/uploads/{uid}", content=data[200_000:], headers={"Upload-Offset": "200000"})
    assert r.status_code in (200, 204), r.text
    r = await client.post(f"{urls[2]}/blobs/uploads/{uid}/finish")
    assert r.status_code == 201, r.text
    got = await client.get(urls[1] + r.json()["url"][len(urls[2]):])
    assert got.content == data and got.headers["content-type"].startswith("text/plain")


async def test_session_pinning_holds_across_gateways(cluster: dict[str, Any]) -> None:
    client, urls, ex = cluster["client"], cluster["urls"], cluster["executors"]
    r = await client.put(urls[0] + "/admin/rules", content=LB_RULES, headers=admin())
    assert r.status_code == 200

    async def everywhere() -> bool:
        for url in urls:
            rules = (await client.get(url + "/admin/rules", headers=admin())).json()["rules"]
            if [x["name"] for x in rules["rules"]] != ["pool"]:
                return False
        return True

    await until(everywhere)
    # without a session, round robin spreads messages over the pool on every gateway
    for i in range(6):
        await send(client, urls[i % 3], text_message(f"free-{i}"))
    assert {n for i in range(6) for n in received_by(ex, f"free-{i}")} == {"a1", "a2"}
    # a session's chunks take the route of its first chunk, whichever gateway they reach
    for s in range(3):
        for seq in range(1, 8):
            reply = await send(client, urls[(s + seq) % 3],
                               text_message(f"s{s}-c{seq}", session={"id": f"sess-{s}", "seq": seq, "final": seq == 7}))
            assert task_state(reply) == "TASK_STATE_COMPLETED", reply
        where = Counter(n for seq in range(1, 8) for n in received_by(ex, f"s{s}-c{seq}"))
        assert len(where) == 1 and sum(where.values()) == 7, where


async def test_cluster_status_lists_the_gateways_and_their_rule_set(cluster: dict[str, Any]) -> None:
    client, urls = cluster["client"], cluster["urls"]
    r = await client.put(urls[2] + "/admin/rules", content=rules_to("a2"), headers=admin())
    assert r.status_code == 200
    _register()
    runner = CliRunner()

    async def status(*extra: str) -> str:
        args = ["cluster", "status", "--nats", cluster["nats"], "--name", cluster["name"], *extra]
        res = await asyncio.to_thread(runner.invoke, app, args)
        assert res.exit_code == 0, res.output
        return res.output

    async def all_current() -> bool:
        st = json.loads(await status("--json"))
        return len(st["gateways"]) == 3 and all(g["current"] and g["lag"] == 0 for g in st["gateways"])

    await until(all_current)
    st = json.loads(await status("--json"))
    assert sorted(g["url"] for g in st["gateways"]) == sorted(urls)
    assert {g["rulesRevision"] for g in st["gateways"]} == {st["rulesRevision"]}
    assert all(g["tasks"]["via"] == "bucket" and g["tasks"]["unshared"] == 0 for g in st["gateways"])  # task sharing
    assert st["agents"] == 2
    text = await status()
    assert f"cluster {cluster['name']} on {cluster['nats']}: rules revision {st['rulesRevision']}" in text
    assert text.count(" current") == 3
    # a gateway that stops leaves the member list
    await asyncio.to_thread(cluster["gws"][2].stop)

    async def two_left() -> bool:
        return len(json.loads(await status("--json"))["gateways"]) == 2

    await until(two_left)


def test_cluster_status_says_which_gateway_has_task_records_not_shared_now() -> None:
    """`unsharedNow` in a gateway's member document (its task map's counts: tests/cluster/test_tasks.py) is said in
    its state, so an outage of the sharing shows without --json; a gateway sharing as it should says nothing more."""
    from mma2a.cli.cluster import _render

    def member(n: str, now: int, total: int) -> dict[str, Any]:
        return {"id": n, "url": f"http://{n}", "version": "1", "rulesRevision": 3, "lag": 0, "age_s": 0.4,
                "current": True, "tasks": {"via": "bucket", "batches": 9, "records": 40, "unshared": total,
                                           "unsharedNow": now, "adopted": 2, "reads": 1}}

    text = _render({"cluster": "c", "nats": "nats://n:4222", "rulesRevision": 3, "mode": None, "agents": 1,
                    "modalities": 0, "sessions": 0, "gateways": [member("gw-1", 0, 5), member("gw-2", 7, 12)],
                    "delivery": {}, "blobs": {}})
    gw1, gw2 = (line for line in text.splitlines() if line.startswith("gw-"))
    assert gw1.endswith("  current")  # 5 not shared once, shared again since: nothing to say now
    assert gw2.endswith("  current (task records not shared: 7 in a row through the bucket, 12 in all)")


def test_cluster_status_names_an_unreachable_nats() -> None:
    _register()
    res = CliRunner().invoke(app, ["cluster", "status", "--nats", "nats://127.0.0.1:1"])
    assert res.exit_code == 2
    assert "error: cluster.nats: cannot connect to nats://127.0.0.1:1: nats: no servers available for connection" in res.output
    res = CliRunner().invoke(app, ["cluster", "status", "--nats", "http://x"])
    assert res.exit_code == 2
    assert "error: cluster.nats: Value error, must be nats://HOST:PORT (several separated by commas)" in res.output
