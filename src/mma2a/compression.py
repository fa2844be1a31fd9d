"""HTTP content codings for JSON bodies: zstd (with the `zstandard` package) and gzip (always).

- `encode` / `decode` a body (decoding bounded: a decompression bomb stops at `max_size`; `decode_yielding`, for
  request bodies, lets the event loop run between slices of 1 MiB);
- `ContentCoding`, an ASGI middleware that decodes request bodies sent with `Content-Encoding`
  (any server: the gateway, an agent that lists `contentEncodings` in its card) and, when
  `min_size` is set, compresses JSON responses at least that large for clients that send
  `Accept-Encoding`. A request with neither header costs two look-ups in its `header_map`
  (made once per request, shared with the other layers).
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import zlib
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

import orjson

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import InvalidRequest, MMA2AError, PayloadTooLarge, UnsupportedContentCoding
from .request_body import BODY_GROWN, header_map, read_body, replaying
from .responses import jsonrpc_error_json

GZIP_LEVEL = 5
ZSTD_LEVEL = 3

_zstd: Any
try:  # optional: the `adapt` extra
    import zstandard as _zstd
except ImportError:  # pragma: no cover - depends on the environment
    _zstd = None


def codings() -> tuple[str, ...]:
    """The content codings this process can write and read, best first."""
    return ("zstd", "gzip") if _zstd is not None else ("gzip",)


def pick(wanted: Iterable[str]) -> str | None:
    """The first of `wanted` this process can write, or None."""
    have = codings()
    return next((c for c in wanted if c in have), None)


def encode(body: bytes, coding: str) -> bytes:
    if coding == "zstd" and _zstd is not None:
        return _zstd.ZstdCompressor(level=ZSTD_LEVEL).compress(body)  # type: ignore[no-any-return,unused-ignore]
    if coding == "gzip":
        return gzip.compress(body, GZIP_LEVEL, mtime=0)
    raise ValueError(f"unknown content coding {coding!r}")


SLICE = 1 << 20
"""Decoded bytes between two turns of the event loop in `decode_yielding` (a 64 KB gzip body decoding to 64 MiB
held the loop for 0.59 s in one go; every other request, `/healthz` too, waited)."""


def _slices(body: bytes, coding: str, max_size: int) -> Iterator[bytes]:
    """The decoded body in pieces of at most `SLICE` bytes (a few more for zstd); `PayloadTooLarge` once more than
    `max_size` bytes came out, `InvalidRequest` for corrupt or truncated data or an unknown coding."""
    coding = coding.strip().lower()
    total = 0
    if coding == "identity":
        pieces: Iterator[bytes] = iter((body,))
    elif coding in ("gzip", "x-gzip", "deflate"):
        pieces = _inflated(body, coding)
    elif coding == "zstd" and _zstd is not None:
        pieces = _unzstd(body)
    else:
        raise UnsupportedContentCoding(f"Content-Encoding {coding!r} is not supported (use {', '.join(codings())})",
                                       field="Content-Encoding")
    for piece in pieces:
        total += len(piece)
        if total > max_size:
            raise PayloadTooLarge(f"request body decodes to more than {max_size} bytes", field="Content-Encoding")
        yield piece


def _inflated(body: bytes, coding: str) -> Iterator[bytes]:
    d = zlib.decompressobj(wbits=47 if coding != "deflate" else 15)  # 47: a gzip or zlib header
    data = body
    while True:
        try:
            piece = d.decompress(data, SLICE)
        except zlib.error as exc:
            raise InvalidRequest(f"request body is not valid {coding} data: {exc}", field="Content-Encoding") from None
        if piece:
            yield piece
        data = d.unconsumed_tail
        if d.eof:
            return
        if not piece and not data:
            raise InvalidRequest(f"request body: truncated {coding} data", field="Content-Encoding")


def _unzstd(body: bytes) -> Iterator[bytes]:
    try:
        reader = _zstd.ZstdDecompressor().stream_reader(body)
        while piece := reader.read(SLICE):
            yield piece
    except _zstd.ZstdError as exc:
        raise InvalidRequest(f"request body is not valid zstd data: {exc}", field="Content-Encoding") from None


def decode(body: bytes, coding: str, max_size: int) -> bytes:
    """Decode a body; `PayloadTooLarge` past `max_size` decoded bytes, `InvalidRequest` for corrupt data."""
    if coding.strip().lower() == "identity":
        return body
    return b"".join(_slices(body, coding, max_size))


async def decode_yielding(body: bytes, coding: str, max_size: int,
                          grown: Callable[[int], None] | None = None) -> bytes:
    """`decode`, letting the event loop run after each `SLICE` of decoded bytes (request bodies: a small coded body
    may decode to `max_size`). `grown`, if given, is told the decoded size after each slice (the gateway's body
    budget reserves it there; an `MMA2AError` it raises stops the decoding)."""
    pieces = _slices(body, coding, max_size)
    first = next(pieces, b"")
    if grown is not None:
        grown(len(first))
    out: bytearray | None = None
    for piece in pieces:  # a body that decodes to one slice (most) never waits for the loop
        await asyncio.sleep(0)
        if out is None:
            out = bytearray(first)
        out += piece
        if grown is not None:
            grown(len(out))
    return first if out is None else bytes(out)


def accepted(header: str) -> str | None:
    """The best coding of an `Accept-Encoding` value we can write (q=0 excluded), or None."""
    best: tuple[float, int, str] | None = None
    have = codings()
    for item in header.split(","):
        name, _, params = item.strip().partition(";")
        name = name.strip().lower()
        q = 1.0
        if params.strip().startswith("q="):
            try:
                q = float(params.strip()[2:])
            except ValueError:
                continue
        if name in have and q > 0:
            cand = (q, -have.index(name), name)
            if best is None or cand > best:
                best = cand
    return best[2] if best else None


@functools.lru_cache(maxsize=256)
def _accepted(header: bytes) -> str | None:
    """`accepted` for a raw header value; clients send a handful of distinct values, so it is remembered."""
    return accepted(header.decode("latin-1"))


_COMPRESSIBLE = (b"application/json", b"text/", b"application/problem+json")


class ContentCoding:
    """Decode `Content-Encoding` request bodies (bounded) and compress large JSON responses on request."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, min_size: int | None = 4096,
                 error_body: Callable[[MMA2AError, Scope], bytes] | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.min_size = min_size
        self.error_body = error_body or _jsonrpc_error

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """A request with neither a coded body nor a coding it accepts: the app's own coroutine, no frame of ours."""
        if scope["type"] != "http":
            return self.app(scope, receive, send)
        headers = header_map(scope)
        content, accept = headers.get(b"content-encoding"), headers.get(b"accept-encoding")
        if (content is None or content.strip().lower() == b"identity") and (accept is None or self.min_size is None):
            return self.app(scope, receive, send)
        return self._coded(scope, receive, send, content, accept)

    async def _coded(self, scope: Scope, receive: Receive, send: Send, content: bytes | None, accept: bytes | None
                     ) -> None:
        if content is not None and content.strip().lower() != b"identity":
            try:
                receive, scope = await self._decoded(scope, receive, content.decode("latin-1"))
            except MMA2AError as exc:
                body = self.error_body(exc, scope)
                readable = [(b"accept-encoding", ", ".join(codings()).encode())] if exc.http_status == 415 else []
                await send({"type": "http.response.start", "status": exc.http_status, "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *readable]})
                await send({"type": "http.response.body", "body": body})
                return
        if accept is None or self.min_size is None:
            await self.app(scope, receive, send)
            return
        coding = _accepted(accept)
        if coding is None:
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, _Compressing(send, coding, self.min_size))

    async def _decoded(self, scope: Scope, receive: Receive, coding: str) -> tuple[Receive, Scope]:
        limit = self.max_body_bytes  # compressed bytes are bounded as tightly as decoded ones
        raw = await read_body(receive, limit)
        if raw is None:  # the client left: nothing to decode, the app sees the disconnect
            return receive, scope
        body = await decode_yielding(raw, coding, limit, scope.get(BODY_GROWN))
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"content-encoding", b"content-length")]
        headers.append((b"content-length", str(len(body)).encode()))
        return replaying(body, receive), {**scope, "headers": headers}


class _Compressing:
    """A `send` that compresses one-message JSON responses of at least `min_size` bytes."""

    __slots__ = ("coding", "min_size", "send", "start")

    def __init__(self, send: Send, coding: str, min_size: int) -> None:
        self.send = send
        self.coding = coding
        self.min_size = min_size
        self.start: Message | None = None

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.start = message  # held until the body says whether it is worth compressing
            return
        start, self.start = self.start, None
        if start is None:
            await self.send(message)
            return
        body = message.get("body", b"")
        if len(body) < self.min_size or message.get("more_body", False) or not _compressible(start):
            await self.send(start)
            await self.send(message)
            return
        packed = encode(body, self.coding)
        headers = [(k, v) for k, v in start.get("headers") or () if k != b"content-length"]
        headers += [(b"content-encoding", self.coding.encode()), (b"content-length", str(len(packed)).encode()),
                    (b"vary", b"Accept-Encoding")]
        await self.send({**start, "headers": headers})
        await self.send({"type": "http.response.body", "body": packed})


def _compressible(start: Message) -> bool:
    ctype = b""
    for k, v in start.get("headers") or ():
        if k == b"content-encoding":
            return False
        if k == b"content-type":
            ctype = v
    return ctype.startswith(_COMPRESSIBLE) and not ctype.startswith(b"text/event-stream")


def _jsonrpc_error(exc: MMA2AError, scope: Scope) -> bytes:
    return orjson.dumps(jsonrpc_error_json(None, exc))
