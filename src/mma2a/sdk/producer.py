"""The producer side: `MultimodalClient`, a wrapper around the `a2a-sdk` client that sends native parts.

    async with await MultimodalClient.connect("http://gateway:8800", extract_features=True) as client:
        reply = await client.send(Path("crack.png"), text="inspect this", features={"camera": "dock-3"})

Each item becomes one part with the extension filled in (modality detected, or given;
features extracted locally when asked, plus the producer's own `features`; a thumbnail). Payloads over `inline_limit` are
streamed from disk to the gateway's store and sent by signed reference; live streams go
through a gateway stream announced by the message. With an agent that does not declare
the extension the message is a plain A2A one. Failures surface as `mma2a.errors` types.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import ssl
import struct
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError, A2AClientTimeoutError
from a2a.types import AgentCard, SendMessageRequest, StreamResponse
from a2a.utils import errors as a2a_errors
from google.protobuf import json_format

from ..card import EXTENSIONS_HEADER, VERSION_HEADER, card_declares_extension
from ..errors import (
    DispatchError,
    Forbidden,
    GatewayUnreachable,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    MMA2AError,
    ModalityRefused,
    RateLimited,
    SignatureError,
    TaskNotFound,
    Unauthorized,
    UnsupportedExtensionVersion,
    UnsupportedOperation,
)
from ..ext import (
    EXTENSION_URI,
    FeatureSource,
    MessageExtension,
    PartExtension,
    PayloadRef,
    downgrade_message,
    normalize_json,
    read_part,
    write_message,
    write_part,
)
from ..features.producer import build_part, sniff_modality
from ..modality import DEFAULT_REGISTRY, EMBEDDING, parse_modality
from ..proto import message_from_json, part_to_json
from .items import Blob, Embedding, File, Item, Live, Text, as_item
from .parts import PayloadReader
from .reply import Reply, ReplyStream, reply_from_events
from .transfer import GatewayStore, unreachable, wait_for_gateway

INLINE_LIMIT = 256 * 1024
EXTRACT_LIMIT = 16 * 1024 * 1024  # above this, features of an uploaded file are its size and digest only

_A2A_ERRORS: dict[type[Exception], type[MMA2AError]] = {
    a2a_errors.ContentTypeNotSupportedError: ModalityRefused,
    a2a_errors.TaskNotFoundError: TaskNotFound,
    a2a_errors.InvalidParamsError: InvalidParams,
    a2a_errors.InvalidRequestError: InvalidRequest,
    a2a_errors.MethodNotFoundError: MethodNotFound,
    a2a_errors.UnsupportedOperationError: UnsupportedOperation,
    a2a_errors.VersionNotSupportedError: UnsupportedExtensionVersion,
}


class MultimodalClient:
    """Sends files, bytes, text, embeddings and live streams to an A2A agent or an mma2a gateway."""

    def __init__(
        self,
        url: str,
        card: AgentCard,
        http: httpx.AsyncClient,
        *,
        gateway: str | None = None,
        extract_features: bool = False,
        thumbnail: bool = True,
        inline_limit: int = INLINE_LIMIT,
        signing_key: Any = None,
        signer: str | None = None,
        reader: PayloadReader | None = None,
        owns_http: bool = True,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.card = card
        self.http = http
        self.extension = card_declares_extension(card)
        if not isinstance(extract_features, bool):
            raise TypeError(f"extract_features: must be a bool, got {type(extract_features).__name__}")
        self.extract_features = extract_features
        self.thumbnail = thumbnail
        self.inline_limit = inline_limit
        self.signer = signer
        self.signing_key = _private_key(signing_key) if signing_key is not None else None
        if self.signing_key is not None and not signer:
            raise InvalidParams("signer: a signing key needs the signer's name (the gateway looks its public key up by it)",
                                field="signer")
        self._gateway = gateway
        self._store: GatewayStore | None = None
        self._clients: dict[bool, Client] = {}
        self._owns_http = owns_http
        self.progress = progress  # upload progress: (file name, bytes just sent, file size)
        origin = urlsplit(self.url)
        self.reader = reader or PayloadReader.for_gateway([gateway or f"{origin.scheme}://{origin.netloc}"])

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        gateway: str | None = None,
        token: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        wait: float = 0.0,
        notes: list[str] | None = None,
        verify: ssl.SSLContext | bool = True,
        **kwargs: Any,
    ) -> MultimodalClient:
        """Fetch the Agent Card at `url` (a gateway, a gateway's `/agents/{name}/`, or any A2A agent).

        `gateway` is where big payloads and live streams go (default: `url`'s origin when
        it is an mma2a gateway). With `wait` seconds, a gateway that is still starting is
        waited for (and its configured agents, per `/healthz`; `notes` receives a line if
        some never came). `GatewayUnreachable` when nothing answers. `verify`: the TLS trust for an
        https:// gateway (an `ssl.SSLContext` holding its CA, or True for the system's store).
        """
        if "features" in kwargs:
            raise TypeError("connect(): local extraction is `extract_features=True`; a producer's own features "
                            "go to `send(..., features={'camera': 'dock-3'})`")
        if wait > 0:
            await wait_for_gateway(url.rstrip("/"), wait, notes=notes, verify=verify)
        headers = {VERSION_HEADER: "1.0"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if api_key:
            headers["X-API-Key"] = api_key
        http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout, write=None), verify=verify)
        base = url.rstrip("/")
        try:
            try:
                resp = await http.get(base + "/.well-known/agent-card.json")
            except httpx.RequestError as exc:
                raise unreachable(base, exc) from None
            if resp.status_code != 200:
                raise GatewayUnreachable(f"cannot reach the gateway at {base}: no Agent Card (HTTP {resp.status_code})",
                                         field="url")
            card = json_format.ParseDict(resp.json(), AgentCard(), ignore_unknown_fields=True)
        except BaseException:
            await http.aclose()
            raise
        client = cls(base, card, http, gateway=gateway, **kwargs)
        if client.extension:
            http.headers[EXTENSIONS_HEADER] = EXTENSION_URI
        return client

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()
        self._clients.clear()
        if self._owns_http:
            await self.http.aclose()

    async def __aenter__(self) -> MultimodalClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- the gateway's store --------------------------------------------------------------
    async def store(self) -> GatewayStore | None:
        """The gateway store for big payloads and streams: the configured one, or `url`'s origin if it is a gateway."""
        if self._store is not None:
            return self._store
        if self._gateway:
            self._store = GatewayStore(self._gateway, self.http)
            return self._store
        parts = urlsplit(self.url)
        origin = f"{parts.scheme}://{parts.netloc}"
        try:
            resp = await self.http.get(origin + "/healthz")
            is_gateway = resp.status_code == 200 and "rulesVersion" in resp.json()
        except (httpx.RequestError, ValueError):
            is_gateway = False
        if is_gateway:
            self._store = GatewayStore(origin, self.http)
        return self._store

    # --- building parts ------------------------------------------------------------------
    async def _part(self, item: Item, index: int, features: bool, thumbnail: bool,
                    lives: list[tuple[str, AsyncIterable[bytes]]]) -> dict[str, Any]:
        if isinstance(item, Text):
            return await asyncio.to_thread(build_part, item.text.encode(), modality=item.modality, features=features,
                                           thumbnail=False)
        if isinstance(item, Embedding):
            data = struct.pack(f"<{len(item.vector)}f", *item.vector)
            mod = f"{EMBEDDING}; dtype=float32; dimension={len(item.vector)}" + (f"; model={item.model}" if item.model else "")
            return await asyncio.to_thread(build_part, data, modality=mod, features=True, thumbnail=False)
        if isinstance(item, Blob):
            if len(item.data) > self.inline_limit and (store := await self.store()) is not None:
                mod = str(parse_modality(item.modality or sniff_modality(item.data, item.filename)))
                info = await store.upload_bytes(item.data, mod, item.filename or f"items[{index}]")
                return await self._reference(info, mod, item.filename, features, thumbnail, data=item.data)
            return await asyncio.to_thread(build_part, item.data, modality=item.modality, features=features,
                                           thumbnail=thumbnail, filename=item.filename)
        if isinstance(item, File):
            path = Path(item.path)
            size = path.stat().st_size
            if size <= self.inline_limit or (store := await self.store()) is None:
                return await asyncio.to_thread(build_part, path, modality=item.modality, features=features,
                                               thumbnail=thumbnail, filename=item.filename)
            with path.open("rb") as f:
                head = f.read(4096)
            mod = str(parse_modality(item.modality or sniff_modality(head, path.name)))
            info = await store.upload_file(path, mod, self.progress)
            return await self._reference(info, mod, item.filename or path.name, features, thumbnail,
                                         path=path if size <= EXTRACT_LIMIT else None)
        if isinstance(item, Live):
            store = await self.store()
            if store is None:
                raise InvalidParams(f"items[{index}]: a live stream needs an mma2a gateway to carry it; "
                                    f"{self.url} is not one (pass gateway=...)", field=f"items[{index}]")
            chunks: AsyncIterable[bytes] = item.chunks
            sniffed = item.modality
            if sniffed is None:
                first, chunks = await _peek(item.chunks)
                sniffed = sniff_modality(first)
            mod = str(parse_modality(sniffed))
            info = await store.open_stream(mod, item.session_id)
            lives.append((info["producerUrl"], chunks))
            ext = PartExtension(modality=mod, encoding="native",
                                stream=_stream_ref(info["stream"]))
            return write_part({"url": info["consumerUrl"] + "&format=raw", "mediaType": mod}, ext)
        return part_to_json(item)  # an a2a Part, sent as it is

    async def _reference(self, info: dict[str, Any], modality: str, filename: str | None, features: bool, thumbnail: bool,
                         *, data: bytes | None = None, path: Path | None = None) -> dict[str, Any]:
        found: dict[str, Any] = {"size": info["size"], "sha256": info["sha256"]} if features else {}
        source, schema, thumb = FeatureSource("producer", "mma2a-sdk", "1"), None, None
        content = data if data is not None else path
        if (features or thumbnail) and content is not None:
            full = await asyncio.to_thread(build_part, content, modality=modality,
                                           features=features, thumbnail=thumbnail)
            ext = full["metadata"][EXTENSION_URI]
            if features:
                found.update(ext.get("features") or {})
                schema = ext.get("featureSchema")
                fs = ext.get("featureSource") or {}
                source = FeatureSource("producer", fs.get("extractor"), fs.get("version"))
            if thumbnail and "thumbnail" in ext:
                from ..ext import Thumbnail
                thumb = Thumbnail.from_json(ext["thumbnail"], "thumbnail")
        part: dict[str, Any] = {"url": info["url"], "mediaType": modality}
        if filename:
            part["filename"] = filename
        return write_part(part, PartExtension(
            modality=modality, encoding="native", features=found, feature_schema=schema if found else None,
            feature_source=source if found else None, payload=PayloadRef(info["sha256"], info["size"], info.get("expires")),
            thumbnail=thumb))

    async def build_message(
        self, *items: Any, to: str | Sequence[str] | None = None, text: str | None = None, modality: str | None = None,
        features: Mapping[str, Any] | None = None, extract_features: bool | None = None, thumbnail: bool | None = None,
        context_id: str | None = None, task_id: str | None = None,
        _lives: list[tuple[str, AsyncIterable[bytes]]] | None = None,
    ) -> dict[str, Any]:
        """The A2A 1.0 message (JSON form) `send` would send, payloads uploaded and signed."""
        own = own_features(features, "features")
        if extract_features is not None and not isinstance(extract_features, bool):
            raise TypeError(f"extract_features: must be a bool, got {type(extract_features).__name__}")
        its: list[Item] = [Text(text)] if text else []
        first = len(its)
        its += [as_item(v, i, modality) for i, v in enumerate(items)]
        if not its:
            raise InvalidParams("items: nothing to send (give at least one item, or text=...)", field="items")
        feats = self.extract_features if extract_features is None else extract_features
        thumbs = self.thumbnail if thumbnail is None else thumbnail
        lives = _lives if _lives is not None else []
        parts = [await self._part(it, i, feats, thumbs, lives) for i, it in enumerate(its)]
        for i, (it, part) in enumerate(zip(its, parts)):
            given = {**(own if i >= first else {}), **own_features(getattr(it, "features", None), f"items[{i - first}].features")}
            if given:
                attach_features(part, given, f"items[{i - first}]" if i >= first else "text")
        msg: dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": parts}
        if context_id:
            msg["contextId"] = context_id
        if task_id:
            msg["taskId"] = task_id
        receivers = (to,) if isinstance(to, str) else tuple(to or ())
        if not self.extension:
            return downgrade_message(msg, input_modes=_input_modes(self.card))
        write_message(msg, MessageExtension(intent="explicit" if receivers else "auto", receivers=receivers))
        if self.signing_key is not None:
            from ..signing import sign_message

            sign_message(msg, self.signing_key, signer=str(self.signer), ts=int(time.time()))
        return msg

    # --- sending ---------------------------------------------------------------------------
    def _client(self, streaming: bool) -> Client:
        if streaming not in self._clients:
            config = ClientConfig(streaming=streaming, httpx_client=self.http)
            self._clients[streaming] = ClientFactory(config).create(self.card)
        return self._clients[streaming]

    async def send(
        self,
        *items: Any,
        to: str | Sequence[str] | None = None,
        text: str | None = None,
        stream_reply: bool = False,
        modality: str | None = None,
        features: Mapping[str, Any] | None = None,
        extract_features: bool | None = None,
        thumbnail: bool | None = None,
        accepted_output_modes: Sequence[str] = (),
        context_id: str | None = None,
        task_id: str | None = None,
    ) -> Any:
        """Send items as one message; returns a `Reply`, or with `stream_reply` a `ReplyStream` to iterate.

        `to` names the receiving agent(s) (the extension's explicit `receivers`); without it the
        gateway routes each part. `modality` overrides detection for the binary items.
        `features` (a dict, e.g. `{"camera": "dock-3"}`) are the producer's own facts, added to
        every item's part (an item's own `features` win) and checked against the modality's
        feature schema; `extract_features` overrides the client's local extraction setting.
        """
        lives: list[tuple[str, AsyncIterable[bytes]]] = []
        msg = await self.build_message(*items, to=to, text=text, modality=modality, features=features,
                                       extract_features=extract_features, thumbnail=thumbnail,
                                       context_id=context_id, task_id=task_id, _lives=lives)
        request = SendMessageRequest(message=message_from_json(msg))
        if accepted_output_modes:
            request.configuration.accepted_output_modes.extend(accepted_output_modes)
        events = self._events(request, streaming=stream_reply, lives=lives)
        if stream_reply:
            return ReplyStream(events, self.reader)
        return reply_from_events([ev async for ev in events], self.reader)

    async def _events(self, request: SendMessageRequest, *, streaming: bool,
                      lives: list[tuple[str, AsyncIterable[bytes]]]) -> AsyncIterator[StreamResponse]:
        store = self._store
        pushes = [asyncio.create_task(store.push(url, chunks)) for url, chunks in lives] if store else []
        ok = False
        try:
            async with self._errors():
                async for ev in self._client(streaming).send_message(request):
                    yield ev
            ok = True
        finally:
            if not ok:
                for t in pushes:
                    t.cancel()
            results = await asyncio.gather(*pushes, return_exceptions=True)
        for r in results:
            if ok and isinstance(r, BaseException):
                raise r

    @asynccontextmanager
    async def _errors(self) -> AsyncIterator[None]:
        who = self.card.name or self.url
        try:
            yield
        except A2AClientTimeoutError as exc:
            raise GatewayUnreachable(f"cannot reach the gateway at {self.url}: {exc.message}", field="url") from None
        except A2AClientError as exc:
            cause = exc.__cause__
            if isinstance(cause, httpx.RequestError):
                raise unreachable(self.url, cause) from None
            if isinstance(cause, httpx.HTTPStatusError):
                raise _http_error(who, cause.response) from None
            raise DispatchError(f"{who}: {exc.message}") from None
        except a2a_errors.A2AError as exc:
            cls = _A2A_ERRORS.get(type(exc), DispatchError)
            data = exc.data if isinstance(exc.data, dict) else None
            if cls is ModalityRefused:
                raise ModalityRefused(f"{who} refuses the message: {exc.message}", data=data) from None
            if cls is InvalidParams and "].signature" in exc.message:
                cls = SignatureError  # the gateway refused the signed extension fields
            raise cls(f"{who}: {exc.message}", data=data) from None

    async def get_task(self, task_id: str) -> Reply:
        from a2a.types import GetTaskRequest

        async with self._errors():
            task = await self._client(False).get_task(GetTaskRequest(id=task_id))
        ev = StreamResponse()
        ev.task.CopyFrom(task)
        return reply_from_events([ev], self.reader)


def _http_error(who: str, resp: httpx.Response) -> MMA2AError:
    """An HTTP refusal as the error it is, with the server's own reason (the JSON-RPC error message of a gateway's
    401, 403 or 429) in place of httpx's `Client error '401 Unauthorized' for url …`."""
    try:
        body = resp.json()
        said = str(body["error"]["message"]) if isinstance(body, dict) and isinstance(body.get("error"), dict) else ""
    except ValueError:
        said = ""
    said = said or resp.text.strip()[:200] or resp.reason_phrase
    message = f"{who} answered HTTP {resp.status_code}: {said}"
    if resp.status_code == 429:
        try:
            retry_after = float(resp.headers.get("Retry-After", "1"))
        except ValueError:
            retry_after = 1.0
        return RateLimited(message, retry_after=retry_after)
    return {401: Unauthorized, 403: Forbidden}.get(resp.status_code, DispatchError)(message)


def own_features(value: Any, where: str) -> dict[str, Any]:
    """A producer's own features, as a JSON-safe dict; `TypeError` for anything but a mapping with string keys."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        hint = "; to extract features locally, pass extract_features=True" if isinstance(value, bool) else ""
        raise TypeError(f"{where}: must be a dict of feature values such as {{'camera': 'dock-3'}}, "
                        f"got {type(value).__name__}{hint}")
    for key in value:
        if not isinstance(key, str) or not key:
            raise TypeError(f"{where}: feature names must be non-empty strings, got {key!r}")
    try:
        json.dumps(dict(value), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where}: feature values must be JSON values (str, number, bool, list, dict): {exc}") from None
    return dict(normalize_json(dict(value)))


def attach_features(part: dict[str, Any], given: Mapping[str, Any], where: str) -> None:
    """Merge a producer's own features into a built part, checked against its modality's schema (`FeatureSchemaError`)."""
    ext = read_part(part, where)
    merged = {**ext.features, **given}
    modality = ext.modality or "application/octet-stream"
    DEFAULT_REGISTRY.validate_features(modality, merged, field=f"{where}.features")
    known = DEFAULT_REGISTRY.lookup(modality)
    write_part(part, dataclasses.replace(
        ext, features=merged, feature_schema=ext.feature_schema or (known.feature_schema if known else None),
        feature_source=ext.feature_source or FeatureSource("producer", "mma2a-sdk", "1")))


async def _peek(chunks: AsyncIterable[bytes]) -> tuple[bytes, AsyncIterator[bytes]]:
    """The first non-empty chunk, and an iterator that still yields it."""
    it = aiter(chunks)
    first = b""
    async for c in it:
        if c:
            first = bytes(c)
            break

    async def chained() -> AsyncIterator[bytes]:
        if first:
            yield first
        async for c in it:
            yield c

    return first, chained()


def _stream_ref(doc: dict[str, Any]) -> Any:
    from ..ext import StreamRef

    return StreamRef.from_json(doc, "stream")


def _input_modes(card: AgentCard) -> list[str]:
    modes = list(card.default_input_modes)
    for s in card.skills:
        modes += [m for m in s.input_modes if m not in modes]
    return modes


def _private_key(key: Any) -> Any:
    from ..signing import private_key_from_text

    return private_key_from_text(key) if isinstance(key, str) else key


