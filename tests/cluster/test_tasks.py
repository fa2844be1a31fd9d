"""Tasks shared by a cluster's gateways: two gateway processes on one real nats-server, auth on. A task made on
one gateway is read, listed, cancelled and subscribed to on the other by its owner, refused to another client,
and still there after the gateway that made it restarts."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from mma2a.cluster.link import ClusterLink
from mma2a.cluster.server import NatsServer
from mma2a.cluster.tasks import ClusterTaskMap
from mma2a.gateway.cluster_config import ClusterConfig
from tests.agents import RecordingExecutor, make_card, run_agent

from .conftest import admin, cluster_name, gateways, task_sharing, text_message
from .test_gateways import until
from .test_security import TOKENS, bearer, rpc

pytestmark = pytest.mark.timeout(300)

NOT_FOUND = -32001  # TaskNotFound
NOT_CANCELABLE = -32002  # the agent's own answer: a completed task cannot be cancelled


def shared(nats_url: str, name: str, urls: dict[str, str] | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "auth": {"clients": [{"name": n, "token": t} for n, t in TOKENS.items()]},
        "timeout_s": 20, "retries": 0,
        "cluster": {"nats": nats_url, "name": name, "heartbeat_s": 0.5, "member_ttl_s": 2},
    }
    if urls is not None:  # the first gateway seeds the cluster: every message to both agents (a fan-out task)
        config["agents"] = [{"name": n, "url": u} for n, u in urls.items()]
        config["rules"] = json.dumps({"version": 1, "rules": [
            {"name": "both", "match": {"modality": "*/*"}, "action": {"clone_and_route_to": sorted(urls)}}]})
    return config


async def knows_agents(c: httpx.AsyncClient, url: str, names: set[str]) -> bool:
    r = await c.get(url + "/admin/agents", headers=admin())
    return r.status_code == 200 and names <= {a["name"] for a in r.json()["agents"]}


async def subscribe(c: httpx.AsyncClient, url: str, who: str, task_id: str) -> list[dict[str, Any]]:
    """The JSON-RPC answers of a SubscribeToTask stream (one answer when it is an error)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
    async with c.stream("POST", url + "/", json=body, headers=bearer(who)) as r:
        if not r.headers.get("content-type", "").startswith("text/event-stream"):
            return [json.loads(await r.aread())]
        return [json.loads(line[5:]) async for line in r.aiter_lines() if line.startswith("data:")]


async def test_a_task_made_on_one_gateway_is_its_owners_on_the_other_and_outlives_a_restart(
        nats_server: NatsServer, tmp_path: Path) -> None:
    async with run_agent(make_card("a"), RecordingExecutor(echo=True)) as a_url, \
            run_agent(make_card("b"), RecordingExecutor(echo=True)) as b_url:
        name = cluster_name()
        async with gateways([shared(nats_server.url, name, {"a": a_url, "b": b_url}), shared(nats_server.url, name)],
                            tmp_path) as gws:
            gw1, gw2 = gws[0].url, gws[1].url
            async with httpx.AsyncClient(timeout=30) as c:
                await until(lambda: knows_agents(c, gw2, {"a", "b"}))  # the second gateway has the first's agents
                fan = (await rpc(c, gw1, "alice", "SendMessage", {"message": text_message("two agents")}))["result"]["task"]
                single = (await rpc(c, gw1 + "/agents/a", "alice", "SendMessage",
                                    {"message": text_message("one agent")}))["result"]["task"]
                assert fan["id"].startswith("gw-") and not single["id"].startswith("gw-")
                # the owner, on the other gateway: the fan-out's aggregate rebuilt from its legs, the agent's own task
                got_fan = await rpc(c, gw2, "alice", "GetTask", {"id": fan["id"]})
                assert "result" in got_fan, got_fan
                assert got_fan["result"]["id"] == fan["id"], got_fan
                assert got_fan["result"]["contextId"] == fan["contextId"]
                assert got_fan["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
                got = await rpc(c, gw2, "alice", "GetTask", {"id": single["id"]})
                assert got["result"]["id"] == single["id"] and got["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
                cancel = await rpc(c, gw2, "alice", "CancelTask", {"id": single["id"]})
                assert cancel["error"]["code"] == NOT_CANCELABLE, cancel  # the agent was asked: the task was found
                events = await subscribe(c, gw2, "alice", fan["id"])
                assert [e["result"]["task"]["id"] for e in events] == [fan["id"]], events
                rest = await c.get(f"{gw2}/tasks/{single['id']}", headers=bearer("alice"))  # the HTTP+JSON binding
                assert rest.status_code == 200 and rest.json()["id"] == single["id"], rest.text
                rated = await c.post(f"{gw2}/tasks/{single['id']}:feedback", json={"score": 1.0}, headers=bearer("alice"))
                assert rated.status_code == 200 and rated.json()["agent"] == "a", rated.text
                assert (await c.get(f"{gw2}/tasks/{single['id']}", headers=bearer("bob"))).status_code == 404
                assert (await c.post(f"{gw2}/tasks/{single['id']}:feedback", json={"score": 1.0},
                                     headers=bearer("bob"))).status_code == 404
                listed = await rpc(c, gw2, "alice", "ListTasks", {})
                assert single["id"] in {t["id"] for t in listed["result"]["tasks"]}, listed
                # the sharing in each gateway's /metrics (read at scrape time): gw1 stored the records, gw2 read them
                made = task_sharing((await c.get(gw1 + "/metrics", headers=admin())).text)
                took = task_sharing((await c.get(gw2 + "/metrics", headers=admin())).text)
                assert made["via"] == took["via"] == "bucket", (made, took)
                assert made["records"] >= 2 and 1 <= made["batches"] <= made["records"], made
                assert made["unshared"] == made["unsharedNow"] == took["unshared"] == 0, (made, took)
                assert took["adopted"] >= 2 and took["reads"] >= 1, took
                # another client, on either gateway: as unknown as a task that never was
                for url in (gw1, gw2):
                    for tid in (fan["id"], single["id"]):
                        assert (await rpc(c, url, "bob", "GetTask", {"id": tid}))["error"]["code"] == NOT_FOUND
                        assert (await rpc(c, url, "bob", "CancelTask", {"id": tid}))["error"]["code"] == NOT_FOUND
                        assert (await subscribe(c, url, "bob", tid))[0]["error"]["code"] == NOT_FOUND
                    bobs = await rpc(c, url, "bob", "ListTasks", {})
                    assert not {fan["id"], single["id"]} & {t["id"] for t in bobs["result"]["tasks"]}, bobs
                # a follow-up on the task through the other gateway continues it (the agent's own task id)
                follow = text_message("and then")
                follow["taskId"] = single["id"]
                assert (await rpc(c, gw2, "bob", "SendMessage", {"message": follow}))["error"]["code"] == NOT_FOUND
                # the gateway that made both tasks restarts (killed: nothing written at exit): none is lost
                gws[0].kill()
                gws[0].start()
                await gws[0].ready()
                for tid in (fan["id"], single["id"]):
                    again = await rpc(c, gw1, "alice", "GetTask", {"id": tid})
                    assert again["result"]["id"] == tid, again
                    assert (await rpc(c, gw1, "bob", "GetTask", {"id": tid}))["error"]["code"] == NOT_FOUND


@contextlib.asynccontextmanager
async def bucket_maps(nats_server: NatsServer, *, per_owner: int | None = None
                      ) -> AsyncIterator[tuple[Callable[[str], Awaitable[ClusterTaskMap]], ClusterLink]]:
    """`opened(member_id)`: a gateway's task map over the `tasks` bucket of a cluster of its own (`per_owner`: each
    owner's byte budget); every map and the link closed at the end."""
    config = ClusterConfig(nats=nats_server.url, name=cluster_name())
    link = await ClusterLink(config).connect()
    maps: list[ClusterTaskMap] = []

    async def opened(member_id: str) -> ClusterTaskMap:
        m = ClusterTaskMap(SimpleNamespace(config=config, names=link.names, js=link.js, id=member_id, sizing={}),
                           max_bytes=1 << 20, max_bytes_per_owner=per_owner)
        await m.open()
        maps.append(m)
        return m

    try:
        yield opened, link
    finally:
        for m in maps:
            await m.close()
        await link.close()


async def test_a_clients_task_budget_holds_across_gateways_and_spares_other_clients(nats_server: NatsServer) -> None:
    """Each owner's byte budget (limits.task_bytes_per_client) holds on the cluster's records: what one gateway forgets
    of a client past its share is deleted from the bucket, so no other gateway (nor a restarted one) answers it; another
    client's task stays."""
    async with bucket_maps(nats_server, per_owner=4000) as (opened, link):
        gw1, gw2 = await opened("gw1"), await opened("gw2")
        gw1.put_leg("bob-1", "a", "ctx-bob", [], "bob")
        ids = [f"alice-{i}" for i in range(40)]
        for tid in ids:
            gw1.put_leg(tid, "a", None, [], "alice")
        for tid in ["bob-1", *ids]:
            await gw1.flush(tid)  # stored, or (past alice's budget) deleted
        kept = [tid for tid in ids if gw1.find(tid) is not None]
        assert 0 < len(kept) < len(ids) and kept == ids[-len(kept):]  # alice's newest, within her budget
        assert gw1.held_by("alice") <= 4000
        gw3 = await opened("gw3")  # a gateway started now reads the bucket: the same records
        assert [tid for tid in ids if gw3.find(tid) is not None] == kept
        for m in (gw2, gw3):
            await m.fetch("bob-1")
            rec = m.find("bob-1")
            assert rec is not None and rec.owner == "bob" and [(d.agent, d.task_id) for d in rec.legs] == [("a", "bob-1")]
            assert m.context_owner("ctx-bob") == (True, "bob")
        assert gw3.held_by("alice") == gw1.held_by("alice")  # counted alike on every gateway


async def test_records_made_together_share_one_write_and_every_gateway_finds_them(nats_server: NatsServer) -> None:
    """Records made while no batch is being stored go out as one KV entry (one write for many requests, where each
    request paid its own); a gateway whose cache lacks one finds it once it is stored, as does one started after."""
    async with bucket_maps(nats_server) as (opened, link):
        gw1, gw2 = await opened("gw1"), await opened("gw2")
        ids = [f"carol-{i}" for i in range(20)]
        for tid in ids:
            gw1.put_leg(tid, "a", f"ctx-{tid}", [], "carol")
        for tid in ids:
            await gw1.flush(tid)
        assert (gw1.batches, gw1.records) == (1, 20)
        assert gw2.find(ids[0]) is None and gw2.adopted == 0  # nothing reaches gw2 until it needs it
        for tid in ids:  # made on gw1: gw2 finds each, the first lookup reading the batch from the bucket
            await gw2.fetch(tid)
            rec = gw2.find(tid)
            assert rec is not None and rec.owner == "carol" and rec.legs[0].context_id == f"ctx-{tid}"
            assert gw2.context_owner(f"ctx-{tid}") == (True, "carol")
        assert gw2.adopted == 20  # one read, of the one batch
        more = [f"dave-{i}" for i in range(5)]
        for tid in more:
            gw1.put_leg(tid, "a", None, [], "dave")
        for tid in more:
            await gw1.flush(tid)
        await gw2.fetch_context("ctx-never-seen")  # an unknown context reads on too: from where gw2 stopped
        assert all(gw2.find(tid) is not None for tid in more) and gw2.adopted == 25
        gw1.put_leg("erin-1", "a", None, [], "erin")
        await gw1.flush("erin-1")
        reads = gw2.reads
        await asyncio.gather(*(gw2.fetch_context(f"ctx-new-{i}") for i in range(20)))  # 20 misses at once: one read
        assert gw2.reads - reads == 1 and gw2.find("erin-1") is not None
        await gw2.fetch("never-made")  # a task no gateway made: looked up, not found
        assert gw2.find("never-made") is None
        gw3 = await opened("gw3")  # started after: reads the batch back
        assert all(gw3.find(tid) is not None for tid in ids)


async def test_a_bucket_outage_is_said_once_and_its_records_counted_until_sharing_resumes(
        nats_server: NatsServer, caplog: pytest.LogCaptureFixture) -> None:
    """The tasks bucket gone (its stream deleted: every batch put refused by NATS): one warning for the outage, not one
    a batch; the records stay this gateway's own and are counted (`unshared`, `unsharedNow`, as `cluster status`
    shows); once the bucket is back the next batch is stored, it is said, and the other gateway finds that record."""
    async with bucket_maps(nats_server) as (opened, link):
        gw1, gw2 = await opened("gw1"), await opened("gw2")
        gw1.put_leg("before", "a", None, [], "carol")
        await gw1.flush("before")
        stream = await link.js.stream_info(gw1.stream)
        await link.js.delete_stream(gw1.stream)
        with caplog.at_level("WARNING", logger="mma2a.cluster.tasks"):
            for i in range(5):  # five batches, one after the other: each put refused
                gw1.put_leg(f"away-{i}", "a", None, [], "carol")
                await gw1.flush(f"away-{i}")
            said = [r.getMessage() for r in caplog.records if "not shared" in r.getMessage()]
            assert len(said) == 1, said  # once for the outage, not once a batch
            assert all(gw1.find(f"away-{i}") is not None for i in range(5))  # kept in this gateway's own cache
            stats = gw1.stats()
            assert stats["via"] == "bucket" and stats["unshared"] == stats["unsharedNow"] == 5
            assert (stats["batches"], stats["records"]) == (1, 1)
            await link.js.add_stream(stream.config)  # the bucket back (empty)
            gw1.put_leg("after", "a", None, [], "carol")
            await gw1.flush("after")
            assert [r.getMessage() for r in caplog.records if "shared again" in r.getMessage()] == [
                "task records shared again (5 were kept this gateway's own in the outage)"]
        assert gw1.stats()["unsharedNow"] == 0 and gw1.stats()["unshared"] == 5 and gw1.stats()["records"] == 2
        await gw2.fetch("after")
        assert gw2.find("after") is not None and gw2.find("away-0") is None  # the outage's records were never shared
