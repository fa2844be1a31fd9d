"""`link.ensure_kv` between gateways that start together: a bucket another gateway made — and bounded — between this
one's look-up and its creation is opened, not refused (JetStream refuses a second creation whose configuration
differs: 'stream name already in use with a different configuration', which stopped a gateway at its start)."""

from __future__ import annotations

from typing import Any

import nats
import pytest
from nats.js.errors import BucketNotFoundError

from mma2a.cluster.link import ensure_kv
from mma2a.cluster.server import NatsServer

from .conftest import cluster_name


async def test_a_bucket_made_and_bounded_by_another_gateway_meanwhile_is_opened(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = f"{cluster_name()}_race"
    other, nc = await nats.connect(nats_server.url), await nats.connect(nats_server.url)
    try:
        await ensure_kv(other.jetstream(), bucket, max_bytes=1 << 20)  # the other gateway: made and bounded
        js = nc.jetstream()
        looked: list[str] = []
        real = js.key_value

        async def before_it_was_made(name: str) -> Any:  # this gateway looked just before the other made it
            looked.append(name)
            if len(looked) == 1:
                raise BucketNotFoundError
            return await real(name)

        monkeypatch.setattr(js, "key_value", before_it_was_made)
        kv = await ensure_kv(js, bucket, max_bytes=1 << 20)
        assert looked == [bucket, bucket]  # refused a creation, then opened what the other made
        await kv.put("k", b"v")
        assert (await kv.get("k")).value == b"v"
        info = await js.stream_info(f"KV_{bucket}")
        assert info.config.max_bytes == 1 << 20
    finally:
        await other.close()
        await nc.close()
