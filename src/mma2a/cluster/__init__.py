"""Cluster mode: many stateless gateways sharing one NATS JetStream.

KV buckets carry rules, modalities, agents, session pins and membership; the Object
Store carries payloads; a stream carries durable deliveries. Only `ClusterConfig` is
imported eagerly: nothing here imports `nats` until a gateway is actually clustered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import ClusterConfig

if TYPE_CHECKING:
    from .objects import ObjectBlobStore
    from .server import NatsServer
    from .state import ClusterState

__all__ = ["ClusterConfig", "ClusterState", "NatsServer", "ObjectBlobStore"]


def __getattr__(name: str) -> Any:
    if name == "ClusterState":
        from .state import ClusterState

        return ClusterState
    if name == "ObjectBlobStore":
        from .objects import ObjectBlobStore

        return ObjectBlobStore
    if name == "NatsServer":
        from .server import NatsServer

        return NatsServer
    raise AttributeError(name)
