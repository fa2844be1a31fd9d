"""Typed views of received parts, and reading their payloads as byte streams.

`IncomingPart` is what an executor (or a producer reading a reply) holds for each part:
its modality, features, payload reference or live stream, and `open()`, an async
iterator of byte chunks. Referenced payloads are fetched only through the SSRF guard
(`SafeFetcher`), their expiry is checked before the fetch and their digest and size while
the bytes flow; nothing is ever buffered whole. Live streams are read as frames and
resumed from the last byte received when the connection drops.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import struct
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import aiohttp
from a2a.types import Part
from google.protobuf import json_format

from ..errors import (
    DigestMismatch,
    InvalidParams,
    MMA2AError,
    PayloadError,
    PayloadExpired,
    PayloadNotFound,
    PayloadTooLarge,
    RangeNotSatisfiable,
    SignatureError,
)
from ..ext import EXTENSION_URI, PartExtension, PayloadRef, StreamRef, Thumbnail, normalize_json, read_part
from ..features.base import Limits
from ..features.budget import DEFAULT_DECODE_BYTES, DecodeBudget, decode_cost
from ..features.probe import check_media
from ..features.producer import sniff_modality
from ..modality import EMBEDDING, Modality, parse_modality
from ..payload import FrameDecoder, SafeFetcher, URLPolicy
from ..payload.ssrf import hosts_of

CHUNK = 256 * 1024
DECODES = DecodeBudget(DEFAULT_DECODE_BYTES, name="the process's decode budget, mma2a.sdk.parts.DECODES")
"""Bytes `IncomingPart.image()` decodes at once in this process (`features.budget.decode_cost`; the reference agents'
own decodes hold it too): an image waits for room up to `DECODE_WAIT_S`, then is refused with the reason (`DecodeBusy`)."""
DECODE_WAIT_S = 30.0
_SIGNATURE = re.compile(r"([?&]sig=)[^&\s:)]+")


def redact_signature(text: str) -> str:
    """`text` with the signature of any signed URL in it cut (`sig=…`): it grants reading the payload."""
    return _SIGNATURE.sub(r"\1…", text)


class PayloadReader:
    """Fetches referenced payloads and live streams under one URL policy (the SSRF guard).

    `allow_hosts` should name the gateway (`hosts_of([gateway_url])`); everything else
    must be a public address. `clock` gives Unix seconds (expiry checks).
    """

    def __init__(
        self,
        policy: URLPolicy | None = None,
        *,
        max_bytes: int = 1 << 40,
        chunk_size: int = CHUNK,
        timeout: float = 30.0,
        max_reconnects: int = 5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy or URLPolicy()
        self.max_bytes = max_bytes
        self.chunk_size = chunk_size
        self.timeout = timeout
        self.max_reconnects = max_reconnects
        self.clock = clock

    @classmethod
    def for_gateway(cls, gateway: str | Sequence[str] | None, *, allow_hosts: Sequence[str] = (), **kwargs: Any) -> PayloadReader:
        urls = [gateway] if isinstance(gateway, str) else list(gateway or [])
        return cls(URLPolicy(allow_hosts=hosts_of(urls) + tuple(allow_hosts)), **kwargs)

    def _fetcher(self) -> SafeFetcher:
        return SafeFetcher(self.policy, max_bytes=self.max_bytes, timeout=self.timeout, chunk_size=self.chunk_size)

    def check_expiry(self, url: str, where: str, expires: int | None = None) -> None:
        """`PayloadExpired` when the URL's signed `exp` (or the reference's `expires`) is in the past."""
        exp = expires
        q = parse_qs(urlsplit(url).query)
        if "exp" in q and q["exp"][0].isdigit():
            exp = int(q["exp"][0]) if exp is None else min(exp, int(q["exp"][0]))
        now = int(self.clock())
        if exp is not None and exp < now:
            raise PayloadExpired(
                f"{where}: the payload URL expired {now - exp} s ago; ask the sender for a fresh reference", field=where
            )

    def _refused(self, exc: PayloadError, where: str) -> MMA2AError:
        status = exc.data.get("status")
        if status == 403:
            return SignatureError(f"{where}: the payload URL was refused (HTTP 403: signature invalid or expired)", field=where)
        if status == 404:
            return PayloadNotFound(f"{where}: the payload is gone from the store (HTTP 404)", field=where)
        if status == 416:
            return RangeNotSatisfiable(f"{where}: the stream offset is no longer buffered (HTTP 416)", field=where)
        message = redact_signature(exc.message)  # `refused to fetch URL: ...` goes back to the sender
        return exc if message == exc.message else type(exc)(message, field=exc.field, data=exc.data)

    async def open_url(self, url: str, *, where: str, payload: PayloadRef | None = None) -> AsyncIterator[bytes]:
        """The bytes at `url`, chunk by chunk; digest and size checked against `payload` when given."""
        self.check_expiry(url, where, payload.expires if payload else None)
        digest = hashlib.sha256()
        size = 0
        async with self._fetcher() as fetcher:
            try:
                async with fetcher.open(url) as resp:
                    async for chunk in resp.chunks():
                        size += len(chunk)
                        if payload is not None and size > payload.size:
                            raise DigestMismatch(
                                f"{where}: payload is larger than the {payload.size} bytes its reference declares", field=where
                            )
                        digest.update(chunk)
                        yield chunk
            except PayloadError as exc:
                if isinstance(exc, (DigestMismatch, PayloadTooLarge)):
                    raise
                raise self._refused(exc, where) from None
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                reason = redact_signature(str(exc) or type(exc).__name__)
                raise PayloadError(f"{where}: the payload download broke off after {size} bytes: {reason}",
                                   field=where) from None
        if payload is not None:
            got = digest.hexdigest()
            if size != payload.size or got != payload.sha256:
                raise DigestMismatch(
                    f"{where}: payload digest mismatch: expected sha256 {payload.sha256} ({payload.size} bytes), "
                    f"got {got} ({size} bytes)",
                    field=where,
                )

    async def open_stream(self, stream: StreamRef, *, where: str, offset: int = 0) -> AsyncIterator[bytes]:
        """A live stream's bytes from `offset` until the producer closes it, reconnecting (and resuming) on a drop."""
        base = frames_url(stream.url)
        self.check_expiry(base, where)
        pos, failures = offset, 0
        while True:
            url = _with_offset(base, pos)
            decoder = FrameDecoder()
            try:
                async with self._fetcher() as fetcher, fetcher.open(url) as resp:
                    async for blob in resp.chunks():
                        for frame in decoder.feed(blob):
                            if frame.type == "delta":
                                if frame.offset != pos:
                                    raise PayloadError(
                                        f"{where}: stream chunk {frame.seq} starts at offset {frame.offset}, expected {pos}",
                                        field=where,
                                    )
                                pos += len(frame.data)
                                failures = 0
                                yield frame.data
                            elif frame.type == "stop":
                                return
                            elif frame.type == "error":
                                cls = RangeNotSatisfiable if frame.status == 416 else PayloadError
                                raise cls(f"{where}: stream error: {frame.reason}", field=where)
            except PayloadError as exc:
                if exc.data.get("status") is not None or str(exc.message).startswith(where):
                    raise self._refused(exc, where) from None
                failures += 1  # a dropped connection (SafeFetcher could not connect)
                if failures > self.max_reconnects:
                    raise
            except (aiohttp.ClientError, asyncio.TimeoutError, struct.error):
                failures += 1
                if failures > self.max_reconnects:
                    raise PayloadError(
                        f"{where}: the stream broke off at offset {pos} and {self.max_reconnects} reconnects failed",
                        field=where,
                    ) from None
            else:
                failures += 1  # the body ended without a stop frame: the connection was cut
                if failures > self.max_reconnects:
                    raise PayloadError(
                        f"{where}: the stream ended at offset {pos} without a stop frame, {self.max_reconnects} times",
                        field=where,
                    )
            self.check_expiry(base, where)
            await asyncio.sleep(min(0.05 * 2**failures, 2.0))


def frames_url(url: str) -> str:
    """The chunked-HTTP frames URL of a stream, from its WebSocket subscribe URL (same signature)."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    path = parts.path[: -len("/subscribe")] if parts.path.endswith("/subscribe") else parts.path
    query = "&".join(kv for kv in parts.query.split("&") if kv and not kv.startswith(("offset=", "format=")))
    return urlunsplit((scheme, parts.netloc, path, query, ""))


def _with_offset(url: str, offset: int) -> str:
    return f"{url}{'&' if '?' in url else '?'}offset={offset}"


@dataclass
class IncomingPart:
    """One received part: what it is (modality, features), what it carries, and how to read its bytes."""

    index: int
    kind: str  # text | raw | url | data
    modality: str
    features: dict[str, Any]
    ext: PartExtension
    extension: bool  # did the part carry extension metadata (False: filled from mediaType and bytes)
    part: Part
    reader: PayloadReader | None = None
    json: dict[str, Any] = field(default_factory=dict)

    # --- what it carries --------------------------------------------------------------
    @property
    def media_type(self) -> Modality:
        return parse_modality(self.modality)

    @property
    def filename(self) -> str | None:
        return self.part.filename or None

    @property
    def text(self) -> str | None:
        return self.part.text if self.kind == "text" else None

    @property
    def data(self) -> Any:
        return normalize_json(json_format.MessageToDict(self.part.data)) if self.kind == "data" else None

    @property
    def raw(self) -> bytes | None:
        return self.part.raw if self.kind == "raw" else None

    @property
    def url(self) -> str | None:
        return self.part.url if self.kind == "url" else None

    @property
    def payload(self) -> PayloadRef | None:
        return self.ext.payload

    @property
    def stream(self) -> StreamRef | None:
        return self.ext.stream

    @property
    def thumbnail(self) -> Thumbnail | None:
        return self.ext.thumbnail

    @property
    def size(self) -> int | None:
        if self.payload is not None:
            return self.payload.size
        if self.kind == "raw":
            return len(self.part.raw)
        if self.kind == "text":
            return len(self.part.text.encode())
        return None

    @property
    def transformed_from(self) -> str | None:
        """The modality this part was made from by a gateway transform (a caption: `image/png`), if any."""
        meta = ((self.json.get("metadata") or {}).get(EXTENSION_URI) or {}).get("transformedFrom")
        source = meta.get("modality") if isinstance(meta, Mapping) else None
        return str(source) if source else None

    @property
    def is_text(self) -> bool:
        return self.kind == "text"

    @property
    def is_stream(self) -> bool:
        return self.stream is not None

    @property
    def is_reference(self) -> bool:
        return self.kind == "url"

    def __repr__(self) -> str:
        what = "stream" if self.is_stream else self.kind
        return f"<IncomingPart {self.index} {self.modality} {what} size={self.size} features={sorted(self.features)}>"

    # --- reading the bytes ---------------------------------------------------------------
    @property
    def where(self) -> str:
        return f"part {self.index} ({self.modality})"

    def open(self, *, offset: int = 0) -> AsyncIterator[bytes]:
        """The part's bytes as an async iterator of chunks (never the whole payload at once).

        Inline parts are sliced; references are fetched through the SSRF guard with their
        expiry, size and SHA-256 checked (`DigestMismatch` ends the iteration instead of a
        normal end); live streams are read until the producer closes them (from `offset`),
        resuming after a dropped connection.
        """
        if self.stream is not None:
            return self._need_reader().open_stream(self.stream, where=self.where, offset=offset)
        if self.kind == "url":
            if offset:
                raise InvalidParams(f"{self.where}: offset is only supported for live streams", field="offset")
            return self._need_reader().open_url(self.part.url, where=self.where, payload=self.payload)
        return self._inline(offset)

    async def _inline(self, offset: int) -> AsyncIterator[bytes]:
        if self.kind == "raw":
            blob: bytes = self.part.raw
        elif self.kind == "text":
            blob = self.part.text.encode()
        else:
            blob = json_format.MessageToJson(self.part.data).encode()
        view = memoryview(blob)
        for i in range(offset, len(blob), CHUNK):
            yield bytes(view[i : i + CHUNK])

    async def read(self, *, limit: int = 64 * 1024 * 1024) -> bytes:
        """All the bytes, for small payloads; `PayloadTooLarge` past `limit`."""
        out = bytearray()
        async for chunk in self.open():
            out += chunk
            if len(out) > limit:
                raise PayloadTooLarge(f"{self.where}: more than {limit} bytes; use `async for chunk in part.open()`",
                                      field=self.where)
        return bytes(out)

    async def read_media(self, *, limits: Limits | None = None) -> bytes:
        """All the bytes (at most `limits.max_bytes`), refused (`MediaError` naming the part) when the header declares
        more pixels or seconds than `limits` allow — call it rather than `read()` before decoding media yourself."""
        limits = limits or Limits()
        data = await self.read(limit=limits.max_bytes)
        await asyncio.to_thread(check_media, data, str(self.media_type), limits, self.where)
        return data

    async def image(self, *, limits: Limits | None = None) -> Any:
        """The part decoded as a Pillow image (off the event loop), its pixel count checked from the header first:
        a decompression bomb is refused with `MediaError`, never decoded."""
        from ..features.image import open_image

        limits = limits or Limits()
        data = await self.read_media(limits=limits)
        where = self.where

        def decode() -> Any:  # holds its bytes of the process's decode budget while it decodes
            with DECODES.reserve(decode_cost(data, parse_modality("image/*")), time.monotonic() + DECODE_WAIT_S, where):
                return open_image(data, limits, where)

        return await asyncio.to_thread(decode)

    def vector(self) -> list[float]:
        """An embedding part's values (little-endian float32/16/64 bytes, or a JSON list)."""
        from ..features.embedding import read_vector

        mod = self.media_type
        if mod.essence != EMBEDDING:
            raise InvalidParams(f"{self.where}: not an embedding ({EMBEDDING})", field=self.where)
        if self.kind == "data":
            return [float(v) for v in self.data]
        vec, _ = read_vector(self.part.raw, mod)
        return [float(v) for v in vec]

    def _need_reader(self) -> PayloadReader:
        if self.reader is None:
            raise InvalidParams(f"{self.where}: no PayloadReader to fetch the reference with", field=self.where)
        return self.reader


def view_parts(parts: Sequence[Part], reader: PayloadReader | None, *, where: str = "message.parts") -> list[IncomingPart]:
    """Typed views of SDK parts; a part without the extension gets its modality from `mediaType`, else from its bytes."""
    out = []
    for i, p in enumerate(parts):
        pj = json_format.MessageToDict(p)
        meta = pj.get("metadata")
        has_ext = isinstance(meta, Mapping) and EXTENSION_URI in meta
        ext = read_part(pj, f"{where}[{i}]")
        kind = p.WhichOneof("content") or "none"
        modality = ext.modality or "application/octet-stream"
        features = dict(ext.features)
        if not has_ext and kind == "raw":
            if not p.media_type:
                modality = sniff_modality(p.raw[:4096], p.filename or None)
            features.setdefault("size", len(p.raw))
            features.setdefault("sha256", hashlib.sha256(p.raw).hexdigest())
        out.append(IncomingPart(i, kind, modality, features, ext, has_ext, p, reader, pj))
    return out


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
