"""Ingress security: who is calling, how often, how much, which modalities, which URLs, whose signatures.

Two places, one policy (credentials and rate limits in `access`, message checks in `guard`):
- `AccessControl.enforce` (here; run by each route's `authz.Guarded` gate with the route's access
  class, decided at build time from the route table, never from the path): authentication (bearer
  token or API key per client, from config or env), the admin token (one check for every admin
  route), per-sender token-bucket rate limits (429 + `Retry-After`), the body size limit for every
  binding (413), refusal while draining (503). The authenticated client is put in
  `current_client` for the request. A path no route matches gets 401 before 404 when auth is on.
- `guard.MessageGuard.admit` (called by `Pipeline.prepare` on every binding): parts per message,
  inline bytes, features size, modality allow/deny lists (gateway-wide and per agent),
  the SSRF guard on every field that carries a URL, and the Ed25519 signature of the
  extension fields (reject or strip). It returns the sender whose features the feature
  policy judges (the verified signer, else the authenticated client).

Secrets are never logged: clients are named, tokens are compared by SHA-256 digest only.
"""

from __future__ import annotations

import base64
import hmac
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import orjson
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...errors import (
    INVALID_REQUEST,
    Forbidden,
    MethodNotFound,
    AgentRefusal,
    MMA2AError,
    Overloaded,
    PayloadTooLarge,
    RateLimited,
    Unauthorized,
)
from ...request_body import BODY_GROWN, READ_BODY, check_json_body, header_map, read_body, replaying
from ...responses import error_json, jsonrpc_error_json
from ...tls import client_cn
from .authz import AccessClass, ErrorShape, RouteAccess
from .clients import (
    ADMIN_MAX_PRIORITY,
    Authenticator,
    BodyBudget,
    BodyHold,
    Client,
    RateLimiter,
    StreamSlot,
    StreamSlots,
    client_jwt,
    current_client,
    digest_secret,
    jwt_of,
    shown,
)
from .failures import CredentialFailures
from .federation import HEADER_KEY as FEDERATION_HEADER
from .federation import Asserted, Federation, check_unbound
from .peers import UNKNOWN, address_key, current_address

if TYPE_CHECKING:
    from .jwt_clients import JWTVerifier  # loaded with `auth.jwt` only (joserfc)

log = logging.getLogger("mma2a.gateway.security")


# --- enforcing a route's access class -----------------------------------------------------------------

def error_body(exc: MMA2AError, shape: ErrorShape, status: int) -> bytes:
    """The error in the shape of the route's binding (JSON-RPC, REST, or the plain body of admin and payload routes)."""
    if shape is ErrorShape.JSONRPC:
        return orjson.dumps(jsonrpc_error_json(None, exc))
    if shape is ErrorShape.PAYLOAD or shape is ErrorShape.ADMIN:
        return orjson.dumps(error_json(exc))
    return orjson.dumps(exc.to_rest())


class Unavailable(MMA2AError):
    code, http_status = INVALID_REQUEST, 503


class BodiesBusy(Unavailable):
    """Too many large bodies in flight (`BodyBudget`). `drain`: the body has a declared length within the cap, so the
    connection is kept and uvicorn reads and drops the rest of it: the client reads the 503 instead of a reset."""

    drain = False


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

# The members every request compares against, read as module globals: on Python 3.11 an attribute of an Enum class is
# read through `EnumType.__getattr__`'s slot (~0.45 µs, as long as the rest of a small function; 13 a request here).
_PUBLIC, _CLIENT, _ADMIN, _SIGNED, _WEBHOOK = (AccessClass.PUBLIC, AccessClass.CLIENT, AccessClass.ADMIN,
                                               AccessClass.SIGNED, AccessClass.WEBHOOK)
_JSONRPC, _REST, _PAYLOAD = ErrorShape.JSONRPC, ErrorShape.REST, ErrorShape.PAYLOAD


class AccessControl:
    """Enforces a route's access class: credentials, the admin token, rate limits, the body cap, drain refusal."""

    def __init__(
        self,
        *,
        auth: Authenticator,
        limiter: RateLimiter | None,
        max_body_bytes: int,
        admin_token: Callable[[], str | None] | None = None,
        drain: Any = None,
        clock: Callable[[], float] = time.monotonic,
        bodies: BodyBudget | None = None,
        streams: StreamSlots | None = None,
        federation: Federation | None = None,
        body_check: Callable[[bytes], Awaitable[None]] | None = None,
        failures: CredentialFailures | None = None,
    ) -> None:
        """`body_check`: the check of a REST body (`request_body.check_json_body`, raising its `MMA2AError`); the
        gateway's keeps large bodies off the event loop (`bindings.body_parser`). Default: checked here.
        `failures`: the budget of failed credential checks per address (None: not limited)."""
        self.auth = auth
        self.failures = failures
        self.body_check = body_check or _check_json_body
        self.federation = federation  # trusted peer gateways' assertions of their clients (gateway/access/federation.py)
        self.limiter = limiter
        self.max_body_bytes = max_body_bytes
        self.bodies = bodies or BodyBudget(8 * max_body_bytes, 4 * max_body_bytes)
        self.streams = streams or StreamSlots(64, 1024)
        self.admin_token = admin_token
        self.drain = drain
        self.clock = clock
        wanted = ("authorization", "content-length", "content-encoding", auth.header,
                  *((FEDERATION_HEADER,) if federation is not None else ()))  # a peer's assertion: read if trusted
        self._wanted = tuple((name, name.encode("latin-1")) for name in dict.fromkeys(wanted))  # what access reads

    async def enforce(self, access: RouteAccess, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        cls = access.cls
        if cls is _PUBLIC or cls is _SIGNED or cls is _WEBHOOK:
            # signed, webhook: the route verifies its signature, its leg's secret
            await app(scope, receive, send)
            return
        http = scope["type"] == "http"
        named = header_map(scope)
        headers = self._pick(named)
        client: Client | None = None
        sender: str | None = None  # set when the body is metered into the body budget
        streaming: str | None = None
        try:
            raw = scope.get("headers") or ()
            if len(named) != len(raw):  # some header is repeated (rare): never a credential
                self.single_credentials(k for k, _ in raw)
            peer = str((scope.get("client") or ("?",))[0]) if self.keys_by_address else "?"
            cn = client_cn(scope) if cls is _CLIENT else None
            agent = scope.get("path_params", {}).get("agent")
            if self.auth.jwt is None and self.federation is None:  # nothing to wait for: no coroutine to make
                client = self.admit(access, headers, peer=peer, cn=cn, agent=agent, refuse_draining=http)
            else:
                client = await self.admit_async(access, headers, peer=peer, cn=cn, agent=agent, refuse_draining=http)
            declared = headers.get("content-length")
            if http and access.shape is not _PAYLOAD:
                size = int(declared) if declared is not None and declared.isdigit() else None
                if size is not None and size > self.max_body_bytes:
                    raise PayloadTooLarge(f"request body exceeds {self.max_body_bytes} bytes; "
                                          "send large media by reference (POST /blobs)")
                if (size is None and scope["method"] in _BODY_METHODS) or (size is not None and size > BodyBudget.LARGE) \
                        or (size and headers.get("content-encoding", "identity").strip().lower() != "identity"):
                    # metered as it arrives (a coded body: as it decodes); no length said, or coded: it may grow
                    # to the cap, so only what has come counts
                    sender = client.key if client is not None else address_key((scope.get('client') or ('?',))[0])
                    if size is not None and size > BodyBudget.LARGE:  # a length that cannot fit: refused unread
                        why = self.bodies.why_not(sender, size)
                        if why is not None:
                            busy = BodiesBusy(f"{why}; retry, or send large media by reference (POST /blobs)",
                                              field="Content-Length")
                            busy.drain = True
                            raise busy
            if client is not None and client.bound is not None and access.shape is _PAYLOAD:
                check_unbound(f"{scope.get('method', 'GET')} {scope.get('path', '')}", client)  # blobs, uploads, streams
            if access.stream:
                streaming = self.open_stream(client, scope)
        except MMA2AError as exc:
            if not http:
                await send({"type": "websocket.close", "code": 1008, "reason": exc.message[:120]})
                return
            await self.refuse(exc, access.shape, send)
            return
        token, own = current_client.set(client), client_jwt.set(jwt_of(client, headers.get("authorization")))
        # no client named (auth off, the admin token): the address keys what is queued for the caller (body worker)
        where = current_address.set(str((scope.get("client") or (UNKNOWN,))[0])) if client is None else None
        counted = self.drain is not None and http and cls is _CLIENT
        if counted:
            self.drain.enter()
        slot = None
        if streaming is not None and http:  # free before the answer's last byte is out (the next stream may follow)
            slot = StreamSlot(self.streams, streaming)
            send = slot.sending(send)
        metered = _Metered(self.bodies.hold(sender, self.max_body_bytes), receive, send) if sender is not None else None
        try:
            if metered is None:
                await app(scope, receive, send)
            else:
                await metered.run(app, scope, self, access.shape)
        finally:
            if counted:
                self.drain.leave()
            if metered is not None:
                metered.hold.release()
            if slot is not None:
                slot.give()
            elif streaming is not None:
                self.streams.give(streaming)
            client_jwt.reset(own)
            current_client.reset(token)
            if where is not None:
                current_address.reset(where)

    def check_body(self, access: RouteAccess, app: ASGIApp, scope: Scope, receive: Receive, send: Send
                   ) -> Awaitable[None]:
        """Once access is granted (and the body decoded): cap bodies without a length (JSON-RPC caps its own
        otherwise) and check REST bodies are JSON (400 otherwise, as an a2a-sdk agent answers; the SDK's REST
        binding itself answers 500 to non-UTF-8 bytes). The Content-Type is not read: an a2a-sdk agent takes a
        JSON body under any. Nothing to check (a JSON-RPC body of a declared length): the app's own coroutine,
        no frame of ours."""
        if (scope["type"] == "http" and access.shape is not _PAYLOAD and scope.get("method") in _BODY_METHODS
                and access.cls is not _PUBLIC and access.cls is not _SIGNED
                and access.cls is not _WEBHOOK
                and (access.shape is not _JSONRPC or b"content-length" not in header_map(scope))):
            return self._checked(access, app, scope, receive, send)
        return app(scope, receive, send)

    async def _checked(self, access: RouteAccess, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        body = await self._capped(receive, access.shape, send, check_json=access.shape is _REST)
        if body is not None:
            scope[READ_BODY] = body
            try:
                await app(scope, replaying(body, receive), send)
            finally:  # the server keeps a keep-alive connection's last scope: not its body too
                del scope[READ_BODY]

    def open_stream(self, client: Client | None, scope: Scope | None = None, *, peer: str | None = None) -> str:
        """A stream slot for the caller (its client, else its address: `scope`'s or `peer`); the key to give it back
        with `streams.give`, or `RateLimited` (429 + `Retry-After`; gRPC `RESOURCE_EXHAUSTED`) past the caps."""
        if client is not None:
            sender = client.key
        else:
            sender = address_key(peer if peer is not None else ((scope or {}).get('client') or ('?',))[0])
        why = self.streams.take(sender)
        if why is not None:
            raise RateLimited(why, retry_after=1.0)
        return sender

    def single_credentials(self, names: Iterable[bytes | str]) -> None:
        """`Unauthorized` when a credential header (`Authorization`, the API-key header) is sent more than once:
        RFC 9110 gives it one value, and a proxy in front may judge another copy than the gateway does (the
        gateway read the first, so `Authorization: <good>` then `Authorization: <bad>` passed as the good one)."""
        seen: set[str] = set()
        for name in names:
            key = name.decode("latin-1") if isinstance(name, bytes) else name.lower()
            if key == "authorization" or key == self.auth.header:
                if key in seen:
                    raise Unauthorized(f"{key}: sent more than once; send one credential", field=key)
                seen.add(key)

    def _pick(self, named: Mapping[bytes, bytes]) -> dict[str, str]:
        """The few request headers access control reads (credentials, the body's length), decoded, from the request's
        `header_map`. (A loop, not a comprehension: no function of its own to call, once a request.)"""
        picked: dict[str, str] = {}
        for name, key in self._wanted:
            value = named.get(key)
            if value is not None:
                picked[name] = value.decode("latin-1")
        return picked

    @property
    def keys_by_address(self) -> bool:
        """Something is counted per caller address (rate limits, failed credentials): the doors find it."""
        return self.limiter is not None or self.failures is not None

    def admit(self, access: RouteAccess, headers: Mapping[str, str], *, peer: str, cn: str | None = None,
              agent: str | None = None, refuse_draining: bool = True) -> Client | None:
        """The access decision of both front doors (an HTTP route, a gRPC method): the caller's client (None:
        anonymous, or a public/signed class, which is decided elsewhere), or the `MMA2AError` refusing it.

        `admin`: the admin token. `client`: refused while draining (`refuse_draining`), the credential (or the
        verified certificate's CN `cn` when no credential header is sent), the target `agent` the client may
        use, then a rate-limit token for the client, or for the anonymous caller's address `peer`."""
        cls = access.cls
        if cls is _ADMIN:
            return self.admin(headers, peer)
        if cls is not _CLIENT:
            return None
        if refuse_draining and self.drain is not None and self.drain.draining:
            raise Unavailable("the gateway is shutting down and takes no new work; retry on another instance")
        federation = self.federation
        asserted = None
        if (federation is not None and self.failures is not None and (said := headers.get(FEDERATION_HEADER))
                and ("authorization" in headers or self.auth.header in headers)):  # (no credential: nothing judged)
            asserted = federation.asserted(said, time.time())  # a peer's client: failures are judged as its
        client = self._client(headers, access, cn, peer, asserted)
        if federation is not None and client is not None:  # a trusted peer gateway's client: its own principal
            client = federation.principal(client, headers.get(FEDERATION_HEADER), time.time(), asserted)
        self.check_agent(client, agent)
        if self.limiter is not None:
            self.limiter.admit(client, peer, self.clock())
        return client

    async def admit_async(self, access: RouteAccess, headers: Mapping[str, str], *, peer: str, cn: str | None = None,
                          agent: str | None = None, refuse_draining: bool = True) -> Client | None:
        """`admit`, but a JWT naming a key its issuer's set lacks waits for one read of the set (at most one per
        `min_refresh_s`, shared by every request that asks) and is judged again: a rotated key works at once."""
        if self.auth.jwt is None:  # no issuers: joserfc (jwt_clients) is never loaded
            client = self.admit(access, headers, peer=peer, cn=cn, agent=agent, refuse_draining=refuse_draining)
        else:
            from .jwt_clients import KeysStale

            try:
                client = self.admit(access, headers, peer=peer, cn=cn, agent=agent, refuse_draining=refuse_draining)
            except KeysStale as stale:
                await stale.refresh()
                client = self.admit(access, headers, peer=peer, cn=cn, agent=agent, refuse_draining=refuse_draining)
        if client is not None and client.bound is not None and self.federation is not None:  # a peer's client:
            await self.federation.claim(client, headers.get(FEDERATION_HEADER))  # its assertion once per cluster
        return client

    def admin(self, headers: Mapping[str, str], peer: str | None = None) -> Client:
        """The one check of the admin token (admin routes, and `/metrics` besides client credentials); a wrong one
        counts as a failed credential of `peer` (the caller's address)."""
        token = self.admin_token() if self.admin_token else None
        if not token:
            raise Forbidden("admin API disabled: set the admin token (admin.token_env) to enable it")
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise Unauthorized("admin API: missing bearer token")
        return self.judged(peer, "Authorization", lambda: self._admin_token(given.strip(), token))

    @staticmethod
    def _admin_token(given: str, token: str) -> Client:
        if not hmac.compare_digest(digest_secret(given), digest_secret(token)):
            raise Forbidden("admin API: invalid token")
        return Client("admin", "bearer", max_priority=ADMIN_MAX_PRIORITY)

    def judged(self, peer: str | None, field: str, check: Callable[[], Client], via: Asserted | None = None
               ) -> Client:
        """`check()` of a credential (in the header `field`) from address `peer`, within the address's budget of
        failed checks (`failures`): a refusal by `check` (401, 403) counts as a failure; while the address is over its
        budget every credential from it is refused alike (`CredentialsLocked`, 429, right or wrong), but for clients
        served from that address recently, which are checked and served as ever. `via`: the request carries a trusted
        peer gateway's verified assertion: judged within that peer client's budget instead of the address's."""
        failures = self.failures
        if failures is None or peer is None:
            return check()
        now = self.clock()
        wait = failures.over(peer, now, via)
        try:
            found = check()
        except (Unauthorized, Forbidden) as exc:
            if not getattr(exc, "final", True):  # a JWT naming a kid not read yet: judged again after the read
                raise
            if wait is not None:  # the same answer as for a right one: a guess learns nothing
                raise failures.locked(peer, wait, field, via) from None
            failures.failed(peer, now, via)
            raise
        key = found.key
        if wait is not None and not failures.known(peer, key, via):
            raise failures.locked(peer, wait, field, via)
        failures.verified(peer, key, via)
        return found

    def _client(self, headers: Mapping[str, str], access: RouteAccess, cn: str | None,
                peer: str | None = None, via: Asserted | None = None) -> Client | None:
        if cn is not None and "authorization" not in headers and self.auth.header not in headers:
            return self.auth.certificate(cn)  # mutual TLS: the certificate's subject is the sender
        if not self.auth.active:
            return None
        authorization = headers.get("authorization")
        presented = authorization or headers.get(self.auth.header)
        if not presented:  # nothing to check (401 missing credentials): no guess
            return self.auth.authenticate(headers)
        field = "Authorization" if authorization else self.auth.header
        return self.judged(peer, field, lambda: self._credential(headers, access), via)

    def _credential(self, headers: Mapping[str, str], access: RouteAccess) -> Client:
        """The client (or, where the route takes it too, the admin) the request's credential names, or 401."""
        if access.admin_also:
            admin = self.admin_token() if self.admin_token else None
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if admin and scheme.lower() == "bearer" and hmac.compare_digest(digest_secret(given.strip()),
                                                                          digest_secret(admin)):
                return Client("admin", "bearer", max_priority=ADMIN_MAX_PRIORITY)
        return self.auth.authenticate(headers)

    @staticmethod
    def check_agent(client: Client | None, agent: str | None, *, field: str = "agent") -> None:
        """`Forbidden` when the client's `auth.clients[].agents` leaves out the target `agent` (named by `field`:
        the `/agents/{agent}` path on HTTP, the request's `tenant` on gRPC)."""
        if client is None or client.agents is None or agent is None:
            return
        if agent not in client.agents:
            raise Forbidden(f"{shown(client.key)} may not call agent {agent}", field=field)

    async def unmatched(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A path no route matches: 401 first when auth is on (no route map for strangers), else 404."""
        try:
            if self.auth.active:  # 401 or 404 would tell whether a credential is good: counted as a check
                headers = self._pick(header_map(scope))
                presented = headers.get("authorization") or headers.get(self.auth.header)
                if presented and self.failures is not None:
                    peer = str((scope.get("client") or ("?",))[0])
                    field = "Authorization" if "authorization" in headers else self.auth.header
                    self.judged(peer, field, lambda: self.auth.authenticate(headers))
                else:
                    self.auth.authenticate(headers)
            raise MethodNotFound(f"no route for {scope.get('method', 'GET')} {scope.get('path', '/')}", field="path")
        except MMA2AError as exc:
            await self.refuse(exc, _REST, send)

    async def _capped(self, receive: Receive, shape: ErrorShape, send: Send, *, check_json: bool = False
                      ) -> bytes | None:
        """Read a body up to the limit (413 past it; 400 if `check_json` and it is not JSON) for the caller to replay;
        None when answered here, or when the client left before the end of the body (the a2a-sdk's REST binding, run on
        a disconnect, logged `Unknown error occurred` with a traceback)."""
        try:
            data = await read_body(receive, self.max_body_bytes)
        except PayloadTooLarge:
            await self.refuse(PayloadTooLarge(f"request body exceeds {self.max_body_bytes} bytes; "
                                              "send large media by reference (POST /blobs)"), shape, send)
            return None
        if data is None:  # the client left (or the body budget refused the body): nobody to answer, the app is not run
            return None
        if check_json and data:
            try:
                await self.body_check(data)
            except MMA2AError as exc:  # too many values, not JSON; 503 if a large body's checker stopped
                await self.refuse(exc, shape, send)
                return None
        return data

    async def refuse(self, exc: MMA2AError, shape: ErrorShape, send: Send) -> None:
        body = error_body(exc, shape, exc.http_status)
        headers = [(b"content-type", b"application/json"), *_refusal_headers(exc), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": exc.http_status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class _Metered:
    """A request body metered into the body budget as it arrives, and as it decodes (`BODY_GROWN` in the scope,
    for `compression.ContentCoding`): a step the budget refuses ends the request with the budget's 503 (the
    body's reservation given back at once; the app reads a disconnect and its answer, if any, is dropped)."""

    __slots__ = ("arrived", "hold", "refusal", "started", "_receive", "_send")

    def __init__(self, hold: BodyHold, receive: Receive, send: Send) -> None:
        self.hold = hold
        self.arrived = 0
        self.refusal: BodiesBusy | None = None
        self.started = False
        self._receive = receive
        self._send = send

    async def run(self, app: ASGIApp, scope: Scope, control: AccessControl, shape: ErrorShape) -> None:
        scope[BODY_GROWN] = self.grown
        try:
            await app(scope, self.receive, self.send)
        except Exception:
            if self.refusal is None:
                raise
            log.debug("request refused mid-body by the body budget; the app's error is dropped", exc_info=True)
        if self.refusal is not None and not self.started:
            await control.refuse(self.refusal, shape, self._send)

    async def receive(self) -> Message:
        if self.refusal is not None:
            return {"type": "http.disconnect"}
        msg = await self._receive()
        if msg["type"] == "http.request":
            self.arrived += len(msg.get("body", b""))
            if self.arrived > BodyBudget.LARGE:
                try:
                    self.grown(self.arrived)
                except BodiesBusy:
                    return {"type": "http.disconnect"}
        return msg

    def grown(self, size: int) -> None:
        """`size` bytes of the body are held (arrived, or decoded): reserved, or `BodiesBusy` (and all given back)."""
        if self.refusal is not None:
            raise self.refusal
        why = self.hold.grow(size)
        if why is not None:
            self.hold.release()
            self.refusal = BodiesBusy(f"{why}; retry, or send large media by reference (POST /blobs)",
                                      field="Content-Length")
            raise self.refusal

    async def send(self, message: Message) -> None:
        if self.refusal is not None:
            return  # refused: the 503 is the answer
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


async def _check_json_body(body: bytes) -> None:
    check_json_body(body)


def retry_after(exc: MMA2AError) -> int | None:
    """The seconds a refused caller is told to wait (`Retry-After` on HTTP, `retry-after` on gRPC), if any."""
    if isinstance(exc, (RateLimited, Overloaded, AgentRefusal)):
        return max(1, math.ceil(exc.retry_after))
    return 1 if exc.http_status == 503 else None


def _refusal_headers(exc: MMA2AError) -> list[tuple[bytes, bytes]]:
    status = exc.http_status
    headers = []
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="mma2a"'))
    wait = retry_after(exc)
    if wait is not None:
        headers.append((b"retry-after", str(wait).encode()))
    if status == 503 and not (isinstance(exc, BodiesBusy) and exc.drain):
        headers.append((b"connection", b"close"))
    if status == 413:
        headers.append((b"connection", b"close"))
    return headers


def b64_secret(n: int = 32) -> str:
    """A fresh random secret for a client token or API key."""
    return base64.urlsafe_b64encode(os.urandom(n)).rstrip(b"=").decode("ascii")


# --- wiring into a Gateway ---------------------------------------------------------------------------


def access_control(gw: Any, body_check: Callable[[bytes], Awaitable[None]] | None = None) -> AccessControl:
    """The `AccessControl` of a `Gateway` (authentication, admin token, rate limits, body cap, drain), from its config;
    `body_check`: see `AccessControl`."""
    cfg = gw.config
    limiter = RateLimiter(cfg.rate_limit.rate, cfg.rate_limit.burst) if cfg.rate_limit.enabled else None
    in_flight = cfg.max_body_bytes_in_flight or 8 * cfg.max_body_bytes
    return AccessControl(auth=Authenticator(cfg.auth, jwt_verifier(gw)), limiter=limiter, max_body_bytes=cfg.max_body_bytes,
                         admin_token=lambda: gw.admin_token, drain=gw.drain,
                         bodies=BodyBudget(in_flight, max(in_flight // 2, cfg.max_body_bytes)),
                         streams=StreamSlots(cfg.limits.max_response_streams_per_client, cfg.limits.max_response_streams),
                         federation=gw.federation, body_check=body_check, failures=credential_failures(gw))


def credential_failures(gw: Any) -> CredentialFailures | None:
    """The budget of failed credential checks per address of a `Gateway` (`auth.failed_credentials`), its refusals
    counted in the metrics; None when turned off."""
    cfg = gw.config.auth.failed_credentials
    if not cfg.enabled:
        return None
    counter = gw.metrics.credential_failures
    return CredentialFailures(cfg, count=lambda result: counter.labels(result).inc())


def jwt_verifier(gw: Any) -> JWTVerifier | None:
    """The JWT side of a `Gateway`'s authentication (`auth.jwt`), counting into its metrics; None without issuers."""
    cfg = gw.config
    if not cfg.auth.jwt:
        return None
    from ...payload.ssrf import URLPolicy
    from .jwt_clients import JWTVerifier

    tokens, reads = gw.metrics.jwt_tokens, gw.metrics.jwks_reads
    return JWTVerifier(cfg.auth.jwt, base_dir=cfg.base_dir, clock=gw.clock,
                       policy=URLPolicy(allow_hosts=tuple(cfg.urls.allow_hosts), allow_private=cfg.urls.allow_private),
                       static_names=frozenset(c.name for c in cfg.auth.clients),
                       count=lambda issuer, result: tokens.labels(issuer, result).inc(),
                       on_fetch=lambda issuer, result: reads.labels(issuer, result).inc())
