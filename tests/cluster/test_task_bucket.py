"""Security probe P4: the cluster's `tasks` bucket is bounded in bytes. Every batch of task records stays in it for
the map's age limit (an hour) whatever its records became, so before the bound one client sending fan-out messages
whose agents echo 200 KiB parts grew it by 469 KiB a message (7.7 MB/s from one client on loopback): the disk of the
NATS servers, shared with every other stream of the cluster, filled at that rate for as long as it kept sending."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest
from nats.js import api

from mma2a.cluster import cluster_state
from mma2a.cluster.server import NatsServer
from mma2a.gateway import Gateway, parse_config
from mma2a.serving import free_port, running
from tests.cluster.conftest import ADMIN, SECRET, cluster_name
from tests.conformance.tck_agent import tck_agent
from tests.gateway.conftest import agent, agents
from tests.webhooks import webhook_receiver

ALICE = {"Authorization": "Bearer alice-token", "A2A-Version": "1.0"}
CAP = 4 << 20


@contextlib.asynccontextmanager
async def cluster_gateway(cfg: dict[str, Any]) -> AsyncIterator[tuple[Gateway, str]]:
    port = free_port()
    config = parse_config({"listen": f"127.0.0.1:{port}", "admin": {"token": ADMIN}, "health_interval_s": 3600,
                           "features": False, **cfg})
    gw = Gateway(config, cluster=cluster_state(config))
    async with running(gw.app, "127.0.0.1", port, timeouts=gw.config.server.timeouts()) as url:
        yield gw, url


async def test_one_clients_large_tasks_keep_the_tasks_bucket_within_its_byte_bound(
        nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMA2A_URL_SECRET", SECRET)
    name = cluster_name()
    specs = {"echo-t": agent("echo-t", ["text/plain"], echo=True),
             "echo-d": agent("echo-d", ["application/octet-stream"], echo=True)}
    blob = base64.b64encode(b"\x01" * (200 << 10)).decode()
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    try:
        async with agents(specs) as urls:
            cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()], "data_dir": str(tmp_path),
                   "cluster": {"nats": nats_server.url, "name": name, "task_bucket_bytes": CAP},
                   "auth": {"clients": [{"name": "alice", "token": "alice-token"}]}}
            async with cluster_gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=60) as c:
                last, stream = "", f"KV_{name}_tasks"
                for i in range(400):  # until the bucket has let its oldest batches go: more was written than it holds
                    r = await c.post(url + "/", headers=ALICE, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                     "params": {"message": {"messageId": f"m-{i}", "role": "ROLE_USER", "parts": [
                                         {"text": "t" * (200 << 10)}, {"raw": blob, "mediaType": "application/octet-stream"}]}}})
                    last = r.json()["result"]["task"]["id"]
                    if (await js.stream_info(stream)).state.first_seq > 1:
                        break
                info = await js.stream_info(stream)
                got = await c.post(url + "/", headers=ALICE, json={"jsonrpc": "2.0", "id": 2, "method": "GetTask",
                                                                   "params": {"id": last}})
    finally:
        await nc.close()
    assert info.config.max_bytes == CAP and info.config.discard == api.DiscardPolicy.OLD
    assert info.state.first_seq > 1 and info.state.bytes <= CAP  # before: every batch kept, growing with every message
    assert info.state.messages > 0 and got.json()["result"]["id"] == last  # the newest records are kept and served


async def test_durable_answers_keep_the_delivered_bucket_within_its_byte_bound(
        nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for durable delivery: each delivered record keeps the agent's answer for `delivered_ttl_s` (24 h) under
    a key of its own, so an echoing agent's 200 KiB answers grew the `delivered` bucket by each message's size for a
    day. Bounded by `cluster.delivered_bucket_bytes`, oldest out first; the newest record still answers a retry."""
    monkeypatch.setenv("MMA2A_URL_SECRET", SECRET)
    name = cluster_name()
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    try:
        echo = agent("echo-t", ["text/plain"], echo=True)
        async with agents({"echo-t": echo}) as urls:
            cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()], "data_dir": str(tmp_path),
                   "cluster": {"nats": nats_server.url, "name": name, "durable": True, "delivered_bucket_bytes": CAP},
                   "auth": {"clients": [{"name": "alice", "token": "alice-token"}]}}
            async with cluster_gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=60) as c:
                def send(i: int) -> dict[str, Any]:
                    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                        "messageId": f"m-{i}", "role": "ROLE_USER", "parts": [{"text": f"{i} " + "t" * (300 << 10)}]}}}

                stream = f"KV_{name}_delivered"
                ids = [(await c.post(url + "/", headers=ALICE, json=send(i))).json()["result"]["task"]["id"]
                       for i in range(28)]  # each record holds its 300 KiB answer: over 8 MB, twice the bound
                again = (await c.post(url + "/", headers=ALICE, json=send(len(ids) - 1))).json()
                info = await js.stream_info(stream)
    finally:
        await nc.close()
    assert info.config.max_bytes == CAP and info.config.discard == api.DiscardPolicy.OLD
    assert info.state.bytes <= CAP and info.state.messages < len(ids)  # before: all 28 records, 17.2 MB
    assert "result" in again and len(echo[1].received) == len(ids)  # the newest record answers the retry: not sent again


async def test_push_configs_set_and_deleted_do_not_stay_in_the_bucket_forever(
        nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Security probe P7: the `push_configs` bucket had no TTL: every config a client ever set left a key (a deleted
    one a marker), kept forever and read one by one by every gateway at its start, so a client creating and deleting
    configs grew the bucket and every start without end. The bucket now forgets a record `push.config_ttl_s` +
    `push.follow_max_s` after it was written (a config lives no longer), and holds at most `push_bucket_bytes`."""
    monkeypatch.setenv("MMA2A_URL_SECRET", SECRET)
    name = cluster_name()
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    try:
        async with webhook_receiver() as hook, tck_agent("tck") as tck:
            cfg = {"agents": [{"name": "tck", "url": tck.url}], "data_dir": str(tmp_path),
                   "urls": {"allow_hosts": [hook.url.removeprefix("http://")]},
                   "push": {"config_ttl_s": 0.5, "follow_max_s": 0.5},
                   "cluster": {"nats": nats_server.url, "name": name, "push_bucket_bytes": CAP},
                   "auth": {"clients": [{"name": "alice", "token": "alice-token"}]}}
            async with cluster_gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=60) as c:
                async def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
                    r = await c.post(url + "/", headers=ALICE, json={"jsonrpc": "2.0", "id": 1, "method": method,
                                                                    "params": params})
                    return r.json()  # type: ignore[no-any-return]

                tid = (await rpc("SendMessage", {"message": {"messageId": "tck-complete-task-1", "role": "ROLE_USER",
                                                             "parts": [{"text": "x"}]}}))["result"]["task"]["id"]
                for i in range(20):
                    assert "result" in await rpc("CreateTaskPushNotificationConfig",
                                                 {"taskId": tid, "id": f"c{i}", "url": hook.url + "/h"})
                    assert "result" in await rpc("DeleteTaskPushNotificationConfig", {"taskId": tid, "id": f"c{i}"})
                stream, clock = f"KV_{name}_push_configs", asyncio.get_running_loop().time
                deadline = clock() + 20
                # the journal writes in the background: every record put (a config and its deleted marker: 40), gone
                # or not, then none left
                while (written := (await js.stream_info(stream)).state.last_seq) < 40 and clock() < deadline:
                    await asyncio.sleep(0.05)
                while (left := (await js.stream_info(stream)).state.messages) and clock() < deadline:
                    await asyncio.sleep(0.1)
                info = await js.stream_info(stream)
    finally:
        await nc.close()
    assert written >= 40  # one key per config set, then its deleted marker: kept forever before
    assert info.config.max_age == 1.0 and info.config.max_bytes == CAP and info.config.discard == api.DiscardPolicy.OLD
    assert left == 0


async def test_pinned_sessions_keep_the_sessions_bucket_within_its_byte_bound(
        nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Security probe S15 (left open by probe6, closed by the lead): the `sessions` bucket had a TTL but no byte bound,
    and each session a `pin_session` rule routes is a key of its own for `session_ttl_s` (an hour) after its last
    use: clients opening new sessions grew it without end. Bounded by `cluster.sessions_bucket_bytes`, the pins idle
    longest out first; the newest pin is still there for the other gateways."""
    from nats.js.errors import KeyNotFoundError

    from mma2a.cluster.pins import ClusterSessionPins, session_key
    from mma2a.routing.decision import PartRoute, Target

    monkeypatch.setenv("MMA2A_URL_SECRET", SECRET)
    name, cap = cluster_name(), 1 << 20
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    routes = (PartRoute(0, "text/plain", ("pool",), (Target("a1", (), "round_robin"),), (), None, False, True),)
    try:
        cfg = {"agents": [], "data_dir": str(tmp_path),
               "cluster": {"nats": nats_server.url, "name": name, "sessions_bucket_bytes": cap}}
        async with cluster_gateway(cfg) as (gw, _):
            pins = gw.cluster.pins
            assert isinstance(pins, ClusterSessionPins)
            sessions = [f"{i:06d}-" + "s" * 249 for i in range(3000)]  # 256 characters, the most an id may have
            for i, sid in enumerate(sessions):  # ~1.4 MB of pins written through to the bucket
                pins.pin(sid, 1, routes)
                if i % 100 == 99:
                    await pins.flush(sid)
            await pins.flush(sessions[-1])
            info = await js.stream_info(f"KV_{name}_sessions")
            kv = await js.key_value(f"{name}_sessions")
            newest = await kv.get(session_key(sessions[-1]))
            with pytest.raises(KeyNotFoundError):
                await kv.get(session_key(sessions[0]))
    finally:
        await nc.close()
    assert info.config.max_bytes == cap and info.config.discard == api.DiscardPolicy.OLD
    assert info.state.bytes <= cap and 0 < info.state.messages < len(sessions)  # before: all 3,000 kept for an hour
    assert newest.value is not None and sessions[-1].encode() in newest.value


async def test_a_pin_removed_anywhere_is_found_by_its_key_not_by_hashing_every_pin(
        nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Security probe S16-1: a pin removed from the `sessions` bucket (a client's `session.final`, from any gateway,
    this one's own included) reached every gateway's watch as a key, and the watch found its session by hashing every
    pin it held (up to 100,000) on the event loop: ~0.3 s of the loop a removal, which any client with a
    `pin_session` rule could ask for at its request rate, on every gateway of the cluster (every worker of
    `serve --workers N`). Now one dictionary read: no pin is hashed for it, the removed session's pin is gone, every
    other one kept."""
    from mma2a.cluster import pins as pins_module
    from mma2a.cluster.pins import ClusterSessionPins
    from mma2a.routing.decision import PartRoute, Target

    monkeypatch.setenv("MMA2A_URL_SECRET", SECRET)
    routes = (PartRoute(0, "text/plain", ("pool",), (Target("a1", (), "round_robin"),), (), None, False, True),)
    cfg = {"agents": [], "data_dir": str(tmp_path), "cluster": {"nats": nats_server.url, "name": cluster_name()}}
    async with cluster_gateway(cfg) as (gw, _):
        pins = gw.cluster.pins
        assert isinstance(pins, ClusterSessionPins)
        sessions = [f"mallory\x1f{i:05d}" for i in range(2000)]
        for i, sid in enumerate(sessions):
            pins.pin(sid, 1, routes)
            if i % 100 == 99:
                await pins.flush(sid)
        await pins.flush(sessions[-1])
        removed = asyncio.Event()
        hashed: list[str] = []
        watched = pins.on_entry

        def on_entry(key: str, value: bytes | None, op: str | None, revision: int | None = None) -> None:
            watched(key, value, op, revision)
            if not value:
                removed.set()

        key_of = pins_module.session_key

        def counted(session_id: str) -> str:
            hashed.append(session_id)
            return key_of(session_id)

        monkeypatch.setattr(pins, "on_entry", on_entry)  # what the `sessions` watch calls
        monkeypatch.setattr(pins_module, "session_key", counted)
        pins.release(sessions[7])  # the session's last chunk: its pin deleted from the bucket, seen by the watch
        await asyncio.wait_for(removed.wait(), 10)
        pins_module.ClusterSessionPins.on_entry(pins, pins_module.session_key(sessions[8]), None, "DEL")  # another's
    assert set(hashed) <= {sessions[7], sessions[8]}, len(set(hashed))  # (before: all 2,000, for each removal)
    assert sessions[7] not in pins and sessions[8] not in pins and sessions[9] in pins
    assert pins.lookup(sessions[8], 1) is None and pins.lookup(sessions[9], 1) == routes
