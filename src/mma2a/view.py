"""The routing view of a message: per part its modality and features, per message its intent.

Built once per request from the JSON form (`view_message`), immutable, and all the routing
engine ever reads; the engine never touches raw parts or protobuf.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._frozen import quick_init
from .errors import InvalidParams, InvalidRequest
from .ext import PartExtension, Session, decoded_size, part_kind, read_message, read_part
from .modality import Modality, ModalityRegistry, parse_modality

__all__ = [
    "Caller",
    "MessageView",
    "part_size",
    "PartView",
    "read_caller",
    "view_message",
    "view_part",
]


@quick_init
@dataclass(frozen=True, slots=True)
class PartView:
    """What the router knows of one part."""

    index: int
    modality: Modality
    features: Mapping[str, Any]
    kind: str = "text"
    size: int | None = None
    ext: PartExtension = field(default_factory=PartExtension)
    embedding: Any = field(default=None, compare=False)  # the sentence vector of its text (semantic routing), off the wire
    embedding_model: str = ""  # the sentence model of `embedding` ("" = whichever built the snapshot's vectors)

    @property
    def modality_str(self) -> str:
        return str(self.modality)


@quick_init
@dataclass(frozen=True, slots=True)
class Caller:
    """Who sends the message, as rules may read it (`client:` conditions): the client id, and the claims the rules
    name (a JWT's claims, a static client's `attributes`). Set on a view only when the rules read it."""

    id: str
    claims: Mapping[str, Any] = field(default_factory=dict)


@quick_init
@dataclass(frozen=True, slots=True)
class MessageView:
    """What the router knows of one message."""

    message_id: str
    parts: tuple[PartView, ...]
    receivers: tuple[str, ...] = ()
    session: Session | None = None
    hops: int = 0
    via: tuple[str, ...] = ()  # gateways passed (federation)
    priority: int = 5
    accepted_output_modes: tuple[str, ...] = ()
    extension: bool = False
    caller: Caller | None = None  # the authenticated caller, when the rules have `client:` conditions
    allowed: frozenset[str] | None = None  # the agents the sending client may use (auth.clients[].agents; None: all)


def part_size(part: Mapping[str, Any], ext: PartExtension) -> int | None:
    if ext.payload is not None:
        return ext.payload.size
    if "raw" in part and isinstance(part["raw"], str):
        return decoded_size(part["raw"])
    if "text" in part and isinstance(part["text"], str):
        return len(part["text"])
    return None


_PLAIN: dict[tuple[str, Any], tuple[PartExtension, Modality]] = {}  # (kind, mediaType) of parts without metadata
_PLAIN_MAX = 256


def view_part(part: Mapping[str, Any], index: int, registry: ModalityRegistry | None = None) -> PartView:
    if isinstance(part, dict) and "metadata" not in part:  # a plain part: its extension and modality, read once per shape
        media_type = part.get("mediaType")
        if media_type is None or type(media_type) is str:
            kind = part_kind(part)
            known = _PLAIN.get((kind, media_type))
            if known is not None:
                ext, modality = known
                return PartView(index, modality, {}, kind, part_size(part, ext), ext)
    where = f"message.parts[{index}]"
    if not isinstance(part, dict):
        raise InvalidRequest(f"{where}: must be an object", field=where)
    kind = part_kind(part)
    if kind == "none":
        hint = f"; a v0.3 part (kind: {part['kind']}) belongs to message/send" if isinstance(part.get("kind"), str) else ""
        raise InvalidRequest(f"{where}: carries no content (one of text, raw, url, data){hint}", field=where)
    ext = read_part(part, where)
    assert ext.modality is not None
    modality = parse_modality(ext.modality, field=f"{where}.modality")
    if registry is not None and ext.features:
        registry.validate_features(modality, ext.features, field=f"{where}.features")
    if "metadata" not in part and kind != "none" and len(_PLAIN) < _PLAIN_MAX:
        media_type = part.get("mediaType")
        if media_type is None or type(media_type) is str:
            _PLAIN[(kind, media_type)] = (ext, modality)  # frozen, its features empty: shared by alike parts
            return PartView(index, modality, {}, kind, part_size(part, ext), ext)  # a view's own dict, never the shared one
    return PartView(index, modality, ext.features, kind, part_size(part, ext), ext)


def view_message(
    message: Mapping[str, Any],
    *,
    accepted_output_modes: tuple[str, ...] = (),
    registry: ModalityRegistry | None = None,
) -> MessageView:
    """Read a message (A2A 1.0 JSON form) into the routing view; errors name the field."""
    if not isinstance(message, dict):
        raise InvalidRequest("message: must be an object", field="message")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise InvalidRequest("message.parts: must be a non-empty list", field="message.parts")
    mext = read_message(message)
    views = tuple([view_part(p, i, registry) for i, p in enumerate(parts)])  # (a list: no generator to resume)
    return MessageView(
        message_id=str(message.get("messageId", "")),
        parts=views,
        receivers=mext.receivers if mext else (),
        session=mext.session if mext else None,
        hops=mext.hops if mext else 0,
        via=mext.via if mext else (),
        priority=mext.priority if mext else 5,
        accepted_output_modes=accepted_output_modes,
        extension=mext is not None,
    )


def read_caller(raw: Any) -> Caller:
    """The caller a dry run names (the admin API's explain, `mma2a rules explain`): `{"id": "alice", "claims":
    {"groups": ["contractors"]}}`; errors name the field."""
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or not raw["id"]:
        raise InvalidParams("client: must be an object with id (a client id) and optional claims", field="client")
    claims = raw.get("claims", {})
    if not isinstance(claims, dict):
        raise InvalidParams("client.claims: must be an object of claim name to value", field="client.claims")
    return Caller(raw["id"], claims)
