"""Pipeline stage: fit each leg's parts to its receiver's profiles (`mma2a.adapt`), as recorded transforms.

For every part an agent wants in another form (fewer pixels, another encoding, another
sample rate), the bytes are adapted off the event loop within a time budget. A part by
reference gets its variant in the blob store, content-addressed and cached by (source
digest, profile), and travels by reference; an inline part travels inline (by reference
when the variant is over the offload threshold). A failure forwards the original and
records why. An agent without profiles costs one dict look-up per leg.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ...adapt.media import Adapted, fit_media
from ...adapt.profiles import ReceiverProfile, ReceiverProfiles, card_params, receiver_profiles
from ...compression import pick
from ...errors import MMA2AError
from ...ext import EXTENSION_URI, PayloadRef, decoded_size
from ...features.base import Limits, set_deadline
from ...features.budget import DecodeBudget, decode_cost
from ...modality import Modality, parse_modality
from ...payload import BlobStore, URLSigner
from ...payload.store import check_key
from ..downstream.directory import AgentEntry

log = logging.getLogger("mma2a.gateway.adapt")

_SUFFIX = {"image/webp": ".webp", "image/jpeg": ".jpg", "image/png": ".png", "audio/ogg": ".ogg", "audio/flac": ".flac",
           "audio/wav": ".wav", "audio/webm": ".webm", "video/mp4": ".mp4", "video/webm": ".webm"}


@dataclass(frozen=True, slots=True)
class Adaptation:
    """One recorded transform of one part for one agent (or why the original went instead)."""

    index: int
    agent: str
    source: str
    target: str
    bytes_before: int
    bytes_after: int
    ms: float
    cached: bool = False
    detail: str = ""
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"agent": self.agent, "from": self.source, "to": self.target,
                               "bytesBefore": self.bytes_before, "bytesAfter": self.bytes_after,
                               "ms": round(self.ms, 1), "cached": self.cached}
        if self.detail:
            out["detail"] = self.detail
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True, slots=True)
class _Variant:
    key: str
    size: int
    media_type: str
    detail: str


class PartAdapter:
    """Adapts parts for receivers with profiles; variants live in `store`, remembered by (digest, profile)."""

    def __init__(
        self, store: BlobStore, signer: URLSigner, *, base_url: str, limits: Limits | None = None,
        budget_s: float = 10.0, inline_max: int = 256 * 1024, cache_entries: int = 4096,
        decode_budget: DecodeBudget | None = None,
    ) -> None:
        self.decode_budget = decode_budget
        self.store = store
        self.signer = signer
        self.base_url = base_url.rstrip("/")
        self.limits = limits or Limits()
        self.budget_s = budget_s
        self.inline_max = inline_max
        self.cache_entries = cache_entries
        self._cache: OrderedDict[tuple[str, str], _Variant] = OrderedDict()  # (source sha256, profile key) -> variant
        self._running: dict[tuple[str, str], asyncio.Future[_Variant]] = {}
        self._profiles: dict[str, tuple[Mapping[str, Any], ReceiverProfiles, str | None]] = {}

    def profiles(self, entry: AgentEntry) -> ReceiverProfiles:
        """The agent's profiles: its card's params merged with gateway.yaml (recomputed when the card changes)."""
        return self._memo(entry)[1]

    def coding(self, entry: AgentEntry) -> str | None:
        """The content coding for JSON bodies to this agent (the first it reads that we write), or None."""
        return self._memo(entry)[2]

    def _memo(self, entry: AgentEntry) -> tuple[Mapping[str, Any], ReceiverProfiles, str | None]:
        memo = self._profiles.get(entry.name)
        if memo is not None and memo[0] is entry.card:  # per request: one look-up and one identity test
            return memo
        try:
            found = receiver_profiles(card_params(entry.card, EXTENSION_URI), entry.config.accepts or None,
                                      entry.config.compress)
        except MMA2AError as exc:  # the agent's card says something we cannot read: the operator's part still holds
            log.warning("agent %s: card params ignored: %s", entry.name, exc.message)
            found = receiver_profiles({}, entry.config.accepts or None, entry.config.compress)
        memo = self._profiles[entry.name] = (entry.card, found, pick(found.content_encodings))
        return memo

    async def fit(
        self, entry: AgentEntry, parts: list[tuple[int, dict[str, Any]]]
    ) -> tuple[list[tuple[int, dict[str, Any]]], list[Adaptation]]:
        """The leg's parts fitted to `entry`'s profiles, and what was done."""
        profiles = self.profiles(entry)
        jobs = []
        for k, (index, part) in enumerate(parts):
            found = _wanted(part, profiles) if profiles and _media_part(part) else None
            if found is not None:
                jobs.append((k, self._fit_part(entry.name, index, part, *found)))
        if not jobs:
            return parts, []
        results = await asyncio.gather(*(j for _, j in jobs))
        out, records = list(parts), []
        for (k, _), (part, record) in zip(jobs, results):
            if record is not None:
                out[k] = (out[k][0], part)
                records.append(record)
        return out, records

    async def _fit_part(
        self, agent: str, index: int, part: dict[str, Any], ext: Mapping[str, Any], modality: Modality,
        profile: ReceiverProfile,
    ) -> tuple[dict[str, Any], Adaptation | None]:
        t0 = time.perf_counter()
        source = str(modality)
        try:
            data, digest = await self._source_bytes(part)
        except _NotHere as why:
            return part, Adaptation(index, agent, source, source, 0, 0, 0.0, error=str(why))
        key = (digest, profile.key)
        variant = self._cache.get(key)
        cached = variant is not None
        try:
            if variant is not None:
                self._cache.move_to_end(key)
            else:
                variant, cached = await self._variant(key, data, modality, profile)
        except (MMA2AError, TimeoutError, OSError, ValueError, RuntimeError) as exc:
            reason = exc.message if isinstance(exc, MMA2AError) else str(exc) or type(exc).__name__
            return part, Adaptation(index, agent, source, source, len(data), len(data),
                                    (time.perf_counter() - t0) * 1000, error=f"original forwarded: {reason}")
        ms = (time.perf_counter() - t0) * 1000
        if variant.key == "":  # already fits
            return part, None
        new = await self._rewrite(part, ext, variant, digest, len(data), inline=isinstance(part.get("raw"), str))
        return new, Adaptation(index, agent, source, variant.media_type, len(data), variant.size, ms, cached,
                               variant.detail)

    async def _source_bytes(self, part: dict[str, Any]) -> tuple[bytes, str]:
        raw = part.get("raw")
        if isinstance(raw, str):
            if (size := decoded_size(raw)) > self.limits.max_bytes:
                raise _NotHere(f"{size} bytes is over the adaptation limit of {self.limits.max_bytes}")
            try:
                data = base64.b64decode(raw)
            except (binascii.Error, ValueError):
                raise _NotHere("raw is not valid base64") from None
            return data, hashlib.sha256(data).hexdigest()
        url = part.get("url")
        if not isinstance(url, str) or not url.startswith(self.base_url + "/blobs/"):
            raise _NotHere("not adapted: the bytes are not in the gateway's blob store")
        parts = urlsplit(url)
        digest = parts.path.rsplit("/", 1)[-1]
        query = parse_qs(parts.query)
        try:
            check_key(digest)
            self.signer.verify("GET", digest, query.get("exp", [""])[0], query.get("sig", [""])[0])
            info = await self.store.stat(digest)
        except MMA2AError as exc:  # a bad signature, an expired URL, a blob no longer stored
            raise _NotHere(f"not adapted: {exc.message}") from None
        if info.size > self.limits.max_bytes:
            raise _NotHere(f"not adapted: {info.size} bytes is over the adaptation limit of {self.limits.max_bytes}")
        return await self.store.read_all(digest), digest

    async def _variant(self, key: tuple[str, str], data: bytes, modality: Modality, profile: ReceiverProfile
                       ) -> tuple[_Variant, bool]:
        """The variant, and whether it was another request's work (adapted once for both)."""
        running = self._running.get(key)
        if running is not None:  # the same source for the same profile is being adapted: wait for it
            try:
                return await asyncio.shield(running), True
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # this request is being cancelled
                raise TimeoutError("the same adaptation, started by another request, was cancelled") from None
        fut: asyncio.Future[_Variant] = asyncio.get_running_loop().create_future()
        self._running[key] = fut
        try:
            deadline = time.monotonic() + self.budget_s

            def work() -> Adapted | None:
                set_deadline(deadline)
                try:
                    if self.decode_budget is None:
                        return fit_media(data, modality, profile, self.limits)
                    with self.decode_budget.reserve(decode_cost(data, modality), deadline, "adapt",
                                                    self.decode_budget.who()):  # a copy of the request's context
                        return fit_media(data, modality, profile, self.limits)
                finally:
                    set_deadline(None)

            adapted = await asyncio.wait_for(asyncio.to_thread(work), self.budget_s)
            if adapted is None:
                variant = _Variant("", len(data), str(modality), "fits")
            else:
                info = await self.store.put_bytes(adapted.data, adapted.media_type)
                variant = _Variant(info.key, info.size, adapted.media_type, adapted.detail)
            self._cache[key] = variant
            while len(self._cache) > self.cache_entries:
                self._cache.popitem(last=False)
            fut.set_result(variant)
            return variant, False
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                fut.cancel()
            else:
                fut.set_exception(exc)
                fut.exception()  # retrieved: waiters get it, nobody else must
            raise
        finally:
            del self._running[key]

    async def _rewrite(self, part: dict[str, Any], ext: Mapping[str, Any], variant: _Variant, digest: str, size: int,
                       *, inline: bool) -> dict[str, Any]:
        new = {k: v for k, v in part.items() if k not in ("raw", "url", "metadata")}
        meta = copy.deepcopy(part.get("metadata") or {})
        fext = {k: v for k, v in ext.items() if k not in ("features", "featureSchema", "featureSource", "payload")}
        fext["modality"] = variant.media_type
        fext["adaptedFrom"] = {"modality": ext.get("modality") or part.get("mediaType"), "sha256": digest, "size": size}
        if inline and variant.size <= self.inline_max:
            new["raw"] = base64.b64encode(await self.store.read_all(variant.key)).decode("ascii")
            fext["encoding"] = "base64"
        else:
            exp, sig = self.signer.sign_query(variant.key, "GET")
            new["url"] = f"{self.base_url}/blobs/{variant.key}?exp={exp}&sig={sig}"
            fext["encoding"] = "native"
            fext["payload"] = PayloadRef(variant.key, variant.size, exp).to_json()
        new["mediaType"] = variant.media_type
        if isinstance(new.get("filename"), str):
            suffix = _SUFFIX.get(parse_modality(variant.media_type).essence)
            if suffix:
                new["filename"] = str(PurePosixPath(new["filename"]).with_suffix(suffix))
        meta[EXTENSION_URI] = fext
        new["metadata"] = meta
        return new


class _NotHere(Exception):
    """The part's bytes are not available to adapt (the reason is recorded, the original goes)."""


def _wanted(part: Mapping[str, Any], profiles: ReceiverProfiles
            ) -> tuple[Mapping[str, Any], Modality, ReceiverProfile] | None:
    """(extension fields, modality, profile) of a part the receiver has a profile for, or None."""
    ext = (part.get("metadata") or {}).get(EXTENSION_URI) or {}
    declared = ext.get("modality") or part.get("mediaType")
    if not isinstance(declared, str):
        return None
    try:
        modality = parse_modality(declared)
    except MMA2AError:
        return None
    profile = profiles.for_modality(modality)
    return None if profile is None else (ext, modality, profile)


def _media_part(part: Mapping[str, Any]) -> bool:
    return isinstance(part.get("raw"), str) or isinstance(part.get("url"), str)
