"""The multimodal extension on the A2A 1.0 wire: its URI, its fields, typed read/write views.

Extension data lives in `metadata[EXTENSION_URI]` of each part and of the message, and the
URI is listed in `message.extensions`. Everything here works on the A2A 1.0 JSON form
(camelCase dicts, as parsed from the wire); `mma2a.proto` adapts the SDK's protobuf types.
See docs/extension.md for the specification.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import ExtensionError, InvalidModality, UnsupportedExtensionVersion
from .modality import parse_modality

__all__ = [
    "ENCODINGS_KNOWN",
    "EXTENSION_URI",
    "FEATURE_SOURCES",
    "INTENTS",
    "MAX_HOPS",
    "PROTOCOL",
    "THUMBNAIL_MAX_BYTES",
    "carries_extension",
    "check_protocol",
    "decoded_size",
    "downgrade_message",
    "downgrade_part",
    "Encoding",
    "FeatureSource",
    "MessageExtension",
    "normalize_json",
    "part_kind",
    "PartExtension",
    "PayloadRef",
    "read_message",
    "read_part",
    "Session",
    "StreamRef",
    "Thumbnail",
    "write_message",
    "write_part",
]

EXTENSION_URI = "https://mma2a.dev/ext/multimodal/v1"
PROTOCOL = "a2a-multimodal/1.0"
PROTOCOL_NAME, PROTOCOL_MAJOR = "a2a-multimodal", 1

Encoding = str  # "native" | "raw" | "base64" | a codec name such as "h264", "opus"
ENCODINGS_KNOWN = frozenset({"native", "raw", "base64", "h264", "h265", "vp8", "vp9", "av1", "opus", "aac", "mp3", "pcm"})
FEATURE_SOURCES = frozenset({"producer", "router", "hybrid"})
INTENTS = frozenset({"auto", "explicit"})
MAX_HOPS = 8
MAX_SESSION_ID = 256  # characters of a session id (a stream's: each is a pin a rule with pin_session keeps)
_PROTOCOL_RE = re.compile(rf"{re.escape(PROTOCOL_NAME)}/([0-9]+)(?:\.[0-9]+)?")
_FEATURE_SCHEMA_RE = re.compile(r"\S+/[0-9]+")
THUMBNAIL_MAX_BYTES = 16 * 1024


def _where(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _expect(value: Any, types: type | tuple[type, ...], where: str, what: str) -> Any:
    if value is None and type(None) not in (types if isinstance(types, tuple) else (types,)):
        raise ExtensionError(f"{where}: is required ({what})", field=where)
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise ExtensionError(f"{where}: must be {what}, got {type(value).__name__}", field=where)
    if not isinstance(value, types):
        raise ExtensionError(f"{where}: must be {what}, got {type(value).__name__}", field=where)
    return value


def _int(value: Any, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # protobuf Struct carries every number as a double
    _expect(value, int, where, "an integer")
    if value < minimum:
        raise ExtensionError(f"{where}: must be >= {minimum}, got {value}", field=where)
    return int(value)


def normalize_json(value: Any) -> Any:
    """Integral floats back to ints, recursively: protobuf Struct turns every number into a double."""
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) < 2**53:
            return int(value)
        return value
    if isinstance(value, dict):
        return {k: normalize_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize_json(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class FeatureSource:
    """Who extracted the features: `producer`, `router` or `hybrid`, and with what."""

    kind: str = "producer"
    extractor: str | None = None
    version: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.extractor is not None:
            out["extractor"] = self.extractor
        if self.version is not None:
            out["version"] = self.version
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> FeatureSource:
        if isinstance(data, str):
            data = {"kind": data}
        _expect(data, dict, where, "an object or one of producer/router/hybrid")
        kind = data.get("kind", "producer")
        if not isinstance(kind, str) or kind not in FEATURE_SOURCES:
            raise ExtensionError(f"{where}.kind: must be one of producer, router, hybrid, got {kind!r}", field=f"{where}.kind")
        extractor = data.get("extractor")
        version = data.get("version")
        if extractor is not None:
            _expect(extractor, str, f"{where}.extractor", "a string")
        if version is not None:
            _expect(version, str, f"{where}.version", "a version string")
        return cls(kind, extractor, version)


@dataclass(frozen=True, slots=True)
class PayloadRef:
    """The bytes of a part sent by reference: digest, size, expiry (Unix seconds). The part's `url` is the address."""

    sha256: str
    size: int
    expires: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sha256": self.sha256, "size": self.size}
        if self.expires is not None:
            out["expires"] = self.expires
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> PayloadRef:
        _expect(data, dict, where, "an object")
        digest = _expect(data.get("sha256"), str, f"{where}.sha256", "a hex SHA-256 string")
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ExtensionError(f"{where}.sha256: must be 64 lower-case hex digits", field=f"{where}.sha256")
        size = _int(data.get("size"), f"{where}.size")
        expires = data.get("expires")
        return cls(digest, size, None if expires is None else _int(expires, f"{where}.expires"))


@dataclass(frozen=True, slots=True)
class StreamRef:
    """A live media stream carried by reference: where to subscribe, the session, chunking, open or closed."""

    url: str
    session_id: str
    chunk_size: int | None = None
    open: bool = True

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"url": self.url, "sessionId": self.session_id, "open": self.open}
        if self.chunk_size is not None:
            out["chunkSize"] = self.chunk_size
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> StreamRef:
        _expect(data, dict, where, "an object")
        url = _expect(data.get("url"), str, f"{where}.url", "a URL string")
        sid = _expect(data.get("sessionId"), str, f"{where}.sessionId", "a string")
        if len(sid) > MAX_SESSION_ID:
            raise ExtensionError(f"{where}.sessionId: at most {MAX_SESSION_ID} characters, got {len(sid)}",
                                 field=f"{where}.sessionId")
        chunk = data.get("chunkSize")
        is_open = data.get("open", True)
        _expect(is_open, bool, f"{where}.open", "a boolean")
        return cls(url, sid, None if chunk is None else _int(chunk, f"{where}.chunkSize", minimum=1), is_open)


@dataclass(frozen=True, slots=True)
class Thumbnail:
    """A tiny preview for consoles (a few KB, inline)."""

    media_type: str
    data: bytes

    def to_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "data": base64.b64encode(self.data).decode("ascii")}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Thumbnail:
        _expect(data, dict, where, "an object")
        mt = _expect(data.get("mediaType"), str, f"{where}.mediaType", "a media type string")
        parse_modality(mt, field=f"{where}.mediaType")
        raw = _expect(data.get("data"), str, f"{where}.data", "a base64 string")
        try:
            blob = base64.b64decode(raw, validate=True)
        except ValueError:
            raise ExtensionError(f"{where}.data: not valid base64", field=f"{where}.data") from None
        if len(blob) > THUMBNAIL_MAX_BYTES:
            raise ExtensionError(
                f"{where}.data: thumbnail is {len(blob)} bytes, the limit is {THUMBNAIL_MAX_BYTES}", field=f"{where}.data"
            )
        return cls(mt, blob)


@dataclass(frozen=True, slots=True)
class PartExtension:
    """The extension fields of one part (`part.metadata[EXTENSION_URI]`)."""

    modality: str | None = None
    encoding: Encoding | None = None
    features: Mapping[str, Any] = field(default_factory=dict)
    feature_schema: str | None = None
    feature_source: FeatureSource | None = None
    payload: PayloadRef | None = None
    stream: StreamRef | None = None
    thumbnail: Thumbnail | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.modality is not None:
            out["modality"] = self.modality
        if self.encoding is not None:
            out["encoding"] = self.encoding
        if self.features:
            out["features"] = dict(self.features)
        if self.feature_schema is not None:
            out["featureSchema"] = self.feature_schema
        if self.feature_source is not None:
            out["featureSource"] = self.feature_source.to_json()
        if self.payload is not None:
            out["payload"] = self.payload.to_json()
        if self.stream is not None:
            out["stream"] = self.stream.to_json()
        if self.thumbnail is not None:
            out["thumbnail"] = self.thumbnail.to_json()
        return out

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> PartExtension:
        """Validate and read the extension object of a part; errors name the field under `where`."""
        _expect(data, dict, where or "metadata", "an object")
        modality = data.get("modality")
        if modality is not None:
            _expect(modality, str, _where(where, "modality"), "a media type string")
            modality = str(parse_modality(modality, field=_where(where, "modality")))
        encoding = data.get("encoding")
        if encoding is not None:
            _expect(encoding, str, _where(where, "encoding"), "a string")
            if not encoding or len(encoding) > 32:
                raise ExtensionError(f"{_where(where, 'encoding')}: must be 1 to 32 characters", field=_where(where, "encoding"))
        features = data.get("features", {})
        _expect(features, dict, _where(where, "features"), "an object")
        schema = data.get("featureSchema")
        if schema is not None:
            _expect(schema, str, _where(where, "featureSchema"), "a string like image/1")
            if not _FEATURE_SCHEMA_RE.fullmatch(schema):
                raise ExtensionError(
                    f"{_where(where, 'featureSchema')}: must be id/version, e.g. image/1, got {schema!r}",
                    field=_where(where, "featureSchema"),
                )
        src = data.get("featureSource")
        payload = data.get("payload")
        stream = data.get("stream")
        thumb = data.get("thumbnail")
        return cls(
            modality=modality,
            encoding=encoding,
            features=normalize_json(features),
            feature_schema=schema,
            feature_source=None if src is None else FeatureSource.from_json(src, _where(where, "featureSource")),
            payload=None if payload is None else PayloadRef.from_json(payload, _where(where, "payload")),
            stream=None if stream is None else StreamRef.from_json(stream, _where(where, "stream")),
            thumbnail=None if thumb is None else Thumbnail.from_json(thumb, _where(where, "thumbnail")),
        )


@dataclass(frozen=True, slots=True)
class Session:
    """A stream session: id, the chunk's sequence number, whether it is the last."""

    id: str
    seq: int = 0
    final: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "seq": self.seq, "final": self.final}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Session:
        _expect(data, dict, where, "an object")
        sid = _expect(data.get("id"), str, f"{where}.id", "a string")
        if not sid:
            raise ExtensionError(f"{where}.id: must not be empty", field=f"{where}.id")
        if len(sid) > MAX_SESSION_ID:
            raise ExtensionError(f"{where}.id: at most {MAX_SESSION_ID} characters, got {len(sid)}", field=f"{where}.id")
        final = data.get("final", False)
        _expect(final, bool, f"{where}.final", "a boolean")
        return cls(sid, _int(data.get("seq", 0), f"{where}.seq"), final)


@dataclass(frozen=True, slots=True)
class MessageExtension:
    """The extension fields of a message (`message.metadata[EXTENSION_URI]`)."""

    protocol: str = PROTOCOL
    intent: Literal["auto", "explicit"] = "auto"
    receivers: tuple[str, ...] = ()
    priority: int = 5
    session: Session | None = None
    hops: int = 0
    signature: Mapping[str, Any] | None = None
    via: tuple[str, ...] = ()  # the gateways the message passed, first to last (federation; loops refused)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"protocol": self.protocol, "intent": self.intent, "priority": self.priority, "hops": self.hops}
        if self.via:
            out["via"] = list(self.via)
        if self.receivers:
            out["receivers"] = list(self.receivers)
        if self.session is not None:
            out["session"] = self.session.to_json()
        if self.signature is not None:
            out["signature"] = dict(self.signature)
        return out

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> MessageExtension:
        _expect(data, dict, where or "metadata", "an object")
        protocol = data.get("protocol", PROTOCOL)
        check_protocol(protocol, _where(where, "protocol"))
        receivers = data.get("receivers", [])
        _expect(receivers, list, _where(where, "receivers"), "a list of agent names")
        for i, r in enumerate(receivers):
            _expect(r, str, f"{_where(where, 'receivers')}[{i}]", "an agent name")
        raw_intent = data.get("intent", "explicit" if receivers else "auto")
        if raw_intent not in ("auto", "explicit"):
            raise ExtensionError(
                f"{_where(where, 'intent')}: must be auto or explicit, got {raw_intent!r}", field=_where(where, "intent")
            )
        intent: Literal["auto", "explicit"] = "explicit" if raw_intent == "explicit" else "auto"
        if intent == "explicit" and not receivers:
            raise ExtensionError(
                f"{_where(where, 'receivers')}: explicit intent needs at least one receiver", field=_where(where, "receivers")
            )
        priority = _int(data.get("priority", 5), _where(where, "priority"))
        if priority > 9:
            raise ExtensionError(f"{_where(where, 'priority')}: must be 0..9, got {priority}", field=_where(where, "priority"))
        session = data.get("session")
        signature = data.get("signature")
        if signature is not None:
            _expect(signature, dict, _where(where, "signature"), "an object")
        via = data.get("via", [])
        _expect(via, list, _where(where, "via"), "a list of gateway ids")
        for i, g in enumerate(via):
            _expect(g, str, f"{_where(where, 'via')}[{i}]", "a gateway id")
        return cls(
            protocol=protocol,
            intent=intent,
            receivers=tuple(receivers),
            priority=priority,
            session=None if session is None else Session.from_json(session, _where(where, "session")),
            hops=_int(data.get("hops", 0), _where(where, "hops")),
            signature=None if signature is None else normalize_json(signature),
            via=tuple(via),
        )


def decoded_size(raw: str) -> int:
    """The size of a part's `raw` (base64, padded or not) once decoded, without decoding or copying it."""
    pad = 2 if raw.endswith("==") else 1 if raw.endswith("=") else 0
    return (len(raw) - pad) * 3 // 4


def check_protocol(protocol: Any, where: str = "protocol") -> None:
    """Accept `a2a-multimodal/1.x`; anything else is a typed error naming the field."""
    _expect(protocol, str, where, "a protocol token like a2a-multimodal/1.0")
    m = _PROTOCOL_RE.fullmatch(protocol)
    if m is None:
        raise ExtensionError(f"{where}: {protocol!r} is not an a2a-multimodal protocol token", field=where)
    if int(m.group(1)) != PROTOCOL_MAJOR:
        raise UnsupportedExtensionVersion(
            f"{where}: extension version {protocol!r} is not supported (this gateway speaks {PROTOCOL})", field=where
        )


# --- reading and writing the JSON form -------------------------------------------------


def part_kind(part: Mapping[str, Any]) -> str:
    """Which content a part carries: text, raw, url or data."""
    for kind in ("text", "raw", "url", "data"):
        if kind in part:
            return kind
    return "none"


_KIND_DEFAULT = {"text": "text/plain", "data": "application/json", "raw": "application/octet-stream", "url": "application/octet-stream"}


def read_part(part: Mapping[str, Any], where: str = "") -> PartExtension:
    """The extension view of a part; a part without extension data gets one derived from `mediaType`."""
    meta = part.get("metadata")
    raw = meta.get(EXTENSION_URI) if isinstance(meta, dict) else None
    if raw is None:  # the common plain part: one extension object, its modality from `mediaType` or the kind
        return PartExtension(_derived_modality(part, where))
    ext = PartExtension.from_json(raw, _where(where, f"metadata[{EXTENSION_URI}]"))
    if ext.modality is None:
        ext = PartExtension(_derived_modality(part, where), ext.encoding, ext.features, ext.feature_schema,
                            ext.feature_source, ext.payload, ext.stream, ext.thumbnail)
    return ext


def _derived_modality(part: Mapping[str, Any], where: str) -> str:
    """A part's modality when its extension names none: its `mediaType`, else the default of its kind."""
    media_type = part.get("mediaType")
    if media_type:
        return str(parse_modality(media_type, field=_where(where, "mediaType")))
    return _KIND_DEFAULT.get(part_kind(part), "application/octet-stream")


def write_part(part: dict[str, Any], ext: PartExtension) -> dict[str, Any]:
    """Set the extension on a part (in place) and keep `mediaType` in step with the modality."""
    part.setdefault("metadata", {})[EXTENSION_URI] = ext.to_json()
    if ext.modality and "text" not in part and "data" not in part:
        part.setdefault("mediaType", ext.modality)
    return part


def read_message(message: Mapping[str, Any], where: str = "message") -> MessageExtension | None:
    """The message-level extension, or None when the message does not carry it."""
    meta = message.get("metadata")
    raw = meta.get(EXTENSION_URI) if isinstance(meta, dict) else None
    if raw is None:
        return None
    return MessageExtension.from_json(raw, f"{where}.metadata[{EXTENSION_URI}]")


def write_message(message: dict[str, Any], ext: MessageExtension) -> dict[str, Any]:
    """Set the message-level extension (in place) and list the URI in `message.extensions`."""
    message.setdefault("metadata", {})[EXTENSION_URI] = ext.to_json()
    exts = message.setdefault("extensions", [])
    if EXTENSION_URI not in exts:
        exts.append(EXTENSION_URI)
    return message


def carries_extension(message: Mapping[str, Any]) -> bool:
    return EXTENSION_URI in (message.get("extensions") or ()) or bool(
        isinstance(message.get("metadata"), dict) and EXTENSION_URI in message["metadata"]
    )


def downgrade_message(message: Mapping[str, Any], *, input_modes: Iterable[str] | None = None) -> dict[str, Any]:
    """A plain A2A 1.0 message for an agent that does not declare the extension.

    Extension metadata and the URI go; what a plain agent can use stays: the content,
    `mediaType` (taken from the modality when the part had none), `filename`, other metadata.
    With `input_modes` (the target card's modes), a `mediaType` the card does not spell
    literally but accepts (`audio/ogg; codecs=opus` under `audio/ogg`) is rewritten to the
    card's own string, since SDK servers compare media types as plain strings.
    """
    modes = None if input_modes is None else list(input_modes)
    out = {k: v for k, v in message.items() if k not in ("metadata", "extensions", "parts")}
    if "metadata" in message:
        meta = {k: v for k, v in (message.get("metadata") or {}).items() if k != EXTENSION_URI}
        if meta:
            out["metadata"] = meta
    if "extensions" in message:
        exts = [e for e in (message.get("extensions") or []) if e != EXTENSION_URI]
        if exts:
            out["extensions"] = exts
    out["parts"] = [downgrade_part(p, input_modes=modes) for p in message.get("parts", [])]
    return out


def downgrade_part(part: Mapping[str, Any], *, input_modes: Iterable[str] | None = None) -> dict[str, Any]:
    """One part without the extension; see `downgrade_message`."""
    if "metadata" not in part and "mediaType" not in part:  # a plain part: nothing to take off or respell
        return dict(part)
    out = {k: v for k, v in part.items() if k != "metadata"}
    pmeta = part.get("metadata") or {}
    ext = pmeta.get(EXTENSION_URI)
    rest = {k: v for k, v in pmeta.items() if k != EXTENSION_URI}
    if rest:
        out["metadata"] = rest
    if isinstance(ext, dict) and "mediaType" not in out and isinstance(ext.get("modality"), str):
        if "text" not in out or not _is_plain_text(ext["modality"]):
            out["mediaType"] = ext["modality"]
    if input_modes is not None and isinstance(out.get("mediaType"), str):
        out["mediaType"] = _spell_as_card(out["mediaType"], input_modes)
    return out


def _is_plain_text(modality: str) -> bool:
    """`text/plain` with any parameters: what a plain agent assumes of a text part anyway."""
    try:
        return parse_modality(modality).essence == "text/plain"
    except InvalidModality:
        return False


def _spell_as_card(media_type: str, input_modes: Iterable[str]) -> str:
    """The card's own spelling of the first concrete input mode that accepts `media_type`, else `media_type`."""
    modes = list(input_modes)
    if media_type in modes:
        return media_type
    try:
        mod = parse_modality(media_type, field="mediaType")
    except InvalidModality:
        return media_type
    for mode in modes:
        try:
            pattern = parse_modality(mode, field="inputModes")
        except InvalidModality:
            continue
        if not pattern.is_wildcard and mod.matches(pattern):
            return mode
    return media_type
