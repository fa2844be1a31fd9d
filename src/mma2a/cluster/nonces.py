"""Nonces of signed messages, shared by every gateway of a cluster: a signed message is good once per cluster.

Each gateway keeps its own `ReplayGuard` (fast, bounded per signer); a nonce it has not seen
is then claimed in the `<name>_nonces` KV bucket with `create` (atomic: only the first
gateway's create succeeds). Entries live twice `signing.window_s` — past `ts + window_s`
the freshness check refuses the message anyway, and a message may arrive up to a window
before its `ts`. Keys are a digest of (signer, nonce), so neither reaches NATS as it came.

A claim that failed with NATS out of reach may still have been written (nats-py sends what it
buffered once it reconnects): each claim's value is a random token, and a claim this gateway
reported as failed is remembered, so the retry of that message finds its own token and is
accepted — once — while any other gateway finds the key and refuses a replay.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections import OrderedDict
from typing import Any

import orjson
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from ..errors import ClusterError
from .link import Connected, ensure_kv

log = logging.getLogger("mma2a.cluster")


def nonce_key(signer: str, nonce: str) -> str:
    return hashlib.sha256(orjson.dumps([signer, nonce])).hexdigest()


class ClusterNonces:
    """The cluster's record of signed-message nonces (the gateway's `NonceLedger`)."""

    UNCERTAIN = 10_000  # failed claims remembered (the oldest forgotten first: their retry is then refused)

    def __init__(self, cluster: Connected) -> None:
        self.cluster = cluster
        self.kv: Any = None
        self._uncertain: OrderedDict[str, bytes] = OrderedDict()  # key -> token of a claim reported as failed

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
        key = nonce_key(signer, nonce)
        token = self._uncertain.get(key) or secrets.token_bytes(16)
        try:
            await self.kv.create(key, token)
        except KeyWrongLastSequenceError:
            return await self._ours(key, token)
        except Exception as exc:  # NATS away: not accepted (a replay could not be told apart)
            self._uncertain[key] = token
            self._uncertain.move_to_end(key)
            while len(self._uncertain) > self.UNCERTAIN:
                self._uncertain.popitem(last=False)
            raise ClusterError(f"signed message not accepted: the cluster's nonce record is out of reach "
                               f"(NATS: {exc or type(exc).__name__}); retry", field="signing") from None
        self._uncertain.pop(key, None)
        return True

    async def _ours(self, key: str, token: bytes) -> bool:
        """The key exists: fresh only if it holds the token of this gateway's own claim that was reported failed."""
        if self._uncertain.get(key) != token:
            return False
        try:
            entry = await self.kv.get(key)
        except KeyNotFoundError:
            return False
        except Exception as exc:  # NATS away again: still not accepted, still ours to retry
            raise ClusterError(f"signed message not accepted: the cluster's nonce record is out of reach "
                               f"(NATS: {exc or type(exc).__name__}); retry", field="signing") from None
        if entry.value != token:
            return False
        del self._uncertain[key]
        return True
