"""Who is calling and how often: client credentials (bearer tokens, API keys) and per-sender rate limits.

Secrets are never kept or logged: clients are named, tokens are compared by SHA-256 digest
in constant time. The authenticated client of a request is in `current_client`.
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import hmac
import logging
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..._frozen import quick_init
from ...errors import RateLimited, Unauthorized
from .budgets import ClientCounts
from .peers import address_key

log = logging.getLogger("mma2a.gateway.security")


# --- configuration (the `auth` and `rate_limit` sections) -------------------------------------


class ClientConfig(BaseModel):
    """One client of the gateway and its credential (a value, or the name of an env variable holding it)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
    token: str | None = None
    token_env: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    agents: list[str] | None = None  # the /agents/{name} routes this client may call (None: all)
    rate: float | None = Field(default=None, gt=0)
    burst: int | None = Field(default=None, ge=1)
    # what `client:` rule conditions read as this client's claims (a JWT client's are its token's claims)
    attributes: dict[str, str | int | float | bool | list[str | int | float | bool]] = Field(default_factory=dict)
    max_priority: int = Field(default=5, ge=0, le=9)  # the highest message priority honoured (docs/operations.md)

    def secrets(self) -> list[tuple[str, str]]:
        """(scheme, secret) pairs, env variables resolved now."""
        out = []
        for scheme, value, env in (("bearer", self.token, self.token_env), ("api_key", self.api_key, self.api_key_env)):
            secret = value or (os.environ.get(env) if env else None)
            if secret:
                out.append((scheme, secret))
        return out


SIGNATURE_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
"""What a JWT issuer may sign with: public-key algorithms only (never `none`, never HMAC: a gateway holding an
issuer's shared secret could mint its tokens, and an HMAC key made of a public key is the classic forgery)."""


class JWTIssuerConfig(BaseModel):
    """One issuer of client JWTs (`auth.jwt[]`): whose tokens, for whom, signed how, naming the client how."""

    model_config = ConfigDict(extra="forbid")

    issuer: str = Field(min_length=1)  # the exact `iss` of its tokens
    audiences: list[str] = Field(min_length=1)  # a token must name one of these in `aud`
    jwks_file: str | None = None  # a JWKS document on disk (relative to the config file)
    jwks_url: str | None = None  # fetched through the SSRF guard (urls.allow_hosts / allow_private apply)
    algorithms: list[str] = Field(default_factory=lambda: ["RS256"])
    leeway_s: float = Field(default=30.0, ge=0, le=300)  # clock skew allowed on exp, nbf and iat
    client_claim: str = "sub"  # the claim whose value names the client (its id everywhere a static client's is)
    client_prefix: str = ""  # put before the client id: keeps issuers (and static clients) apart
    agents_claim: str | None = None  # a list (or space-separated string) of agents the client may call
    max_priority_claim: str | None = None  # an integer 0-9: the highest message priority the client may ask
    max_priority: int = Field(default=5, ge=0, le=9)  # the ceiling of this issuer's clients whose token has no such claim
    rate: float | None = Field(default=None, gt=0)  # per-client rate limit of this issuer's clients
    burst: int | None = Field(default=None, ge=1)
    refresh_s: float = Field(default=300.0, gt=0)  # the longest a key set is kept (a URL's max-age may shorten it)
    min_refresh_s: float = Field(default=30.0, ge=0)  # the least time between two reads of the key set
    # the issuer's OpenID Connect discovery document, declared in the gateway's card (default: ISSUER/.well-known/
    # openid-configuration for an https issuer; "" declares a plain JWT bearer scheme instead)
    openid_configuration: str | None = None

    def discovery_url(self) -> str | None:
        """The discovery document's URL the card names (None: the card declares a JWT bearer scheme)."""
        if self.openid_configuration is not None:
            return self.openid_configuration or None
        if self.issuer.startswith("https://"):
            return self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        return None

    @field_validator("algorithms")
    @classmethod
    def _algorithms(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one algorithm")
        for alg in v:
            if alg not in SIGNATURE_ALGORITHMS:
                why = " (never accepted)" if alg.lower() == "none" or alg.upper().startswith("HS") else ""
                raise ValueError(f"{alg!r} is not a public-key signature algorithm{why}; "
                                 f"allowed: {', '.join(SIGNATURE_ALGORITHMS)}")
        return v

    @model_validator(mode="after")
    def _one_key_source(self) -> JWTIssuerConfig:
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise ValueError("give exactly one of jwks_file or jwks_url")
        if self.jwks_url is not None and not self.jwks_url.startswith(("https://", "http://")):
            raise ValueError("jwks_url: must be an http:// or https:// URL")
        if self.min_refresh_s > self.refresh_s:
            raise ValueError("min_refresh_s: must not be more than refresh_s")
        return self


class FailedCredentialsConfig(BaseModel):
    """The budget of failed credential checks per source address (`auth.failed_credentials`, access/failures.py)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    # failed checks an address may make at once, and regains a second: generous enough that a route sweep or a fleet of
    # clients with a stale token behind one address (a NAT, an ingress without forwarded headers) does not lock its new
    # clients out, tight enough that guessing is bounded (87,400 judged guesses a day, not 76 million; docs/security.md)
    burst: int = Field(default=1000, ge=1)
    per_s: float = Field(default=1.0, gt=0, le=1000)
    max_addresses: int = Field(default=65_536, ge=16)  # addresses tracked (the least recently failing forgotten)
    max_remembered: int = Field(default=16_384, ge=16)  # (address, client) pairs that verified: served when over
    # a trusted peer gateway's clients (its verified assertion, federation): their failures take from the peer's own
    # budget (one address's: burst, per_s) and each client's from this share of it, not from the peer's address
    origin_share: float = Field(default=0.1, gt=0, le=1)


class AuthConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = None  # default: on when clients (static or JWT issuers) are configured
    clients: list[ClientConfig] = Field(default_factory=list)
    jwt: list[JWTIssuerConfig] = Field(default_factory=list)  # issuers of client JWTs (docs/operations.md)
    api_key_header: str = "X-API-Key"
    protect_metrics: bool = True
    anonymous_max_priority: int = Field(default=5, ge=0, le=9)  # callers without a client (auth off)
    failed_credentials: FailedCredentialsConfig = Field(default_factory=FailedCredentialsConfig)

    @property
    def active(self) -> bool:
        return bool(self.clients or self.jwt) if self.enabled is None else self.enabled

    def restricted(self, agents: Iterable[str]) -> frozenset[str]:
        """The `agents` some client may not use: left out of a client's `agents` list, or every agent when an issuer
        reads the agents from its tokens' `agents_claim` (any token may leave any agent out). Rules routing to one
        refuse by default what they cannot judge (`routing.Snapshot.on_incomplete`)."""
        if not self.active:
            return frozenset()
        names = frozenset(agents)
        if any(issuer.agents_claim is not None for issuer in self.jwt):
            return names
        return frozenset(name for name in names
                         if any(c.agents is not None and name not in c.agents for c in self.clients))

    @model_validator(mode="after")
    def _issuers_apart(self) -> AuthConfig:
        seen: dict[str, str] = {}
        for i, issuer in enumerate(self.jwt):
            if issuer.issuer in seen.values():
                raise ValueError(f"jwt.{i}.issuer: {issuer.issuer!r} is configured twice")
            if len(self.jwt) > 1 and issuer.client_prefix in seen:
                raise ValueError(f"jwt.{i}.client_prefix: {issuer.client_prefix!r} is also issuer "
                                 f"{seen[issuer.client_prefix]!r}'s; several issuers need distinct client_prefix values "
                                 "(or one issuer's 'alice' is another's)")
            seen[issuer.client_prefix] = issuer.issuer
        return self


class RateLimitConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    rate: float = Field(default=100.0, gt=0)  # requests per second, per sender
    burst: int = Field(default=200, ge=1)


# --- who is calling ----------------------------------------------------------------------------


@quick_init
@dataclass(frozen=True, slots=True)
class Client:
    """An authenticated caller (never holds its secret).

    `scheme`: bearer, api_key, certificate, or jwt. `claims`: what rules may read of the caller (a JWT's claims,
    a static client's `attributes`). `max_priority`: the highest message priority it may ask (None: the clients'
    default, `DEFAULT_MAX_PRIORITY`; the admin's is `ADMIN_MAX_PRIORITY`)."""

    name: str
    scheme: str
    agents: frozenset[str] | None = None
    rate: float | None = None
    burst: int | None = None
    max_priority: int | None = None
    claims: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    upstream: str | None = None  # a trusted peer gateway's own client, as it asserted (gateway/access/federation.py)
    bound: str | None = None  # the request that assertion was signed for (`message:<id>`, `task:<id>`)

    @property
    def key(self) -> str:
        """The principal everything per client is keyed by: the client, or `UPSTREAM via PEER` for a trusted peer
        gateway's client (dedupe, task ownership, session pins, rate buckets, stream slots, blob quotas). No
        client name holds a space (static names, JWT client ids), so no client can be named like a peer's client."""
        return self.name if self.upstream is None else f"{self.upstream} via {self.name}"


class JWTSide(Protocol):
    """What `Authenticator` and the gateway's lifespan ask of the JWT side (`jwt_clients.JWTVerifier`)."""

    def judges(self, token: str) -> bool:
        """The bearer token is one for the JWT side (shaped like a JWT, or too long to be a static token)."""

    def authenticate(self, token: str) -> Client:
        """The client the token names, or `Unauthorized` naming why not."""

    async def start(self) -> list[str]:
        """Read the issuers' key sets; the errors."""

    async def close(self) -> None:
        """Stop reading key sets."""


def shown(key: str) -> str:
    """How a refusal names the principal `key`: `client NAME`, or, for a peer gateway's client (`UPSTREAM via
    PEER`), `this client`, so that no refusal names another gateway or its clients."""
    return "this client" if " via " in key else f"client {key}"


def _bare(key: str) -> str:
    """`shown` without the word `client` for a named one (messages that began with the key)."""
    return "this client" if " via " in key else key


DEFAULT_MAX_PRIORITY = 5  # a client's priority ceiling unless its config (or its JWT) says otherwise
ADMIN_MAX_PRIORITY = 9

current_client: contextvars.ContextVar[Client | None] = contextvars.ContextVar("mma2a_client", default=None)


client_jwt: contextvars.ContextVar[str | None] = contextvars.ContextVar("mma2a_client_jwt", default=None)
"""The request's own JWT when its client was named by one: what `forward_client_token` agents receive (a static
client's token is the gateway's secret and is never passed on)."""


def jwt_of(client: Client | None, authorization: str | None) -> str | None:
    """The bearer JWT of the `Authorization` value that named `client` (None for any other kind of client)."""
    if client is None or client.scheme != "jwt" or client.upstream is not None or not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def honoured_priority(asked: int, client: Client | None, anonymous_max: int) -> int:
    """The message priority the gateway honours: what the message asks, at most its client's `max_priority`
    (`anonymous_max` for a caller without a client), so no client jumps the queue by writing 9."""
    if client is None:
        cap = anonymous_max
    else:
        cap = client.max_priority if client.max_priority is not None else DEFAULT_MAX_PRIORITY
    return asked if asked <= cap else cap


def current_sender() -> str | None:
    client = current_client.get()
    return client.key if client is not None else None


def digest_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


class Authenticator:
    """Bearer tokens and API keys → clients, compared by SHA-256 digest in constant time; a bearer token that is no
    static client's goes to the JWT issuers (`jwt`, a `jwt_clients.JWTVerifier`) when there are some."""

    def __init__(self, config: AuthConfig, jwt: JWTSide | None = None) -> None:
        self.active = config.active
        self.jwt = jwt
        self.header = config.api_key_header.lower()
        self._by_digest: dict[tuple[str, bytes], Client] = {}
        self._by_name: dict[str, Client] = {}  # for client certificates: the subject's CN names the client
        for c in config.clients:
            client = Client(c.name, "", frozenset(c.agents) if c.agents is not None else None, c.rate, c.burst,
                            claims=dict(c.attributes), max_priority=c.max_priority)
            self._by_name[c.name] = dataclasses.replace(client, scheme="certificate")
            for scheme, secret in c.secrets():
                self._by_digest[(scheme, digest_secret(secret))] = dataclasses.replace(client, scheme=scheme)
        # a static bearer token shaped like a JWT is looked up before the JWT issuers are asked (rare: then every JWT
        # is looked up in the static table first)
        self._jwt_shaped_static = jwt is not None and any(
            scheme == "bearer" and jwt.judges(secret) for c in config.clients for scheme, secret in c.secrets())
        if self.active and not self._by_digest and not self._by_name and jwt is None:
            log.warning("auth is on but no client has a credential (check token_env / api_key_env): every call will be refused")

    def _find(self, scheme: str, secret: str) -> Client | None:
        d = digest_secret(secret)
        found = None
        for (s, digest), client in self._by_digest.items():  # constant time over the whole table
            if hmac.compare_digest(digest, d) and s == scheme:
                found = client
        return found

    def certificate(self, cn: str) -> Client:
        """The client a verified client certificate names (its subject's CN).

        With auth on, the CN must be a configured client (its agents and rate apply), else 401;
        with auth off, any certificate the listener's CA signed names its own client."""
        client = self._by_name.get(cn)
        if client is not None:
            return client
        if self.active:
            raise Unauthorized(f"client certificate CN={cn} is not a configured client (auth.clients)",
                               field="certificate")
        return Client(cn, "certificate")

    def authenticate(self, headers: Mapping[str, str]) -> Client:
        """The client the request's credential names; `Unauthorized` (401) when there is none or it is wrong."""
        auth = headers.get("authorization")
        key = headers.get(self.header)
        if auth:
            scheme, _, given = auth.partition(" ")
            if scheme.lower() != "bearer" or not given.strip():
                raise Unauthorized("Authorization: only the Bearer scheme is accepted", field="Authorization")
            token = given.strip()
            if self.jwt is not None and self.jwt.judges(token) and not self._jwt_shaped_static:
                return self.jwt.authenticate(token)  # no static token looks like a JWT: the table is not scanned
            client = self._find("bearer", token)
            if client is None:
                if self.jwt is not None and self.jwt.judges(token):
                    return self.jwt.authenticate(token)
                raise Unauthorized("Authorization: invalid bearer token", field="Authorization")
            return client
        if key:
            client = self._find("api_key", key.strip())
            if client is None:
                raise Unauthorized(f"{self.header}: invalid API key", field=self.header)
            return client
        raise Unauthorized(
            "missing credentials: send Authorization: Bearer <token> or an API key header", field="Authorization"
        )


# --- how often -----------------------------------------------------------------------------------


class RateLimiter:
    """Token buckets per sender: `rate` tokens a second, at most `burst`; idle buckets are forgotten.

    In a cluster (`budgets.SharedBudgets.rate`) the tokens taken are also counted per sender for the other gateways,
    and theirs are charged here (`charge`): a bucket may then owe tokens (below zero) and refills from there."""

    def __init__(self, rate: float, burst: float, *, capacity: int = 50_000) -> None:
        self.rate = rate
        self.burst = burst
        self.capacity = capacity
        self._buckets: OrderedDict[str, list[float]] = OrderedDict()  # key -> [tokens, at, rate, burst]
        self._taken: dict[str, int] | None = None  # a cluster's: tokens taken per key since the last report
        self._wake: Callable[[], None] | None = None
        self._arm: Callable[[], None] | None = None

    def take(self, key: str, now: float, *, rate: float | None = None, burst: float | None = None) -> float | None:
        """Take one token; None when allowed, else the seconds until one is available."""
        rate = rate or self.rate
        burst = burst or self.burst
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = [float(burst), now, rate, burst]
            while len(self._buckets) > self.capacity:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
            b[0] = min(float(burst), b[0] + (now - b[1]) * rate)
            b[1] = now
        taken = self._taken
        if taken is None:
            if b[0] >= 1.0:
                b[0] -= 1.0
                return None
            return (1.0 - b[0]) / rate
        b[2], b[3] = rate, burst  # what `charge` refills this key's bucket at
        if b[0] >= 1.0:
            b[0] -= 1.0
            if not taken and self._arm is not None:  # the first take since the last report: one is due
                self._arm()
            n = taken[key] = taken.get(key, 0) + 1
            if n == (int(burst) >> 2 or 1) and self._wake is not None:  # a quarter of its burst: tell the others now
                self._wake()
            return None
        return (1.0 - b[0]) / rate

    def has_any(self) -> bool:
        """Some key has a bucket (one that refilled may still be kept)."""
        return bool(self._buckets)

    def due(self, key: str, now: float) -> float | None:
        """The seconds until `key` has a token, None when it has one now (nothing is taken; a bucket found full again
        is forgotten)."""
        b = self._buckets.get(key)
        if b is None:
            return None
        tokens = b[0] + (now - b[1]) * b[2]
        if tokens >= 1.0:
            if tokens >= b[3] and (self._taken is None or key not in self._taken):
                del self._buckets[key]
            return None
        return (1.0 - tokens) / b[2]

    def share(self, wake: Callable[[], None], arm: Callable[[], None] | None = None) -> None:
        """Count the tokens taken per key for `unreported` (a cluster's budgets); `wake` when a key took a quarter
        of its burst since the last report, `arm` at the first take since the last report."""
        self._taken = {}
        self._wake = wake
        self._arm = arm

    def pending(self) -> bool:
        """Tokens were taken since the last `unreported`."""
        return bool(self._taken)

    def unreported(self) -> dict[str, tuple[int, float, float]]:
        """Per key, the tokens taken since the last call and the rate and burst of its bucket (empty unless shared)."""
        taken = self._taken
        if not taken:
            return {}
        self._taken = {}
        buckets, rate, burst = self._buckets, self.rate, self.burst
        return {key: (n, b[2], b[3]) if (b := buckets.get(key)) is not None else (n, rate, burst)
                for key, n in taken.items()}

    def charge(self, key: str, tokens: float, now: float, rate: float | None = None, burst: float | None = None) -> None:
        """`tokens` another gateway let `key` take: taken out of its bucket here, refilled up to `now` first (a key not
        seen here: a full bucket of the `rate` and `burst` the other gateway gives it)."""
        b = self._buckets.get(key)
        if b is None:
            rate, burst = rate or self.rate, burst or self.burst
            b = self._buckets[key] = [float(burst), now, rate, burst]
            while len(self._buckets) > self.capacity:
                self._buckets.popitem(last=False)
        else:
            b[0] = min(float(b[3]), b[0] + (now - b[1]) * b[2])
            b[1] = now
        b[0] -= tokens

    def admit(self, client: Client | None, peer: str, now: float) -> None:
        """Take a token for `client` (its own rate and burst), or for an anonymous `peer`; RateLimited when out."""
        key = client.key if client is not None else address_key(peer)
        wait = self.take(key, now, rate=client.rate if client else None, burst=client.burst if client else None)
        if wait is not None:
            raise RateLimited(f"rate limit of {_bare(key)} exceeded; retry in {wait:.2f} s", retry_after=round(wait, 3))


# --- how much at once --------------------------------------------------------------------------------


class BodyBudget:
    """Bytes of large request bodies being read and held at once: in all, and per sender.

    Each request may be `max_body_bytes`, but nothing bounded how many were held together: ten concurrent
    60 MB bodies took a gateway from 162 to 839 MB. A body reserves what has arrived of it (and, decoded, what it
    has grown to), in steps of `STEP` bytes once past `LARGE` (`hold`), and gives it back when the request is done;
    a reservation past `total` bytes in all, or past `per_sender` for one sender, is refused. A declared length is
    checked up front (`why_not`), so a body that cannot fit is refused before it is read. Reserving a declared
    length, or the cap for a body without one, up front let clients trickling a byte every few seconds hold the
    whole budget (round 5). Smaller bodies (nearly every request) cost one comparison.
    """

    LARGE = 1 << 20
    STEP = 1 << 20

    def __init__(self, total: int, per_sender: int) -> None:
        self.total = total
        self.per_sender = per_sender
        self.held = 0
        self._by: dict[str, int] = {}

    def why_not(self, sender: str, size: int) -> str | None:
        """Why `size` more bytes for `sender` would not fit now; None when they would (nothing is reserved)."""
        mine = self._by.get(sender, 0)
        if mine + size > self.per_sender:
            return (f"{_bare(sender)} is already sending {mine} bytes of request bodies (at most {self.per_sender} at once, "
                    "max_body_bytes_in_flight / 2)")
        if self.held + size > self.total:
            return f"the gateway is reading {self.held} bytes of request bodies already (max_body_bytes_in_flight)"
        return None

    def take(self, sender: str, size: int) -> str | None:
        """Reserve `size` bytes for `sender`; None when granted, else why not."""
        why = self.why_not(sender, size)
        if why is None:
            self._by[sender] = self._by.get(sender, 0) + size
            self.held += size
        return why

    def give(self, sender: str, size: int) -> None:
        self.held -= size
        left = self._by.get(sender, 0) - size
        if left > 0:
            self._by[sender] = left
        else:
            self._by.pop(sender, None)

    def hold(self, sender: str, cap: int) -> BodyHold:
        """The reservation of one body of `sender` of at most `cap` bytes, empty until it grows past `LARGE`."""
        return BodyHold(self, sender, cap)


class BodyHold:
    """One request body's share of a `BodyBudget`: the bytes of it held so far, reserved in `STEP`s as they grow."""

    __slots__ = ("budget", "cap", "held", "sender")

    def __init__(self, budget: BodyBudget, sender: str, cap: int) -> None:
        self.budget = budget
        self.sender = sender
        self.cap = cap
        self.held = 0

    def grow(self, size: int) -> str | None:
        """`size` bytes of the body are held now: reserve up to the next `STEP` (at most the cap, unless `size` is
        past it); None when granted (or nothing more was needed), else why not (the reservation is kept as it was)."""
        if size <= self.held or size <= BodyBudget.LARGE:
            return None
        step = BodyBudget.STEP
        want = max(size, min(-(-size // step) * step, self.cap))
        why = self.budget.take(self.sender, want - self.held)
        if why is None:
            self.held = want
        return why

    def release(self) -> None:
        """Give back everything this body holds (once; later calls give nothing)."""
        if self.held:
            self.budget.give(self.sender, self.held)
            self.held = 0


class StreamSlots(ClientCounts):
    """Response streams (SSE on JSON-RPC and REST, gRPC server streams) open at once: per sender and in all.

    Each open stream holds a client socket, a connection to an agent and a task; nothing bounded how many one
    client kept open (400 subscriptions were taken without a refusal). A stream takes a slot before it starts and
    gives it back when it ends; past `per_sender` for one sender, or `total` in all, it is refused (429). Requests
    that do not stream never look here. In a cluster `per_sender` is on the sum with what the sender holds on the
    other gateways (a `ClientCounts`, shared as `streams`).
    """

    __slots__ = ("held", "per_sender", "total")

    def __init__(self, per_sender: int, total: int) -> None:
        super().__init__()
        self.per_sender = per_sender
        self.total = total
        self.held = 0

    def take(self, sender: str) -> str | None:
        """A slot for `sender`; None when granted, else why not."""
        by = self._by
        mine = by.get(sender, 0)
        if mine >= self.per_sender or self.elsewhere:
            there = self.elsewhere.get(sender, 0) if self.elsewhere else 0
            if mine + there >= self.per_sender:
                where = f" ({there} of them on other gateways of the cluster)" if there else ""
                return (f"{_bare(sender)} has {mine + there} streams open already{where} "
                        f"(limits.max_response_streams_per_client: {self.per_sender}); close one first")
        if self.held >= self.total:
            return f"the gateway has {self.held} streams open already (limits.max_response_streams); retry later"
        by[sender] = mine + 1
        self.held += 1
        if self._wake is not None:
            self._wake()
        return None

    def give(self, sender: str) -> None:
        self.held -= 1
        by = self._by
        left = by.pop(sender, 0) - 1
        if left > 0:
            by[sender] = left
        if self._wake is not None:
            self._wake()


class StreamSlot:
    """One stream's slot in `StreamSlots`, given back once: when the answer's last body message is handed to the
    server (`sending`), so a client that opens its next stream as soon as this one ended never finds it still held
    (the answer's task ends a few loop turns after its last byte is out), or at the latest by `give` in a `finally`."""

    __slots__ = ("slots", "sender", "held")

    def __init__(self, slots: StreamSlots, sender: str) -> None:
        self.slots, self.sender, self.held = slots, sender, True

    def give(self) -> None:
        if self.held:
            self.held = False
            self.slots.give(self.sender)

    def sending(self, send: Callable[[MutableMapping[str, Any]], Awaitable[None]]
                ) -> Callable[[MutableMapping[str, Any]], Awaitable[None]]:
        """`send` (an ASGI send), giving the slot back just before the answer's last body message goes out."""
        async def send_(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                self.give()
            await send(message)
        return send_
