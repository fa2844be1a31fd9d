"""The signing keys of one JWT issuer (a JWKS file or URL): parsed, cached, refreshed within bounds.

A key set is read at start and whenever it is due: at its expiry (`Cache-Control: max-age` of the
answer, clamped to `[min_refresh_s, refresh_s]`; a file: every `refresh_s`), and on a token naming a
`kid` it does not hold, at most once per `min_refresh_s` (a flood of made-up kids costs one fetch,
then nothing). Readers never wait on the network: `keys` is swapped whole, a refresh runs once at a
time (callers of `refresh` share it), and a failed refresh keeps the keys in force. A URL is fetched
through the SSRF guard (`payload.ssrf.SafeFetcher`: every redirect checked, at most `MAX_JWKS_BYTES`, the whole
read within `READ_TIMEOUT_S`);
a file is read off the event loop, and either is parsed there (at most `MAX_JWKS_KEYS` keys).

Only public keys for signatures are taken: `oct` (HMAC) keys are refused at parse, so no token can be
checked with a secret made of a public key; a key with `use: enc` is skipped.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, OKPKey, RSAKey, import_key

from ...errors import MMA2AError
from ...payload.ssrf import SafeFetcher, URLPolicy

log = logging.getLogger("mma2a.gateway.jwks")

MAX_JWKS_BYTES = 1 << 20
"""A key set document read at most this long (an IdP publishes a few keys: a few KB)."""

MAX_JWKS_KEYS = 100
"""Keys a set may hold (an IdP publishes a few: the current one and the next). 1 MiB of keys is ~2,700 RSA or ~7,500 EC
keys, each imported (0.6-0.9 s of CPU); a set past this is refused whole, the keys in force kept."""

READ_TIMEOUT_S = 10.0
"""A key set URL read whole within this, connection to last byte. The fetcher's own timeouts are per socket read, so a
server sending a byte every few seconds held the read (and every request waiting for a new kid) for as long as it
liked, and no later read could start: rotation stopped."""

PublicKey = RSAKey | ECKey | OKPKey
_MAX_AGE = re.compile(r"max-age=(\d+)")


class JWKSError(MMA2AError):
    """A key set that cannot be fetched or does not parse; the message names the source and the cause."""

    http_status = 401


@dataclass(frozen=True)
class SigningKey:
    """One verification key of a key set: the key and the algorithm its JWK pins, if any."""

    key: PublicKey
    alg: str | None


def parse_jwks(data: bytes | Mapping[str, Any], source: str) -> dict[str, SigningKey]:
    """kid -> key of a JWKS document; `JWKSError` naming `source` when it is not one (or holds no usable key)."""
    try:
        doc = orjson.loads(data) if isinstance(data, bytes) else data
    except orjson.JSONDecodeError:
        raise JWKSError(f"JWKS {source}: not JSON") from None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("keys"), list):
        raise JWKSError(f"JWKS {source}: not a key set (a JSON object with a 'keys' list)")
    if len(doc["keys"]) > MAX_JWKS_KEYS:
        raise JWKSError(f"JWKS {source}: {len(doc['keys'])} keys, more than {MAX_JWKS_KEYS}")
    keys: dict[str, SigningKey] = {}
    for i, jwk in enumerate(doc["keys"]):
        if not isinstance(jwk, Mapping):
            raise JWKSError(f"JWKS {source}: keys[{i}] is not a JSON object")
        kty = jwk.get("kty")
        if kty == "oct":
            raise JWKSError(f"JWKS {source}: keys[{i}] is a symmetric (oct) key; only public keys verify client tokens")
        if jwk.get("use", "sig") != "sig":
            continue
        public = {k: v for k, v in jwk.items() if k not in ("d", "p", "q", "dp", "dq", "qi", "oth")}
        try:
            key = import_key(public)
        except (JoseError, ValueError, TypeError, KeyError) as exc:
            raise JWKSError(f"JWKS {source}: keys[{i}] ({kty!r}) is not a valid public key: {type(exc).__name__}") from None
        if not isinstance(key, (RSAKey, ECKey, OKPKey)):
            raise JWKSError(f"JWKS {source}: keys[{i}] has key type {kty!r}; RSA, EC and OKP keys are accepted")
        kid = jwk.get("kid")
        kid = kid if isinstance(kid, str) and kid else key.thumbprint()
        alg = jwk.get("alg")
        keys[kid] = SigningKey(key, alg if isinstance(alg, str) else None)
    if not keys:
        raise JWKSError(f"JWKS {source}: no signature key in it")
    return keys


def max_age(cache_control: str | None) -> float | None:
    """The seconds `Cache-Control: max-age=N` allows (None when absent; 0 for `no-store`/`no-cache`)."""
    if not cache_control:
        return None
    value = cache_control.lower()
    if "no-store" in value or "no-cache" in value:
        return 0.0
    m = _MAX_AGE.search(value)
    return float(m.group(1)) if m else None


@dataclass
class IssuerKeys:
    """The key set of one issuer and when it may, or must, be read again.

    `source`: a JWKS URL (`http(s)://`) or a file path. `refresh_s`: the longest a set is kept;
    `min_refresh_s`: the least time between two reads, whatever asks (expiry, an unknown kid)."""

    source: str
    refresh_s: float = 300.0
    min_refresh_s: float = 30.0
    policy: URLPolicy = field(default_factory=URLPolicy)
    clock: Callable[[], float] = time.monotonic
    on_fetch: Callable[[str], None] | None = None  # told "ok" or "failed" after each read
    keys: dict[str, SigningKey] = field(default_factory=dict)
    read_at: float | None = None  # when a read was last tried (ok or not)
    expires_at: float = 0.0
    error: str | None = None  # why the last read failed, if it did
    reads: int = 0
    _running: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def is_url(self) -> bool:
        return self.source.startswith(("http://", "https://"))

    def due(self) -> bool:
        """The set has expired (or was never read) and a read is allowed now."""
        now = self.clock()
        return now >= self.expires_at and self._may_read(now)

    def may_refresh_for_unknown_kid(self) -> bool:
        """An unknown kid may wait for a read now: one is under way (its result is shared), or one may start (at most
        one per `min_refresh_s`)."""
        return (self._running is not None and not self._running.done()) or self._may_read(self.clock())

    def _may_read(self, now: float) -> bool:
        return self.read_at is None or now - self.read_at >= self.min_refresh_s

    def start_read(self) -> asyncio.Future[None]:
        """The read of the set under way, started now if none is (callers share it); await it for the new keys."""
        if self._running is None or self._running.done():
            self.read_at = self.clock()
            self._running = asyncio.ensure_future(self._read())
        return asyncio.shield(self._running)

    async def refresh(self) -> None:
        """Read the set once (concurrent callers share the read); a failure keeps the keys in force."""
        await self.start_read()

    def refresh_soon(self) -> None:
        """Start a read in the background when one is due (the request that noticed is not held up); nothing outside
        an event loop."""
        if not ((self._running is None or self._running.done()) and self.due()):
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self.read_at = self.clock()
        self._running = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        self.reads += 1
        try:
            if self.is_url:
                try:
                    body, ttl = await asyncio.wait_for(self._fetch(), READ_TIMEOUT_S)
                except TimeoutError:
                    raise JWKSError(f"JWKS {self.source}: not read within {READ_TIMEOUT_S:g} s") from None
            else:
                body, ttl = await asyncio.to_thread(Path(self.source).read_bytes), None
            keys = await asyncio.to_thread(parse_jwks, body, self.source)  # keys imported off the event loop
        except Exception as exc:  # noqa: BLE001 - a read never fails a request: the keys held stay in force
            if isinstance(exc, MMA2AError):
                self.error = exc.message
            elif isinstance(exc, OSError) and exc.strerror:
                self.error = f"JWKS {self.source}: {exc.strerror}"
            else:
                self.error = f"JWKS {self.source}: {type(exc).__name__}: {exc}"
            self.expires_at = self.clock() + self.min_refresh_s  # retried after the least interval
            log.warning("%s (the keys read before stay in force)", self.error)
            if self.on_fetch is not None:
                self.on_fetch("failed")
            return
        self.keys, self.error = keys, None
        lifetime = self.refresh_s if ttl is None else min(max(ttl, self.min_refresh_s), self.refresh_s)
        self.expires_at = self.clock() + lifetime
        if self.on_fetch is not None:
            self.on_fetch("ok")

    async def _fetch(self) -> tuple[bytes, float | None]:
        async with SafeFetcher(self.policy, max_bytes=MAX_JWKS_BYTES, max_redirects=3, timeout=10.0,
                               headers={"Accept": "application/json"}) as fetcher:
            async with fetcher.open(self.source) as resp:
                body = b"".join([c async for c in resp.chunks()])
                return body, max_age(resp.header("Cache-Control"))

    async def close(self) -> None:
        if self._running is not None and not self._running.done():
            self._running.cancel()
