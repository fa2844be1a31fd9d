"""Clients named by JWTs of the issuers an operator trusts (`auth.jwt`): checked with joserfc, never by hand.

A bearer token that is no static client's and looks like a JWT is checked here: at most `MAX_TOKEN_BYTES`,
its issuer one of `auth.jwt[].issuer`, its `alg` in that issuer's allow-list (public-key algorithms only)
and pinned by the key when the JWK names one, its `kid` in the issuer's key set (`jwks.IssuerKeys`), its
signature, `exp` (required), `nbf` and `iat` within `leeway_s`, and one of the issuer's audiences in `aud`.
The client is then `client_prefix` + the `client_claim`'s value, with the agents of `agents_claim`, the
priority ceiling of `max_priority_claim` and the token's claims (which `client:` rule conditions read).

Each refusal is a 401 whose message names the cause, never the token, and is counted by cause
(`mma2a_jwt_tokens{issuer,result}`). A token already verified is found again by its SHA-256 digest
(at most 4,096 tokens and 8 MiB of them, least recently used out) until its `exp` (+ leeway) or until its key leaves the key set, as
Envoy's `jwt_cache_config` does: the signature is checked once per token, not per request.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import orjson
from joserfc import jws
from joserfc.errors import BadSignatureError, ClaimError, ExpiredTokenError, JoseError, MissingClaimError
from joserfc.jws import JWSRegistry
from joserfc.jwt import JWTClaimsRegistry

from ...errors import Unauthorized
from ...payload.ssrf import URLPolicy
from .clients import Client, JWTIssuerConfig
from .jwks import IssuerKeys, SigningKey

MAX_TOKEN_BYTES = 8192
"""A client JWT longer than this is refused unread (an IdP's access token is 1-2 KB; this one is a lever)."""

_KEY_FAMILY = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}


class JWTRefused(Unauthorized):
    """A client JWT refused (401); `cause` is a fixed word (the metric's label), the message says it in full."""

    def __init__(self, message: str, cause: str, issuer: str = "unknown") -> None:
        super().__init__(f"JWT: {message}", field="Authorization")
        self.cause = cause
        self.issuer = issuer


class KeysStale(JWTRefused):
    """The token names a kid its issuer's key set lacks, and the set may be read again now: a caller that can wait
    awaits `refresh()` and tries once more; one that cannot answers this 401."""

    final = False  # not a failed credential yet (access/failures.py): judged again once the set is read

    def __init__(self, keys: IssuerKeys, issuer: str) -> None:
        super().__init__("unknown key id (kid): not in the issuer's key set", "unknown_kid", issuer)
        self.keys = keys

    async def refresh(self) -> None:
        await self.keys.refresh()


class _Verified(NamedTuple):
    client: Client
    until: float  # exp + leeway
    keys: IssuerKeys
    kid: str
    key: SigningKey
    size: int  # what it holds, counted as its token's length (the claims are that, decoded)


class _Issuer:
    """One trusted issuer: its config, key set and the joserfc registries built once from them."""

    def __init__(self, config: JWTIssuerConfig, keys: IssuerKeys, clock: Callable[[], float]) -> None:
        self.config = config
        self.name = config.issuer
        self.keys = keys
        self.algorithms = frozenset(config.algorithms)
        self.jws = JWSRegistry(algorithms=list(config.algorithms), strict_check_header=False)
        self.claims = JWTClaimsRegistry(
            now=lambda: int(clock()), leeway=int(config.leeway_s),
            iss={"essential": True, "value": config.issuer}, aud={"essential": True, "values": list(config.audiences)},
            exp={"essential": True})


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated segments whose header is a JSON object (`eyJ`): a JWS compact serialisation."""
    return token.startswith("eyJ") and token.count(".") == 2


class JWTVerifier:
    """Client JWTs of several issuers -> `Client`s (see the module's docstring)."""

    def __init__(self, issuers: Sequence[JWTIssuerConfig], *, base_dir: str = ".", policy: URLPolicy | None = None,
                 static_names: frozenset[str] = frozenset(), clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic,
                 count: Callable[[str, str], None] | None = None, on_fetch: Callable[[str, str], None] | None = None,
                 cache_entries: int = 4096, cache_bytes: int = 8 << 20) -> None:
        """`clock`: the wall clock tokens are judged by; `monotonic`: when key sets are due; `count(issuer, result)`
        is told each token's outcome, `on_fetch(issuer, ok|failed)` each key set read."""
        self.clock = clock
        self.static_names = static_names
        self.count = count
        self.cache_entries = cache_entries
        self.cache_bytes = cache_bytes  # the verified tokens kept, by their length: at most 8 MiB by default
        self._cache: OrderedDict[bytes, _Verified] = OrderedDict()
        self._cached = 0
        self._issuers: dict[str, _Issuer] = {}
        for cfg in issuers:
            source = cfg.jwks_url or str(Path(base_dir) / (cfg.jwks_file or ""))
            told = (lambda result, name=cfg.issuer: on_fetch(name, result)) if on_fetch is not None else None
            keys = IssuerKeys(source, refresh_s=cfg.refresh_s, min_refresh_s=cfg.min_refresh_s,
                              policy=policy or URLPolicy(), clock=monotonic, on_fetch=told)
            self._issuers[cfg.issuer] = _Issuer(cfg, keys, clock)

    @property
    def issuers(self) -> list[IssuerKeys]:
        return [i.keys for i in self._issuers.values()]

    async def start(self) -> list[str]:
        """Read every issuer's key set once; the errors (an issuer whose keys cannot be read refuses its tokens
        with the reason until a later read succeeds)."""
        for issuer in self._issuers.values():
            await issuer.keys.refresh()
        return [i.keys.error for i in self._issuers.values() if i.keys.error]

    def refresh_due(self) -> None:
        """Start a background read of each key set that has expired (called on the request path: no wait)."""
        for issuer in self._issuers.values():
            issuer.keys.refresh_soon()

    async def close(self) -> None:
        for issuer in self._issuers.values():
            await issuer.keys.close()

    def _tell(self, issuer: str, result: str) -> None:
        if self.count is not None:
            self.count(issuer, result)

    @staticmethod
    def judges(token: str) -> bool:
        """A bearer token for this side to judge: shaped like a JWT, or too long for a static token (refused)."""
        return looks_like_jwt(token) or len(token) > MAX_TOKEN_BYTES

    def authenticate(self, token: str) -> Client:
        """The client a bearer JWT names; `JWTRefused` (401, naming the cause) otherwise, `KeysStale` when a
        read of the key set may find its kid."""
        if len(token) > MAX_TOKEN_BYTES:
            self._tell("unknown", "too_large")
            raise JWTRefused(f"token is {len(token)} bytes, over the limit of {MAX_TOKEN_BYTES}", "too_large")
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        hit = self._cache.get(digest)
        if hit is not None:
            if self.clock() < hit.until and hit.keys.keys.get(hit.kid) is hit.key:
                self._cache.move_to_end(digest)
                self._tell(hit.client.claims.get("iss", "unknown"), "ok")
                return hit.client
            self._forget(digest)  # expired, or its key has left the set: judged again in full (and refused)
        try:
            client, verified = self._verify(token)
        except KeysStale:
            raise  # not counted: the caller reads the key set and asks again
        except JWTRefused as exc:
            self._tell(exc.issuer, exc.cause)
            raise
        self._cache[digest] = verified
        self._cached += verified.size
        while self._cache and (len(self._cache) > self.cache_entries or self._cached > self.cache_bytes):
            self._forget(next(iter(self._cache)))  # least recently used first
        self._tell(verified.client.claims.get("iss", "unknown"), "ok")
        return client

    def cached(self) -> tuple[int, int]:
        """The verified tokens kept: how many, and their bytes."""
        return len(self._cache), self._cached

    def _forget(self, digest: bytes) -> None:
        gone = self._cache.pop(digest, None)
        if gone is not None:
            self._cached -= gone.size

    def _verify(self, token: str) -> tuple[Client, _Verified]:
        try:
            obj = jws.extract_compact(token.encode("ascii"))
            header = obj.headers()
            claims = orjson.loads(obj.payload)
        except (JoseError, ValueError, UnicodeError, TypeError):
            raise JWTRefused("not a well-formed JWS compact token", "malformed") from None
        if not isinstance(claims, dict):
            raise JWTRefused("the payload is not a JSON object of claims", "malformed")
        iss = claims.get("iss")  # any JSON value, unsigned yet: only a string can name an issuer (a list is unhashable)
        issuer = self._issuers.get(iss) if isinstance(iss, str) else None
        if issuer is None:
            raise JWTRefused("issuer (iss) is not one this gateway trusts (auth.jwt[].issuer)", "unknown_issuer")
        name = issuer.name
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in issuer.algorithms:
            shown = alg if isinstance(alg, str) and len(alg) <= 16 and alg.isprintable() else "(unreadable)"
            raise JWTRefused(f"algorithm {shown} is not allowed for this issuer (allowed: "
                             f"{', '.join(issuer.config.algorithms)})", "alg_not_allowed", name)
        if "crit" in header or "b64" in header:
            raise JWTRefused("critical or unencoded-payload headers (crit, b64) are not accepted", "malformed", name)
        self.refresh_due()  # a key set past its expiry is read again in the background; this token uses the keys held
        key = self._key(issuer, header.get("kid"), alg)
        try:
            valid = jws.validate_compact(obj, key.key, registry=issuer.jws)
        except JoseError:
            valid = False
        if not valid:
            raise JWTRefused("signature does not verify with the issuer's key", "bad_signature", name)
        try:
            issuer.claims.validate(claims)
        except ExpiredTokenError:
            raise JWTRefused("token has expired (exp)", "expired", name) from None
        except MissingClaimError as exc:
            raise JWTRefused(f"required claim missing: {exc.claim}", "missing_claim", name) from None
        except ClaimError as exc:
            raise self._claim_refusal(exc.claim, name) from None
        return self._client(issuer, claims, header.get("kid"), key, len(token))

    @staticmethod
    def _claim_refusal(claim: str, issuer: str) -> JWTRefused:
        if claim == "nbf":
            return JWTRefused("token is not valid yet (nbf)", "not_yet_valid", issuer)
        if claim == "iat":
            return JWTRefused("token was issued in the future (iat)", "issued_in_future", issuer)
        if claim == "aud":
            return JWTRefused("audience (aud) names none of this gateway's audiences", "wrong_audience", issuer)
        if claim == "exp":
            return JWTRefused("exp is not a NumericDate", "malformed", issuer)
        return JWTRefused(f"claim {claim} is not valid", "bad_claim", issuer)

    def _key(self, issuer: _Issuer, kid: Any, alg: str) -> SigningKey:
        keys = issuer.keys
        if keys.error is not None and not keys.keys:
            raise JWTRefused(f"the issuer's key set cannot be read ({keys.error})", "jwks_unavailable", issuer.name)
        if kid is None and len(keys.keys) == 1:
            found: SigningKey | None = next(iter(keys.keys.values()))
        else:
            found = keys.keys.get(kid) if isinstance(kid, str) else None
        if found is None:
            if keys.may_refresh_for_unknown_kid():
                raise KeysStale(keys, issuer.name)
            raise JWTRefused("unknown key id (kid): not in the issuer's key set", "unknown_kid", issuer.name)
        if (found.alg is not None and found.alg != alg) or _KEY_FAMILY.get(alg[:2]) != found.key.key_type:
            raise JWTRefused(f"algorithm {alg} does not match the key it names", "alg_not_allowed", issuer.name)
        return found

    def _client(self, issuer: _Issuer, claims: dict[str, Any], kid: Any, key: SigningKey,
                size: int) -> tuple[Client, _Verified]:
        cfg = issuer.config
        value = claims.get(cfg.client_claim)
        if not isinstance(value, str) or not value or len(value) > 256 or not value.isprintable() or " " in value:
            raise JWTRefused(f"claim {cfg.client_claim} (client_claim) is missing or not a usable client id",
                             "bad_claim", issuer.name)
        name = cfg.client_prefix + value
        if name in self.static_names or name.startswith("ip:") or name == "admin":
            raise JWTRefused(f"claim {cfg.client_claim} names a reserved or static client; give this issuer a "
                             "client_prefix", "bad_claim", issuer.name)
        agents: frozenset[str] | None = None
        if cfg.agents_claim is not None:
            agents = _names(claims.get(cfg.agents_claim))
        priority = cfg.max_priority
        if cfg.max_priority_claim is not None:
            raw = claims.get(cfg.max_priority_claim)
            if raw is not None:
                if not isinstance(raw, int) or isinstance(raw, bool) or not 0 <= raw <= 9:
                    raise JWTRefused(f"claim {cfg.max_priority_claim} (max_priority_claim) is not an integer from 0 "
                                     "to 9", "bad_claim", issuer.name)
                priority = raw
        client = Client(name, "jwt", agents, cfg.rate, cfg.burst, priority, claims)
        until = float(claims["exp"]) + cfg.leeway_s
        return client, _Verified(client, until, issuer.keys, kid if isinstance(kid, str) else _only_kid(issuer), key,
                                 size)


def _only_kid(issuer: _Issuer) -> str:
    return next(iter(issuer.keys.keys))


def _names(value: Any) -> frozenset[str]:
    """Agent names from a claim: a list of strings, or one space-separated string (as OAuth2's `scope`); anything
    else (absent included) names none."""
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(v for v in value if isinstance(v, str))
    return frozenset()

