"""mma2a: modality-native routing for A2A agent networks.

A multimodal extension of A2A 1.0 (each part carries its modality, encoding and features;
big payloads travel by reference) and a gateway that routes every part natively.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:  # loaded lazily at run time (see __getattr__); typed as what they are
    from .errors import (
        ContentTypeNotSupported,
        ExtensionError,
        FeatureSchemaError,
        InvalidModality,
        MMA2AError,
        RuleError,
        UnsupportedExtensionVersion,
    )
    from .ext import (
        EXTENSION_URI,
        PROTOCOL,
        FeatureSource,
        MessageExtension,
        PartExtension,
        PayloadRef,
        Session,
        StreamRef,
        Thumbnail,
        downgrade_message,
        read_message,
        read_part,
        write_message,
        write_part,
    )
    from .gateway import Gateway, GatewayConfig
    from .modality import DEFAULT_REGISTRY, Modality, ModalityRegistry, accepts, modality_matches, parse_modality
    from .routing import (
        AgentInfo,
        RouteDecision,
        Rule,
        RuleSet,
        Snapshot,
        build_snapshot,
        decide,
        load_rules_file,
        parse_rules,
    )
    from .sdk import (
        IncomingMessage,
        IncomingPart,
        Live,
        MultimodalClient,
        MultimodalExecutor,
        PayloadReader,
        Reply,
        ReplyStream,
    )
    from .view import MessageView, PartView, view_message

# each public name -> the module that defines it, imported when the name is first asked for: `import mma2a` itself
# loads nothing else, so a process that needs one module of the package (the supervisor of `serve --workers N`:
# mma2a.supervisor) holds only that module's imports, not routing, the wire types, yaml and orjson
_HOME = {
    **dict.fromkeys(("ContentTypeNotSupported", "ExtensionError", "FeatureSchemaError", "InvalidModality", "MMA2AError",
                     "RuleError", "UnsupportedExtensionVersion"), "errors"),
    **dict.fromkeys(("EXTENSION_URI", "PROTOCOL", "FeatureSource", "MessageExtension", "PartExtension", "PayloadRef",
                     "Session", "StreamRef", "Thumbnail", "downgrade_message", "read_message", "read_part",
                     "write_message", "write_part"), "ext"),
    **dict.fromkeys(("Gateway", "GatewayConfig"), "gateway"),  # the web stack
    **dict.fromkeys(("DEFAULT_REGISTRY", "Modality", "ModalityRegistry", "accepts", "modality_matches",
                     "parse_modality"), "modality"),
    **dict.fromkeys(("AgentInfo", "RouteDecision", "Rule", "RuleSet", "Snapshot", "build_snapshot", "decide",
                     "load_rules_file", "parse_rules"), "routing"),
    **dict.fromkeys(("IncomingMessage", "IncomingPart", "Live", "MultimodalClient", "MultimodalExecutor",
                     "PayloadReader", "Reply", "ReplyStream"), "sdk"),  # a2a-sdk's client and server pieces
    **dict.fromkeys(("MessageView", "PartView", "view_message"), "view"),
}


def __getattr__(name: str) -> Any:
    """A public name, from its module (PEP 562): loaded on first use, the same object as the module's."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'mma2a' has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{home}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})


__all__ = [
    "AgentInfo",
    "DEFAULT_REGISTRY",
    "Gateway",
    "GatewayConfig",
    "RouteDecision",
    "Rule",
    "RuleSet",
    "Snapshot",
    "build_snapshot",
    "decide",
    "load_rules_file",
    "parse_rules",
    "EXTENSION_URI",
    "PROTOCOL",
    "ContentTypeNotSupported",
    "ExtensionError",
    "FeatureSchemaError",
    "FeatureSource",
    "InvalidModality",
    "MMA2AError",
    "MessageExtension",
    "MessageView",
    "Modality",
    "ModalityRegistry",
    "PartExtension",
    "PartView",
    "PayloadRef",
    "RuleError",
    "Session",
    "StreamRef",
    "Thumbnail",
    "UnsupportedExtensionVersion",
    "__version__",
    "accepts",
    "downgrade_message",
    "modality_matches",
    "parse_modality",
    "read_message",
    "read_part",
    "view_message",
    "write_message",
    "write_part",
    "IncomingMessage",
    "IncomingPart",
    "Live",
    "MultimodalClient",
    "MultimodalExecutor",
    "PayloadReader",
    "Reply",
    "ReplyStream",
]
