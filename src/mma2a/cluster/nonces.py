"""Nonces of signed messages, shared by every gateway of a cluster: a signed message is good once per cluster.

Each gateway keeps its own `ReplayGuard` (fast, bounded per signer); a nonce it has not seen
is then claimed in the `<name>_nonces` KV bucket with `create` (atomic: only the first
gateway's create succeeds). Entries live twice `signing.window_s` — past `ts + window_s`
the freshness check refuses the message anyway, and a message may arrive up to a window
before its `ts`. Keys are a digest of (signer, nonce), so neither reaches NATS as it came.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import orjson
from nats.js.errors import KeyWrongLastSequenceError

from ..errors import ClusterError
from .link import Connected, ensure_kv

log = logging.getLogger("mma2a.cluster")


def nonce_key(signer: str, nonce: str) -> str:
    return hashlib.sha256(orjson.dumps([signer, nonce])).hexdigest()


class ClusterNonces:
    """The cluster's record of signed-message nonces (the gateway's `NonceLedger`)."""

    def __init__(self, cluster: Connected) -> None:
        self.cluster = cluster
        self.kv: Any = None

    async def setup(self, window_s: float) -> None:
        c = self.cluster
        self.kv = await ensure_kv(c.js, c.names.bucket("nonces"), ttl=2 * window_s, replicas=c.config.replicas)
        status = await self.kv.status()
        ttl = float(getattr(status, "ttl", None) or 0)
        if 0 < ttl < 2 * window_s:  # made by a gateway with a shorter window: its nonces expire too early for ours
            log.warning("cluster: bucket %s keeps nonces %g s, less than twice signing.window_s (%g s): a replay may "
                        "pass after %g s; give every gateway the same window", c.names.bucket("nonces"), ttl,
                        window_s, ttl)

    async def claim(self, signer: str, nonce: str) -> bool:
        if self.kv is None:
            raise ClusterError("cluster: the shared nonce record is not open yet; retry", field="signing")
        try:
            await self.kv.create(nonce_key(signer, nonce), b"")
        except KeyWrongLastSequenceError:
            return False
        except Exception as exc:  # NATS away: not accepted (a replay could not be told apart)
            raise ClusterError(f"signed message not accepted: the cluster's nonce record is out of reach "
                               f"(NATS: {exc or type(exc).__name__}); retry", field="signing") from None
        return True
