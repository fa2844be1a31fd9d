"""cluster/kv_keys.py: a KV bucket's keys read from its stream's subjects, every one of them past what one
`STREAM.INFO` answer carries (100,000 subjects), also when keys go away or come between two pages; each key's current
entry, a deleted or purged key's marker said apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js import api
from nats.js.kv import KV_DEL, KV_PURGE

from mma2a.cluster.account import nats_account
from mma2a.cluster.kv_keys import current, held_keys, stream_subjects
from mma2a.cluster.link import ClusterLink, ensure_kv
from mma2a.cluster.push import PushJournalKV
from mma2a.cluster.server import NatsServer
from mma2a.gateway.cluster_config import ClusterConfig
from tests.cluster.conftest import cluster_name

LIMIT = 100_000  # subjects in one STREAM.INFO answer (nats-server's JSMaxSubjectDetails, a constant; 2.15.1 here)
pytestmark = pytest.mark.timeout(120)


class BetweenPages:
    """The JetStream context a listing uses, with `change` run once after its first answer (before its second
    request): what other members do to the bucket while it is listed, at a known point."""

    def __init__(self, js: Any, change: Any) -> None:
        self.js, self.change, self.answers = js, change, 0
        self._prefix, self._timeout = js._prefix, js._timeout

    async def _api_request(self, subject: str, req: bytes, timeout: float) -> dict[str, Any]:
        if self.answers == 1:
            await self.change()
        self.answers += 1
        answer: dict[str, Any] = await self.js._api_request(subject, req, timeout=timeout)
        return answer


async def test_every_key_past_one_answer_is_listed_once_also_when_keys_go_or_come_between_pages(
        nats_server: NatsServer) -> None:
    bucket = cluster_name() + "_many"
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream(timeout=30.0)
    await js.create_key_value(config=api.KeyValueConfig(bucket=bucket, storage=api.StorageType.MEMORY))
    n = LIMIT + 2
    try:
        for start in range(0, n, 5000):  # a batch, then its last put acknowledged: all stored (in order), none dropped
            end = min(n, start + 5000)
            for i in range(start, end - 1):
                await nc.publish(f"$KV.{bucket}.k{i:06d}", b"")
            await js.publish(f"$KV.{bucket}.k{end - 1:06d}", b"")
        everyone = [f"k{i:06d}" for i in range(n)]
        assert (await js.stream_info(f"KV_{bucket}")).state.messages == n

        listing = BetweenPages(js, _nothing)  # nothing changes: two answers, every key once
        assert await held_keys(listing, bucket) == everyone
        assert listing.answers == 2

        async def three_come() -> None:  # before the page boundary: the subjects after it move on by three
            for key in ("a1", "a2", "a3"):
                await js.publish(f"$KV.{bucket}.{key}", b"")

        listing = BetweenPages(js, three_come)
        assert await held_keys(listing, bucket) == everyone  # the new ones came after their place was read; no twice
        assert listing.answers == 2

        async def ten_go() -> None:  # aged out or purged (no marker is left): the subjects after them move back by ten
            for key in ("a1", "a2", "a3", *everyone[:7]):
                await js.purge_stream(f"KV_{bucket}", subject=f"$KV.{bucket}.{key}")

        listing = BetweenPages(js, ten_go)
        assert await held_keys(listing, bucket) == ["a1", "a2", "a3", *everyone]  # read before they went, the last
        assert listing.answers > 2  # ones not lost past them: the second page was read again from further back
        assert await held_keys(js, bucket) == everyone[7:]
    finally:
        await js.delete_key_value(bucket)
        await nc.close()


async def _nothing() -> None:
    return None


async def test_a_deleted_or_purged_key_is_listed_and_said_apart_and_a_missing_bucket_has_no_keys(
        nats_server: NatsServer) -> None:
    bucket = cluster_name() + "_few"
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    try:
        assert await held_keys(js, bucket) == []
        kv = await js.create_key_value(config=api.KeyValueConfig(bucket=bucket, history=5))
        assert await held_keys(js, bucket) == []
        for key in ("live", "deleted", "purged", "rewritten"):
            await kv.put(key, key.encode())
        await kv.put("rewritten", b"again")
        await kv.delete("deleted")
        await kv.purge("purged")
        keys = await held_keys(js, bucket)
        assert keys == ["deleted", "live", "purged", "rewritten"]
        assert [(e.key, e.value, e.operation) for e in await current(kv, keys)] == [
            ("live", b"live", None), ("rewritten", b"again", None)]
        said = {e.key: e.operation for e in await current(kv, keys, deleted=True)}
        assert said == {"deleted": KV_DEL, "live": None, "purged": KV_PURGE, "rewritten": None}
        assert await current(kv, ["never-written"], deleted=True) == []
        assert await stream_subjects(js, f"KV_{bucket}", f"$KV.{bucket}.l*") == []  # a token's wildcard: none
        assert await stream_subjects(js, f"KV_{bucket}", f"$KV.{bucket}.live") == [f"$KV.{bucket}.live"]
    finally:
        await js.delete_key_value(bucket)
        await nc.close()


async def test_a_listing_and_a_deliverys_purge_need_no_more_than_the_documented_nats_permissions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A nats-server configured as docs/operations.md says ("Securing NATS"): a listing's STREAM.INFO (with an offset)
    and the purge that removes a push delivery's record (cluster/push.py `_forget`) are among the gateways' subjects."""
    name = cluster_name()
    monkeypatch.setenv("MMA2A_NATS_PASSWORD", "nats-gateway-s3cret-0123456789")
    conf = tmp_path / "nats.conf"
    conf.write_text(nats_account(name))
    server = NatsServer(tmp_path / "nats", args=["-c", str(conf)]).start()
    try:
        link = await ClusterLink(ClusterConfig(nats=server.url, name=name, auth={
            "user": "mma2a-gateway", "password_env": "MMA2A_NATS_PASSWORD"})).connect()
        bucket = link.names.bucket("push_deliveries")
        kv = await ensure_kv(link.js, bucket)
        for key in ("d1", "d2"):
            await kv.put(key, b"{}")
        assert await held_keys(link.js, bucket) == ["d1", "d2"]
        await PushJournalKV(link)._forget("d1")  # type: ignore[arg-type]  # a link: all `_forget` uses of a member
        assert await held_keys(link.js, bucket) == ["d2"]
        await link.close()
    finally:
        server.stop()
