"""Who a peer gateway's client is: the upstream gateway signs an assertion of the client it authenticated, the
downstream gateway keys everything per client by (peer, upstream client).

Without it a federated hop made every client of the upstream gateway one principal downstream: the same
`messageId` from two of its clients was one task, one client's flood emptied the rate bucket of all
(docs/security.md, round 6).

The upstream (`federation.private_key_env`) adds to each call it makes on a client's behalf to another gateway
(an agent whose card marks the extension with `params.gateway: true`, as every card a gateway serves does) the
header `MMA2A-Upstream-Client` (gRPC metadata `mma2a-upstream-client`):

    v1.<base64url of the RFC 8785 form of {"v": 1, "gateway", "key", "client", "for", "ts", "n"}>.<base64url Ed25519 signature>

`client` is the principal the upstream keys the caller by, `for` what the call is about (`message:<messageId>` for
SendMessage and SendStreamingMessage, `task:<id>` for GetTask, CancelTask and SubscribeToTask, `list:<digest>` for
ListTasks: the digest of its params, `list_bound`), `ts` the Unix
time, `key` the signing key's id (`key_id`: which trusted peer's key verifies it, without trying each), `n` a random
nonce (no two sends carry the same assertion: a request sent again, after a cut connection or as a 415's plain resend, is signed again). The downstream (`federation.trusted_gateways: {CLIENT_ID: {public_key_env}}`) checks it at the door, for a
caller authenticated as CLIENT_ID only: the signature with that peer's key, `ts` within `window_s`, and, where the
request is read, that `for` names this request (`check_bound`), and that the assertion was never used before: each is
good for one request, on this gateway and (with a cluster) on every gateway of the cluster (`NonceLedger`), so one
lifted from the wire cannot be presented again within its window. The principal is then `client via CLIENT_ID` (the
peer's policy — agents, rate, burst — applies to each of its clients apart). From any other caller the header is
ignored: the caller stays one principal. A header from a trusted peer that does not verify is refused (401
naming it). The header travels on the wire between gateways only: agents never see it, and it is not in `via`
(a message's metadata reaches every agent downstream and the tasks' histories, where it could be lifted).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from ...errors import ClusterError, ConfigError, RateLimited, SignatureError, Unauthorized
from ...ext import PROTOCOL_NAME
from ...signing import ReplayGuard, canonicalize, private_key_from_text, public_key_from_text, public_key_text
from .clients import Client, current_client

if TYPE_CHECKING:  # cryptography is imported where an assertion is checked (keys come from signing)
    from .guard import NonceLedger
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

HEADER = "MMA2A-Upstream-Client"
HEADER_KEY = HEADER.lower()  # as headers and gRPC metadata are read
MAX_HEADER = 2048
MAX_CLIENT = 512
_CLIENT = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,510}[\x21-\x7e])?")  # printable ASCII (multi-hop: `alice via gwa`)
_BOUND_METHODS = {"SendMessage": "message", "SendStreamingMessage": "message",
                  "GetTask": "task", "CancelTask": "task", "SubscribeToTask": "task",
                  f"{PROTOCOL_NAME}/TaskFeedback": "task",  # a rating passed on to the peer that ran the task
                  "ListTasks": "list"}


@dataclasses.dataclass(frozen=True, slots=True)
class Asserted:
    """What a verified assertion says: the trusted `peer` (its client id here) signed that its `client` sent the
    request `bound` (`message:<id>`, `task:<id>`, `list:<digest>`)."""

    peer: str
    client: str
    bound: str
    ident: str = ""  # which assertion (a digest of its payload): each is used once
    ts: int = 0  # its time (when it may be forgotten)


class TrustedGateway(BaseModel):
    """A peer gateway whose assertions are believed: its Ed25519 public key (32 bytes, base64), from the env."""

    model_config = ConfigDict(extra="forbid")

    public_key_env: str | None = None
    public_key: str | None = None  # the key itself (tests, labs); `public_key_env` in production


class FederationConfig(BaseModel):
    """`federation:` in gateway.yaml (docs/operations.md, "Federation")."""

    model_config = ConfigDict(extra="forbid")

    private_key_env: str | None = None  # set: this gateway signs who its clients are for the gateways it calls
    trusted_gateways: dict[str, TrustedGateway] = Field(default_factory=dict)  # peer client id -> its key
    window_s: float = Field(default=60.0, gt=0, le=3600)  # how far an assertion's `ts` may be from this clock
    max_assertions_per_peer: int = Field(default=1_000_000, ge=1)  # used ones remembered (a window's); past it 429


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def key_id(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The id an assertion names its signing key by: the first 16 hex digits of the SHA-256 of the public key's text."""
    return hashlib.sha256(public_key_text(key).encode()).hexdigest()[:16]


def list_bound(params: Mapping[str, Any]) -> str | None:
    """What an assertion for a ListTasks is signed for: `list:<digest>`, the SHA-256 (32 hex digits) of the RFC 8785
    form of its params as the A2A type reads them (proto JSON names, defaults left out), `tenant` aside (the path
    names the agent). The upstream signs the params it sends and the downstream checks the params it read (the same
    request read back: `check_bound("list", …)`), so an assertion lifted from one listing lists nothing else, and one
    from a message or a task call no listing. None: params the A2A type does not read (the call carries none)."""
    from a2a.types import ListTasksRequest
    from google.protobuf import json_format

    try:
        read = json_format.MessageToDict(json_format.ParseDict(dict(params), ListTasksRequest(), ignore_unknown_fields=True))
    except (json_format.ParseError, TypeError, ValueError):
        return None
    read.pop("tenant", None)
    return f"list:{hashlib.sha256(canonicalize(read)).hexdigest()[:32]}"


def bound_to(method: str, params: Mapping[str, Any]) -> str | None:
    """What an assertion for `method` is signed for (`message:<id>`, `task:<id>`, `list:<digest>`); None: the call
    carries none."""
    kind = _BOUND_METHODS.get(method)
    if kind == "list":
        return list_bound(params)
    if kind == "message":
        message = params.get("message")
        mid = message.get("messageId") if isinstance(message, Mapping) else None
        return f"message:{mid}" if isinstance(mid, str) and mid else None
    if kind == "task":
        tid = params.get("id")
        return f"task:{tid}" if isinstance(tid, str) and tid else None
    return None


def check_bound(kind: str, value: object) -> None:
    """`Unauthorized` when the caller's principal comes from an assertion signed for another request than this one,
    `kind` (`message`, `task`, `list`) `value` (its id; a listing's digest, `list_bound`): an assertion lifted from one
    request cannot name the caller of another. (Nothing is built for a caller without an assertion: one look at the context.)"""
    client = current_client.get()
    if client is None or client.bound is None or client.bound == f"{kind}:{value}":
        return
    raise Unauthorized(f"{HEADER}: the assertion was signed for another request than this one ({kind} {value!r}); "
                       "the upstream gateway signs one per request", field=HEADER)


def check_listing(params: Mapping[str, Any]) -> None:
    """`Unauthorized` when the caller's principal comes from an assertion not signed for this ListTasks (`params`, as
    read): one lifted from a message, a task call or another listing lists none of that client's tasks. (Nothing is
    computed for a caller without an assertion.)"""
    client = current_client.get()
    if client is None or client.bound is None or client.bound == list_bound(params):
        return
    raise Unauthorized(f"{HEADER}: the assertion was signed for {client.bound.replace(':', ' ', 1)}, not for this "
                       "ListTasks (the upstream gateway signs each listing for its params)", field=HEADER)


def check_unbound(what: str, client: Client | None = None) -> None:
    """`Unauthorized` when the caller's principal (`client`, else the request's) comes from an assertion, on a request
    the upstream never signs one for (`what`: ListTasks, a blob upload, ...): the assertion was lifted from another
    request, and believing it would let one message's assertion list or charge everything of that client for the rest
    of the window."""
    client = client or current_client.get()
    if client is None or client.bound is None:
        return
    raise Unauthorized(f"{HEADER}: the assertion was signed for {client.bound.replace(':', ' ', 1)}; {what} carries "
                       "none (the upstream gateway signs messages, task calls, listings and ratings only)", field=HEADER)


class Federation:
    """The signing side (an upstream's key) and the trusting side (peers' keys) of client assertions."""

    def __init__(self, gateway_id: str, *, private_key: Ed25519PrivateKey | None = None,
                 peers: Mapping[str, Ed25519PublicKey] | None = None, window_s: float = 60.0,
                 max_assertions_per_peer: int = 1_000_000, ledger: NonceLedger | None = None) -> None:
        """`ledger`: the cluster's record of nonces, where each assertion used is claimed once for every gateway
        of the cluster (None: this gateway's own record only)."""
        self.gateway_id = gateway_id
        self.private_key = private_key
        self.peers = dict(peers or {})
        self.window_s = window_s
        self.ledger = ledger
        self._used = ReplayGuard(window_s, capacity=max_assertions_per_peer)  # peer -> assertions used, per window
        self._key = key_id(private_key) if private_key is not None else None
        self._by_key = {key_id(key): peer for peer, key in self.peers.items()}  # an assertion's `key` -> its peer

    @classmethod
    def from_config(cls, config: FederationConfig, gateway_id: str, environ: Mapping[str, str] | None = None,
                    ledger: NonceLedger | None = None) -> Federation | None:
        """None when the section sets nothing; `ConfigError` naming the field of a key that is missing or bad."""
        if config.private_key_env is None and not config.trusted_gateways:
            return None
        env = os.environ if environ is None else environ
        private = None
        if config.private_key_env is not None:
            text = env.get(config.private_key_env)
            if not text:
                raise ConfigError(f"federation.private_key_env: the environment variable {config.private_key_env} is "
                                  "not set (32 bytes of Ed25519 private key in base64)", field="federation.private_key_env")
            try:
                private = private_key_from_text(text)
            except SignatureError as exc:
                raise ConfigError(f"federation.private_key_env: {config.private_key_env}: {exc.message}",
                                  field="federation.private_key_env") from None
        peers = {}
        for peer, trusted in config.trusted_gateways.items():
            where = f"federation.trusted_gateways.{peer}"
            text = trusted.public_key or (env.get(trusted.public_key_env) if trusted.public_key_env else None)
            if not text:
                what = f"the environment variable {trusted.public_key_env} is not set" if trusted.public_key_env \
                    else "public_key_env is required"
                raise ConfigError(f"{where}: {what}", field=where)
            try:
                peers[peer] = public_key_from_text(text, field=where)
            except SignatureError as exc:
                raise ConfigError(exc.message, field=where) from None
        return cls(gateway_id, private_key=private, peers=peers, window_s=config.window_s,
                   max_assertions_per_peer=config.max_assertions_per_peer, ledger=ledger if peers else None)

    # --- upstream: sign -------------------------------------------------------------------------------

    def assertion(self, principal: str, bound: str, ts: int) -> str:
        """The header value asserting `principal` for the request `bound` (see the module's doc)."""
        assert self.private_key is not None
        body = canonicalize({"v": 1, "gateway": self.gateway_id, "key": self._key, "client": principal, "for": bound,
                             "ts": ts, "n": secrets.token_urlsafe(12)})
        return f"v1.{_b64(body)}.{_b64(self.private_key.sign(body))}"

    def signer(self, method: str, params: Mapping[str, Any], principal: str | None = None
               ) -> Callable[[], dict[str, str]] | None:
        """What makes the assertion header of a call made for the current client (or for `principal`, the client a
        durable delivery was accepted for, sent later by a dispatcher outside the client's request), a fresh one (its
        own nonce and time) for each send of it: the downstream takes each once, so a request sent again — after a
        cut connection, as a 415's plain resend, with a refreshed credential, redelivered — would be refused as a
        replay with the first's. None: no key, no client, or a call that carries none."""
        if self.private_key is None:
            return None
        if principal is None:
            client = current_client.get()
            if client is None or client.scheme == "admin":
                return None
            principal = client.key
        bound = bound_to(method, params)
        if bound is None:
            return None

        def sign(who: str = principal) -> dict[str, str]:
            return {HEADER: self.assertion(who, bound, int(time.time()))}

        return sign

    # --- downstream: verify ---------------------------------------------------------------------------

    def principal(self, client: Client | None, value: str | None, now: float,
                  asserted: Asserted | None = None) -> Client | None:
        """The caller as this gateway keys it: `client`'s upstream client when `client` is a trusted peer whose
        header verifies; `client` itself when it is not a trusted peer or sent none; `Unauthorized` naming the
        header when a trusted peer's does not verify. `asserted`: the header as `asserted` read it already."""
        if client is None or value is None or client.upstream is not None:
            return client
        key = self.peers.get(client.name)
        if key is None:  # not a gateway this one trusts: what it says of its clients is ignored
            return client
        if asserted is None or asserted.peer != client.name:
            asserted = self._verify(value, key, client.name, now)
        self._spend(asserted, now)
        return dataclasses.replace(client, upstream=asserted.client, bound=asserted.bound)

    def _spend(self, asserted: Asserted, now: float) -> None:
        """Record the assertion as used on this gateway; `Unauthorized` naming why when it was used already (a replay
        of a lifted header), `RateLimited` when the peer has sent more than `max_assertions_per_peer` in a window."""
        try:
            self._used.remember(asserted.peer, asserted.ident, now, asserted.ts)
        except SignatureError:
            raise _replayed() from None
        except RateLimited as exc:
            raise RateLimited(f"{HEADER}: {asserted.peer} sent {self._used.held(asserted.peer)} assertions inside the "
                              f"{self.window_s:g} s window (federation.max_assertions_per_peer); its requests are "
                              f"refused for {exc.retry_after:.0f} s", retry_after=exc.retry_after) from None

    async def claim(self, client: Client, value: str | None) -> None:
        """The assertion `client`'s principal came from (the header `value`), once for every gateway of the cluster:
        `Unauthorized` when another gateway has recorded it (a replay there), `ClusterError` (503) when the record
        is out of reach (not served: a replay could not be told apart). Nothing without a ledger or an assertion."""
        if self.ledger is None or client.bound is None or value is None:
            return
        try:
            fresh = await self.ledger.claim(f"federation:{client.name}", _ident(value))
        except ClusterError as exc:  # (its words name a signed message)
            raise ClusterError(f"{HEADER}: not accepted: {exc.message.partition(': ')[2]}", field=HEADER) from None
        if not fresh:
            raise _replayed(" on another gateway of the cluster")

    def asserted(self, value: str, now: float) -> Asserted | None:
        """Whom the header asserts, if it verifies with the key of the trusted peer it names (`key`) within the
        window (None otherwise, and no refusal: whether the caller is that peer is known only once its credential is
        checked). Read before the credential so that the credential's failures count against the peer's client, not
        the peer's address (`failures.CredentialFailures`). One signature checked at most: with every peer's key tried
        in turn, anyone could make each request cost a signature per trusted peer before its credential was looked at
        (session 15, S15-6); an assertion naming no key (an upstream from before) is read only as `principal` reads
        it, from the peer its credential names."""
        if len(value) > MAX_HEADER:
            return None
        try:
            doc = orjson.loads(_unb64(value.strip().split(".", 2)[1]))  # unsigned yet: only which key to try
        except (IndexError, binascii.Error, ValueError):
            return None
        key = doc.get("key") if isinstance(doc, dict) else None
        peer = self._by_key.get(key) if isinstance(key, str) else None
        if peer is None:
            return None
        try:
            asserted = self._verify(value, self.peers[peer], peer, now)
        except Unauthorized:
            return None
        # one used already is a replay: its credential is judged as its address's, never the peer's client's
        return None if self._used.holds(peer, asserted.ident, now) else asserted

    def _verify(self, value: str, key: Ed25519PublicKey, peer: str, now: float) -> Asserted:
        def refuse(why: str) -> Unauthorized:
            return Unauthorized(f"{HEADER}: {why}", field=HEADER)

        if len(value) > MAX_HEADER:
            raise refuse(f"longer than {MAX_HEADER} characters")
        version, _, rest = value.strip().partition(".")
        body_text, _, sig_text = rest.partition(".")
        if version != "v1" or not body_text or not sig_text:
            raise refuse("not an assertion (v1.<payload>.<signature>)")
        try:
            body, sig = _unb64(body_text), _unb64(sig_text)
        except (binascii.Error, ValueError):
            raise refuse("not base64url") from None
        from cryptography.exceptions import InvalidSignature

        try:
            key.verify(sig, body)
        except InvalidSignature:
            raise refuse(f"the signature does not verify with the key of {peer} "
                         f"(federation.trusted_gateways.{peer})") from None
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise refuse("the payload is not JSON") from None
        if not isinstance(doc, dict) or doc.get("v") != 1:
            raise refuse("the payload is not a version 1 assertion")
        upstream, bound, ts = doc.get("client"), doc.get("for"), doc.get("ts")
        if not isinstance(upstream, str) or _CLIENT.fullmatch(upstream) is None:
            raise refuse(f"client: must be 1 to {MAX_CLIENT} printable characters")
        if not isinstance(bound, str) or not bound.startswith(("message:", "task:", "list:")):
            raise refuse("for: must name the request (message:<messageId>, task:<id> or list:<digest>)")
        if isinstance(ts, bool) or not isinstance(ts, int):
            raise refuse("ts: must be an integer (Unix seconds)")
        if abs(now - ts) > self.window_s:
            age = now - ts
            when = f"{age:.0f} s old" if age > 0 else f"{-age:.0f} s in the future"
            raise refuse(f"the assertion is {when}, outside the {self.window_s:g} s window "
                         "(federation.window_s; replayed, or the clocks disagree)")
        return Asserted(peer, upstream, bound, _ident(value), ts)


def _ident(value: str) -> str:
    """Which assertion a header carries: a digest of its signed payload (the nonce `n` in it makes each call's own)."""
    return hashlib.sha256(value.strip().partition(".")[2].partition(".")[0].encode()).hexdigest()[:32]


def _replayed(where: str = "") -> Unauthorized:
    return Unauthorized(f"{HEADER}: the assertion was used already{where} (each is good for one request; a replay "
                        "of a lifted header is refused): the upstream gateway signs one per call", field=HEADER)
