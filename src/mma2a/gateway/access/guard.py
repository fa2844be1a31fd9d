"""What a message may carry: parts, inline bytes, features size, modalities, URLs, signatures.

`MessageGuard.admit` runs in `Pipeline.prepare` on every binding, before features and
routing: the limits, modality allow/deny lists (gateway-wide and per agent), the SSRF guard
on every field that carries a URL, and the Ed25519 signature of the extension fields
(reject or strip). It returns the sender whose features the feature policy judges.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Literal, Protocol

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...errors import (
    Forbidden,
    InvalidModality,
    MMA2AError,
    PayloadTooLarge,
    SignatureError,
    URLForbidden,
)
from ...ext import EXTENSION_URI, decoded_size
from ...features.base import Limits
from ...features.budget import DECODED_BYTES_PER_PIXEL, DEFAULT_DECODE_BYTES
from ...features.probe import check_raw, looks_like_image
from ...modality import parse_modality
from ...payload.ssrf import URLPolicy, check_url, normalize_url
from ...signing import (
    ReplayGuard,
    carries_features,
    public_key_from_text,
    signature_of,
    strip_features,
    verify_message,
)

log = logging.getLogger("mma2a.gateway.security")

# what follows /blobs/ or /streams/ in the gateway's own URLs: its blob keys and stream ids, in segments of unreserved
# characters not starting with a dot. Nothing else is its own: not `..;` or `;x` (path parameters, which a proxy may
# strip: `/blobs/..;/admin/rules` is `/admin/rules` to Tomcat), not an encoded separator (`%2f`, `%5c`), `%3b`, `%00`
# or any other escape (a proxy that decodes it may walk out of /blobs), not `.`-led segments
_OWN_PATH = re.compile(r"[A-Za-z0-9_~-][A-Za-z0-9._~-]*(?:/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)*/?")


# --- configuration (the `limits`, `urls` and `signing` sections) -----------------------------


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
    # response streams (SSE, gRPC server streams) open at once; past them 429 + Retry-After
    max_response_streams_per_client: int = Field(default=64, ge=1)
    max_response_streams: int = Field(default=1024, ge=1)
    # task records kept for GetTask (gateway/state/tasks.py): in all, and per client within that (its oldest go first)
    task_bytes: int = Field(default=16 * 1024 * 1024, ge=64 * 1024)
    task_bytes_per_client: int = Field(default=4 * 1024 * 1024, ge=16 * 1024)
    # media a message may carry inline or upload, from headers before anything decodes (features.probe)
    max_pixels: int = Field(default=40_000_000, gt=0)
    max_audio_seconds: float = Field(default=4 * 3600.0, gt=0)
    max_audio_samples: int = Field(default=48_000 * 2 * 4 * 3600, gt=0)  # rate x channels x seconds: 4 h of 48 kHz stereo
    # bytes every decode of the gateway holds at once (features, thumbnails, fitting: an image 4 bytes a pixel, audio
    # 8 a sample as decoded, a mesh its bytes); past it a decode waits within its deadline, else is skipped with the
    # reason. `max_decode_pixels_in_flight` says the same budget in pixels (of 4 bytes): set one or the other
    max_decode_bytes_in_flight: int = Field(default=DEFAULT_DECODE_BYTES, ge=1)
    max_decode_pixels_in_flight: int | None = Field(default=None, ge=1)
    max_video_seconds: float = Field(default=4 * 3600.0, gt=0)
    modalities: ModalityLists = Field(default_factory=ModalityLists)
    agents: dict[str, ModalityLists] = Field(default_factory=dict)
    # under overload (gateway/downstream/overload.py, docs/operations.md "Overload"): each agent's concurrency limit (adaptive
    # unless agents[].max_concurrency fixes it; "off": only fixed limits), the bounded priority queue past it
    agent_concurrency: Literal["adaptive", "off"] = "adaptive"
    initial_agent_concurrency: int = Field(default=4, ge=1)
    max_agent_concurrency: int = Field(default=256, ge=1)
    max_queue_per_agent: int = Field(default=256, ge=0)
    # the JSON body worker (large bodies read, answers of many values converted; docs/security.md LN1): its worker
    # processes (lanes) in each gateway process, and what one caller (client, or anonymous address) may hold in it,
    # waiting or running; its jobs are taken in turn across callers, and past these its own next is refused 429
    body_worker_lanes: int = Field(default=1, ge=1, le=64)
    body_worker_jobs_per_client: int = Field(default=8, ge=1)
    body_worker_bytes_per_client: int = Field(default=256 * 1024 * 1024, ge=1)
    # what all callers together may hold in it (bytes, waiting and running; default: the body budget's total,
    # max_body_bytes_in_flight, 8 x max_body_bytes unless set, at least task_bytes: app.body_worker_total): past it a
    # caller past its even share is refused 429, one within it takes the room of the newest waiting jobs of those past
    # theirs (docs/security.md ED4)
    body_worker_bytes_total: int | None = Field(default=None, ge=1)
    # sessions pinned to their route (`pin_session`) a gateway process remembers, its least recently used dropped past
    # it; one client's at most a quarter (a peer gateway's clients each their own: `CLIENT via PEER`). In cluster mode
    # the shared pins are bounded by the sessions bucket instead (cluster.sessions_bucket_bytes, sessions_bytes_per_client)
    session_pins: int = Field(default=100_000, ge=4)
    # connections the gateway keeps open to one agent at most (http:// calls and every stream: SSE); legs past them
    # wait for one in the pool (a leg holding an agent's slot still waits here when this is below the limit)
    max_connections_per_agent: int = Field(default=256, ge=1, le=65_536)
    queue_timeout_s: float = Field(default=5.0, gt=0)  # the longest a leg waits for a slot (sooner: the client's deadline)
    # the longest a routine leg (priority up to 5) waits for a slot: past it, shed (a shed answer comes this soon at
    # the latest); privileged legs wait up to queue_timeout_s. Off by default (None: queue_timeout_s for every leg): a
    # short cap sheds routine requests whenever an agent is briefly full (a burst while an adaptive limit still
    # grows, one client's flood ahead of another's request), which clients of a gateway do not expect by default
    routine_queue_timeout_s: float | None = Field(default=None, gt=0)
    # ratings of tasks (POST /tasks/{id}:feedback, gateway/stages/feedback.py) per client: a token bucket, past it 429
    feedback_per_s: float = Field(default=20.0, gt=0)
    feedback_burst: int = Field(default=100, ge=1)

    @model_validator(mode="after")
    def _decode_budget_in_bytes(self) -> LimitsConfig:
        if self.max_decode_pixels_in_flight is not None:
            if "max_decode_bytes_in_flight" in self.model_fields_set:
                raise ValueError("limits: set max_decode_bytes_in_flight or max_decode_pixels_in_flight, not both")
            self.max_decode_bytes_in_flight = self.max_decode_pixels_in_flight * DECODED_BYTES_PER_PIXEL
        return self

    @property
    def decode_budget_name(self) -> str:
        """The setting a decode budget refusal names: the one the operator set."""
        if self.max_decode_pixels_in_flight is not None:
            return f"limits.max_decode_pixels_in_flight, {DECODED_BYTES_PER_PIXEL} bytes a pixel"
        return "limits.max_decode_bytes_in_flight"


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
    clients: list[str] | None = None  # the authenticated clients allowed to send this signer's messages (None: any)

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
    max_nonces_per_signer: int = Field(default=100_000, ge=1)  # past it, that signer's new messages wait (429)

    @field_validator("senders", mode="before")
    @classmethod
    def _short(cls, v: Any) -> Any:
        return {k: ({"public_key": s} if isinstance(s, str) else s) for k, s in v.items()} if isinstance(v, dict) else v

    @property
    def active(self) -> bool:
        return bool(self.senders)


class NonceLedger(Protocol):
    """Nonces of signed messages shared by every gateway of a cluster (`mma2a.cluster.nonces`)."""

    async def claim(self, signer: str, nonce: str) -> bool:
        """Record a nonce for the replay window; False if a gateway of the cluster has recorded it already.
        `ClusterError` when the shared record cannot be reached (the message is not accepted)."""


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


_NO_EXT: Mapping[str, Any] = {}


def _part_ext(part: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = part.get("metadata")
    if meta is None:  # most parts: no metadata (and a dict is checked before the slower Mapping test)
        return _NO_EXT
    ext = meta.get(EXTENSION_URI) if isinstance(meta, dict) or isinstance(meta, Mapping) else None
    return ext if isinstance(ext, dict) or isinstance(ext, Mapping) else _NO_EXT


def media_limits(limits: LimitsConfig) -> Limits:
    return Limits(max_pixels=limits.max_pixels, max_audio_seconds=limits.max_audio_seconds,
                  max_audio_samples=limits.max_audio_samples,
                  max_video_seconds=limits.max_video_seconds)


def sniff_modality(raw: str, declared: str) -> str | None:
    """The media type to check a raw part as: its declared one, or an image its first bytes say it is."""
    family = declared.split("/", 1)[0].strip().lower()
    if family in ("image", "audio", "video"):
        return declared
    return "image/*" if looks_like_image(raw[:16]) else None  # declared otherwise, but an image decoder takes it


def _part_modality(part: Mapping[str, Any], ext: Mapping[str, Any] | None = None) -> str:
    """The modality a part declares (its extension's, else its `mediaType`), else the one its kind implies."""
    m = (_part_ext(part) if ext is None else ext).get("modality") or part.get("mediaType")
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
        nonces: NonceLedger | None = None,
    ) -> None:
        """`nonces`: the cluster's shared record of nonces (None: this gateway's own `ReplayGuard` only)."""
        self.limits = limits
        self.urls = urls
        self.url_policy = URLPolicy(
            allow_hosts=tuple(urls.allow_hosts), allow_private=urls.allow_private, allowed_schemes=tuple(urls.schemes)
        )
        own = normalize_url(own_url).rstrip("/") if own_url else ""
        self.own_prefixes = tuple(f"{own}/{p}/" for p in ("blobs", "streams")) if own else ()
        if own.startswith("http"):  # the ws:// subscribe URLs its own /streams hand out
            self.own_prefixes += (f"ws{own[4:]}/streams/",)
        self.signing = signing
        self.keys = {name: public_key_from_text(_key_text(name, k), field=f"signing.senders.{name}.public_key")
                     for name, k in signing.senders.items()}
        self.replay = ReplayGuard(signing.window_s, capacity=signing.max_nonces_per_signer)
        self.nonces = nonces
        self.media_limits = media_limits(limits)
        self.clock = clock
        self._url_ok: OrderedDict[str, float] = OrderedDict()

    def admit(
        self, message: dict[str, Any], configuration: Mapping[str, Any] | None, target: str | None, sender: str | None
    ) -> Awaitable[str | None] | None:
        """Check one message (changed in place only by the `strip` policy): None when it is admitted with `sender` as
        the features' sender, else the checks left to wait for (`_admit_rest`), which give the features' sender.

        One pass over the parts does the limits (raised first, in part order, as before any modality is
        looked at), the modality lists (the first refusal raised once every limit passed), and notes
        whether any part has raw bytes to probe or a field that may carry a URL. (Nothing left to wait for, the
        common case: no coroutine to make.)"""
        parts = message.get("parts") or []
        lim = self.limits
        if len(parts) > lim.max_parts:
            raise PayloadTooLarge(f"params.message.parts: {len(parts)} parts, the limit is {lim.max_parts}",
                                  field="params.message.parts")
        lists = self._lists(target)
        refusal: Forbidden | None = None
        inline = 0
        probe = fetch = False
        for i, part in enumerate(parts):
            if not (isinstance(part, dict) or isinstance(part, Mapping)):
                continue
            raw = part.get("raw")
            if isinstance(raw, str):
                inline += decoded_size(raw)
            else:
                text = part.get("text")
                if isinstance(text, str):
                    inline += len(text)
            if inline > lim.max_inline_bytes:
                raise PayloadTooLarge(
                    f"params.message.parts[{i}]: inline content passes {lim.max_inline_bytes} bytes; "
                    "send large media by reference (POST /blobs)", field=f"params.message.parts[{i}]")
            ext = _NO_EXT
            if "metadata" in part:
                fetch = True
                ext = _part_ext(part)
                features = ext.get("features")
                if features:
                    size = len(orjson.dumps(features, option=orjson.OPT_NON_STR_KEYS)) if _jsonable(features) else math.inf
                    if size > lim.max_features_bytes:
                        where = f"params.message.parts[{i}].metadata[{EXTENSION_URI}].features"
                        raise PayloadTooLarge(f"{where}: {size} bytes, the limit is {lim.max_features_bytes}", field=where)
            elif "url" in part:
                fetch = True
            if "raw" in part:
                probe = True
            if lists and refusal is None:
                refusal = self._modality_refusal(i, part, ext, lists)
        if refusal is not None:
            raise refusal
        if probe or (self.urls.check and (configuration is not None or fetch)) or self.signing.active:
            return self._admit_rest(message, configuration, sender, probe, fetch)
        return None

    async def _admit_rest(self, message: dict[str, Any], configuration: Mapping[str, Any] | None, sender: str | None,
                          probe: bool, fetch: bool) -> str | None:
        """`admit`'s checks that wait: raw media probed (`probe`), URLs checked, the signature verified."""
        if probe:  # else nothing to probe
            await self.check_media(message)
        if self.urls.check and (configuration is not None or fetch):
            await self.check_urls(message, configuration)  # else no field that carries a URL
        if not self.signing.active:  # nothing signed to check: no coroutine to make
            return sender
        return await self.check_signature(message, sender)

    def _lists(self, target: str | None) -> list[tuple[str, ModalityLists]]:
        """The modality lists a message to `target` is held to (none when no list says anything)."""
        lists = []
        gateway = self.limits.modalities
        if gateway.allow or gateway.deny:
            lists.append(("this gateway", gateway))
        if target is not None:
            own = self.limits.agents.get(target)
            if own is not None and (own.allow or own.deny):
                lists.append((f"agent {target}", own))
        return lists

    @staticmethod
    def _modality_refusal(i: int, part: Mapping[str, Any], ext: Mapping[str, Any],
                          lists: list[tuple[str, ModalityLists]]) -> Forbidden | None:
        modality = _part_modality(part, ext)
        for who, ml in lists:
            why = modality_refusal(modality, ml)
            if why is not None:
                return Forbidden(f"params.message.parts[{i}]: modality {modality} {why} of {who}",
                                 field=f"params.message.parts[{i}]")
        return None

    async def check_media(self, message: Mapping[str, Any]) -> None:
        """Raw images, audio and video: refused from their headers when they declare more pixels or seconds than
        `limits` allow (decompression bombs), before anything decodes them — here or at an agent."""
        for i, part in enumerate(message.get("parts") or []):
            raw = part.get("raw") if isinstance(part, Mapping) else None
            if not isinstance(raw, str) or not raw:
                continue
            modality = sniff_modality(raw, _part_modality(part))
            if modality is None:
                continue
            where = f"params.message.parts[{i}].raw"  # off the event loop: an image's bounded walk, a container's all
            await asyncio.to_thread(check_raw, raw, modality, self.media_limits, where)

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
            await self.check_url(url, where)

    async def check_url(self, url: str, where: str) -> None:
        """`URLForbidden` naming `where` when the `urls` policy refuses `url` (a no-op with `urls.check` off)."""
        if not self.urls.check:
            return
        if len(url) > self.limits.max_url_length:
            raise URLForbidden(f"{where}: URL of {len(url)} characters, the limit is {self.limits.max_url_length}",
                               field=where)
        try:  # compared after normalisation: /blobs/x/../../tasks/a is not one of its own blob URLs, nor is a path
            # with an escape or a path parameter (`/blobs/..%2fadmin`, `/blobs/..;/admin`: see `_OWN_PATH`)
            normal = normalize_url(url) if self.own_prefixes else ""
            own = self.is_own(normal)
        except URLForbidden as exc:
            raise URLForbidden(f"{where}: {exc.message}", field=where) from None
        if own:
            return
        now = self.clock()
        seen = self._url_ok.get(url)
        if seen is not None and now - seen < 60:
            return
        try:
            await check_url(url, self.url_policy)
        except URLForbidden as exc:
            raise URLForbidden(f"{where}: {exc.message}", field=where) from None
        except MMA2AError as exc:  # unresolvable host
            raise URLForbidden(f"{where}: refused: {exc.message}", field=where) from None
        self._url_ok[url] = now
        while len(self._url_ok) > 10_000:
            self._url_ok.popitem(last=False)

    def is_own(self, normal: str) -> bool:
        """The normalised URL is one of the gateway's own blob or stream URLs (checked then by their signature)."""
        for prefix in self.own_prefixes:
            if normal.startswith(prefix):
                path = normal[len(prefix):].partition("?")[0].partition("#")[0]
                return _OWN_PATH.fullmatch(path) is not None
        return False

    async def check_signature(self, message: dict[str, Any], sender: str | None) -> str | None:
        if not self.signing.active:
            return sender
        sig = signature_of(message)
        if sig is None and not carries_features(message):
            return sender  # nothing to believe or doubt
        try:
            self._check_bound(sig, sender)
            signer = verify_message(message, self.keys, now=self.clock(), replay=self.replay)
            if self.nonces is not None:
                await self._claim(signer, str(sig["nonce"]))
            return signer
        except SignatureError as exc:
            if self.signing.policy == "reject":
                raise
            n = strip_features(message)
            log.info("features stripped from %d parts of %s: %s", n, message.get("messageId"), exc.message)
            return sender


    def _check_bound(self, sig: Any, sender: str | None) -> None:
        """A signer bound to clients (`signing.senders.NAME.clients`) is believed only from them (checked before the
        signature, so a message refused here burns no nonce)."""
        signer = sig.get("signer") if isinstance(sig, Mapping) else None
        key = self.signing.senders.get(signer) if isinstance(signer, str) else None
        if key is None or key.clients is None or sender in key.clients:
            return
        where = f"message.metadata[{EXTENSION_URI}].signature.signer"
        who = f"client {sender!r}" if sender is not None else "an unauthenticated caller"
        raise SignatureError(f"{where}: signer {signer!r} may send only through clients {', '.join(key.clients)} "
                             f"(signing.senders.{signer}.clients); this message came from {who}", field=where)

    async def _claim(self, signer: str, nonce: str) -> None:
        """The nonce once per cluster: a nonce another gateway has recorded is a replay; with the record out of
        reach the message is not accepted (and its nonce stays usable for the retry)."""
        assert self.nonces is not None
        try:
            fresh = await self.nonces.claim(signer, nonce)
        except MMA2AError:
            self.replay.forget(signer, nonce)
            raise
        if not fresh:
            where = f"message.metadata[{EXTENSION_URI}].signature.nonce"
            raise SignatureError(f"{where}: nonce already used by {signer} on another gateway of the cluster "
                                 "(replayed message)", field=where)


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
