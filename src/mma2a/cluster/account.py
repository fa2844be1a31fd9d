"""The least-privilege NATS account of a cluster's gateways: the subjects and JetStream streams they use, nothing
else (`mma2a cluster nats-config`; docs/operations.md, "Securing NATS").

Whoever reaches the gateways' NATS account is their admin: it holds the rules, agents and
modalities every gateway adopts, every durable payload and outcome, every blob. So the
gateways get an account of their own (JetStream on), with one user whose permissions name
only the cluster's streams and subjects; no other client gets a user in it.
"""

from __future__ import annotations

from .link import Names

KV_BUCKETS = ("rules", "agents", "modalities", "sessions", "members", "delivered", "nonces", "uploads", "push_configs",
              "push_deliveries", "tasks", "blob_quota")
"""Every KV bucket a gateway opens (`<name>_<kind>`); tests/cluster/test_security.py fails on one missing here."""


def cluster_streams(names: Names) -> list[str]:
    """Every JetStream stream of the cluster: its KV buckets, its Object Store, the delivery and history streams."""
    return ([f"KV_{names.bucket(b)}" for b in KV_BUCKETS] + [f"OBJ_{names.blobs_bucket}", names.delivery_stream,
                                                            f"{names.cluster}_history".upper(),
                                                            f"{names.cluster}_learning".upper()])


def gateway_permissions(names: Names) -> tuple[list[str], list[str]]:
    """(publish, subscribe) subjects the gateways of cluster `names` need."""
    publish = ["$JS.API.INFO"]
    for s in cluster_streams(names):
        publish += [f"$JS.API.STREAM.*.{s}",  # INFO, CREATE, UPDATE, DELETE, PURGE of its own streams
                    f"$JS.API.STREAM.MSG.*.{s}", f"$JS.API.DIRECT.GET.{s}", f"$JS.API.DIRECT.GET.{s}.>",
                    f"$JS.API.CONSUMER.*.{s}", f"$JS.API.CONSUMER.*.{s}.>",  # CREATE, INFO, DELETE
                    f"$JS.API.CONSUMER.*.*.{s}.>",  # DURABLE.CREATE, MSG.NEXT
                    f"$JS.ACK.{s}.>", f"$JS.FC.{s}.>"]
    publish += [f"$KV.{names.bucket(b)}.>" for b in KV_BUCKETS]
    publish += [f"$O.{names.blobs_bucket}.>", f"{names.cluster}.deliver.>", f"{names.cluster}.reply.>",
                f"{names.cluster}.history.>", f"{names.cluster}.learning.>", f"{names.cluster}.budgets"]
    subscribe = ["_INBOX.>", f"{names.cluster}.reply.>", f"{names.cluster}.budgets"]
    return publish, subscribe


def nats_account(cluster: str = "mma2a", *, user: str = "mma2a-gateway", password_env: str = "MMA2A_NATS_PASSWORD") -> str:
    """A nats-server configuration block: the account `MMA2A` for the gateways of `cluster`, its one user with the
    password from the server's environment variable `password_env`, and no anonymous access."""
    publish, subscribe = gateway_permissions(Names(cluster))

    def subjects(items: list[str]) -> str:
        return "\n".join(f'            "{s}"' for s in items)

    return (
        "# the gateways' account: JetStream on, one user, permissions naming only the cluster's subjects\n"
        "accounts {\n"
        "  MMA2A {\n"
        "    jetstream: enabled\n"
        "    users: [\n"
        f"      {{user: \"{user}\", password: ${password_env},\n"
        "       permissions: {\n"
        "         publish: {allow: [\n"
        f"{subjects(publish)}\n"
        "         ]}\n"
        "         subscribe: {allow: [\n"
        f"{subjects(subscribe)}\n"
        "         ]}\n"
        "       }}\n"
        "    ]\n"
        "  }\n"
        "}\n"
    )
