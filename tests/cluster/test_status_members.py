"""`mma2a cluster status` lists every gateway whose member document is in the `members` bucket, also while the
gateways are writing their heartbeats. It used to list them with a KV watch (`KeyValue.keys`), whose end-of-values
signal came before the values when a key was rewritten meanwhile: a clean-clone run said "no gateways" of a cluster
whose two workers were serving (tests/cluster/test_workers_nats_auth.py), and a loop like the one below read the
wrong keys 8 times in 300."""

from __future__ import annotations

import asyncio
import time

from typing import Any

import nats
import orjson
import pytest
from nats.js import api
from nats.js.kv import KeyValue

from mma2a.cluster.link import Names
from mma2a.cluster.server import NatsServer
from mma2a.cluster.status import cluster_status
from mma2a.gateway.cluster_config import ClusterConfig
from tests.cluster.conftest import cluster_name, rewriting


async def test_status_lists_every_member_while_their_heartbeats_are_written(nats_server: NatsServer) -> None:
    name = cluster_name()
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    kv = await js.create_key_value(config=api.KeyValueConfig(bucket=Names(name).bucket("members"), ttl=10))
    beating = True

    async def heartbeats() -> None:  # two gateways' member documents rewritten as fast as NATS takes them
        while beating:
            for gw in ("gw-a", "gw-b"):
                await kv.put(gw, orjson.dumps({"id": gw, "at": time.time(), "rulesRevision": 0}))

    beat = asyncio.create_task(heartbeats())
    seen = []
    try:
        for _ in range(60):
            status = await cluster_status(ClusterConfig(nats=nats_server.url, name=name))
            seen.append(sorted(g["id"] for g in status["gateways"]))
    finally:
        beating = False
        await beat
        await nc.close()
    assert seen == [["gw-a", "gw-b"]] * 60


async def test_status_counts_every_agent_modality_and_session_while_they_are_rewritten_and_no_deleted_one(
        nats_server: NatsServer) -> None:
    """The counts of agents, modalities and session pins were read by KV watch too (a few in a hundred wrong while
    other gateways rewrote them); a deleted agent or modality (its marker) is not counted. Sessions are counted as keys
    from the stream's state: an ended session's marker is one until it ages out (see the next test)."""
    name = cluster_name()
    names = Names(name)
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    for kind in ("agents", "modalities", "sessions"):
        kv = await js.create_key_value(config=api.KeyValueConfig(bucket=names.bucket(kind)))
        await kv.put("kept", b"{}")
        await kv.put("gone", b"{}")
        await kv.delete("gone")
    seen = []
    try:
        async with rewriting(nats_server.url, names.bucket("agents"), {"a1": b"{}", "a2": b"{}"}), \
                rewriting(nats_server.url, names.bucket("modalities"), {"m1": b"{}"}), \
                rewriting(nats_server.url, names.bucket("sessions"), {"s1": b"{}", "s2": b"{}", "s3": b"{}"}):
            for _ in range(100):
                status = await cluster_status(ClusterConfig(nats=nats_server.url, name=name))
                seen.append((status["agents"], status["modalities"], status["sessions"]))
    finally:
        await nc.close()
    assert seen == [(3, 2, 5)] * 100


async def test_status_counts_the_session_keys_from_the_streams_state_reading_none_of_them(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """`cluster status` read every key of the `sessions` bucket (its subjects listed, then each key's entry) to count
    the pins: 100,000 pins took 12 s. It now counts the keys from the stream's state (`num_subjects`, one
    `STREAM.INFO`): pins and the markers of ended sessions, each a key until it ages out or is purged, as the bucket
    holds them against its bound (`sessionsBytes`: its stream's bytes)."""
    name = cluster_name()
    bucket = Names(name).bucket("sessions")
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    read: list[str] = []
    get = KeyValue.get

    async def counted_get(kv: KeyValue, key: str, *args: Any, **kwargs: Any) -> Any:
        if kv._name == bucket:
            read.append(key)
        return await get(kv, key, *args, **kwargs)

    try:
        kv = await js.create_key_value(config=api.KeyValueConfig(bucket=bucket))
        for i in range(300):
            await kv.put(f"c.{i:04d}", b'{"session": "s"}')
        for i in range(0, 300, 3):
            await kv.delete(f"c.{i:04d}")  # ended: a marker each
        await js.purge_stream(f"KV_{bucket}", subject=f"$KV.{bucket}.c.0001")  # past a share: nothing left of it
        monkeypatch.setattr(KeyValue, "get", counted_get)
        status = await cluster_status(ClusterConfig(nats=nats_server.url, name=name))
        info = await js.stream_info(f"KV_{bucket}")
    finally:
        await nc.close()
    assert read == []  # before: every one of the 299 keys read
    assert (status["sessions"], status["sessionsBytes"]) == (299, info.state.bytes)  # 199 pins and 100 markers
