"""HTTP endpoints for blobs, mounted by the gateway (or any Starlette app) via `payload_routes`.

- `POST /blobs`: the body streamed into the store; `Content-Type` is the media type,
  `X-Content-SHA256` an optional check. 201 `{"url", "sha256", "size", "mediaType", "expires"}`.
- Resumable: `POST /blobs/uploads` -> 201 `{"uploadId", "offset": 0, "location"}`;
  `PATCH /blobs/uploads/{id}` with `Upload-Offset` (the current end, else 409 naming the
  expected offset); `HEAD|GET /blobs/uploads/{id}` -> the offset; `POST
  /blobs/uploads/{id}/finish` -> 201 like `POST /blobs`; `DELETE` aborts. An upload id carries an HMAC tag
  of the client that began it: for any other client it is an upload nobody began (404).
- `GET|HEAD /blobs/{key}?exp=..&sig=..`: signed read with `Range` (206 + `Content-Range`, 416
  when unsatisfiable); `DELETE` with a URL signed for `DELETE`.
Errors are `{"error": {"code", "reason", "message", "data"}}` with the error's HTTP status
(`mma2a.responses`).
"""

from __future__ import annotations

import asyncio
import hmac
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from ..errors import MMA2AError, PayloadError, PayloadNotFound, PayloadTooLarge, RangeNotSatisfiable
from ..responses import json_response, read_json_object
from ..request_body import decimal
from .endpoint import BaseURLFn, data_headers, default_base_url, handles_errors, media_type_of
from .signing import URLSigner
from .store import BlobInfo, BlobStore, check_key, check_sha256
from .stream_routes import StreamEndpoints
from .streams import StreamHub

_T = TypeVar("_T")
# (first bytes of a blob, media type, whether they are all of it) -> raises MMA2AError to refuse it
MediaCheck = Callable[[bytes, str, bool], None]
MEDIA_PREFIX = {"image": 1 << 20, "audio": 16 << 20, "video": 16 << 20}  # bytes read for a header check
_RANGE_RE = re.compile(r"^bytes=(\d*)-(\d*)$")
_UPLOAD_ID_RE = re.compile(r"^([0-9a-f]{32})\.([A-Za-z0-9_-]{22})$")


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


def _declared_length(request: Request, limit: int) -> None:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(f"body of {length} bytes is larger than the limit of {limit} bytes", field="body")


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
        media_check: MediaCheck | None = None,
        owner_fn: Callable[[], str | None] | None = None,
        refused: Callable[[str], None] | None = None,
    ):
        self.refused = refused  # told the setting of each refusal at a bound (`handles_errors`)
        self.store = store
        self.owner_fn = owner_fn or (lambda: None)
        self.signer = signer
        self.base_url = public_base_url_fn or default_base_url
        self.max_upload_bytes = max_upload_bytes
        self.url_expires_in = url_expires_in
        self.media_check = media_check

    def _upload_tag(self, store_id: str) -> str:
        """The tag binding an upload to the client that began it (HMAC with the URL key: any gateway of a cluster
        checks it, nothing is stored)."""
        return self.signer.signature("UPLOAD", store_id, 0, scope=f"uploads/{self.owner_fn() or ''}")[:22]

    def _store_id(self, request: Request) -> tuple[str, str]:
        """(the id the client sent, the store's id): another client's upload is answered as one nobody began."""
        given = request.path_params["upload_id"]
        m = _UPLOAD_ID_RE.match(given)
        if m is None:
            raise PayloadError(f"upload id {given!r} is not valid (use the uploadId POST /blobs/uploads answered)",
                               field="uploadId")
        if not hmac.compare_digest(m.group(2), self._upload_tag(m.group(1))):
            raise PayloadNotFound(f"upload {given} not found", field="uploadId")
        return given, m.group(1)

    async def _on_upload(self, request: Request, op: Callable[[str], Awaitable[_T]]) -> tuple[str, _T]:
        given, store_id = self._store_id(request)
        try:
            return given, await op(store_id)
        except PayloadError as exc:  # the store names its own id: the client knows the one it was given
            exc.message = exc.message.replace(f"upload {store_id}", f"upload {given}")
            raise

    def describe(self, request: Request, info: BlobInfo) -> dict[str, Any]:
        exp, sig = self.signer.sign_query(info.key, "GET", self.url_expires_in)
        return {
            "url": f"{self.base_url(request)}/blobs/{info.key}?exp={exp}&sig={sig}",
            "sha256": info.key,
            "size": info.size,
            "mediaType": info.media_type,
            "expires": exp,
        }

    async def _checked(self, info: BlobInfo) -> None:
        """Run `media_check` on the head of a new blob (images, audio, video; other types are sniffed for images);
        a refused blob is deleted."""
        if self.media_check is None:
            return
        limit = MEDIA_PREFIX.get(info.media_type.split("/", 1)[0], 1 << 20)  # other types: sniffed for an image
        head = bytearray()
        async for chunk in self.store.open_range(info.key, 0, min(info.size, limit)):
            head += chunk
        try:
            await asyncio.to_thread(self.media_check, bytes(head), info.media_type, info.size <= limit)
        except MMA2AError:
            await self.store.delete(info.key)
            raise

    def _created(self, request: Request, info: BlobInfo) -> Response:
        body = self.describe(request, info)
        return json_response(body, 201, {"Location": body["url"]})

    @staticmethod
    async def _body(request: Request) -> AsyncIterator[bytes]:
        try:
            async for chunk in request.stream():
                yield chunk
        except ClientDisconnect:
            raise PayloadError("client disconnected before the body was complete", field="body") from None

    async def _check_room(self, request: Request, at: int | None = None) -> str | None:
        """The calling client, once the store's quotas can take the body's declared length (if any), as a new blob
        or (`at`) a chunk appended to an upload at that offset: a body over them is refused before a byte of it is
        read; one without a length is counted as it is written."""
        owner = self.owner_fn()
        length = request.headers.get("content-length")
        if length is not None and length.isdigit():
            await self.store.check_room(owner, int(length), at)
        return owner

    async def put(self, request: Request) -> Response:
        _declared_length(request, self.max_upload_bytes)
        owner = await self._check_room(request)
        media_type = media_type_of(request.headers.get("content-type"))
        digest = request.headers.get("x-content-sha256")
        info = await self.store.put_stream(
            self._body(request),
            media_type,
            sha256=None if digest is None else check_sha256(digest, "X-Content-SHA256"),
            max_size=self.max_upload_bytes,
            owner=owner,
        )
        await self._checked(info)
        return self._created(request, info)

    async def begin_upload(self, request: Request) -> Response:
        ct = request.headers.get("content-type", "")
        if ct.startswith("application/json"):
            media_type = media_type_of((await read_json_object(request, empty_ok=True)).get("mediaType"), "mediaType")
        else:
            media_type = media_type_of(request.headers.get("upload-media-type") or ct or None)
        store_id = await self.store.begin_upload(media_type, owner=self.owner_fn())
        upload_id = f"{store_id}.{self._upload_tag(store_id)}"
        location = f"{self.base_url(request)}/blobs/uploads/{upload_id}"
        body = {"uploadId": upload_id, "offset": 0, "mediaType": media_type, "location": location}
        return json_response(body, 201, {"Location": location, "Upload-Offset": "0"})

    async def upload_status(self, request: Request) -> Response:
        upload_id, offset = await self._on_upload(request, self.store.upload_offset)
        headers = {"Upload-Offset": str(offset), "Cache-Control": "no-store"}
        if request.method == "HEAD":
            return Response(b"", 200, headers)
        return json_response({"uploadId": upload_id, "offset": offset}, headers=headers)

    async def append(self, request: Request) -> Response:
        raw = request.headers.get("upload-offset")
        if raw is None:
            raise PayloadError("Upload-Offset header is required", field="Upload-Offset")
        offset = decimal(raw.strip())
        if offset is None:
            raise PayloadError(f"Upload-Offset {raw[:80]!r} is not a non-negative integer", field="Upload-Offset")
        start: int = offset
        self._store_id(request)  # another client's id is refused before its quota is looked at
        await self._check_room(request, start)
        try:
            upload_id, offset = await self._on_upload(request, lambda sid: self.store.append(
                sid, start, request.stream(), max_size=self.max_upload_bytes))
        except ClientDisconnect:
            return Response(b"", 400)
        return json_response({"uploadId": upload_id, "offset": offset}, headers={"Upload-Offset": str(offset)})

    async def finish_upload(self, request: Request) -> Response:
        self._store_id(request)  # another client's id is refused before its body is read
        digest = request.headers.get("x-content-sha256")
        field = "X-Content-SHA256"
        if digest is None and request.headers.get("content-type", "").startswith("application/json"):
            digest, field = (await read_json_object(request, empty_ok=True)).get("sha256"), "sha256"
        expected = None if digest is None else check_sha256(digest, field)
        _, info = await self._on_upload(request, lambda sid: self.store.finish(sid, expected))
        await self._checked(info)
        return self._created(request, info)

    async def abort_upload(self, request: Request) -> Response:
        await self._on_upload(request, self.store.abort_upload)
        return Response(b"", 204)

    async def get(self, request: Request) -> Response:
        q = request.query_params  # the signature first: nothing about the key is said to a caller without one
        self.signer.verify(request.method, request.path_params["key"], q.get("exp"), q.get("sig"))
        key = check_key(request.path_params["key"])
        info = await self.store.stat(key)
        rng = parse_range(request.headers.get("range"), info.size)
        headers = {
            "Accept-Ranges": "bytes",
            "ETag": f'"{info.key}"',
            "Cache-Control": "private, max-age=0",
            "X-Content-SHA256": info.key,
            **data_headers(info.media_type),
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
        q = request.query_params
        self.signer.verify("DELETE", request.path_params["key"], q.get("exp"), q.get("sig"))
        key = check_key(request.path_params["key"])
        await self.store.delete(key)
        return Response(b"", 204)

    def routes(self) -> list[BaseRoute]:
        def e(fn: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
            return handles_errors(fn, self.refused)

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


# The routes whose own URL signature is their credential (everything else needs the caller's credential).
SIGNED_ROUTES = frozenset({"blob_get", "blob_delete", "stream_consume", "stream_info", "stream_produce_ws",
                           "stream_subscribe_ws"})


def payload_routes(
    store: BlobStore,
    signer: URLSigner,
    *,
    public_base_url_fn: BaseURLFn | None = None,
    max_upload_bytes: int = 1 << 30,
    hub: StreamHub | None = None,
    url_expires_in: int | None = None,
    media_check: MediaCheck | None = None,
    owner_fn: Callable[[], str | None] | None = None,
    blob_refused: Callable[[str], None] | None = None,
) -> list[BaseRoute]:
    """Every payload endpoint: blobs (`/blobs...`) and live streams (`/streams...`).

    `public_base_url_fn(request)` gives the base URL receivers use (default: the request's
    own base URL); signed URLs in responses are built on it. Pass `hub` to share the
    stream hub with the rest of the gateway. `media_check(head, media_type, complete)` refuses uploaded
    images, audio and video from their first bytes (the blob is deleted, the upload answers its error).
    `owner_fn()` names the calling client (streams are limited per client; an upload id works only for the
    client that began the upload). `blob_refused(setting)`: told of each blob request refused at a bound (a quota, the
    disk's reserve, the open uploads), by the setting that refused it.
    """
    blobs = BlobEndpoints(
        store, signer, public_base_url_fn=public_base_url_fn, max_upload_bytes=max_upload_bytes, url_expires_in=url_expires_in,
        media_check=media_check, owner_fn=owner_fn, refused=blob_refused,
    )
    streams = StreamEndpoints(
        hub if hub is not None else StreamHub(), signer, public_base_url_fn=public_base_url_fn, url_expires_in=url_expires_in,
        owner_fn=owner_fn,
    )
    return blobs.routes() + streams.routes()
