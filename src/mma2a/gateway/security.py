"""Ingress security: who is calling, how often, how much, which modalities, which URLs, whose signatures.

Two places, one policy (credentials and rate limits in `access`, message checks in `guard`):
- `SecurityMiddleware` (here; pure ASGI, in front of every route): authentication (bearer token or
  API key per client, from config or env), per-sender token-bucket rate limits (429 +
  `Retry-After`), the body size limit for every binding (413), refusal while draining
  (503). The authenticated client is put in `current_client` for the request.
- `guard.MessageGuard.admit` (called by `Pipeline.prepare` on every binding): parts per message,
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
import hmac
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import orjson

from ..errors import (
    INVALID_REQUEST,
    UnsupportedMediaType,
    Forbidden,
    InvalidRequest,
    MMA2AError,
    PayloadTooLarge,
    RateLimited,
)
from ..responses import error_json, jsonrpc_error_json
from .access import Authenticator, Client, RateLimiter, current_client, digest_secret

log = logging.getLogger("mma2a.gateway.security")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


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


def is_json_type(ctype: str) -> bool:
    """`application/json`, or a `+json` type, with any parameters."""
    essence = ctype.split(";", 1)[0].strip().lower()
    return essence == "application/json" or essence.endswith("+json")


def error_body(exc: MMA2AError, path: str, method: str, status: int) -> bytes:
    """The error in the shape of the binding the path belongs to (JSON-RPC, REST, blobs, admin)."""
    if is_jsonrpc(path, method):
        return orjson.dumps(jsonrpc_error_json(None, exc))
    if path.startswith(("/blobs", "/streams", "/admin")):
        return orjson.dumps(error_json(exc))
    return orjson.dumps(exc.to_rest())


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
            # SDK's REST binding answers 500 to bytes that are not UTF-8 (and another content type is a 415)
            ctype = headers.get("content-type")
            if ctype is not None and not is_jsonrpc(path, method) and not is_json_type(ctype):
                await self._refuse(UnsupportedMediaType(f"Content-Type {ctype!r} is not supported; send application/json",
                                                        field="Content-Type"), path, method, send)
                return
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
        if admin and scheme.lower() == "bearer" and hmac.compare_digest(digest_secret(given.strip()), digest_secret(admin)):
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


def security_middleware(gw: Any) -> list[Any]:
    """The Starlette middleware list for a `Gateway` (authentication, rate limits, body cap, drain)."""
    from starlette.middleware import Middleware

    cfg = gw.config
    limiter = RateLimiter(cfg.rate_limit.rate, cfg.rate_limit.burst) if cfg.rate_limit.enabled else None
    return [Middleware(
        SecurityMiddleware, auth=Authenticator(cfg.auth), limiter=limiter, max_body_bytes=cfg.max_body_bytes,
        admin_token=lambda: gw.admin_token, protect_metrics=cfg.auth.protect_metrics, drain=gw.drain,
    )]
