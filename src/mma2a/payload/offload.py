"""Offload: inline `raw` parts above a threshold become signed `url` parts with `payload` metadata.

Runs before dispatch, once for every target: receivers fetch the bytes by URL instead of
reading base64 out of JSON. The part keeps its `mediaType`, `filename` and other metadata;
its extension fields get `encoding: native` and `payload: {sha256, size, expires}`.
"""

from __future__ import annotations

import base64
import binascii
import copy
from collections.abc import AsyncIterator, Mapping
from typing import Any

from ..errors import PayloadError
from ..ext import EXTENSION_URI, PayloadRef, decoded_size
from .signing import URLSigner
from .store import DEFAULT_MEDIA_TYPE, BlobStore

DEFAULT_THRESHOLD = 256 * 1024
_B64_SLICE = 4 * 64 * 1024  # base64 characters decoded per chunk (a multiple of 4)


async def _decode_chunks(raw: str, where: str) -> AsyncIterator[bytes]:
    """Decode base64 (standard or URL-safe, as protobuf JSON accepts) slice by slice."""
    urlsafe = "-" in raw or "_" in raw
    if len(raw) % 4:
        raw = raw + "=" * (-len(raw) % 4)
    for i in range(0, len(raw), _B64_SLICE):
        piece = raw[i : i + _B64_SLICE]
        try:
            if urlsafe:
                yield base64.urlsafe_b64decode(piece.encode("ascii"))
            else:
                yield base64.b64decode(piece, validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            raise PayloadError(f"{where}: not valid base64", field=where) from None


async def offload_parts(
    message: Mapping[str, Any],
    store: BlobStore,
    signer: URLSigner,
    *,
    threshold: int = DEFAULT_THRESHOLD,
    base_url: str,
    expires_in: int | None = None,
    where: str = "message",
    owner: str | None = None,
) -> dict[str, Any]:
    """A copy of `message` (A2A 1.0 JSON form) whose large `raw` parts are stored and sent by reference.

    Parts at or under `threshold` bytes stay inline; the input is not modified. `owner`: the client the stored
    bytes are counted for in the store's quotas.
    """
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise PayloadError(f"{where}.parts: must be a list", field=f"{where}.parts")
    out = dict(message)
    new_parts: list[Any] = []
    changed = False
    for i, part in enumerate(parts):
        raw = part.get("raw") if isinstance(part, dict) else None
        if not isinstance(raw, str) or decoded_size(raw) <= threshold:
            new_parts.append(part)
            continue
        field = f"{where}.parts[{i}].raw"
        media_type = part.get("mediaType") or DEFAULT_MEDIA_TYPE
        info = await store.put_stream(_decode_chunks(raw, field), media_type, owner=owner)
        exp, sig = signer.sign_query(info.key, "GET", expires_in)
        url = f"{base_url.rstrip('/')}/blobs/{info.key}?exp={exp}&sig={sig}"
        new = {k: v for k, v in part.items() if k not in ("raw", "metadata")}
        new["url"] = url
        new.setdefault("mediaType", media_type)
        meta = copy.deepcopy(part.get("metadata") or {})
        ext = dict(meta.get(EXTENSION_URI) or {})
        ext["encoding"] = "native"
        ext["payload"] = PayloadRef(info.key, info.size, exp).to_json()
        meta[EXTENSION_URI] = ext
        new["metadata"] = meta
        new_parts.append(new)
        changed = True
    if not changed:
        return out
    out["parts"] = new_parts
    exts = list(out.get("extensions") or [])
    if EXTENSION_URI not in exts:
        exts.append(EXTENSION_URI)
    out["extensions"] = exts
    return out
