"""A gateway's (or a tool's) link to the cluster's NATS: the connection, the names of every bucket,
stream and subject, KV buckets made on first use — and, as Protocols, what the cluster's parts
(pins, blobs, deliveries, history) need of the member that owns them."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Protocol

import nats
from nats.aio.client import RawCredentials
from nats.js import JetStreamContext, api
from nats.js.errors import BucketNotFoundError, NotFoundError, ServerError
from nats.js.kv import KeyValue

from ..errors import ClusterError
from ..gateway.cluster_config import ClusterConfig, NatsAuth
from ..gateway.state.hooks import GatewayParts
from ..tls import client_context

log = logging.getLogger("mma2a.cluster")


@dataclass(frozen=True)
class Names:
    """Every bucket, stream and subject of one cluster, derived from its name."""

    cluster: str

    def bucket(self, kind: str) -> str:
        return f"{self.cluster}_{kind}"

    @property
    def delivery_stream(self) -> str:
        return f"{self.cluster}_delivery".upper()

    def deliver_subject(self, agent: str) -> str:
        return f"{self.cluster}.deliver.{agent}"

    @property
    def deliver_filter(self) -> str:
        return f"{self.cluster}.deliver.>"

    def reply_subject(self, member: str) -> str:
        return f"{self.cluster}.reply.{member}"

    @property
    def blobs_bucket(self) -> str:
        return f"{self.cluster}_blobs"


async def connect(config: ClusterConfig, *, name: str = "mma2a", **callbacks: Any) -> Any:
    """A NATS connection that reconnects forever; a clear `ClusterError` if the first connect fails."""
    # the errors NATS gave while connecting (nats-py ends with "no servers available" whatever it was, and a refused
    # credential's "Authorization Violation" can be followed by the closed connection's own error): the last few kept
    errors: list[Exception] = []
    outer = callbacks.get("error_cb", _quiet)

    async def noted(exc: Exception) -> None:
        errors[:] = [*errors[-7:], exc]
        await outer(exc)

    callbacks["error_cb"] = noted
    if config.tls is not None:  # a bad file: TLSFileError naming it
        callbacks["tls"] = client_context(config.tls, what="cluster")
    callbacks.update(credentials(config.auth))
    limit = 3 * config.connect_timeout_s + 1  # nats-py can wait forever on a TLS handshake that failed
    try:  # a few attempts at first; once connected, reconnect forever
        nc = await asyncio.wait_for(nats.connect(
            servers=config.servers(), name=name, connect_timeout=config.connect_timeout_s,
            max_reconnect_attempts=2, reconnect_time_wait=0.25, allow_reconnect=True, **callbacks,
        ), limit)
    except asyncio.TimeoutError:
        hint = "; check cluster.tls (its ca_file, and whether the server requires TLS)"
        raise ClusterError(f"cluster.nats: cannot connect to {config.nats}: no connection within {limit:g} s{hint}",
                           field="cluster.nats") from None
    except Exception as exc:  # nats raises NoServersError, TimeoutError, OSError
        said = next((e for e in errors if "authorization" in str(e).lower()), None)
        if said is not None:
            raise ClusterError(f"cluster.auth: NATS at {config.nats} refused the gateway's credentials ({said}); check "
                               "cluster.auth (docs/operations.md, \"Securing NATS\")", field="cluster.auth") from None
        raise ClusterError(f"cluster.nats: cannot connect to {config.nats}: {exc or type(exc).__name__}",
                           field="cluster.nats") from None
    nc.options["max_reconnect_attempts"] = -1
    return nc


def credentials(auth: NatsAuth) -> dict[str, Any]:
    """nats-py's connect options for the configured credentials, read now (a `ClusterError` naming the field
    when a variable is unset or a file unreadable)."""
    try:
        if (password := auth.secret("password")) is not None:
            return {"user": auth.user, "password": password}
        if (token := auth.secret("token")) is not None:
            return {"token": token}
        if (seed := auth.secret("nkey_seed")) is not None:
            return {"nkeys_seed_str": seed}
        if (creds := auth.secret("creds")) is not None:
            return {"user_credentials": RawCredentials(creds)}
    except ValueError as exc:
        raise ClusterError(str(exc), field="cluster.auth") from None
    return {}


async def _quiet(exc: Exception) -> None:
    log.debug("nats: %s", exc)


async def ensure_kv(js: JetStreamContext, bucket: str, *, ttl: float | None = None, history: int = 1, replicas: int = 1,
                    max_bytes: int | None = None, enforce_ttl: bool = False) -> KeyValue:
    """Open a KV bucket, creating it on first use (creation is idempotent between gateways). With `max_bytes` the
    bucket holds at most that many bytes, its oldest entries out first (`discard: old`; a KV bucket's own default
    refuses new writes when full); that bound, and with `enforce_ttl` the TTL, are set again on every open, so a
    bucket made before them gets them."""
    try:
        kv = await js.key_value(bucket)
    except BucketNotFoundError:
        cfg = api.KeyValueConfig(bucket=bucket, history=history, ttl=ttl, replicas=replicas)
        kv = await js.create_key_value(config=cfg)
    if max_bytes is not None or enforce_ttl:
        config = (await js.stream_info(f"KV_{bucket}")).config
        want = dataclasses.replace(config)
        if max_bytes is not None:
            want.max_bytes, want.discard = max_bytes, api.DiscardPolicy.OLD
        if enforce_ttl and ttl is not None:
            want.max_age = ttl
            if want.duplicate_window is not None and want.duplicate_window > ttl:  # NATS refuses a window past the age
                want.duplicate_window = ttl
        if want != config:
            try:
                await js.update_stream(want)
            except ServerError as exc:  # e.g. JetStream cannot reserve max_bytes (its store is smaller): run unbounded
                log.warning("bucket %s: its bounds (max_bytes %s, TTL %s s) not set: %s; lower them in the cluster "
                            "section (task_bucket_bytes, delivered_bucket_bytes, push_bucket_bytes) or give JetStream "
                            "more storage", bucket, max_bytes, ttl if enforce_ttl else None, exc.description or exc)
    return kv


async def ensure_stream(js: JetStreamContext, name: str, subjects: str, *, max_age_s: float, max_bytes: int,
                        replicas: int = 1) -> None:
    """A limits-retention stream (file storage, oldest out past `max_age_s` or `max_bytes`), created on first use
    (another gateway may create it at the same moment: that is fine)."""
    try:
        await js.stream_info(name)
    except NotFoundError:
        cfg = api.StreamConfig(name=name, subjects=[subjects], storage=api.StorageType.FILE,
                               retention=api.RetentionPolicy.LIMITS, discard=api.DiscardPolicy.OLD, max_age=max_age_s,
                               max_bytes=max_bytes, num_replicas=replicas)
        with contextlib.suppress(Exception):
            await js.add_stream(cfg)


class Connected(Protocol):
    """A connection to the cluster: its config, its names, JetStream (None until connected)."""

    @property
    def config(self) -> ClusterConfig: ...

    @property
    def names(self) -> Names: ...

    @property
    def js(self) -> Any: ...


class Member(Connected, Protocol):
    """One gateway of the cluster (`ClusterState`), as its pins, deliveries and history see it."""

    @property
    def id(self) -> str: ...

    @property
    def nc(self) -> Any: ...

    @property
    def kv(self) -> dict[str, KeyValue]: ...

    @property
    def gw(self) -> GatewayParts: ...

    def epoch(self) -> str:
        """The cluster config this gateway runs: equal on two gateways that applied the same changes."""

    async def is_alive(self, member: str) -> bool:
        """A member is alive while its heartbeat entry is fresh."""


class ClusterLink:
    """A bare connection to a cluster (names, config, NATS), for tools that use one piece without a gateway."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.names = Names(config.name)
        self.nc: Any = None
        self.js: Any = None

    async def connect(self) -> ClusterLink:
        self.nc = await connect(self.config, name="mma2a-tool")
        self.js = self.nc.jetstream(timeout=5.0)
        return self

    async def close(self) -> None:
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.drain()
            self.nc = None
