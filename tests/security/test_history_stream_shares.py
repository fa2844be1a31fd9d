"""Each client's share of the cluster's history stream (docs/security.md S17-6): the stream is bounded by
`history.max_bytes` and drops its oldest messages first when full; one client's decisions of new shapes each (~45 KB)
filled it and pushed every other client's out, so a gateway started after such a flood caught up from a stream missing
alice's decisions. Now every gateway (a follower of the stream, and one that only publishes, as the workers of
`serve --workers N` but the first) counts what each client's decisions take of it; a client holding more than an eighth
of `history.max_bytes_per_client` has messages of its own, and past its share its own oldest are purged. Real
nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest
from nats.js import api

from mma2a.cluster import cluster_state
from mma2a.cluster.history import JetStreamHistory
from mma2a.cluster.history_shares import CLIENTS_HEADER, client_of, client_token, read_shared_header, stored_bytes
from mma2a.cluster.server import NatsServer
from mma2a.gateway import Gateway
from mma2a.gateway.config import parse_config
from mma2a.serving import free_port, running
from tests.cluster.conftest import SECRET, cluster_name, nats_server  # noqa: F401 - the session's nats-server
from tests.gateway.conftest import ADMIN, agent, agents

pytestmark = pytest.mark.timeout(300)

MAX_BYTES, SHARE = 2_000_000, 400_000
CLIENTS = [{"name": "alice", "token": "alice-token"}, {"name": "mallory", "token": "mallory-token"}]


@contextlib.asynccontextmanager
async def member(cfg: dict[str, Any], history: str = "stream") -> AsyncIterator[tuple[Gateway, str]]:
    """A gateway of the cluster in this process: `stream` follows the stream into its file, `publish` only publishes
    (the workers of `serve --workers N` but the first)."""
    port = free_port()
    config = parse_config({"listen": f"127.0.0.1:{port}", "admin": {"token": ADMIN}, "health_interval_s": 3600,
                           "features": False, **cfg})
    gw = Gateway(config, cluster=cluster_state(config, history=history))  # type: ignore[arg-type]
    async with running(gw.app, "127.0.0.1", port, timeouts=gw.config.server.timeouts()) as url:
        yield gw, url


def sink(gw: Gateway) -> JetStreamHistory:
    assert gw.cluster is not None and isinstance(gw.cluster.history, JetStreamHistory)
    return gw.cluster.history


async def stream_held(nats_url: str, stream: str) -> tuple[Any, dict[str | None, int], dict[str, int]]:
    """The stream's state, the bytes each client's own messages take of it (as nats-server counts them; None: shared
    messages), and each client's part of the shared messages (as their headers say)."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        held: dict[str | None, int] = {}
        shared: dict[str, int] = {}
        sub = await js.subscribe(">", stream=stream, ordered_consumer=True,
                                 config=api.ConsumerConfig(headers_only=True, deliver_policy=api.DeliverPolicy.ALL))
        seen = 0
        while seen < info.state.messages:
            msg = await sub.next_msg(timeout=10)
            seen += 1
            headers = msg.headers or {}
            size = stored_bytes(msg.subject, int(headers["Nats-Msg-Size"]), headers)
            held[client_of(msg.subject)] = held.get(client_of(msg.subject), 0) + size
            for client, part in read_shared_header(headers.get(CLIENTS_HEADER, "")):  # a shared message's
                shared[client] = shared.get(client, 0) + part
        await sub.unsubscribe()
        return info, held, shared
    finally:
        await nc.close()


async def settled(*gws: Gateway) -> None:
    """Every decision the gateways recorded is published, counted by each of them, and their purges done."""
    deadline = time.monotonic() + 60
    while True:
        sinks = [sink(g) for g in gws]
        info = await sinks[0].cluster.js.stream_info(sinks[0].stream)
        if all(not s._queue and s.heard >= info.state.last_seq and not s._purging for s in sinks):
            return
        assert time.monotonic() < deadline, "the gateways did not settle"
        await asyncio.sleep(0.05)


async def test_one_clients_flood_leaves_the_others_decisions_in_the_stream_for_a_gateway_joining_late(
        nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        caplog: pytest.LogCaptureFixture) -> None:
    """Alice's 10 decisions through two gateways, then mallory's 120 of 64 parts of media types of her own (~45 KB of
    shape each, ~5.5 MB in all) through both, four at a time. Before: the stream (2 MB) dropped its oldest messages,
    alice's with them, and a gateway started after held none of her decisions (0 of 10; the stream's first sequence
    past hers). Now mallory's messages take at most her share of the stream (plus one batch heard late), nothing is
    discarded from its front, and the late gateway holds alice's 10 and mallory's newest. Then, those two gone, a new
    gateway (counting from its start) cuts mallory's next 30 there, and its first cut takes her messages from before."""
    monkeypatch.setenv("MMA2A_URL_SECRET", SECRET)
    caplog.set_level(logging.WARNING, logger="mma2a.cluster")
    name = cluster_name()
    stream = f"{name}_history".upper()
    base = {"auth": {"clients": CLIENTS},
            "cluster": {"nats": nats_server.url, "name": name},
            "history": {"max_bytes": MAX_BYTES, "max_bytes_per_client": SHARE}}
    async with agents({"text": agent("text", ["text/plain"])}) as urls, httpx.AsyncClient(timeout=60) as c:
        cfg = {**base, "agents": [{"name": "text", "url": urls["text"]}]}

        async def send(url: str, token: str, mid: str, parts: list[dict[str, Any]]) -> None:
            r = await c.post(url + "/", headers={"A2A-Version": "1.0", "Authorization": f"Bearer {token}"},
                             json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                   "params": {"message": {"messageId": mid, "role": "ROLE_USER", "parts": parts}}})
            assert r.status_code == 200 and "result" in r.json(), r.text[:300]

        async with member({**cfg, "data_dir": str(tmp_path / "a")}) as (a, url_a), \
                member({**cfg, "data_dir": str(tmp_path / "b")}, history="publish") as (b, url_b):
            for i in range(10):
                await send([url_a, url_b][i % 2], "alice-token", f"alice-{i}", [{"text": "hello"}])
            await settled(a, b)

            async def mallorys(k: int) -> None:
                for j in range(k * 30, (k + 1) * 30):
                    parts = [{"text": "x", "mediaType": f"text/plain; n={'m' * 180}{j}.{i}"} for i in range(64)]
                    await send([url_a, url_b][j % 2], "mallory-token", f"mallory-{j}", parts)

            await asyncio.gather(*(mallorys(k) for k in range(4)))
            await settled(a, b)
            info, held, shared = await stream_held(nats_server.url, stream)
            purged = [sink(g).purged for g in (a, b)]
            metric = [g.metrics.registry.get_sample_value("mma2a_history_decisions_total", {"fate": "purged"}) or 0
                      for g in (a, b)]
            counted = [(sink(g).shares.own(client_token("mallory")), sink(g).shares.held(client_token("mallory")))
                       for g in (a, b)]
            # a gateway started after the flood catches up from the stream
            async with member({**cfg, "data_dir": str(tmp_path / "c")}) as (late, url_late):
                deadline = time.monotonic() + 60
                while True:
                    r = await c.get(url_late + "/admin/history", params={"limit": "1000", "sender": "alice"},
                                    headers={"Authorization": "Bearer " + ADMIN})
                    alices = sorted(d["messageId"] for d in r.json()["decisions"])
                    if len(alices) == 10 or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.1)
                r = await c.get(url_late + "/admin/history", params={"limit": "1", "sender": "mallory"},
                                headers={"Authorization": "Bearer " + ADMIN})
                newest = [d["messageId"] for d in r.json()["decisions"]]
        # the gateways that counted the flood gone, a new one counts from its start: mallory's next flood through it
        # is cut there, and the cut takes what she held before it started too (every message of hers up to a sequence)
        async with member({**cfg, "data_dir": str(tmp_path / "d")}) as (fresh, url_fresh):
            before_fresh = sink(fresh).shares.held(client_token("mallory"))
            for j in range(120, 150):
                parts = [{"text": "x", "mediaType": f"text/plain; n={'m' * 180}{j}.{i}"} for i in range(64)]
                await send(url_fresh, "mallory-token", f"mallory-{j}", parts)
            await settled(fresh)
            info_after, held_after, shared_after = await stream_held(nats_server.url, stream)
            fresh_own = sink(fresh).shares.own(client_token("mallory"))
    assert alices == sorted(f"alice-{i}" for i in range(10))  # before: [] (her messages dropped from the stream)
    assert info.state.first_seq == 1  # nothing discarded from the stream's front: its oldest message is alice's first
    assert info.state.bytes == sum(held.values()) <= MAX_BYTES
    token = client_token("mallory")
    mallory = held[token] + shared.get(token, 0)
    assert mallory <= SHARE + 600_000  # her share, and at most a message heard after the last cut
    assert counted[0] == counted[1] == (held[token], mallory)  # both gateways count what the stream holds of her
    assert client_token("alice") not in held and shared[client_token("alice")] < SHARE // 8  # hers shared, as before
    assert newest and newest[0].startswith("mallory-")  # she keeps her newest decisions
    assert sum(purged) == sum(metric) > 0  # counted where the purge removed them
    assert before_fresh == 0 and held_after[token] + shared_after.get(token, 0) <= SHARE + 600_000
    assert held_after[token] == fresh_own  # her messages from before it started went with its first cut
    assert info_after.state.first_seq == 1 and shared_after[client_token("alice")] == shared[client_token("alice")]
    assert sink(fresh).purged > 0
    said = [r.getMessage() for r in caplog.records if "its oldest are purged" in r.getMessage()]
    assert 1 <= len(said) <= 3 and all(client_token("mallory") in s for s in said)  # once (per gateway, at most)
