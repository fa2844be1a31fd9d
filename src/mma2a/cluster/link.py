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
from nats.js.errors import BadRequestError, BucketNotFoundError, NotFoundError, ServerError
from nats.js.kv import KeyValue

from ..errors import ClusterError
from ..gateway.cluster_config import ClusterConfig, NatsAuth
from ..gateway.state.hooks import GatewayParts
from ..tls import client_context
from .nats_urls import without_credentials

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
        raise ClusterError(f"cluster.nats: cannot connect to {without_credentials(config.nats)}: no connection within "
                           f"{limit:g} s{hint}", field="cluster.nats") from None
    except Exception as exc:  # nats raises NoServersError, TimeoutError, OSError
        said = next((e for e in errors if "authorization" in str(e).lower()), None)
        if said is not None:
            raise ClusterError(f"cluster.auth: NATS at {without_credentials(config.nats)} refused the gateway's "
                               f"credentials ({said}); check cluster.auth (docs/operations.md, \"Securing NATS\")",
                               field="cluster.auth") from None
        raise ClusterError(f"cluster.nats: cannot connect to {without_credentials(config.nats)}: "
                           f"{exc or type(exc).__name__}", field="cluster.nats") from None
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


def reserved(config: ClusterConfig, *, history_bytes: int | None = None, task_bucket: bool = True
             ) -> dict[str, tuple[int, str]]:
    """What a gateway's byte-bounded buckets and streams reserve of the JetStream store of each server that holds a
    replica of them: stream name -> (bytes, the setting that sets it). JetStream counts a stream's `max_bytes` against
    its store (`max_file_store`, by default 75% of the disk free when the server starts) when the stream is made or
    bounded, whatever it holds; a stream or bound the store cannot take is refused ('insufficient storage resources').
    The other buckets and streams (rules, agents, members, nonces, push deliveries, blobs (bounded by the
    gateways' own `blob_max_bytes`), the delivery work queue) are unbounded and reserve nothing. `history_bytes`: the history stream's (`history.max_bytes`) where the
    gateway publishes its decisions (not the workers of `serve --workers N` over their own nats-server, which share a
    file, nor do they use the `tasks` bucket: `task_bucket=False`)."""
    names = Names(config.name)
    out = {f"KV_{names.bucket('delivered')}": (config.delivered_bucket_bytes, "cluster.delivered_bucket_bytes")}
    if task_bucket:
        out[f"KV_{names.bucket('tasks')}"] = (config.task_bucket_bytes, "cluster.task_bucket_bytes")
    if history_bytes is not None:
        out[f"{config.name}_history".upper()] = (history_bytes, "history.max_bytes")
    out[f"{config.name}_learning".upper()] = (config.learning_stream_bytes, "cluster.learning_stream_bytes")
    out[f"KV_{names.bucket('push_configs')}"] = (config.push_bucket_bytes, "cluster.push_bucket_bytes")
    out[f"KV_{names.bucket('blob_quota')}"] = (config.blob_quota_bucket_bytes, "cluster.blob_quota_bucket_bytes")
    out[f"KV_{names.bucket('sessions')}"] = (config.sessions_bucket_bytes, "cluster.sessions_bucket_bytes")
    return out


def _refusal(what: str, max_bytes: int, setting: str, exc: Exception, sizing: dict[str, tuple[int, str]] | None) -> str:
    """The one log line saying JetStream refused a bound (or a stream), naming the setting to lower and the others."""
    said = getattr(exc, "description", None) or exc
    total = f"{sum(b for b, _ in sizing.values()) / (1 << 30):.2f} GiB" if sizing else "its buckets' and streams' bounds"
    others = ", ".join(s for _, s in (sizing or {}).values() if s != setting)
    return (f"{what} ({setting}: {max_bytes} bytes): JetStream refused it: {said}. Each JetStream server holding a "
            f"replica reserves every bound stream's max_bytes in its store; this gateway's streams reserve {total}. Lower "
            f"{setting}{' (or ' + others + ')' if others else ''}, or give JetStream a larger store (max_file_store); "
            "docs/operations.md, \"Sizing\"")


async def ensure_kv(js: JetStreamContext, bucket: str, *, ttl: float | None = None, history: int = 1, replicas: int = 1,
                    max_bytes: int | None = None, enforce_ttl: bool = False, setting: str = "",
                    sizing: dict[str, tuple[int, str]] | None = None) -> KeyValue:
    """Open a KV bucket, creating it on first use (creation is idempotent between gateways). With `max_bytes` the
    bucket holds at most that many bytes, its oldest entries out first (`discard: old`; a KV bucket's own default
    refuses new writes when full); that bound, and with `enforce_ttl` the TTL, are set again on every open, so a
    bucket made before them gets them. A bound JetStream's store cannot take is logged once, naming `setting` (and
    what `sizing` says the gateway reserves), and the bucket runs unbounded."""
    try:
        kv = await js.key_value(bucket)
    except BucketNotFoundError:
        cfg = api.KeyValueConfig(bucket=bucket, history=history, ttl=ttl, replicas=replicas)
        try:
            kv = await js.create_key_value(config=cfg)
        except BadRequestError as exc:  # another gateway made it meanwhile, and bounded it since (below): JetStream
            # refuses a second creation whose configuration differs ('stream name already in use'); two gateways
            # starting together failed so (a worker of serve --workers 2 exited at its start)
            try:
                kv = await js.key_value(bucket)
            except BucketNotFoundError:
                raise exc from None
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
                log.error("%s", _refusal(f"bucket {bucket}: its bound not set, it runs unbounded", max_bytes or 0,
                                         setting or "max_bytes", exc, sizing))
    return kv


async def ensure_stream(js: JetStreamContext, name: str, subjects: str, *, max_age_s: float, max_bytes: int,
                        replicas: int = 1, setting: str = "", sizing: dict[str, tuple[int, str]] | None = None
                        ) -> str | None:
    """A limits-retention stream (file storage, oldest out past `max_age_s` or `max_bytes`), created on first use
    (another gateway may create it at the same moment: that is fine). A stream JetStream refuses (its store cannot
    reserve `max_bytes`) is logged once, naming `setting`, and the refusal returned (None: the stream is there):
    what is published to it then fails, and its publisher says so once, not per batch."""
    try:
        await js.stream_info(name)
        return None
    except NotFoundError:
        pass
    cfg = api.StreamConfig(name=name, subjects=[subjects], storage=api.StorageType.FILE,
                           retention=api.RetentionPolicy.LIMITS, discard=api.DiscardPolicy.OLD, max_age=max_age_s,
                           max_bytes=max_bytes, num_replicas=replicas)
    try:
        await js.add_stream(cfg)
        return None
    except Exception as exc:  # noqa: BLE001 - made by another gateway meanwhile, or refused
        try:
            await js.stream_info(name)
            return None
        except Exception:  # noqa: BLE001 - not there: refused
            said = _refusal(f"stream {name} not created", max_bytes, setting or "max_bytes", exc, sizing)
            log.error("%s", said)
            return said


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

    @property
    def sizing(self) -> dict[str, tuple[int, str]]:
        """What its bound buckets and streams reserve of JetStream's store (`reserved`), for the log of a refusal."""


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
