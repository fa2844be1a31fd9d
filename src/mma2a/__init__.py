"""mma2a: modality-native routing for A2A agent networks.

A multimodal extension of A2A 1.0 (each part carries its modality, encoding and features;
big payloads travel by reference) and a gateway that routes every part natively.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__
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
from .view import MessageView, PartView, view_message

if TYPE_CHECKING:  # loaded lazily at run time (see __getattr__); typed as what they are
    from .gateway import Gateway, GatewayConfig
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

_SDK = ("MultimodalClient", "MultimodalExecutor", "IncomingMessage", "IncomingPart", "Reply", "ReplyStream", "Live",
        "PayloadReader")


def __getattr__(name: str) -> Any:
    """`Gateway` and `GatewayConfig` load the web stack only when asked for."""
    if name in ("Gateway", "GatewayConfig"):
        from . import gateway

        return getattr(gateway, name)
    if name in _SDK:  # the agent SDK (a2a-sdk client and server pieces) also loads on first use
        from . import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'mma2a' has no attribute {name!r}")


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
    # the agent SDK (mma2a.sdk), loaded on first use
    "IncomingMessage",
    "IncomingPart",
    "Live",
    "MultimodalClient",
    "MultimodalExecutor",
    "PayloadReader",
    "Reply",
    "ReplyStream",
]
