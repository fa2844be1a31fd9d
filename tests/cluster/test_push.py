"""Push notifications in a cluster: a gateway process SIGKILLed while deliveries to two clients' webhooks are
pending (the webhooks answering 503) delivers them after its restart, each once or more, each to its own client's
webhook with that client's credentials; and the clients' configs survive the restart."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest

from mma2a.cluster.kv_keys import current, held_keys
from mma2a.cluster.server import NatsServer
from tests.conformance.tck_agent import tck_agent
from tests.webhooks import WebhookReceiver, webhook_receiver

from .conftest import SECRET, GatewayProc, cluster_name
from .test_task_bucket import ALICE, cluster_gateway

pytestmark = pytest.mark.timeout(300)


async def pending_keys(nats_url: str, bucket: str) -> list[str]:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()  # not a KV watch (cluster/kv_keys.py): its listing missed keys being rewritten
        return [e.key for e in await current(await js.key_value(bucket), await held_keys(js, bucket))]
    finally:
        await nc.close()


async def held(nats_url: str, bucket: str) -> list[str]:
    """The keys with a message in the bucket: a delivery's outcome leaves none (a KV delete's marker stayed forever)."""
    nc = await nats.connect(nats_url)
    try:
        return await held_keys(nc.jetstream(), bucket)
    finally:
        await nc.close()


async def until(predicate: Any, timeout_s: float = 60.0) -> None:
    """Until `predicate()` (an async check) holds; the timeout only guards against a hang."""
    async def loop() -> None:
        while not await predicate():
            await asyncio.sleep(0.1)
    await asyncio.wait_for(loop(), timeout_s)


async def send(c: httpx.AsyncClient, url: str, token: str, mid: str, hook: WebhookReceiver, credential: str) -> str:
    config = {"id": "mine", "url": hook.url + "/hook", "authentication": {"scheme": "Bearer", "credentials": credential}}
    r = await c.post(url + "/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": "inspect"}]},
        "configuration": {"taskPushNotificationConfig": config}}},
        headers={"A2A-Version": "1.0", "Authorization": f"Bearer {token}"})
    return str(r.json()["result"]["task"]["id"])


async def test_a_killed_gateways_pending_deliveries_are_delivered_after_its_restart_to_their_own_clients(
        nats_server: NatsServer, tmp_path: Path) -> None:
    name = cluster_name()
    async with webhook_receiver(statuses=[503] * 10_000) as alice_hook, \
            webhook_receiver(statuses=[503] * 10_000) as bob_hook, tck_agent("tck") as agent:
        config = {
            "cluster": {"nats": nats_server.url, "name": name, "id": "push-gw-1", "heartbeat_s": 0.5, "member_ttl_s": 3},
            "agents": [{"name": "tck", "url": agent.url}],
            "auth": {"clients": [{"name": "alice", "token": "alice-token"}, {"name": "bob", "token": "bob-token"}]},
            "urls": {"allow_hosts": [alice_hook.url.removeprefix("http://"), bob_hook.url.removeprefix("http://")]},
            "push": {"backoff_s": 0.2, "max_backoff_s": 0.5, "max_attempts": 1000, "timeout_s": 5},
        }
        gw = GatewayProc(config, tmp_path).start()
        try:
            await gw.ready()
            async with httpx.AsyncClient(timeout=30) as c:
                alice_task = await send(c, gw.url, "alice-token", "tck-input-required-a", alice_hook, "alice-credential")
                bob_task = await send(c, gw.url, "bob-token", "tck-input-required-b", bob_hook, "bob-credential")
                await alice_hook.wait_for(1)
                await bob_hook.wait_for(1)

                async def both_pending() -> bool:
                    return len(await pending_keys(nats_server.url, f"{name}_push_deliveries")) == 2
                await until(both_pending)
                gw.kill()  # SIGKILL: no drain, nothing written at exit
                refused = (len(alice_hook.hits), len(bob_hook.hits))
                alice_hook.statuses.clear()  # the webhooks are back
                bob_hook.statuses.clear()
                gw.start()
                await gw.ready()
                hits_a = await alice_hook.wait_for(refused[0] + 1)
                hits_b = await bob_hook.wait_for(refused[1] + 1)

                async def none_pending() -> bool:  # not even a marker left
                    return await held(nats_server.url, f"{name}_push_deliveries") == []
                await until(none_pending)
                listed = await c.post(gw.url + "/", json={"jsonrpc": "2.0", "id": 1, "method": "ListTaskPushNotificationConfigs",
                                                          "params": {"taskId": alice_task}},
                                      headers={"A2A-Version": "1.0", "Authorization": "Bearer alice-token"})
        finally:
            gw.stop()
    assert all(h.body["task"]["id"] == alice_task for h in alice_hook.hits)
    assert all(h.body["task"]["id"] == bob_task for h in bob_hook.hits)
    assert all(h.headers["authorization"] == "Bearer alice-credential" for h in alice_hook.hits)
    assert all(h.headers["authorization"] == "Bearer bob-credential" for h in bob_hook.hits)
    assert hits_a[-1].body["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert hits_b[-1].body["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert [cfg["id"] for cfg in listed.json()["result"]["configs"]] == ["mine"]


async def test_another_gateway_takes_over_the_deliveries_of_one_that_died(nats_server: NatsServer, tmp_path: Path) -> None:
    """Two gateways; the one holding a pending delivery is SIGKILLed and stays down: once its heartbeat is stale the
    other takes the delivery over (one compare-and-set) and sends it to the client's webhook, with its credentials."""
    name = cluster_name()
    async with webhook_receiver(statuses=[503] * 10_000) as hook, tck_agent("tck") as agent:
        base = {
            "cluster": {"nats": nats_server.url, "name": name, "heartbeat_s": 0.5, "member_ttl_s": 2},
            "agents": [{"name": "tck", "url": agent.url}],
            "auth": {"clients": [{"name": "alice", "token": "alice-token"}]},
            "urls": {"allow_hosts": [hook.url.removeprefix("http://")]},
            "push": {"backoff_s": 0.2, "max_backoff_s": 0.5, "max_attempts": 1000, "timeout_s": 5},
        }
        first = GatewayProc({**base, "cluster": {**base["cluster"], "id": "push-a"}}, tmp_path).start()
        second = GatewayProc({**base, "cluster": {**base["cluster"], "id": "push-b"}}, tmp_path).start()
        try:
            await asyncio.gather(first.ready(), second.ready())
            async with httpx.AsyncClient(timeout=30) as c:
                task = await send(c, first.url, "alice-token", "tck-input-required-t", hook, "alice-credential")
                await hook.wait_for(1)

                async def pending() -> bool:
                    return len(await pending_keys(nats_server.url, f"{name}_push_deliveries")) == 1
                await until(pending)
                first.kill()
                refused = len(hook.hits)
                hook.statuses.clear()
                hits = await hook.wait_for(refused + 1)

                async def none_pending() -> bool:  # not even a marker left
                    return await held(nats_server.url, f"{name}_push_deliveries") == []
                await until(none_pending)
        finally:
            first.stop()
            second.stop()
    assert hits[-1].body["task"]["id"] == task and hits[-1].headers["authorization"] == "Bearer alice-credential"
    assert "taken over" in second.log.read_text()  # by the other gateway, not a restart


async def test_a_clients_push_configs_read_the_same_through_either_gateway_at_once(
        nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config created through one gateway is there at once through the other (get, list), and one deleted through
    one is gone at once through the other, as through one gateway (the conformance kit's PUSH-CREATE/GET/LIST/DEL
    checks through a round-robin balancer: each config change reached the other gateway by its watch of the bucket, a
    moment after the answer, so the kit's next call there saw it missing, or still there)."""
    monkeypatch.setenv("MMA2A_URL_SECRET", SECRET)
    async with webhook_receiver() as hook, tck_agent("tck") as agent:
        cfg = {"agents": [{"name": "tck", "url": agent.url}], "data_dir": str(tmp_path),
               "cluster": {"nats": nats_server.url, "name": cluster_name()},
               "auth": {"clients": [{"name": "alice", "token": "alice-token"}]},
               "urls": {"allow_hosts": [hook.url.removeprefix("http://")]}}
        async with cluster_gateway(cfg) as (_, one), cluster_gateway(cfg) as (_, two), \
                httpx.AsyncClient(timeout=30) as c:
            async def rpc(url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
                r = await c.post(url + "/", headers=ALICE, json={"jsonrpc": "2.0", "id": 1, "method": method,
                                                                 "params": params})
                return r.json()  # type: ignore[no-any-return]

            tid = (await rpc(one, "SendMessage", {"message": {"messageId": "tck-complete-task-1", "role": "ROLE_USER",
                                                              "parts": [{"text": "hi"}]}}))["result"]["task"]["id"]
            seen = []
            for i, (a, b) in enumerate([(one, two), (two, one)] * 5):
                cid = f"cfg-{i}"
                made = await rpc(a, "CreateTaskPushNotificationConfig", {"taskId": tid, "id": cid, "url": hook.url + "/h"})
                got = await rpc(b, "GetTaskPushNotificationConfig", {"taskId": tid, "id": cid})
                listed = await rpc(b, "ListTaskPushNotificationConfigs", {"taskId": tid})
                await rpc(b, "DeleteTaskPushNotificationConfig", {"taskId": tid, "id": cid})
                gone = await rpc(a, "GetTaskPushNotificationConfig", {"taskId": tid, "id": cid})
                seen.append((made["result"]["id"], got.get("result", {}).get("id"),
                             [x["id"] for x in listed["result"]["configs"]], gone.get("error", {}).get("code")))
    assert seen == [(f"cfg-{i}", f"cfg-{i}", [f"cfg-{i}"], -32001) for i in range(10)], seen
