"""Gateway configuration: a YAML file validated by pydantic at the edge (see docs/operations.md).

May import: `access`, `cluster_config`, `faults`, `history`, `observe`.
"""

from __future__ import annotations

import difflib
import hmac
import os
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..adapt.profiles import ProfileSpec
from ..deadlines import Timeouts
from ..errors import ConfigError as ConfigError  # its home is errors.py; configs are refused with it from here too
from ..errors import InvalidParams, MMA2AError
from ..modality import parse_modality
from ..payload.quota import DEFAULT_MAX_UPLOADS, DEFAULT_MAX_UPLOADS_TOTAL
from ..tls import ClientTLS, ListenerTLS
from .access.agent_auth import AgentAuth
from .access.clients import AuthConfig, RateLimitConfig
from .access.federation import FederationConfig
from .access.guard import LimitsConfig, SigningConfig, URLConfig
from .cluster_config import ClusterConfig
from .faults import FaultsConfig
from .history.config import HistoryConfig
from .observe.tracing import TracingConfig


# The `push` section lives here, not in push/: push/ is built on the stages, which read this module.
class PushSettings(BaseModel):
    """Bounds of what the gateway keeps and does for push notifications."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True  # off: cards say pushNotifications false and the config methods answer -32003
    max_configs_per_client: int = Field(default=1024, ge=1)  # push configs one client may hold at once
    max_configs_per_task: int = Field(default=8, ge=1)
    max_config_bytes: int = Field(default=4096, ge=256)  # one config's JSON (URL, token, credentials)
    max_configs: int = Field(default=20_000, ge=1)  # the whole gateway
    config_ttl_s: float = Field(default=3600.0, gt=0)  # a config is forgotten this long after it was set, unless its
    # task is still followed (as the task map forgets a task: limits.task_max_age_s)
    max_pending_per_client: int = Field(default=256, ge=1)  # deliveries waiting or retrying, per client
    max_pending_bytes_per_client: int = Field(default=8 << 20, ge=1024)
    max_concurrent_deliveries: int = Field(default=32, ge=1)  # POSTs in flight, the whole gateway
    max_concurrent_per_client: int = Field(default=4, ge=1)  # so one slow webhook cannot hold them all
    timeout_s: float = Field(default=10.0, gt=0)  # one delivery attempt: connect + answer
    max_attempts: int = Field(default=8, ge=1)
    backoff_s: float = Field(default=0.5, gt=0)  # first retry after this, doubling
    max_backoff_s: float = Field(default=60.0, gt=0)
    max_notification_bytes: int = Field(default=1 << 20, ge=1024)  # a notification an agent POSTs to the gateway
    poll_s: float = Field(default=0.5, gt=0)  # following a task by GetTask: first interval, doubling
    max_poll_s: float = Field(default=10.0, gt=0)
    follow_max_s: float = Field(default=24 * 3600.0, gt=0)  # a task followed longer than this is let go
    max_follows: int = Field(default=1000, ge=1)  # tasks followed at once, the whole gateway
    max_follows_per_client: int = Field(default=128, ge=1)  # ... and of one client's tasks (a config past it: -32602)


class AgentConfig(BaseModel):
    """One downstream agent: where its Agent Card lives and how the gateway treats it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    url: str
    groups: list[str] = Field(default_factory=list)
    weight: float = Field(default=1.0, gt=0)
    transformer: bool = False
    token_env: str | None = None  # the older spelling of auth: {bearer_env: NAME}
    auth: AgentAuth | None = None  # how the gateway authenticates to the agent (docs/operations.md, "Agent credentials")
    forward_client_token: bool = False  # the client's own JWT goes to the agent (it authorises the end user itself)
    timeout_s: float | None = Field(default=None, gt=0)
    # legs sent to it at once; past it they queue by priority (docs/operations.md, "Overload"); None: adaptive
    max_concurrency: int | None = Field(default=None, ge=1, le=100_000)
    # what the agent wants, per modality pattern (docs/operations.md, "Fitting parts"); wins over its card's params
    accepts: dict[str, ProfileSpec] = Field(default_factory=dict)
    compress: list[Literal["zstd", "gzip"]] | None = None  # content codings it reads; None: as its card says
    tls: ClientTLS | None = None  # https:// agents: CA bundle and client certificate (docs/operations.md, "TLS")

    @field_validator("accepts")
    @classmethod
    def _accepts(cls, v: dict[str, ProfileSpec]) -> dict[str, ProfileSpec]:
        for pattern in v:
            try:
                parse_modality(pattern, field="accepts")
            except MMA2AError as exc:
                raise ValueError(exc.message) from None
        return v

    def secret_envs(self) -> list[tuple[str, str]]:
        """(field, variable) of every environment variable holding a credential this agent is sent."""
        out = [("token_env", self.token_env)] if self.token_env else []
        auth = self.auth
        if auth is not None:
            if auth.bearer_env:
                out.append(("auth.bearer_env", auth.bearer_env))
            if auth.api_key is not None:
                out.append(("auth.api_key.env", auth.api_key.env))
            cc = auth.oauth2_client_credentials
            if cc is not None:
                out += [("auth.oauth2_client_credentials.client_id_env", cc.client_id_env),
                        ("auth.oauth2_client_credentials.client_secret_env", cc.client_secret_env)]
        return out

    @model_validator(mode="after")
    def _one_credential(self) -> AgentConfig:
        if self.token_env is not None and self.auth is not None:
            raise ValueError("give token_env or auth, not both (token_env is auth: {bearer_env: NAME})")
        if self.forward_client_token and self.auth is not None and self.auth.api_key is None:
            raise ValueError("forward_client_token sends the client's JWT as Authorization: it cannot go with a bearer "
                             "or OAuth2 credential of the gateway's own (an api_key can)")
        if self.forward_client_token and self.token_env is not None:
            raise ValueError("forward_client_token sends the client's JWT as Authorization: it cannot go with token_env")
        return self

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            hint = f" (did you mean http://{v}?)" if "://" not in v and v else ""
            raise ValueError("must be an http:// or https:// URL" + hint)
        return v.rstrip("/")


class FeatureConfig(BaseModel):
    """Content features for routing (docs/features.md): who is trusted, what happens to the others."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    trusted_senders: list[str] = Field(default_factory=list)
    untrusted: Literal["validate", "reextract", "drop"] = "validate"
    fill_missing: bool = True
    budget_s: float = Field(default=0.5, gt=0)  # per part; a model extractor gets its own allowance when longer
    model_budget_s: dict[str, float] = Field(default_factory=dict)  # extractor name -> seconds (docs/features.md)
    # what the gateway agrees to decode (hostile media): refused before decoding, reported as features.error
    max_media_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    max_pixels: int = Field(default=40_000_000, gt=0)
    max_audio_seconds: float = Field(default=600.0, gt=0)
    max_audio_samples: int = Field(default=48_000 * 2 * 600, gt=0)  # rate x channels x seconds (600 s of 48 kHz stereo)
    max_video_seconds: float = Field(default=3600.0, gt=0)
    max_mesh_elements: int = Field(default=5_000_000, gt=0)  # vertices + faces of a 3D model, every format
    # sentence vectors of request texts (`semantic` rules, `skills` routing): cached by the digest of the
    # normalised text, least recently used out, bounded by entries and bytes (gateway/stages/vectors.py)
    # the sentence model (features/sentence.py, features/static.py, features/wordllama.py, docs/features.md);
    # `static`'s table is derived from MiniLM once and kept under data_dir/models
    text_model: Literal["minilm", "use", "static", "wordllama"] = "minilm"
    vector_cache_entries: int = Field(default=16_384, ge=0)  # 0: no cache
    vector_cache_mb: float = Field(default=32.0, ge=0)
    vector_batch: int = Field(default=8, ge=1, le=256)  # texts of concurrent requests embedded in one model run


    @field_validator("model_budget_s")
    @classmethod
    def _model_budgets(cls, v: dict[str, float]) -> dict[str, float]:
        from ..features.pipeline import default_budgets

        known = default_budgets()
        for name, seconds in v.items():
            if name not in known:
                raise ValueError(f"{name!r} is not a model extractor; known: {', '.join(sorted(known))}")
            if not seconds > 0:
                raise ValueError(f"{name}: must be a positive number of seconds, got {seconds!r}")
        return v


class AdaptConfig(BaseModel):
    """Fitting parts to receivers and compressing JSON on the wire (docs/operations.md, "Fitting parts")."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    budget_s: float = Field(default=10.0, gt=0)  # per part; over it the original goes, with the reason
    cache_entries: int = Field(default=4096, ge=0)  # (source digest, profile) -> variant
    compress_min_bytes: int = Field(default=4096, ge=0)  # JSON bodies under this travel as they are
    compress_responses: bool = True  # to clients that send Accept-Encoding


class ServerConfig(BaseModel):
    """Connection deadlines (`server:` in gateway.yaml; mma2a.deadlines): the defaults cut a stalled client in 30 s."""

    model_config = ConfigDict(extra="forbid")

    header_timeout_s: float = Field(default=10.0, gt=0)  # connection (or next request's first byte) -> end of headers
    body_timeout_s: float = Field(default=30.0, gt=0)  # longest silence inside a request body the app is reading
    keep_alive_s: float = Field(default=5.0, gt=0)  # idle between requests
    ws_ping_interval_s: float = Field(default=20.0, gt=0)  # WebSocket ping; no pong within ws_ping_timeout_s closes
    ws_ping_timeout_s: float = Field(default=10.0, gt=0)
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)  # request line + headers; past it 431, closed
    write_timeout_s: float = Field(default=30.0, gt=0)  # a peer that takes none of an answer this long is cut

    def timeouts(self) -> Timeouts:
        return Timeouts(header_s=self.header_timeout_s, body_s=self.body_timeout_s, keep_alive_s=self.keep_alive_s,
                        ws_ping_interval_s=self.ws_ping_interval_s, ws_ping_timeout_s=self.ws_ping_timeout_s,
                        max_header_bytes=self.max_header_bytes, write_s=self.write_timeout_s)


class AdminConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token_env: str | None = "MMA2A_ADMIN_TOKEN"
    token: str | None = None

    def resolve_token(self) -> str | None:
        if self.token:
            return self.token
        return os.environ.get(self.token_env) if self.token_env else None


class SecretsConfig(BaseModel):
    """Which environment variables configuration that can arrive at run time may name (docs/security.md)."""

    model_config = ConfigDict(extra="forbid")

    env_prefix: str = Field(default="MMA2A_AGENT_", pattern=r"^[A-Za-z0-9_]*$")
    """An agent's `token_env` must start with it: that token is sent to the agent, so it may name only variables
    kept for agent credentials ("" lifts the prefix; the gateway's own secrets stay refused either way)."""


class GatewayConfig(BaseModel):
    """Everything `mma2a serve` needs; every field has a sensible default but `agents`."""

    model_config = ConfigDict(extra="forbid")

    listen: str = "127.0.0.1:8800"
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")  # id in `via` (default: public_url)
    public_url: str | None = None
    grpc_listen: str | None = None  # HOST:PORT of the gRPC binding (the grpc extra); off when unset
    public_grpc: str | None = None  # HOST:PORT cards advertise for it (a balancer's); default public_url's host, its port
    tls: ListenerTLS | None = None  # serve HTTPS (and gRPC over TLS); client certificates name senders
    rules: str | dict[str, Any] | None = None
    mode: Literal["native", "text-bottleneck"] = "native"
    agents: list[AgentConfig] = Field(default_factory=list)
    admin: AdminConfig = Field(default_factory=AdminConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    timeout_s: float = Field(default=30.0, gt=0)
    retries: int = Field(default=1, ge=0, le=5)
    card_refresh_s: float = Field(default=60.0, gt=0)
    health_interval_s: float = Field(default=10.0, gt=0)
    max_body_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    max_body_bytes_in_flight: int | None = Field(default=None, gt=0)  # large bodies held at once; default 8 x the cap
    offload_threshold: int = Field(default=256 * 1024, ge=0)
    blob_dir: str | None = None  # default: a fresh temporary directory per process
    blob_min_free_bytes: int = Field(default=256 * 1024**2, ge=0)  # disk kept free by the blob store; past it 507
    # the disk's files (inodes) kept free by the blob store (two a blob); past it 507. 256 MiB at ext4's 16 KiB an inode
    blob_min_free_inodes: int = Field(default=16_384, ge=0)
    # what the local blob store may hold in all (507 past it) and per client (413), blobs and uploads counted
    blob_max_bytes: int = Field(default=8 * 1024**3, gt=0)
    blob_max_bytes_per_client: int = Field(default=1024**3, gt=0)
    # resumable uploads one client may hold open at once, across a cluster's gateways and workers (429 past it)
    blob_max_uploads_per_client: int = Field(default=DEFAULT_MAX_UPLOADS, ge=1)
    # resumable uploads the store holds open at once, whoever holds them (with auth off, anonymous callers' one bound but
    # the bytes), across a cluster's gateways and workers (429 past it)
    blob_max_uploads: int = Field(default=DEFAULT_MAX_UPLOADS_TOTAL, ge=1)
    blob_max_age_s: float | None = Field(default=None, gt=0)  # blobs and uploads older than this are deleted; off if unset
    url_secret_env: str | None = "MMA2A_URL_SECRET"  # HMAC key for signed payload URLs (random per process if unset)
    url_expires_s: int = Field(default=3600, gt=0, le=7 * 24 * 3600)
    max_upload_bytes: int = Field(default=8 * 1024**3, gt=0)
    features: FeatureConfig = Field(default_factory=FeatureConfig)
    adapt: AdaptConfig = Field(default_factory=AdaptConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)  # security: docs/security.md
    rate_limit: RateLimitConfig = Field(default_factory=RateLimitConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    urls: URLConfig = Field(default_factory=URLConfig)
    signing: SigningConfig = Field(default_factory=SigningConfig)
    # who the clients are across gateways: signing them for the next gateway, trusting a previous one's
    federation: FederationConfig = Field(default_factory=FederationConfig)
    secrets: SecretsConfig = Field(default_factory=SecretsConfig)
    faults: FaultsConfig = Field(default_factory=FaultsConfig)
    cluster: ClusterConfig | None = None  # cluster mode on NATS JetStream (docs/operations.md, "Cluster mode")
    tracing: TracingConfig = Field(default_factory=TracingConfig)  # OpenTelemetry (the otel extra)
    log_decisions: bool = True
    # where the gateway keeps what must survive a restart (the decision history); relative to base_dir
    data_dir: str = Field(default_factory=lambda: os.environ.get("MMA2A_DATA_DIR") or "./mma2a-data")
    history: HistoryConfig = Field(default_factory=HistoryConfig)  # decision history (docs/operations.md)
    push: PushSettings = Field(default_factory=PushSettings)  # push notifications (docs/operations.md)
    feed_max_bytes: int = Field(default=4 * 1024 * 1024, ge=0)  # the console's decision feed, all entries together
    base_dir: str = "."

    @model_validator(mode="after")
    def _cluster_tls_paths(self) -> GatewayConfig:
        """`cluster.tls` files are named relative to the config file, like every other path in it."""
        tls = self.cluster.tls if self.cluster is not None else None
        if self.cluster is not None and tls is not None:
            paths = {k: str(Path(self.base_dir) / v) for k, v in tls.model_dump().items() if v}
            self.cluster = self.cluster.model_copy(update={"tls": tls.model_copy(update=paths)})
        if self.cluster is not None and self.cluster.auth.active:
            self.cluster = self.cluster.model_copy(update={"auth": self.cluster.auth.relative_to(self.base_dir)})
        return self

    @field_validator("features", mode="before")
    @classmethod
    def _features(cls, v: Any) -> Any:
        return {"enabled": v} if isinstance(v, bool) else v

    @field_validator("listen", "grpc_listen", "public_grpc", mode="before")
    @classmethod
    def _listen_port_only(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            raise ValueError(f"must be HOST:PORT (did you mean 127.0.0.1:{v}?)")
        return v

    @field_validator("listen", "grpc_listen", "public_grpc")
    @classmethod
    def _listen(cls, v: str | None) -> str | None:
        if v is None:
            return v
        host, _, port = v.rpartition(":")
        if not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError("must be HOST:PORT")
        return v

    def own_secrets(self) -> dict[str, str]:
        """The variables holding this gateway's own secrets, each with what it is: the URL secret, the admin token,
        every client's token and API key, the federation signing key, the cluster's NATS credentials."""
        out: dict[str, str] = {}
        if self.url_secret_env:
            out[self.url_secret_env] = "the payload URL secret (url_secret_env)"
        if self.admin.token_env:
            out[self.admin.token_env] = "the admin token (admin.token_env)"
        for c in self.auth.clients:
            for kind, env in (("token", c.token_env), ("api_key", c.api_key_env)):
                if env:
                    out[env] = f"client {c.name}'s {kind.replace('_', ' ')} (auth.clients[].{kind}_env)"
        if self.federation.private_key_env:
            out[self.federation.private_key_env] = "the federation signing key (federation.private_key_env)"
        if self.cluster is not None:
            for field, env in self.cluster.auth.envs().items():
                out[env] = f"the NATS credentials (cluster.auth.{field})"
        return out

    def check_agent_secrets(self, agent: AgentConfig, where: str) -> None:
        """An agent's credentials (`token_env`, `auth.*_env`) are sent to that agent (an OAuth2 client's to its token
        endpoint): each must be under `secrets.env_prefix` and never name (nor hold the value of) one of the gateway's
        own secrets. `InvalidParams` naming the field otherwise; the admin API, the cluster's agents bucket and the
        config file all pass through here."""
        for name, env in agent.secret_envs():
            self._check_agent_env(env, f"{where}.{name}" if where else name)

    def _check_agent_env(self, env: str, field: str) -> None:
        own = self.own_secrets()
        if env in own:
            raise InvalidParams(f"{field}: {env} holds {own[env]}; an agent's token is sent to the agent, so it may "
                                "never name one of the gateway's own secrets", field=field)
        prefix = self.secrets.env_prefix
        if not env.startswith(prefix):
            raise InvalidParams(f"{field}: {env} is not under secrets.env_prefix ({prefix}): an agent's token is sent "
                                f"to the agent, so it may name only variables kept for agent credentials (rename it, "
                                f"e.g. {prefix}{env}, or change secrets.env_prefix)", field=field)
        value = os.environ.get(env)
        if value and any(hmac.compare_digest(value.encode(), secret.encode()) for secret in self._own_values()):
            raise InvalidParams(f"{field}: {env} holds the same value as one of the gateway's own secrets (URL "
                                "secret, admin token, a client's credential); give the agent a token of its own",
                                field=field)

    def agent_entry(self, data: Any) -> AgentConfig:
        """An agent entry arriving at run time (`POST /admin/agents`, the cluster's agents bucket), validated the one
        way for both: the model, then `check_agent_secrets`; `InvalidParams` naming the field."""
        try:
            agent = AgentConfig.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "body"
            raise InvalidParams(f"{where}: {err['msg']}", field=where) from None
        self.check_agent_secrets(agent, "")
        return agent

    def check_configured_agents(self) -> None:
        """`check_agent_secrets` for every agent of the file: a `ConfigError` naming the first refused."""
        for i, agent in enumerate(self.agents):
            try:
                self.check_agent_secrets(agent, f"agents.{i}")
            except InvalidParams as exc:
                raise ConfigError(exc.message, field=exc.field) from None

    def _own_values(self) -> list[str]:
        values = [os.environ.get(env, "") for env in self.own_secrets()]
        values += [v for c in self.auth.clients for v in (c.token, c.api_key) if v]
        if self.admin.token:
            values.append(self.admin.token)
        return [v for v in values if v]

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    def data_path(self, name: str) -> Path:
        """A file under `data_dir` (relative paths are taken from the config file's directory)."""
        return Path(self.base_dir) / self.data_dir / name

    def rules_name(self) -> str:
        """What rule errors name: the rules file's path, or `gateway config: rules` for rules written in the config."""
        if isinstance(self.rules, str) and not ("\n" in self.rules or self.rules.lstrip().startswith(("{", "version"))):
            return str(Path(self.base_dir) / self.rules)
        return "gateway config: rules"

    def rules_source(self) -> str | dict[str, Any] | None:
        """Inline rules (a mapping), rules file text, or None for the default."""
        if self.rules is None or isinstance(self.rules, dict):
            return self.rules
        if "\n" in self.rules or self.rules.lstrip().startswith(("{", "version")):
            return self.rules
        path = Path(self.base_dir) / self.rules
        try:
            return path.read_text()
        except OSError as exc:
            raise ConfigError(f"rules: cannot read {path}: {exc.strerror}", field="rules") from None


def parse_config(data: Any, *, base_dir: str = ".") -> GatewayConfig:
    """Validate a config mapping; the error names the first bad field."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("config: must be a mapping", field="config")
    data = {**data, "base_dir": data.get("base_dir", base_dir)}
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # a misspelt field (`ulr:`) also makes its right spelling missing: name the misspelling, with the fix
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        where = ".".join(str(p) for p in err["loc"]) or "config"
        message = f"{where}: {err['msg']}"
        if err["type"] == "extra_forbidden":
            known = _field_names(GatewayConfig, err["loc"][:-1])
            close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1, cutoff=0.6)
            message = f"{where}: unknown field" + (f"; did you mean '{close[0]}'?" if close else
                                                   f" (fields here: {', '.join(known)})" if known else "")
        raise ConfigError(message, field=where) from None
    config.check_configured_agents()
    return config


def _field_names(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names a config section at `loc` takes (`("agents", 0)` -> AgentConfig's), for did-you-mean."""
    annotation: Any = model
    for step in loc:
        if isinstance(step, str):
            found = _model_in(annotation)
            field = found.model_fields.get(step) if found is not None else None
            if field is None:
                return []
            annotation = field.annotation
        else:  # an index into a list (`list[X]` or `list[X] | None`): its item type
            lists = [a for a in (annotation, *typing.get_args(annotation)) if typing.get_origin(a) is list]
            if not lists:
                return []
            annotation = typing.get_args(lists[0])[0]
    found = _model_in(annotation)
    return [name for name in found.model_fields if name != "base_dir"] if found is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation is, or holds as `X | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def load_config(path: str | Path) -> GatewayConfig:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"config: cannot read {p}: {exc.strerror}", field="config") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config: {p} is not valid YAML: {exc}", field="config") from None
    return parse_config(data, base_dir=str(p.parent))
