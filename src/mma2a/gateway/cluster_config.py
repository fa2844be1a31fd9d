"""The `cluster:` section of the gateway config (read by `mma2a.cluster`; no NATS import here)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..tls import ClientTLS

_URL_RE = re.compile(r"^(nats|tls|ws|wss)://[^\s/]+(:\d+)?/?$")


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
    heartbeat_s: float = Field(default=2.0, gt=0)
    member_ttl_s: float = Field(default=10.0, gt=0)
    session_ttl_s: float = Field(default=3600.0, gt=0)
    replicas: int = Field(default=1, ge=1, le=5)
    """JetStream replicas of every bucket and stream (3 on a 3-node NATS cluster)."""
    connect_timeout_s: float = Field(default=5.0, gt=0)
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
        return self

    def servers(self) -> list[str]:
        return self.nats.split(",")

    def durable_for(self, agent: str) -> bool:
        return self.durable is True or (isinstance(self.durable, list) and agent in self.durable)
