"""The `cluster:` section of the gateway config (read by `mma2a.cluster`; no NATS import here).

May import: nothing in the gateway.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..tls import ClientTLS

_URL_RE = re.compile(r"^(nats|tls|ws|wss)://[^\s/]+(:\d+)?/?$")


_SECRETS = ("password", "token", "nkey_seed", "creds")


class NatsAuth(BaseModel):
    """The gateway's NATS credentials: user and password, a token, an NKey seed, or a creds file (JWT + seed).
    Each secret comes from an environment variable (`*_env`) or a file (`*_file`), never inline."""

    model_config = ConfigDict(extra="forbid")

    user: str | None = None
    password_env: str | None = None
    password_file: str | None = None
    token_env: str | None = None
    token_file: str | None = None
    nkey_seed_env: str | None = None
    nkey_seed_file: str | None = None
    creds_env: str | None = None
    creds_file: str | None = None

    @model_validator(mode="after")
    def _one(self) -> NatsAuth:
        given = [k for k in _SECRETS if getattr(self, f"{k}_env") or getattr(self, f"{k}_file")]
        for k in given:
            if getattr(self, f"{k}_env") and getattr(self, f"{k}_file"):
                raise ValueError(f"{k}_env and {k}_file: give one")
        if len(given) > 1:
            raise ValueError(f"{' and '.join(given)}: give one way to authenticate")
        if (self.user is not None) != (given == ["password"]):
            raise ValueError("user and password go together (user with password_env or password_file)")
        return self

    @property
    def active(self) -> bool:
        return any(getattr(self, f"{k}_env") or getattr(self, f"{k}_file") for k in _SECRETS)

    def envs(self) -> dict[str, str]:
        """The environment variables it names, by field."""
        return {f"{k}_env": v for k in _SECRETS if (v := getattr(self, f"{k}_env"))}

    def relative_to(self, base_dir: str) -> NatsAuth:
        paths = {f"{k}_file": str(Path(base_dir) / v) for k in _SECRETS if (v := getattr(self, f"{k}_file"))}
        return self.model_copy(update=paths)

    def secret(self, kind: str) -> str | None:
        """One secret, read now from its variable or file; `ValueError` naming the field when it is missing."""
        env, path = getattr(self, f"{kind}_env"), getattr(self, f"{kind}_file")
        if env:
            value = os.environ.get(env)
            if not value:
                raise ValueError(f"cluster.auth.{kind}_env: ${env} is not set")
            return value.strip() if kind != "creds" else value
        if path:
            try:
                text = Path(path).read_text()
            except OSError as exc:
                raise ValueError(f"cluster.auth.{kind}_file: cannot read {path}: {exc.strerror}") from None
            if not text.strip():
                raise ValueError(f"cluster.auth.{kind}_file: {path} is empty")
            return text.strip() if kind != "creds" else text
        return None


class ClusterConfig(BaseModel):
    """Gateways sharing rules, agents, modalities, session pins, payloads and deliveries through NATS JetStream."""

    model_config = ConfigDict(extra="forbid")

    nats: str
    """`nats://HOST:PORT`; several servers of one NATS cluster separated by commas."""
    name: str = Field(default="mma2a", pattern=r"^[A-Za-z0-9_-]{1,32}$")
    """The cluster's name: prefix of every bucket, stream and subject, so clusters can share a NATS."""
    id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    """This gateway's member id (default: host-pid-random)."""
    durable: bool | list[str] = False
    """Durable delivery: True for every agent, or the names of the agents whose routes go through the stream."""
    dispatch: bool = True
    """Run a dispatcher in this gateway (False: an ingress-only gateway)."""
    dispatch_concurrency: int = Field(default=64, ge=1, le=4096)
    ack_wait_s: float = Field(default=30.0, gt=0)
    """How long a dispatcher may take to deliver before JetStream redelivers (raised to the agent timeout)."""
    max_deliver: int = Field(default=20, ge=1)
    dedupe_window_s: float = Field(default=120.0, gt=0)
    delivered_ttl_s: float = Field(default=24 * 3600.0, gt=0)
    """How long delivered message ids are remembered (dedupe beyond JetStream's window)."""
    delivered_bucket_bytes: int = Field(default=1 << 30, ge=4 << 20)
    """The `delivered` bucket's bytes at most (each record keeps its answer for `delivered_ttl_s`), oldest out first:
    past it a retry of an old message is delivered again rather than every client's records filling NATS's disk."""
    task_bucket_bytes: int = Field(default=1 << 30, ge=4 << 20)
    """The `tasks` bucket's bytes at most, its oldest batches out first: every batch stays for the map's age limit
    (an hour) whatever its records became, so without a bound one client's large tasks grew it without end."""
    push_bucket_bytes: int = Field(default=256 << 20, ge=4 << 20)
    """The `push_configs` bucket's bytes at most (its TTL: `push.config_ttl_s` + `push.follow_max_s`), oldest out first."""
    learning_stream_bytes: int = Field(default=256 << 20, ge=4 << 20)
    """The learning stream's bytes at most (learned tasks and ratings every gateway follows; a note with a 384-d
    vector is ~2.2 kB: ~100,000 learned tasks), oldest out first."""
    blob_quota_bucket_bytes: int = Field(default=16 << 20, ge=1 << 20)
    """The `blob_quota` bucket's bytes at most (one count per client that ever held a blob, 150 bytes for a
    24-character name: bench/blob_quota_cost.py, session 16; and the store's total), its counts idle longest out
    first: the blob quotas' counts, shared by the gateways."""
    budget_report_s: float = Field(default=0.1, gt=0, le=1.0)
    """How often a gateway tells the others what each client used of its budgets (rate, ratings, streams, follows;
    sooner when a client took a quarter of a burst or a count changed): the window within which a client may use
    more than its budget across gateways (docs/security.md)."""
    heartbeat_s: float = Field(default=2.0, gt=0)
    member_ttl_s: float = Field(default=10.0, gt=0)
    session_ttl_s: float = Field(default=3600.0, gt=0)
    sessions_bucket_bytes: int = Field(default=64 << 20, ge=1 << 20)
    """The `sessions` bucket's bytes at most (one pin a session a `pin_session` rule routed, ~0.4 kB with a 256-character
    id, kept for `session_ttl_s` after it was written: a pin is written once, when its session's route is made), the
    pins written longest ago out first (used or not): clients opening new sessions grew it without end; a pin let go
    this way routes its session's next message afresh on a gateway that does not hold it. Each client is held to
    `sessions_bytes_per_client` of it, so one client's sessions never push another's out (docs/security.md S16-5)."""
    sessions_bytes_per_client: int | None = Field(default=None, ge=4096)
    """The most bytes one client's pins (and its released sessions' markers) take of the `sessions` bucket, across
    every gateway of the cluster (default: a quarter of `sessions_bucket_bytes`, 16 MiB: ~35,000 pins of 256-character
    session ids). Past it the client's own pins written longest ago leave the bucket, never another client's; its
    session whose pin went is routed afresh at its next message where no gateway holds a copy. Sessions of a gateway
    without authentication are all one's, held to the bucket's bound alone."""
    replicas: int = Field(default=1, ge=1, le=5)
    """JetStream replicas of every bucket and stream (3 on a 3-node NATS cluster)."""
    connect_timeout_s: float = Field(default=5.0, gt=0)
    auth: NatsAuth = Field(default_factory=NatsAuth)
    """This gateway's NATS credentials (docs/operations.md, "Securing NATS": NATS access is admin access)."""
    tls: ClientTLS | None = None
    """TLS to NATS: the CA to verify the servers with and this gateway's client certificate (paths relative to the config file)."""

    @field_validator("nats")
    @classmethod
    def _nats(cls, v: str) -> str:
        urls = [u.strip() for u in v.split(",") if u.strip()]
        if not urls or not all(_URL_RE.match(u) for u in urls):
            raise ValueError("must be nats://HOST:PORT (several separated by commas)")
        return ",".join(urls)

    @model_validator(mode="after")
    def _ttl(self) -> ClusterConfig:
        if self.member_ttl_s < 2 * self.heartbeat_s:
            raise ValueError(f"member_ttl_s ({self.member_ttl_s}) must be at least twice heartbeat_s ({self.heartbeat_s})")
        if self.sessions_bytes_per_client is not None and self.sessions_bytes_per_client > self.sessions_bucket_bytes:
            raise ValueError(f"sessions_bytes_per_client ({self.sessions_bytes_per_client}) must be at most "
                             f"sessions_bucket_bytes ({self.sessions_bucket_bytes}): a client's share of that bucket")
        return self

    @property
    def sessions_share(self) -> int:
        """The bytes of the `sessions` bucket one client's pins may take (`sessions_bytes_per_client`, or a quarter)."""
        return self.sessions_bytes_per_client or self.sessions_bucket_bytes // 4

    def servers(self) -> list[str]:
        return self.nats.split(",")

    def durable_for(self, agent: str) -> bool:
        return self.durable is True or (isinstance(self.durable, list) and agent in self.durable)
