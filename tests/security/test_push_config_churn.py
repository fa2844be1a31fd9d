"""A cluster's `push_configs` bucket holds the live configs, not every config ever deleted (docs/security.md S17-7): a
deleted config was kept as a record marked deleted until the bucket's TTL (25 h), so one client creating and deleting
configs of new ids — never holding more than a few at once — filled the bucket, which drops its oldest records
first: alice's live config among them, missing from then on for any gateway that starts. Real nats-server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest

from mma2a.cluster import push as cluster_push
from mma2a.cluster.server import NatsServer
from tests.cluster.conftest import SECRET, cluster_name, nats_server  # noqa: F401 - the session's nats-server
from tests.cluster.test_task_bucket import cluster_gateway
from tests.conformance.tck_agent import tck_agent
from tests.webhooks import webhook_receiver

pytestmark = pytest.mark.timeout(300)

CHURN = 60


async def bucket_messages(url: str, bucket: str) -> int:
    nc = await nats.connect(url)
    try:
        return int((await nc.jetstream().stream_info(f"KV_{bucket}")).state.messages)
    finally:
        await nc.close()


async def test_a_clients_deleted_configs_leave_the_bucket_and_anothers_live_config_stays(
        nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Mallory creates and deletes 60 configs of new ids on her task (one live at a time); alice keeps one. Once the
    deletions have reached the watches, the bucket holds alice's config and nothing of mallory's, and a gateway started
    after reads alice's config. Before: 61 records (every deleted one kept for 25 h): replayed with a 4 MiB bucket,
    mallory's 21,000 creations and deletions (150 s, 136 a second, through one gateway) pushed alice's config out and
    a gateway started after answered her `-32001 push config 'alice-cfg' … not found`."""
    monkeypatch.setenv("MMA2A_URL_SECRET", SECRET)
    monkeypatch.setattr(cluster_push, "RETIRE_S", 0.05)
    name = cluster_name()
    async with webhook_receiver() as hook, tck_agent("tck") as agent:
        cfg = {"agents": [{"name": "tck", "url": agent.url}], "data_dir": str(tmp_path),
               "cluster": {"nats": nats_server.url, "name": name},
               "auth": {"clients": [{"name": "alice", "token": "alice-token"},
                                    {"name": "mallory", "token": "mallory-token"}]},
               "urls": {"allow_hosts": [hook.url.removeprefix("http://")]}}
        async with cluster_gateway(cfg) as (_, one), httpx.AsyncClient(timeout=30) as c:
            async def rpc(url: str, token: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
                r = await c.post(url + "/", headers={"A2A-Version": "1.0", "Authorization": f"Bearer {token}"},
                                 json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
                return r.json()  # type: ignore[no-any-return]

            async def task(token: str, mid: str) -> str:
                sent = await rpc(one, token, "SendMessage", {"message": {"messageId": mid, "role": "ROLE_USER",
                                                                         "parts": [{"text": "hi"}]}})
                return str(sent["result"]["task"]["id"])

            alices = await task("alice-token", "tck-complete-task-a")
            made = await rpc(one, "alice-token", "CreateTaskPushNotificationConfig",
                             {"taskId": alices, "id": "alice-cfg", "url": hook.url + "/h"})
            assert made["result"]["id"] == "alice-cfg", made
            mallorys = await task("mallory-token", "tck-complete-task-m")
            for i in range(CHURN):
                made = await rpc(one, "mallory-token", "CreateTaskPushNotificationConfig",
                                 {"taskId": mallorys, "id": f"m{i}", "url": hook.url + "/h"})
                assert made["result"]["id"] == f"m{i}", made
                gone = await rpc(one, "mallory-token", "DeleteTaskPushNotificationConfig",
                                 {"taskId": mallorys, "id": f"m{i}"})
                assert "error" not in gone, gone
            bucket = f"{name}_push_configs"

            async def only_alices() -> None:
                while await bucket_messages(nats_server.url, bucket) != 1:  # before: 61, for 25 h
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(only_alices(), 60)
            async with cluster_gateway(cfg) as (_, later):
                got = await rpc(later, "alice-token", "GetTaskPushNotificationConfig",
                                {"taskId": alices, "id": "alice-cfg"})
                assert got.get("result", {}).get("id") == "alice-cfg", got
                again = await rpc(later, "mallory-token", "GetTaskPushNotificationConfig",
                                  {"taskId": mallorys, "id": f"m{CHURN - 1}"})
                assert again["error"]["code"] == -32001  # a deleted config stays deleted
