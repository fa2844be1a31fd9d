"""Security probe S16-5: the cluster's `sessions` bucket is shared by every client and drops its oldest writes first
when full (`cluster.sessions_bucket_bytes`), and a pin is written once: a client opening a new session a message
pushed every other client's cluster pins out (~140,000 messages at the 64 MiB default), and alice's next chunk,
reaching a gateway without her pin, was routed afresh — to another member of the pool than the one holding her
stream. Each client's pins are now held to a share of the bucket (`cluster.sessions_bytes_per_client`, a quarter by
default) across the cluster's gateways: past it the client's own oldest pins leave the bucket, never another's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import nats
import pytest
from pydantic import ValidationError

from mma2a.cluster.kv_keys import current, held_keys
from mma2a.cluster.pins import DELETE_HEADERS, ClusterSessionPins, session_key, stored_bytes
from mma2a.cluster.server import NatsServer
from mma2a.ext import EXTENSION_URI
from mma2a.gateway.cluster_config import ClusterConfig
from mma2a.routing.decision import PartRoute, Target
from tests.cluster.conftest import SECRET, cluster_name
from tests.cluster.test_task_bucket import cluster_gateway
from tests.gateway.conftest import agent, agents, until
from tests.security.test_task_ownership import PINNING_RULES, rpc, session_chunk

ALICE, MALLORY = "tok-alice-shares-1", "tok-mallory-shares-2"
CLIENTS = [{"name": "alice", "token": ALICE}, {"name": "mallory", "token": MALLORY}]
BUCKET, SHARE = 1 << 20, 16 << 10


def target(doc: dict[str, Any]) -> str:
    return str(doc["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]["targets"][0])


async def test_one_clients_flood_of_new_sessions_leaves_another_clients_pin_across_gateways(
        nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMA2A_URL_SECRET", SECRET)
    name = cluster_name()
    bucket = f"{name}_sessions"
    cluster = {"nats": nats_server.url, "name": name, "sessions_bucket_bytes": BUCKET,
               "sessions_bytes_per_client": SHARE}
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    try:
        async with agents({n: agent(n, ["image/*"]) for n in ("w1", "w2")}) as urls, \
                httpx.AsyncClient(timeout=30) as c:
            pool = [{"name": n, "url": u, "groups": ["pool"]} for n, u in urls.items()]
            base = {"auth": {"clients": CLIENTS}, "features": False, "cluster": cluster}
            async with cluster_gateway({**base, "agents": pool, "rules": PINNING_RULES,
                                        "data_dir": str(tmp_path / "a")}) as (a, url_a), \
                    cluster_gateway({**base, "data_dir": str(tmp_path / "b")}) as (b, url_b):
                pins = [a.cluster.pins, b.cluster.pins]
                assert isinstance(pins[0], ClusterSessionPins) and isinstance(pins[1], ClusterSessionPins)
                unpinned = dict(session_chunk("u0", "x"))
                del unpinned["message"]["metadata"]  # no session: round robin moves on, alice's session starts on w2
                first = target(await rpc(c, url_a, "SendMessage", unpinned, ALICE))
                alice = target(await rpc(c, url_a, "SendMessage", session_chunk("a0", "cam", 0), ALICE))
                for seq, final in ((0, False), (1, True)):  # and a session ended: its release's marker stays
                    await rpc(c, url_b, "SendMessage", session_chunk(f"mic{seq}", "mic", seq, final), ALICE)
                await pins[0].settle()
                await pins[1].settle()
                # mallory's new sessions through both gateways' pipelines ...
                mallorys = [target(await rpc(c, url, "SendMessage", session_chunk(f"m{i}", f"m-{i}"), MALLORY))
                            for i, url in enumerate([url_a, url_b] * 2)]
                # ... and then ~1.4 MB more of them, pinned as the pipeline pins each (her client, her session id)
                routes = (PartRoute(0, "image/png", ("lb",), (Target("w1", (), "round_robin"),), (), None, False, True),)
                flood = [f"mallory\x1f{i:06d}-" + "s" * 249 for i in range(2400)]  # 256 characters, the most
                for i, sid in enumerate(flood):
                    pins[i % 2].pin(sid, a.state.snapshot.version, routes)
                    if i % 200 == 199:
                        await pins[i % 2].flush(sid)
                for p in pins:
                    await p.settle()
                # each gateway hears the other's last pins through its watch after its own writes are settled, and may
                # purge then: the bucket is read once both have heard its last message and purged what that brought
                # (read before, it lost 6 pins between the listing and the stream's info, once under load)
                last = (await js.stream_info(f"KV_{bucket}")).state.last_seq
                for p in pins:
                    await until(lambda p=p: p.heard >= last, f"the gateway heard the bucket's message {last}")
                    await p.settle()
                kv = await js.key_value(bucket)
                entries = await current(kv, await held_keys(js, bucket), deleted=True)
                info = await js.stream_info(f"KV_{bucket}")
                assert info.state.last_seq == last  # nothing written meanwhile
                # a gateway started after the flood holds no copy of alice's pin: it has the bucket's alone
                async with cluster_gateway({**base, "data_dir": str(tmp_path / "c")}) as (g, url_c):
                    later = target(await rpc(c, url_c, "SendMessage", session_chunk("a1", "cam", 1), ALICE))
                    adopted = g.cluster.pins.adopted
                purged = [p.shares.purged for p in pins]
    finally:
        await nc.close()
    assert first != alice and len(set(mallorys)) == 2
    assert later == alice and adopted == 1  # before: her pin pushed out, routed afresh to `first`
    alices = session_key("alice\x1fcam")
    mallory_prefix = session_key("mallory\x1fx").partition(".")[0]
    held = {e.key: stored_bytes(f"$KV.{bucket}.{e.key}", len(e.value or b""), 0 if e.value else DELETE_HEADERS)
            for e in entries}
    assert alices in held  # before: gone, the first of ~2,400 pins past what the bucket holds
    assert held[session_key("alice\x1fmic")] == stored_bytes(f"$KV.{bucket}.{session_key('alice' + chr(31) + 'mic')}",
                                                               0, DELETE_HEADERS)  # a marker
    theirs = [k for k in held if k.startswith(mallory_prefix + ".")]
    assert sum(held[k] for k in theirs) <= 2 * SHARE  # her share, once for each gateway's writes at most
    # she keeps her newest pins, newest in the bucket's order: the stream's last two messages, both hers (purges take
    # no sequence). Not flood[-1] and flood[-2]: each gateway has its own connection, and under load one's writes
    # reached the bucket ~100 messages after the other's last (b's flood[-1] at 2307, a's flood[-2] at 2407)
    revisions = {e.revision for e in entries if e.key in theirs}
    assert {info.state.last_seq, info.state.last_seq - 1} <= revisions
    assert session_key(flood[0]) not in theirs and sum(purged) >= len(flood) - len(theirs)
    assert info.state.bytes == sum(held.values()) < BUCKET  # each key counted as the bucket counts it; none discarded


async def test_one_clients_flood_of_sessions_through_a_hop_is_held_to_its_share_of_the_peers_bucket(
        nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 18 (edges, docs/security.md ED5): gw-b a cluster gateway (`sessions_bytes_per_client` 4 KiB), gw-a a
    lone one signing who its clients are. Mallory's 40 sessions of long ids through gw-a are `mallory via gwa`'s at
    gw-b: her pins in the bucket stay within her share, her newest kept; alice's session through gw-a, pinned before
    the flood, keeps its pin and its worker."""
    from mma2a.signing import new_private_key, private_key_text, public_key_text

    monkeypatch.setenv("MMA2A_URL_SECRET", SECRET)
    key = new_private_key()
    monkeypatch.setenv("SHARES_FED_KEY", private_key_text(key))
    monkeypatch.setenv("MMA2A_AGENT_SHARES_GWA", "tok-gwa-shares-3")
    name = cluster_name()
    bucket, share = f"{name}_sessions", 4096
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    long = "s" * 200
    try:
        async with agents({n: agent(n, ["image/*"]) for n in ("w1", "w2")}) as urls, \
                httpx.AsyncClient(timeout=30) as c:
            pool = [{"name": n, "url": u, "groups": ["pool"]} for n, u in urls.items()]
            async with cluster_gateway({
                    "agents": pool, "rules": PINNING_RULES, "data_dir": str(tmp_path / "b"),
                    "auth": {"clients": [{"name": "gwa", "token": "tok-gwa-shares-3"}]},
                    "federation": {"trusted_gateways": {"gwa": {"public_key": public_key_text(key)}}},
                    "cluster": {"nats": nats_server.url, "name": name, "sessions_bucket_bytes": BUCKET,
                                "sessions_bytes_per_client": share}}) as (gw_b, url_b), \
                    cluster_gateway({"name": "gw-a", "data_dir": str(tmp_path / "a"), "auth": {"clients": CLIENTS},
                                     "agents": [{"name": "site-b", "url": url_b, "token_env": "MMA2A_AGENT_SHARES_GWA"}],
                                     "federation": {"private_key_env": "SHARES_FED_KEY"}}) as (_, url_a):
                async def worker(token: str, mid: str, sid: str, seq: int = 0) -> str:
                    doc = await rpc(c, url_a, "SendMessage", session_chunk(mid, sid, seq), token)
                    assert "result" in doc, doc
                    return str(doc["result"]["task"]["status"]["message"]["parts"][0]["text"]).removesuffix(" ok")

                alice = [await worker(ALICE, "a0", "cam-" + long)]
                for i in range(40):
                    await worker(MALLORY, f"m{i}", f"{i:03d}-{long}")
                alice += [await worker(ALICE, f"a{i}", "cam-" + long, i) for i in (1, 2)]
                pins = gw_b.cluster.pins
                assert isinstance(pins, ClusterSessionPins)
                await pins.settle()
                kv = await js.key_value(bucket)
                entries = await current(kv, await held_keys(js, bucket), deleted=True)
    finally:
        await nc.close()
    assert alice == [alice[0]] * 3, alice
    held = {e.key: stored_bytes(f"$KV.{bucket}.{e.key}", len(e.value or b""), 0 if e.value else DELETE_HEADERS)
            for e in entries}
    theirs = [k for k in held if k.startswith(session_key(f"mallory via gwa{chr(31)}x").partition(".")[0] + ".")]
    assert session_key(f"alice via gwa{chr(31)}cam-{long}") in held
    assert 0 < sum(held[k] for k in theirs) <= share and len(theirs) < 40, (len(theirs), sum(held[k] for k in theirs))
    assert session_key(f"mallory via gwa{chr(31)}039-{long}") in theirs  # her newest kept, her oldest gone
    assert session_key(f"mallory via gwa{chr(31)}000-{long}") not in theirs


def test_a_clients_share_is_at_most_the_bucket_and_a_quarter_by_default() -> None:
    assert ClusterConfig(nats="nats://127.0.0.1:4222").sessions_share == 16 << 20
    assert ClusterConfig(nats="nats://127.0.0.1:4222", sessions_bucket_bytes=4 << 20).sessions_share == 1 << 20
    with pytest.raises(ValidationError) as err:
        ClusterConfig(nats="nats://127.0.0.1:4222", sessions_bucket_bytes=1 << 20, sessions_bytes_per_client=2 << 20)
    assert "sessions_bytes_per_client (2097152) must be at most sessions_bucket_bytes (1048576)" in str(err.value)


def test_every_gateway_lets_go_of_the_same_keys_whatever_order_it_hears_them_in() -> None:
    """Two gateways' counts fed the same writes, one in the bucket's order and one shuffled (the watch brings the
    others' late, its own come when acknowledged): each key past its client's share is purged once, by the gateway
    that wrote it; the client's newest stay, and a client within its share loses nothing."""
    import random

    from mma2a.cluster.pins import PinShares

    writes = [(f"{'alice' if i in (0, 100) else 'mallory'}.{i:04d}", i + 1) for i in range(200)]  # (key, sequence)
    counts = [PinShares(share=3 * 100, ttl_s=3600, max_keys=10_000) for _ in range(2)]
    heard = [list(writes), random.Random(7).sample(writes, len(writes))]
    purged: list[str] = []
    for g, (count, order) in enumerate(zip(counts, heard)):
        for key, seq in order:
            out, _ = count.wrote(key, seq, 100, seq % 2 == g, now=0.0)  # gateway g wrote the writes of its parity
            purged += [k for k, _ in out]
    mallorys = [k for k, _ in writes if k.startswith("mallory.")]
    assert sorted(purged) == sorted(mallorys[:-3])  # each once, by its writer; her newest three stay
    assert all(c.held("mallory") == 300 and c.held("alice") == 200 for c in counts)  # alice's two kept


def test_keys_of_real_form_are_counted_compactly_and_given_back_as_they_were() -> None:
    """Every gateway counts every client's keys (a full 64 MiB bucket: ~120,000): a key of the real form (the
    client's digest, a dot, the session's 40 hex digits) is held by its session's digest as an int in arrays of its
    client, not as its string in a dict and a heap of tuples (~206 B a key and the key's own string, 110 B: ~38 MB on
    every gateway for a full bucket). What leaves the count is given back as the key it was, purged by its writer
    alone, whatever order the messages were heard in."""
    import random
    import tracemalloc

    from mma2a.cluster.pins import PinShares

    sessions = [f"{'alice' if i in (0, 100) else 'mallory'}\x1fs{i}" for i in range(200)]
    writes = [(session_key(s), i + 1) for i, s in enumerate(sessions)]
    counts = [PinShares(share=3 * 100, ttl_s=3600, max_keys=10_000) for _ in range(2)]
    heard = [list(writes), random.Random(11).sample(writes, len(writes))]
    purged: list[str] = []
    left: list[list[str]] = [[], []]
    for g, (count, order) in enumerate(zip(counts, heard)):
        for key, seq in order:
            out, gone = count.wrote(key, seq, 100, seq % 2 == g, now=0.0)
            purged += [k for k, _ in out]
            left[g] += gone
            assert all(count.seq(k) is None for k in gone)
    mallorys = [k for s, (k, _) in zip(sessions, writes) if s.startswith("mallory")]
    alice = session_key("alice\x1fs0").partition(".")[0]
    assert sorted(purged) == sorted(mallorys[:-3])  # each once, by its writer, as the key it was
    assert sorted(left[0]) == sorted(left[1]) == sorted(mallorys[:-3])
    assert all(c.held(alice) == 200 and c.seq(writes[100][0]) == 101 for c in counts)

    keys = [session_key(f"c{i % 50}\x1f{i:08d}-" + "s" * 240) for i in range(20_000)]  # made first: not measured
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        held = PinShares(share=1 << 40, ttl_s=3600, max_keys=1 << 20)
        for i, key in enumerate(keys):
            held.wrote(key, i + 1, 600, False, 0.0)
        per_key = (tracemalloc.get_traced_memory()[0] - before) / len(keys)
    finally:
        tracemalloc.stop()
    assert len(held) == len(keys) and held.seq(keys[7]) == 8
    assert per_key < 180, per_key  # ~159 B; before: 206 B a key, beside its string (110 B) which it held too


class _Reference:
    """What `PinShares` counts, said plainly (every key in one dict, the oldest found by sorting): the reference the
    compact count is checked against."""

    def __init__(self, share: int, ttl_s: float, max_keys: int) -> None:
        from collections import OrderedDict

        self.share, self.ttl_s, self.max_keys = share, ttl_s, max_keys
        self.keys: dict[str, dict[str, tuple[int, int, bool, float]]] = {}
        self.recent: OrderedDict[str, float] = OrderedDict()

    def count(self) -> int:
        return sum(len(k) for k in self.keys.values())

    def held(self, owner: str) -> int:
        return sum(e[1] for e in self.keys.get(owner, {}).values())

    def wrote(self, key: str, seq: int, size: int, mine: bool, now: float) -> tuple[list[tuple[str, int]], list[str]]:
        owner, dot, _ = key.partition(".")
        if not dot:
            return [], []
        keys = self.keys.setdefault(owner, {})
        old = keys.get(key)
        if old is not None:
            if old[0] == seq and mine:
                keys[key] = (seq, old[1], True, old[3])
            if old[0] >= seq:
                return [], []
        keys[key] = (seq, size, mine, now)
        self.recent[owner] = now
        self.recent.move_to_end(owner)
        purge, gone = [], []
        while keys:
            first = min(keys, key=lambda k: keys[k][0])
            entry = keys[first]
            aged = entry[3] < now - self.ttl_s
            if not aged and (self.held(owner) <= self.share or len(keys) == 1):
                break
            del keys[first]
            gone.append(first)
            if entry[2] and not aged:
                purge.append((first, entry[0]))
        while self.recent:
            owner, at = next(iter(self.recent.items()))
            keys = self.keys[owner]
            if at >= now - self.ttl_s:
                if self.count() <= self.max_keys:
                    break
                while keys and self.count() > self.max_keys:
                    first = min(keys, key=lambda k: keys[k][0])
                    del keys[first]
                    gone.append(first)
                if keys:
                    break
            del self.recent[owner], self.keys[owner]
            gone.extend(keys)
        return purge, gone


@pytest.mark.parametrize(("share", "max_keys"), [(1_500, 25), (1 << 20, 10_000), (1 << 20, 30)])
@pytest.mark.parametrize("seed", range(3))
def test_the_compact_count_counts_as_the_plain_one(seed: int, share: int, max_keys: int) -> None:
    """Random writes of four clients (real keys and others, rewrites, releases' smaller markers, messages heard out of
    the bucket's order, time passing the TTL, more keys than `max_keys`; clients past their share, or within it
    rewriting their keys): the compact count purges, lets go of and holds exactly what the plain one does (and so
    did the count before it, a dict and a heap of tuples)."""
    import random

    from mma2a.cluster.pins import PinShares

    rnd = random.Random(seed)
    names = {c: [session_key(f"{c}\x1f{i}") for i in range(40)] for c in ("alice", "bob", "carol")}
    names["plain"] = [f"plain.s{i}" for i in range(40)]  # a key of another form: held as it is
    owners = [keys[0].partition(".")[0] for keys in names.values()]
    compact, plain = PinShares(share, 100.0, max_keys), _Reference(share, 100.0, max_keys)
    seq, now, pending = 0, 0.0, []
    for _ in range(3_000):
        seq += 1
        pending.append((rnd.choice(rnd.choice(list(names.values()))), seq, rnd.choice((120, 200, 430)), rnd.random() < 0.5))
        if rnd.random() < 0.3 or len(pending) > 6:  # heard in another order than written, now and then
            rnd.shuffle(pending)
            for key, s, size, mine in pending:
                got = compact.wrote(key, s, size, mine, now)
                want = plain.wrote(key, s, size, mine, now)
                assert (got[0], sorted(got[1])) == (want[0], sorted(want[1])), (key, s)
                if rnd.random() < 0.05:  # its own, heard again once acknowledged
                    assert compact.wrote(key, s, size, True, now) == plain.wrote(key, s, size, True, now)
            pending.clear()
        now += 30.0 if rnd.random() < 0.02 else rnd.choice((0.0, 0.1, 0.5))  # past the TTL now and then
        assert len(compact) == plain.count()
        assert all(compact.held(o) == plain.held(o) for o in owners)
