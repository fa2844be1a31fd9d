"""The extension in Agent Cards and request headers: declare it, detect it, activate it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from a2a.types import AgentCard, AgentExtension

from .adapt.profiles import receiver_profiles
from .ext import EXTENSION_URI, PROTOCOL
from .modality import DEFAULT_REGISTRY, ModalityRegistry

EXTENSIONS_HEADER = "A2A-Extensions"
VERSION_HEADER = "A2A-Version"


def extension_declaration(
    *, feature_schemas: Iterable[str] | None = None, required: bool = False, registry: ModalityRegistry = DEFAULT_REGISTRY,
    accepts: Mapping[str, Mapping[str, Any]] | None = None, content_encodings: Iterable[str] | None = None,
) -> AgentExtension:
    """The `capabilities.extensions` entry an agent publishes to say it speaks the extension.

    `accepts` (`{"image/*": {"maxPixels": 1000000, "encodings": ["image/webp"]}}`) and
    `content_encodings` (`["zstd", "gzip"]`) tell gateways the form the agent wants its parts
    and request bodies in (docs/extension.md, section 6); they are checked here.
    """
    schemas = list(feature_schemas) if feature_schemas is not None else sorted(t.feature_schema for t in registry.types())
    ext = AgentExtension(
        uri=EXTENSION_URI,
        description="Multimodal parts: modality, encoding, features, payload by reference, live streams",
        required=required,
    )
    ext.params.update({"protocol": PROTOCOL, "featureSchemas": schemas})
    wishes: dict[str, Any] = {}
    if accepts:
        wishes["accepts"] = {str(k): dict(v) for k, v in accepts.items()}
    if content_encodings is not None:
        wishes["contentEncodings"] = list(content_encodings)
    if wishes:
        receiver_profiles(wishes)  # InvalidParams naming the field, before any gateway reads it
        ext.params.update(wishes)
    return ext


def declare_extension(card: AgentCard, **kwargs: Any) -> AgentCard:
    """Add the extension to a card (in place) unless it is already there."""
    if not card_declares_extension(card):
        card.capabilities.extensions.append(extension_declaration(**kwargs))
    return card


def card_declares_extension(card: AgentCard | Mapping[str, Any]) -> bool:
    """Does this card (protobuf or JSON form) declare the extension?"""
    if isinstance(card, AgentCard):
        return any(e.uri == EXTENSION_URI for e in card.capabilities.extensions)
    exts = (card.get("capabilities") or {}).get("extensions") or []
    return any(isinstance(e, dict) and e.get("uri") == EXTENSION_URI for e in exts)


def parse_extensions_header(values: str | Iterable[str] | None) -> list[str]:
    """The URIs in one or more `A2A-Extensions` header values (comma separated)."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    out: list[str] = []
    for value in values:
        for uri in value.split(","):
            uri = uri.strip()
            if uri and uri not in out:
                out.append(uri)
    return out


def extension_activated(values: str | Iterable[str] | None) -> bool:
    """Did the client activate the extension with the `A2A-Extensions` header?"""
    return EXTENSION_URI in parse_extensions_header(values)


def activation_headers() -> dict[str, str]:
    """Headers a client sends to activate the extension on an A2A 1.0 server."""
    return {EXTENSIONS_HEADER: EXTENSION_URI, VERSION_HEADER: "1.0"}
