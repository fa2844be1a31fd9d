"""What `mma2a cluster status` shows: members and the rule set each runs, lag, deliveries, blobs."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import orjson
from nats.js.errors import KeyNotFoundError, NotFoundError

from ..gateway.cluster_config import ClusterConfig
from .delivery import CONSUMER
from .kv_keys import current, held_keys, key_count
from .link import Names, connect
from .nats_urls import without_credentials


async def _count(js: Any, bucket: str) -> int:
    """How many keys `bucket` holds a value for (not a deleted one's marker); 0 when there is no such bucket."""
    keys = await held_keys(js, bucket)
    return len(await current(await js.key_value(bucket), keys)) if keys else 0


async def cluster_status(config: ClusterConfig) -> dict[str, Any]:
    """A snapshot of the cluster read from NATS alone (no gateway needs to answer)."""
    names = Names(config.name)
    nc = await connect(config, name="mma2a-status")
    try:
        js = nc.jetstream(timeout=5.0)
        now = time.time()
        latest_rules = 0
        mode = None
        with contextlib.suppress(Exception):
            rules_kv = await js.key_value(names.bucket("rules"))
            with contextlib.suppress(KeyNotFoundError):
                latest_rules = int((await rules_kv.get("rules")).revision)
            with contextlib.suppress(KeyNotFoundError):
                mode = orjson.loads((await rules_kv.get("mode")).value).get("mode")
        members = []
        keys = await held_keys(js, names.bucket("members"))  # not a KV watch: kv_keys.py
        if keys:
            for entry in await current(await js.key_value(names.bucket("members")), keys):
                doc = orjson.loads(entry.value or b"{}")
                doc["age_s"] = round(now - float(doc.get("at", now)), 2)
                doc["current"] = doc.get("rulesRevision", 0) >= latest_rules
                members.append(doc)
        members.sort(key=lambda d: d.get("id", ""))
        delivery: dict[str, Any] = {"stream": names.delivery_stream}
        try:
            si = await js.stream_info(names.delivery_stream)
            delivery["messages"] = si.state.messages
            ci = await js.consumer_info(names.delivery_stream, CONSUMER)
            delivery.update(pending=ci.num_pending, ackPending=ci.num_ack_pending, redelivered=ci.num_redelivered)
        except NotFoundError:
            pass
        blobs: dict[str, Any] = {"bucket": names.blobs_bucket}
        with contextlib.suppress(NotFoundError):
            si = await js.stream_info(f"OBJ_{names.blobs_bucket}")
            blobs.update(bytes=si.state.bytes, messages=si.state.messages)
        # the sessions bucket's keys from its stream's state, not each key's entry read (100,000 pins: 12-15 s,
        # bench/kv_listing.py): pins and ended sessions' markers (until they age out or are purged) alike
        sessions, sessions_bytes = await key_count(js, names.bucket("sessions"))
        return {
            "cluster": config.name, "nats": without_credentials(config.nats),
            "server": nc.connected_server_version.__dict__.get("_version")
            if nc.connected_server_version else None,
            "rulesRevision": latest_rules, "mode": mode,
            "agents": await _count(js, names.bucket("agents")),
            "modalities": await _count(js, names.bucket("modalities")),
            "sessions": sessions, "sessionsBytes": sessions_bytes,
            "gateways": members, "delivery": delivery, "blobs": blobs,
        }
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
