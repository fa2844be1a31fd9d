"""HTTP and WebSocket endpoints for live streams (see `streams.py` for frames and the hub).

- `POST /streams` creates a stream: 201 with signed producer and consumer URLs and the
  `stream` extension field (`StreamRef`) to put on the A2A part that announces it.
- Producer (URL signed for `POST`): `WebSocket /streams/{id}` (binary messages are data,
  a text `{"type": "stop"}` or closing the socket ends the stream) or `POST /streams/{id}`
  with a chunked body (its end ends the stream).
- Consumer (URL signed for `GET`): `WebSocket /streams/{id}/subscribe?offset=N` (one
  encoded frame per binary message) or `GET /streams/{id}?offset=N` (frames in a chunked
  body; `format=raw` gives the bare bytes from the offset instead).
WebSocket errors arrive as an `error` frame, then a close with code 4000 + HTTP status.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, HTTPConnection, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from ..directws import DirectIO, direct_io
from ..errors import MMA2AError, PayloadError
from ..ext import MAX_SESSION_ID, StreamRef
from ..responses import json_response, read_json_object
from ..request_body import decimal
from .diffing import DiffPolicy
from .endpoint import BaseURLFn, data_headers, default_base_url, handles_errors, media_type_of
from .signing import URLSigner
from .streams import Frame, StreamHub, check_stream_id

FRAMES_MEDIA_TYPE = "application/x-mma2a-stream-frames"


def _offset(conn: HTTPConnection) -> int:
    raw = conn.query_params.get("offset", "0")
    offset = decimal(raw)
    if offset is None:
        raise PayloadError(f"offset {raw[:80]!r} is not a non-negative integer", field="offset")
    return offset


def _patches(conn: HTTPConnection) -> bool:
    """Does this consumer read merge patches (`?patches=merge`)?"""
    value = conn.query_params.get("patches")
    if value not in (None, "merge"):
        raise PayloadError(f"patches={value!r}: the only value is merge", field="patches")
    return value == "merge"


def _control(text: str) -> tuple[str, str | None]:
    """A producer's text message: `{"type": "start", ...}` (informative) or `{"type": "stop", "reason": ...}`."""
    try:
        control = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise PayloadError("producer control message is not JSON", field="message") from None
    kind = control.get("type") if isinstance(control, dict) else None
    if kind not in ("start", "stop"):
        raise PayloadError(f"producer control message type {kind!r} is not start or stop", field="type")
    reason = control.get("reason")
    return kind, None if reason is None else str(reason)


def _ws_url(http_url: str) -> str:
    return "ws" + http_url[4:] if http_url.startswith("http") else http_url


class StreamEndpoints:
    """The stream endpoints over one hub and signer."""

    def __init__(
        self,
        hub: StreamHub,
        signer: URLSigner,
        *,
        public_base_url_fn: BaseURLFn | None = None,
        url_expires_in: int | None = None,
        owner_fn: Callable[[], str | None] | None = None,
    ):
        self.hub = hub
        self.owner_fn = owner_fn  # the calling client's name, for the per-client stream quota
        self.signer = signer
        self.base_url = public_base_url_fn or default_base_url
        self.url_expires_in = url_expires_in

    def _verify(self, conn: HTTPConnection, method: str) -> str:
        q = conn.query_params  # the signature first: nothing about the id is said to a caller without one
        self.signer.verify(method, conn.path_params["stream_id"], q.get("exp"), q.get("sig"), scope="streams")
        return check_stream_id(conn.path_params["stream_id"])

    def urls(self, conn: HTTPConnection, stream_id: str) -> dict[str, Any]:
        """Signed producer and consumer URLs for a stream."""
        base = self.base_url(conn)
        pexp, psig = self.signer.sign_query(stream_id, "POST", self.url_expires_in, scope="streams")
        cexp, csig = self.signer.sign_query(stream_id, "GET", self.url_expires_in, scope="streams")
        producer = f"{base}/streams/{stream_id}?exp={pexp}&sig={psig}"
        consumer = f"{base}/streams/{stream_id}?exp={cexp}&sig={csig}"
        return {
            "producerUrl": producer,
            "producerWsUrl": _ws_url(producer),
            "consumerUrl": consumer,
            "subscribeUrl": _ws_url(f"{base}/streams/{stream_id}/subscribe?exp={cexp}&sig={csig}"),
            "expires": min(pexp, cexp),
        }

    # --- HTTP -----------------------------------------------------------------------

    async def create(self, request: Request) -> Response:
        doc = await read_json_object(request, empty_ok=True)
        media_type = media_type_of(doc.get("mediaType"), "mediaType")
        sid, session = doc.get("id"), doc.get("sessionId")
        if sid is not None and not isinstance(sid, str):
            raise PayloadError("id: must be a string", field="id")
        if session is not None and not isinstance(session, str):
            raise PayloadError("sessionId: must be a string", field="sessionId")
        if session is not None and len(session) > MAX_SESSION_ID:  # kept with the stream, as a message's session.id
            raise PayloadError(f"sessionId: at most {MAX_SESSION_ID} characters, got {len(session)}", field="sessionId")
        diff = DiffPolicy.from_json(doc["diff"]) if doc.get("diff") is not None else None
        info = self.hub.create(media_type, stream_id=sid, session_id=session, diff=diff,
                               owner=self.owner_fn() if self.owner_fn is not None else None)
        body = info.to_json() | self.urls(request, info.id)
        body["stream"] = StreamRef(body["subscribeUrl"], info.session_id, self.hub.chunk_size, True).to_json()
        return json_response(body, 201, {"Location": body["consumerUrl"]})

    async def produce_http(self, request: Request) -> Response:
        sid = self._verify(request, "POST")
        self.hub.attach_producer(sid)
        reason = "producer closed"
        try:
            async for chunk in request.stream():
                self.hub.publish(sid, chunk)
        except ClientDisconnect:
            reason = "producer disconnected"
        finally:
            self.hub.close(sid, reason)
        info = self.hub.info(sid)
        return json_response(info.to_json())

    async def consume_http(self, request: Request) -> Response:
        sid = self._verify(request, "GET")
        offset = _offset(request)
        raw = request.query_params.get("format") == "raw"
        frames = self.hub.subscribe_patches(sid, offset) if _patches(request) and not raw else self.hub.subscribe(sid, offset)
        first = await anext(frames)  # errors (unknown stream, evicted offset) become a JSON error response
        info = self.hub.info(sid)
        headers = {"Cache-Control": "no-store", "X-Stream-Offset": str(offset), "X-Stream-Session": info.session_id,
                   **data_headers(info.media_type if raw else FRAMES_MEDIA_TYPE)}

        async def body() -> AsyncIterator[bytes]:
            if not raw:
                yield first.encode()
            try:
                async for f in frames:
                    if raw:
                        if f.type == "delta":
                            yield f.data
                    else:
                        yield f.encode()
            except MMA2AError as exc:
                if not raw:
                    yield Frame("error", sid, 0, 0, reason=exc.message, status=exc.http_status).encode()
            finally:
                await frames.aclose()

        return StreamingResponse(body(), 200, headers, media_type=info.media_type if raw else FRAMES_MEDIA_TYPE)

    async def describe(self, request: Request) -> Response:
        sid = self._verify(request, "GET")
        return json_response(self.hub.info(sid).to_json())

    # --- WebSocket ------------------------------------------------------------------

    @staticmethod
    async def _fail(ws: WebSocket, sid: str, exc: MMA2AError) -> None:
        if ws.application_state == WebSocketState.CONNECTING:
            await ws.accept()
        if ws.application_state == WebSocketState.CONNECTED:
            await ws.send_bytes(Frame("error", sid, 0, 0, reason=exc.message, status=exc.http_status).encode())
            await ws.close(4000 + exc.http_status, exc.message.encode()[:120].decode("utf-8", "ignore"))

    async def produce_ws(self, ws: WebSocket) -> None:
        sid = ws.path_params.get("stream_id", "")
        try:
            sid = self._verify(ws, "POST")
            self.hub.attach_producer(sid)
        except MMA2AError as exc:
            await self._fail(ws, sid, exc)
            return
        await ws.accept()
        reason, failure = "producer disconnected", None
        io = direct_io(ws.scope)
        if io is not None:  # binary messages go straight into the hub as they are parsed
            io.feed(functools.partial(self.hub.publish, sid))
        try:
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    break
                if msg.get("bytes") is not None:
                    self.hub.publish(sid, msg["bytes"])
                elif msg.get("text") is not None:
                    kind, why = _control(msg["text"])
                    if kind == "stop":
                        reason = why or "producer closed"
                        break
        except WebSocketDisconnect:
            pass
        except MMA2AError as exc:
            reason, failure = f"producer error: {exc.message}", exc
        finally:
            if io is not None:
                io.feed(None)
            self.hub.close(sid, reason)
        if failure is not None:
            await self._fail(ws, sid, failure)
            return
        if ws.application_state == WebSocketState.CONNECTED:
            info = self.hub.info(sid)
            summary = {"type": "stop", "streamId": sid, "seq": info.chunks + 1, "offset": info.size, "reason": reason}
            if info.skipped is not None:
                summary |= {"skipped": info.skipped[0], "skippedBytes": info.skipped[1]}
            try:
                await ws.send_text(orjson.dumps(summary).decode())
                await ws.close(1000)
            except (WebSocketDisconnect, RuntimeError, OSError):
                pass

    async def consume_ws(self, ws: WebSocket) -> None:
        sid = ws.path_params.get("stream_id", "")
        try:
            sid = self._verify(ws, "GET")
            patches = _patches(ws)
            frames = self.hub.subscribe_patches(sid, _offset(ws)) if patches else self.hub.subscribe(sid, _offset(ws))
            first = await anext(frames)
        except MMA2AError as exc:
            await self._fail(ws, sid, exc)
            return
        await ws.accept()
        io = None if patches else direct_io(ws.scope)  # patch readers take the generator path

        async def pump() -> None:
            try:
                await ws.send_bytes(first.encode())
                if io is not None:
                    await self._push(io, sid, first.offset)
                else:
                    async for f in frames:
                        await ws.send_bytes(f.encode())
                await ws.close(1000)
            except MMA2AError as exc:
                await self._fail(ws, sid, exc)

        async def until_disconnect() -> None:
            # A consumer only listens; reading here notices it leaving even while the stream is idle.
            while (await ws.receive())["type"] != "websocket.disconnect":
                pass

        tasks = [asyncio.create_task(pump()), asyncio.create_task(until_disconnect())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                try:
                    await t
                except (asyncio.CancelledError, WebSocketDisconnect, OSError, RuntimeError):
                    pass
            await frames.aclose()

    async def _push(self, io: DirectIO, sid: str, offset: int) -> None:
        """Relay frames to a direct socket as they are published, until `stop` (or the consumer leaves).

        When the socket's buffer fills, pushing pauses until it drains and resumes from the
        next byte; a consumer that fell further behind than the hub buffers gets the error.
        """

        pos: int | None = offset
        while pos is not None and io.open:
            follower = self.hub.follow(sid, pos, io.send_bytes)  # True while the socket takes more
            try:
                pos = await follower.done
            finally:
                follower.cancel()
            if pos is not None:
                await io.drained()

    def routes(self) -> list[BaseRoute]:
        e = handles_errors
        return [
            Route("/streams", e(self.create), methods=["POST"], name="stream_create"),
            Route("/streams/{stream_id}", e(self.produce_http), methods=["POST"], name="stream_produce"),
            Route("/streams/{stream_id}", e(self.consume_http), methods=["GET"], name="stream_consume"),
            Route("/streams/{stream_id}/info", e(self.describe), methods=["GET"], name="stream_info"),
            WebSocketRoute("/streams/{stream_id}", self.produce_ws, name="stream_produce_ws"),
            WebSocketRoute("/streams/{stream_id}/subscribe", self.consume_ws, name="stream_subscribe_ws"),
        ]

