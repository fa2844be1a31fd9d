"""Cluster mode: many stateless gateways sharing one NATS JetStream.

KV buckets carry rules, modalities, agents, session pins and membership; the Object
Store carries payloads; a stream carries durable deliveries; a core subject carries what each client used of its
budgets (`budgets`). Nothing is
imported eagerly: nothing here imports `nats` until a gateway is actually clustered, nor pydantic until a config is
read (the supervisor of `serve --workers N` starts its nats-server with `server` alone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..gateway.cluster_config import ClusterConfig
    from ..gateway.config import GatewayConfig
    from .objects import ObjectBlobStore
    from .server import NatsServer
    from .state import ClusterState, HistoryMode

__all__ = ["ClusterConfig", "ClusterState", "NatsServer", "ObjectBlobStore", "cluster_state"]


def cluster_state(config: GatewayConfig, *, history: HistoryMode = "stream", task_dir: str | None = None
                  ) -> ClusterState | None:
    """The `ClusterState` for a gateway config with a `cluster:` section, else None (and no NATS import).

    Hand it to `Gateway(config, cluster=...)` (as `mma2a serve` does). Every gateway of a cluster
    must sign payload URLs with the same key, so cluster mode requires the URL secret to be
    configured (`url_secret_env`, MMA2A_URL_SECRET by default). `history`: where its decisions go (`HistoryMode`:
    the workers of `serve --workers N` share one history file); `task_dir`: the directory where the workers of one
    host share their task records when they are the whole cluster (cluster/task_files.py), else the `tasks` bucket.
    """
    if config.cluster is None:
        return None
    import os

    from ..errors import ClusterError

    env = config.url_secret_env
    if not env or not os.environ.get(env):
        raise ClusterError(
            f"cluster: set the payload URL secret ({env or 'url_secret_env'}) to the same value on every gateway, "
            "so a URL signed by one is accepted by all", field="url_secret_env")
    from .state import ClusterState

    return ClusterState(config.cluster, history=history, task_dir=task_dir)


def __getattr__(name: str) -> Any:
    if name == "ClusterConfig":
        from ..gateway.cluster_config import ClusterConfig

        return ClusterConfig
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
