"""Cluster mode: many stateless gateways sharing one NATS JetStream.

KV buckets carry rules, modalities, agents, session pins and membership; the Object
Store carries payloads; a stream carries durable deliveries. Only `ClusterConfig` is
imported eagerly: nothing here imports `nats` until a gateway is actually clustered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import ClusterConfig

if TYPE_CHECKING:
    from ..gateway.app import Gateway
    from .objects import ObjectBlobStore
    from .server import NatsServer
    from .state import ClusterState

__all__ = ["ClusterConfig", "ClusterState", "NatsServer", "ObjectBlobStore", "cluster_state"]


def cluster_state(gateway: Gateway, config: ClusterConfig | None) -> ClusterState | None:
    """The gateway's `ClusterState` when the config has a `cluster:` section, else None (and no NATS import).

    Every gateway of a cluster must sign payload URLs with the same key, so cluster mode
    requires the URL secret to be configured (`url_secret_env`, MMA2A_URL_SECRET by default).
    """
    if config is None:
        return None
    import os

    from ..errors import ClusterError

    env = gateway.config.url_secret_env
    if not env or not os.environ.get(env):
        raise ClusterError(
            f"cluster: set the payload URL secret ({env or 'url_secret_env'}) to the same value on every gateway, "
            "so a URL signed by one is accepted by all", field="url_secret_env")
    from .state import ClusterState

    return ClusterState(gateway, config)


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
