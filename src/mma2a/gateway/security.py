"""Ingress security: who is calling, how often, how much, which modalities, which URLs, whose signatures.

Two places, one policy:
- `SecurityMiddleware` (pure ASGI, in front of every route): authentication (bearer token or
  API key per client, from config or env), per-sender token-bucket rate limits (429 +
  `Retry-After`), the body size limit for every binding (413), refusal while draining
  (503). The authenticated client is put in `current_client` for the request.
- `MessageGuard.admit` (called by `Pipeline.prepare` on every binding): parts per message,
  inline bytes, features size, modality allow/deny lists (gateway-wide and per agent),
  the SSRF guard on every field that carries a URL, and the Ed25519 signature of the
  extension fields (reject or strip). It returns the sender whose features the feature
  policy judges (the verified signer, else the authenticated client).

Paths: agent cards and `/healthz` are public; `/admin` keeps its own token; `/blobs` and
`/streams` reads carry their own URL signature; everything else needs a client credential.
Secrets are never logged: clients are named, tokens are compared by HMAC digest only.
"""

from __future__ import annotations

import base64
import contextvars
import hashlib
import hmac
import logging
import math
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..errors import (
    INVALID_REQUEST,
    Forbidden,
    InvalidRequest,
    InvalidParams,
    MMA2AError,
    PayloadTooLarge,
    RateLimited,
    SignatureError,
    Unauthorized,
    URLForbidden,
)
from ..ext import EXTENSION_URI
from ..errors import InvalidModality
from ..modality import parse_modality
from ..payload.ssrf import URLPolicy, check_url
from ..signing import ReplayGuard, carries_features, public_key_from_text, signature_of, strip_features, verify_message

log = logging.getLogger("mma2a.gateway.security")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


# --- configuration (the `auth`, `rate_limit`, `limits`, `urls`, `signing` sections) ------------


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

    def secrets(self) -> list[tuple[str, str]]:
        """(scheme, secret) pairs, env variables resolved now."""
        out = []
        for scheme, value, env in (("bearer", self.token, self.token_env), ("api_key", self.api_key, self.api_key_env)):
            secret = value or (os.environ.get(env) if env else None)
            if secret:
                out.append((scheme, secret))
        return out


class AuthConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = None  # default: on when clients are configured
    clients: list[ClientConfig] = Field(default_factory=list)
    api_key_header: str = "X-API-Key"
    protect_metrics: bool = True

    @property
    def active(self) -> bool:
        return bool(self.clients) if self.enabled is None else self.enabled


class RateLimitConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    rate: float = Field(default=100.0, gt=0)  # requests per second, per sender
    burst: int = Field(default=200, ge=1)


class ModalityLists(BaseModel):
    model_config = ConfigDict(extra="forbid")

    allow: list[str] = Field(default_factory=list)  # empty: everything not denied
    deny: list[str] = Field(default_factory=list)

    @field_validator("allow", "deny")
    @classmethod
    def _patterns(cls, v: list[str]) -> list[str]:
        for m in v:
            try:
                parse_modality(m)
            except InvalidModality as exc:
                raise ValueError(exc.message) from None
        return v


class LimitsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_parts: int = Field(default=64, ge=1)
    max_inline_bytes: int = Field(default=32 * 1024 * 1024, ge=0)
    max_features_bytes: int = Field(default=16 * 1024, ge=0)
    max_url_length: int = Field(default=4096, ge=16)
    modalities: ModalityLists = Field(default_factory=ModalityLists)
    agents: dict[str, ModalityLists] = Field(default_factory=dict)


class URLConfig(BaseModel):
    """What URLs a message may carry (the gateway and its agents fetch them): docs/security.md."""

    model_config = ConfigDict(extra="forbid")

    check: bool = True
    allow_hosts: list[str] = Field(default_factory=list)
    allow_private: bool = False
    schemes: list[str] = Field(default_factory=lambda: ["https", "http", "wss", "ws"])


class SenderKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    public_key: str | None = None
    public_key_env: str | None = None

    @model_validator(mode="after")
    def _one(self) -> SenderKey:
        if not self.public_key and not self.public_key_env:
            raise ValueError("public_key or public_key_env is required")
        return self


class SigningConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    senders: dict[str, SenderKey] = Field(default_factory=dict)
    policy: Literal["reject", "strip"] = "reject"
    window_s: float = Field(default=300.0, gt=0)

    @field_validator("senders", mode="before")
    @classmethod
    def _short(cls, v: Any) -> Any:
        return {k: ({"public_key": s} if isinstance(s, str) else s) for k, s in v.items()} if isinstance(v, dict) else v

    @property
    def active(self) -> bool:
        return bool(self.senders)


# --- who is calling ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Client:
    """An authenticated caller (never holds its secret)."""

    name: str
    scheme: str
    agents: frozenset[str] | None = None
    rate: float | None = None
    burst: int | None = None


current_client: contextvars.ContextVar[Client | None] = contextvars.ContextVar("mma2a_client", default=None)


def current_sender() -> str | None:
    client = current_client.get()
    return client.name if client is not None else None


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


class Authenticator:
    """Bearer tokens and API keys → clients, compared by SHA-256 digest in constant time."""

    def __init__(self, config: AuthConfig) -> None:
        self.active = config.active
        self.header = config.api_key_header.lower()
        self._by_digest: dict[tuple[str, bytes], Client] = {}
        for c in config.clients:
            client = Client(c.name, "", frozenset(c.agents) if c.agents is not None else None, c.rate, c.burst)
            for scheme, secret in c.secrets():
                self._by_digest[(scheme, _digest(secret))] = Client(client.name, scheme, client.agents, c.rate, c.burst)
        if self.active and not self._by_digest:
            log.warning("auth is on but no client has a credential (check token_env / api_key_env): every call will be refused")

    def _find(self, scheme: str, secret: str) -> Client | None:
        d = _digest(secret)
        found = None
        for (s, digest), client in self._by_digest.items():  # constant time over the whole table
            if hmac.compare_digest(digest, d) and s == scheme:
                found = client
        return found

    def authenticate(self, headers: Mapping[str, str]) -> Client:
        """The client the request's credential names; `Unauthorized` (401) when there is none or it is wrong."""
        auth = headers.get("authorization")
        key = headers.get(self.header)
        if auth:
            scheme, _, given = auth.partition(" ")
            if scheme.lower() != "bearer" or not given.strip():
                raise Unauthorized("Authorization: only the Bearer scheme is accepted", field="Authorization")
            client = self._find("bearer", given.strip())
            if client is None:
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
    """Token buckets per sender: `rate` tokens a second, at most `burst`; idle buckets are forgotten."""

    def __init__(self, rate: float, burst: int, *, capacity: int = 50_000) -> None:
        self.rate = rate
        self.burst = burst
        self.capacity = capacity
        self._buckets: OrderedDict[str, list[float]] = OrderedDict()

    def take(self, key: str, now: float, *, rate: float | None = None, burst: int | None = None) -> float | None:
        """Take one token; None when allowed, else the seconds until one is available."""
        rate = rate or self.rate
        burst = burst or self.burst
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = [float(burst), now]
            while len(self._buckets) > self.capacity:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
            b[0] = min(float(burst), b[0] + (now - b[1]) * rate)
            b[1] = now
        if b[0] >= 1.0:
            b[0] -= 1.0
            return None
        return (1.0 - b[0]) / rate


# --- what a message may carry ----------------------------------------------------------------------


def _matches_any(modality: str, patterns: list[str]) -> bool:
    try:
        mod = parse_modality(modality)
    except InvalidModality:
        return False
    return any(mod.matches(parse_modality(p)) for p in patterns)


def modality_refusal(modality: str, lists: ModalityLists) -> str | None:
    """Why `lists` refuses `modality`, or None."""
    if lists.deny and _matches_any(modality, lists.deny):
        return "is on the deny list"
    if lists.allow and not _matches_any(modality, lists.allow):
        return "is not on the allow list"
    return None


def _part_ext(part: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = part.get("metadata")
    ext = meta.get(EXTENSION_URI) if isinstance(meta, Mapping) else None
    return ext if isinstance(ext, Mapping) else {}


def _raw_size(raw: str) -> int:
    n = len(raw.rstrip("="))
    return n * 3 // 4


def _part_modality(part: Mapping[str, Any]) -> str:
    ext = _part_ext(part)
    m = ext.get("modality") or part.get("mediaType")
    if isinstance(m, str) and m:
        return m
    return "text/plain" if "text" in part else "application/json" if "data" in part else "application/octet-stream"


def message_urls(message: Mapping[str, Any], configuration: Mapping[str, Any] | None) -> Iterator[tuple[str, Any]]:
    """(field, value) of every field of a request that carries a URL someone will fetch."""
    for i, part in enumerate(message.get("parts") or []):
        if not isinstance(part, Mapping):
            continue
        if "url" in part:
            yield f"params.message.parts[{i}].url", part["url"]
        stream = _part_ext(part).get("stream")
        if isinstance(stream, Mapping) and "url" in stream:
            yield f"params.message.parts[{i}].metadata[{EXTENSION_URI}].stream.url", stream["url"]
    if isinstance(configuration, Mapping):
        yield from _urls_in(configuration, "params.configuration", 0)


def _urls_in(value: Any, where: str, depth: int) -> Iterator[tuple[str, Any]]:
    if depth > 8:
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if k in ("url", "uri") or (isinstance(k, str) and k.lower().endswith("url")):
                yield f"{where}.{k}", v
            else:
                yield from _urls_in(v, f"{where}.{k}", depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _urls_in(v, f"{where}[{i}]", depth + 1)


class MessageGuard:
    """The per-message checks every binding runs before features and routing (see module doc)."""

    def __init__(
        self,
        limits: LimitsConfig,
        urls: URLConfig,
        signing: SigningConfig,
        *,
        own_url: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.limits = limits
        self.urls = urls
        self.url_policy = URLPolicy(
            allow_hosts=tuple(urls.allow_hosts), allow_private=urls.allow_private, allowed_schemes=tuple(urls.schemes)
        )
        self.own_prefixes = tuple(f"{own_url.rstrip('/')}/{p}/" for p in ("blobs", "streams")) if own_url else ()
        if own_url and own_url.startswith("http"):  # the ws:// subscribe URLs its own /streams hand out
            self.own_prefixes += (f"ws{own_url.rstrip('/')[4:]}/streams/",)
        self.signing = signing
        self.keys = {name: public_key_from_text(_key_text(name, k), field=f"signing.senders.{name}.public_key")
                     for name, k in signing.senders.items()}
        self.replay = ReplayGuard(signing.window_s)
        self.clock = clock
        self._url_ok: OrderedDict[str, float] = OrderedDict()

    async def admit(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None, target: str | None, sender: str | None
    ) -> str | None:
        """Check one message (changed in place only by the `strip` policy); returns the features' sender."""
        self.check_limits(message)
        self.check_modalities(message, target)
        await self.check_urls(message, configuration)
        return self.check_signature(message, sender)

    def check_limits(self, message: Mapping[str, Any]) -> None:
        parts = message.get("parts") or []
        lim = self.limits
        if len(parts) > lim.max_parts:
            raise PayloadTooLarge(f"params.message.parts: {len(parts)} parts, the limit is {lim.max_parts}",
                                  field="params.message.parts")
        inline = 0
        for i, part in enumerate(parts):
            if not isinstance(part, Mapping):
                continue
            if isinstance(part.get("raw"), str):
                inline += _raw_size(part["raw"])
            elif isinstance(part.get("text"), str):
                inline += len(part["text"])
            if inline > lim.max_inline_bytes:
                raise PayloadTooLarge(
                    f"params.message.parts[{i}]: inline content passes {lim.max_inline_bytes} bytes; "
                    "send large media by reference (POST /blobs)", field=f"params.message.parts[{i}]")
            features = _part_ext(part).get("features")
            if features:
                size = len(orjson.dumps(features, option=orjson.OPT_NON_STR_KEYS)) if _jsonable(features) else math.inf
                if size > lim.max_features_bytes:
                    where = f"params.message.parts[{i}].metadata[{EXTENSION_URI}].features"
                    raise PayloadTooLarge(f"{where}: {size} bytes, the limit is {lim.max_features_bytes}", field=where)

    def check_modalities(self, message: Mapping[str, Any], target: str | None) -> None:
        lists = [("this gateway", self.limits.modalities)]
        if target is not None and target in self.limits.agents:
            lists.append((f"agent {target}", self.limits.agents[target]))
        for i, part in enumerate(message.get("parts") or []):
            if not isinstance(part, Mapping):
                continue
            modality = _part_modality(part)
            for who, ml in lists:
                why = modality_refusal(modality, ml)
                if why is not None:
                    raise Forbidden(f"params.message.parts[{i}]: modality {modality} {why} of {who}",
                                    field=f"params.message.parts[{i}]")

    def check_targets(self, decision: Any) -> None:
        """Per-agent allow/deny lists against where the router sent each part."""
        if not self.limits.agents:
            return
        for pr in decision.parts:
            for agent in pr.agents():
                ml = self.limits.agents.get(agent)
                why = modality_refusal(pr.modality, ml) if ml is not None else None
                if why is not None:
                    raise Forbidden(f"params.message.parts[{pr.index}]: modality {pr.modality} {why} of agent {agent}",
                                    field=f"params.message.parts[{pr.index}]")

    async def check_urls(self, message: Mapping[str, Any], configuration: Mapping[str, Any] | None) -> None:
        if not self.urls.check:
            return
        for where, url in message_urls(message, configuration):
            if not isinstance(url, str):
                continue  # shape errors are the ingress's to report
            if len(url) > self.limits.max_url_length:
                raise URLForbidden(f"{where}: URL of {len(url)} characters, the limit is {self.limits.max_url_length}",
                                   field=where)
            if self.own_prefixes and url.startswith(self.own_prefixes):
                continue
            now = self.clock()
            seen = self._url_ok.get(url)
            if seen is not None and now - seen < 60:
                continue
            try:
                await check_url(url, self.url_policy)
            except URLForbidden as exc:
                raise URLForbidden(f"{where}: {exc.message}", field=where) from None
            except MMA2AError as exc:  # unresolvable host
                raise URLForbidden(f"{where}: refused: {exc.message}", field=where) from None
            self._url_ok[url] = now
            while len(self._url_ok) > 10_000:
                self._url_ok.popitem(last=False)

    def check_signature(self, message: dict[str, Any], sender: str | None) -> str | None:
        if not self.signing.active:
            return sender
        signed = signature_of(message) is not None
        if not signed and not carries_features(message):
            return sender  # nothing to believe or doubt
        try:
            return verify_message(message, self.keys, now=self.clock(), replay=self.replay)
        except SignatureError as exc:
            if self.signing.policy == "reject":
                raise
            n = strip_features(message)
            log.info("features stripped from %d parts of %s: %s", n, message.get("messageId"), exc.message)
            return sender


def _jsonable(value: Any) -> bool:
    try:
        orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return False
    return True


def _key_text(name: str, key: SenderKey) -> str:
    if key.public_key:
        return key.public_key
    value = os.environ.get(key.public_key_env or "")
    if not value:
        raise SignatureError(f"signing.senders.{name}.public_key_env: ${key.public_key_env} is not set",
                             field=f"signing.senders.{name}.public_key_env")
    return value


# --- the ASGI middleware -----------------------------------------------------------------------------

PathKind = Literal["public", "admin", "signed", "api", "metrics"]
_PUBLIC = frozenset({"/healthz", "/.well-known/agent-card.json"})


def classify(path: str, method: str, query: str) -> PathKind:
    """Which credential a path needs: none, the admin token, a URL signature, or a client credential."""
    if path in _PUBLIC or path == "/v1/card" or (
            path.startswith("/agents/") and path.endswith(("/.well-known/agent-card.json", "/v1/card"))):
        return "public"
    if path == "/metrics":
        return "metrics"
    if path == "/admin" or path.startswith("/admin/"):
        return "admin"
    if path.startswith(("/blobs/", "/streams/")) and "sig=" in query and method in ("GET", "HEAD", "DELETE"):
        return "signed"  # the route checks the URL signature itself
    return "api"


def is_jsonrpc(path: str, method: str) -> bool:
    if method != "POST":
        return False
    if path == "/":
        return True
    if path.startswith("/agents/"):
        rest = path[len("/agents/"):].rstrip("/")
        return bool(rest) and "/" not in rest
    return False


_REST_STATUS = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED",
                503: "UNAVAILABLE"}


def error_body(exc: MMA2AError, path: str, method: str, status: int) -> bytes:
    """The error in the shape of the binding the path belongs to (JSON-RPC, REST, blobs, admin)."""
    if is_jsonrpc(path, method):
        return orjson.dumps({"jsonrpc": "2.0", "id": None, "error": exc.to_jsonrpc()})
    if path.startswith(("/blobs", "/streams")):
        from ..payload.routes import error_body as blob_error

        return orjson.dumps(blob_error(exc))
    if path.startswith("/admin"):
        body: dict[str, Any] = {"error": {"code": exc.code, "message": exc.message}}
        if exc.data:
            body["error"]["data"] = exc.data
        return orjson.dumps(body)
    reason = _REST_STATUS.get(status, "INVALID_ARGUMENT")
    return orjson.dumps({"error": {"code": status, "status": reason, "message": exc.message, "details": [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "a2a-protocol.org",
         "metadata": {k: str(v) for k, v in exc.data.items()}}]}})


class Unavailable(MMA2AError):
    code, http_status = INVALID_REQUEST, 503


class SecurityMiddleware:
    """Authenticate, rate-limit, cap bodies and refuse new work while draining, for every HTTP path."""

    def __init__(
        self,
        app: Any,
        *,
        auth: Authenticator,
        limiter: RateLimiter | None,
        max_body_bytes: int,
        admin_token: Callable[[], str | None] | None = None,
        protect_metrics: bool = True,
        drain: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.auth = auth
        self.limiter = limiter
        self.max_body_bytes = max_body_bytes
        self.admin_token = admin_token
        self.protect_metrics = protect_metrics
        self.drain = drain
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "/")
        method: str = scope.get("method", "GET") if scope["type"] == "http" else "GET"
        query = scope.get("query_string", b"").decode("latin-1")
        kind = classify(path, method, query)
        if kind in ("public", "admin", "signed"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        client: Client | None = None
        try:
            if self.drain is not None and self.drain.draining and scope["type"] == "http":
                raise Unavailable("the gateway is shutting down and takes no new work; retry on another instance")
            if kind == "metrics" and self.protect_metrics and self.auth.active:
                client = self._metrics_client(headers)
            elif kind == "api" and self.auth.active:
                client = self.auth.authenticate(headers)
                self._check_route(client, path)
            if kind == "api" and self.limiter is not None:
                key = client.name if client is not None else f"ip:{(scope.get('client') or ('?',))[0]}"
                wait = self.limiter.take(key, self.clock(), rate=client.rate if client else None,
                                         burst=client.burst if client else None)
                if wait is not None:
                    raise RateLimited(f"rate limit of {key} exceeded; retry in {wait:.2f} s", retry_after=round(wait, 3))
            declared = headers.get("content-length")
            if (kind == "api" and scope["type"] == "http" and not path.startswith(("/blobs", "/streams"))
                    and declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes):
                raise PayloadTooLarge(f"request body exceeds {self.max_body_bytes} bytes; "
                                      "send large media by reference (POST /blobs)")
        except MMA2AError as exc:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": exc.message[:120]})
                return
            await self._refuse(exc, path, method, send)
            return
        if (kind == "api" and scope["type"] == "http" and method in ("POST", "PUT", "PATCH")
                and not path.startswith(("/blobs", "/streams"))
                and (headers.get("content-length") is None or not is_jsonrpc(path, method))):
            # bodies without a length are capped here; REST bodies are checked to be JSON here, since the
            # SDK's REST binding answers 500 to bytes that are not UTF-8
            capped = await self._capped(receive, path, method, send, check_json=not is_jsonrpc(path, method))
            if capped is None:
                return
            receive = capped
        token = current_client.set(client)
        counted = self.drain is not None and scope["type"] == "http"
        if counted:
            self.drain.enter()
        try:
            await self.app(scope, receive, send)
        finally:
            if counted:
                self.drain.leave()
            current_client.reset(token)

    def _metrics_client(self, headers: Mapping[str, str]) -> Client:
        admin = self.admin_token() if self.admin_token else None
        auth = headers.get("authorization", "")
        scheme, _, given = auth.partition(" ")
        if admin and scheme.lower() == "bearer" and hmac.compare_digest(_digest(given.strip()), _digest(admin)):
            return Client("admin", "bearer")
        return self.auth.authenticate(headers)

    @staticmethod
    def _check_route(client: Client, path: str) -> None:
        if client.agents is None or not path.startswith("/agents/"):
            return
        agent = path[len("/agents/"):].split("/", 1)[0]
        if agent not in client.agents:
            raise Forbidden(f"client {client.name} may not call agent {agent}", field="agent")

    async def _capped(self, receive: Receive, path: str, method: str, send: Send, *, check_json: bool = False
                      ) -> Receive | None:
        """Read a body up to the limit (413 past it; 400 if `check_json` and it is not JSON), then replay it."""
        chunks: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                return receive
            body = msg.get("body", b"")
            size += len(body)
            if size > self.max_body_bytes:
                # read (and drop) a bounded tail so the client sees the 413 rather than a reset connection
                extra = 0
                while msg.get("more_body", False) and extra < (1 << 20):
                    msg = await receive()
                    extra += len(msg.get("body", b""))
                await self._refuse(PayloadTooLarge(f"request body exceeds {self.max_body_bytes} bytes; "
                                                   "send large media by reference (POST /blobs)"), path, method, send)
                return None
            chunks.append(body)
            if not msg.get("more_body", False):
                break
        data = b"".join(chunks)
        if check_json and data:
            try:
                orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                await self._refuse(InvalidRequest(f"request body is not valid JSON: {exc}", field="body"), path, method, send)
                return None
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()

        return replay

    async def _refuse(self, exc: MMA2AError, path: str, method: str, send: Send) -> None:
        status = exc.http_status
        headers = [(b"content-type", b"application/json")]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="mma2a"'))
        if isinstance(exc, RateLimited):
            headers.append((b"retry-after", str(max(1, math.ceil(exc.retry_after))).encode()))
        if status == 503:
            headers += [(b"retry-after", b"1"), (b"connection", b"close")]
        if status == 413:
            headers.append((b"connection", b"close"))
        body = error_body(exc, path, method, status)
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def b64_secret(n: int = 32) -> str:
    """A fresh random secret for a client token or API key."""
    return base64.urlsafe_b64encode(os.urandom(n)).rstrip(b"=").decode("ascii")


# --- wiring into a Gateway ---------------------------------------------------------------------------


def install_security(gw: Any) -> None:
    """Give a `Gateway`'s pipeline its message guard, deduper and failover, from its config."""
    from .faults import Deduper, fail_over

    cfg = gw.config
    gw.pipeline.guard = MessageGuard(cfg.limits, cfg.urls, cfg.signing, own_url=gw.public_url)
    if cfg.faults.dedupe_ttl_s > 0:
        gw.pipeline.dedupe = Deduper(ttl_s=cfg.faults.dedupe_ttl_s)
    if cfg.faults.failover:
        gw.pipeline.failover = fail_over


def security_middleware(gw: Any) -> list[Any]:
    """The Starlette middleware list for a `Gateway` (authentication, rate limits, body cap, drain)."""
    from starlette.middleware import Middleware

    cfg = gw.config
    limiter = RateLimiter(cfg.rate_limit.rate, cfg.rate_limit.burst) if cfg.rate_limit.enabled else None
    return [Middleware(
        SecurityMiddleware, auth=Authenticator(cfg.auth), limiter=limiter, max_body_bytes=cfg.max_body_bytes,
        admin_token=lambda: gw.admin_token, protect_metrics=cfg.auth.protect_metrics, drain=gw.drain,
    )]
