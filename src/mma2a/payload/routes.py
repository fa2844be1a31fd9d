"""HTTP endpoints for blobs, mounted by the gateway (or any Starlette app) via `payload_routes`.

- `POST /blobs`: the body streamed into the store; `Content-Type` is the media type,
  `X-Content-SHA256` an optional check. 201 `{"url", "sha256", "size", "mediaType", "expires"}`.
- Resumable: `POST /blobs/uploads` -> 201 `{"uploadId", "offset": 0, "location"}`;
  `PATCH /blobs/uploads/{id}` with `Upload-Offset` (the current end, else 409 naming the
  expected offset); `HEAD|GET /blobs/uploads/{id}` -> the offset; `POST
  /blobs/uploads/{id}/finish` -> 201 like `POST /blobs`; `DELETE` aborts.
- `GET|HEAD /blobs/{key}?exp=..&sig=..`: signed read with `Range` (206 + `Content-Range`, 416
  when unsatisfiable); `DELETE` with a URL signed for `DELETE`.
Errors are `{"error": {"code", "message"}}` with the error's HTTP status.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, HTTPConnection, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from ..errors import MMA2AError, PayloadError, PayloadTooLarge, RangeNotSatisfiable
from ..modality import parse_modality
from .signing import URLSigner
from .store import DEFAULT_MEDIA_TYPE, BlobInfo, BlobStore, check_key, check_sha256
from .streams import StreamHub

BaseURLFn = Callable[[HTTPConnection], str]
_RANGE_RE = re.compile(r"^bytes=(\d*)-(\d*)$")
_CAMEL = re.compile(r"(?<!^)(?=[A-Z][a-z])")


def error_code(exc: MMA2AError) -> str:
    """`SignatureError` -> `signature_error`, `URLForbidden` -> `url_forbidden`."""
    return _CAMEL.sub("_", type(exc).__name__).lower()


def error_body(exc: MMA2AError) -> dict[str, Any]:
    err: dict[str, Any] = {"code": error_code(exc), "message": exc.message}
    if exc.data:
        err["data"] = exc.data
    return {"error": err}


def error_response(exc: MMA2AError, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(error_body(exc)), exc.http_status, headers, media_type="application/json")


def handles_errors(fn: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """Turn an `MMA2AError` raised by an endpoint into its JSON error response."""

    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request)
        except RangeNotSatisfiable as exc:
            size = exc.data.get("size")
            return error_response(exc, {"Content-Range": f"bytes */{size}"} if size is not None else None)
        except MMA2AError as exc:
            return error_response(exc)

    endpoint.__name__ = fn.__name__
    endpoint.__doc__ = fn.__doc__
    return endpoint


def default_base_url(conn: HTTPConnection) -> str:
    return str(conn.base_url).rstrip("/")


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """A single `Range: bytes=a-b` as `(start, end_exclusive)`; None for no header; 416 otherwise."""
    if header is None:
        return None
    m = _RANGE_RE.match(header.strip())
    if m is None:
        why = "multiple ranges are not supported" if "," in header else "expected bytes=START-END"
        raise RangeNotSatisfiable(f"Range {header!r}: {why}", field="Range", data={"size": size})
    first, last = m.group(1), m.group(2)
    if first == "" and last == "":
        raise RangeNotSatisfiable(f"Range {header!r}: expected bytes=START-END", field="Range", data={"size": size})
    if first == "":  # suffix: the last N bytes
        n = int(last)
        if n == 0:
            raise RangeNotSatisfiable(f"Range {header!r}: empty suffix range", field="Range", data={"size": size})
        return max(0, size - n), size
    start = int(first)
    end = size if last == "" else min(int(last) + 1, size)
    if start >= size or (last != "" and int(last) < start):
        raise RangeNotSatisfiable(
            f"Range {header!r} is not satisfiable for a blob of {size} bytes", field="Range", data={"size": size}
        )
    return start, end


def media_type_of(value: str | None, field: str = "Content-Type") -> str:
    if not value:
        return DEFAULT_MEDIA_TYPE
    return str(parse_modality(value, field=field))


def _declared_length(request: Request, limit: int) -> None:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(f"body of {length} bytes is larger than the limit of {limit} bytes", field="body")


async def _json_body(request: Request) -> dict[str, Any]:
    body = await request.body()
    if not body:
        return {}
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise PayloadError("body is not valid JSON", field="body") from None
    if not isinstance(doc, dict):
        raise PayloadError("body must be a JSON object", field="body")
    return doc


class BlobEndpoints:
    """The blob endpoints over one store and signer."""

    def __init__(
        self,
        store: BlobStore,
        signer: URLSigner,
        *,
        public_base_url_fn: BaseURLFn | None = None,
        max_upload_bytes: int = 1 << 30,
        url_expires_in: int | None = None,
    ):
        self.store = store
        self.signer = signer
        self.base_url = public_base_url_fn or default_base_url
        self.max_upload_bytes = max_upload_bytes
        self.url_expires_in = url_expires_in

    def describe(self, request: Request, info: BlobInfo) -> dict[str, Any]:
        exp, sig = self.signer.sign_query(info.key, "GET", self.url_expires_in)
        return {
            "url": f"{self.base_url(request)}/blobs/{info.key}?exp={exp}&sig={sig}",
            "sha256": info.key,
            "size": info.size,
            "mediaType": info.media_type,
            "expires": exp,
        }

    def _created(self, request: Request, info: BlobInfo) -> Response:
        body = self.describe(request, info)
        return Response(orjson.dumps(body), 201, {"Location": body["url"]}, media_type="application/json")

    @staticmethod
    async def _body(request: Request) -> AsyncIterator[bytes]:
        try:
            async for chunk in request.stream():
                yield chunk
        except ClientDisconnect:
            raise PayloadError("client disconnected before the body was complete", field="body") from None

    async def put(self, request: Request) -> Response:
        _declared_length(request, self.max_upload_bytes)
        media_type = media_type_of(request.headers.get("content-type"))
        digest = request.headers.get("x-content-sha256")
        info = await self.store.put_stream(
            self._body(request),
            media_type,
            sha256=None if digest is None else check_sha256(digest, "X-Content-SHA256"),
            max_size=self.max_upload_bytes,
        )
        return self._created(request, info)

    async def begin_upload(self, request: Request) -> Response:
        ct = request.headers.get("content-type", "")
        if ct.startswith("application/json"):
            media_type = media_type_of((await _json_body(request)).get("mediaType"), "mediaType")
        else:
            media_type = media_type_of(request.headers.get("upload-media-type") or ct or None)
        upload_id = await self.store.begin_upload(media_type)
        location = f"{self.base_url(request)}/blobs/uploads/{upload_id}"
        body = {"uploadId": upload_id, "offset": 0, "mediaType": media_type, "location": location}
        return Response(orjson.dumps(body), 201, {"Location": location, "Upload-Offset": "0"}, media_type="application/json")

    async def upload_status(self, request: Request) -> Response:
        upload_id = request.path_params["upload_id"]
        offset = await self.store.upload_offset(upload_id)
        headers = {"Upload-Offset": str(offset), "Cache-Control": "no-store"}
        if request.method == "HEAD":
            return Response(b"", 200, headers)
        return JSONResponse({"uploadId": upload_id, "offset": offset}, headers=headers)

    async def append(self, request: Request) -> Response:
        upload_id = request.path_params["upload_id"]
        raw = request.headers.get("upload-offset")
        if raw is None:
            raise PayloadError("Upload-Offset header is required", field="Upload-Offset")
        if not raw.strip().isdigit():
            raise PayloadError(f"Upload-Offset {raw!r} is not a non-negative integer", field="Upload-Offset")
        try:
            offset = await self.store.append(upload_id, int(raw), request.stream(), max_size=self.max_upload_bytes)
        except ClientDisconnect:
            return Response(b"", 400)
        return JSONResponse({"uploadId": upload_id, "offset": offset}, headers={"Upload-Offset": str(offset)})

    async def finish_upload(self, request: Request) -> Response:
        upload_id = request.path_params["upload_id"]
        digest = request.headers.get("x-content-sha256")
        field = "X-Content-SHA256"
        if digest is None and request.headers.get("content-type", "").startswith("application/json"):
            digest, field = (await _json_body(request)).get("sha256"), "sha256"
        expected = None if digest is None else check_sha256(digest, field)
        info = await self.store.finish(upload_id, expected)
        return self._created(request, info)

    async def abort_upload(self, request: Request) -> Response:
        await self.store.abort_upload(request.path_params["upload_id"])
        return Response(b"", 204)

    async def get(self, request: Request) -> Response:
        key = check_key(request.path_params["key"])
        q = request.query_params
        self.signer.verify(request.method, key, q.get("exp"), q.get("sig"))
        info = await self.store.stat(key)
        rng = parse_range(request.headers.get("range"), info.size)
        headers = {
            "Accept-Ranges": "bytes",
            "ETag": f'"{info.key}"',
            "Cache-Control": "private, max-age=0",
            "X-Content-SHA256": info.key,
        }
        start, end, status = 0, info.size, 200
        if rng is not None:
            start, end = rng
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{info.size}"
        headers["Content-Length"] = str(end - start)
        if request.method == "HEAD":
            return Response(b"", status, headers, media_type=info.media_type)
        return StreamingResponse(self.store.open_range(key, start, end), status, headers, media_type=info.media_type)

    async def delete(self, request: Request) -> Response:
        key = check_key(request.path_params["key"])
        q = request.query_params
        self.signer.verify("DELETE", key, q.get("exp"), q.get("sig"))
        await self.store.delete(key)
        return Response(b"", 204)

    def routes(self) -> list[BaseRoute]:
        e = handles_errors
        return [
            Route("/blobs", e(self.put), methods=["POST"], name="blob_put"),
            Route("/blobs/uploads", e(self.begin_upload), methods=["POST"], name="blob_upload_begin"),
            Route("/blobs/uploads/{upload_id}", e(self.upload_status), methods=["GET", "HEAD"], name="blob_upload_status"),
            Route("/blobs/uploads/{upload_id}", e(self.append), methods=["PATCH"], name="blob_upload_append"),
            Route("/blobs/uploads/{upload_id}", e(self.abort_upload), methods=["DELETE"], name="blob_upload_abort"),
            Route("/blobs/uploads/{upload_id}/finish", e(self.finish_upload), methods=["POST"], name="blob_upload_finish"),
            Route("/blobs/{key:path}", e(self.get), methods=["GET", "HEAD"], name="blob_get"),
            Route("/blobs/{key:path}", e(self.delete), methods=["DELETE"], name="blob_delete"),
        ]


def payload_routes(
    store: BlobStore,
    signer: URLSigner,
    *,
    public_base_url_fn: BaseURLFn | None = None,
    max_upload_bytes: int = 1 << 30,
    hub: StreamHub | None = None,
    url_expires_in: int | None = None,
) -> list[BaseRoute]:
    """Every payload endpoint: blobs (`/blobs...`) and live streams (`/streams...`).

    `public_base_url_fn(request)` gives the base URL receivers use (default: the request's
    own base URL); signed URLs in responses are built on it. Pass `hub` to share the
    stream hub with the rest of the gateway.
    """
    from .stream_routes import StreamEndpoints

    blobs = BlobEndpoints(
        store, signer, public_base_url_fn=public_base_url_fn, max_upload_bytes=max_upload_bytes, url_expires_in=url_expires_in
    )
    streams = StreamEndpoints(
        hub if hub is not None else StreamHub(), signer, public_base_url_fn=public_base_url_fn, url_expires_in=url_expires_in
    )
    return blobs.routes() + streams.routes()
