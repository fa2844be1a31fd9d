"""What `mma2a cluster status` shows: members and the rule set each runs, lag, deliveries, blobs."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import orjson
from nats.js.errors import KeyNotFoundError, NotFoundError

from ..gateway.cluster_config import ClusterConfig
from .delivery import CONSUMER
from .link import Names, connect
from .nats_urls import without_credentials


async def _kv_keys(js: Any, bucket: str) -> list[str]:
    try:
        kv = await js.key_value(bucket)
        return list(await kv.keys())
    except Exception:  # no bucket yet, or no keys
        return []


async def _held_keys(js: Any, bucket: str) -> list[str]:
    """The keys a KV bucket holds a message for (a deleted key's marker too: its `get` says so), from its stream's
    subjects. Not a watch (`KeyValue.keys`): its end-of-values signal came before the values on a busy host, and
    `cluster status` then said "no gateways" of a cluster whose two gateways were serving."""
    try:
        info = await js.stream_info(f"KV_{bucket}", subjects_filter=f"$KV.{bucket}.>")
    except NotFoundError:
        return []
    prefix = f"$KV.{bucket}."
    return [subject[len(prefix):] for subject in info.state.subjects or {}]


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
        keys = await _held_keys(js, names.bucket("members"))
        if keys:
            kv = await js.key_value(names.bucket("members"))
            for key in keys:
                with contextlib.suppress(KeyNotFoundError):
                    doc = orjson.loads((await kv.get(key)).value)
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
        return {
            "cluster": config.name, "nats": without_credentials(config.nats),
            "server": nc.connected_server_version.__dict__.get("_version")
            if nc.connected_server_version else None,
            "rulesRevision": latest_rules, "mode": mode,
            "agents": len(await _kv_keys(js, names.bucket("agents"))),
            "modalities": len(await _kv_keys(js, names.bucket("modalities"))),
            "sessions": len(await _kv_keys(js, names.bucket("sessions"))),
            "gateways": members, "delivery": delivery, "blobs": blobs,
        }
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
