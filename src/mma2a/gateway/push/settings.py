"""The `push` section of the gateway configuration (docs/operations.md, "Push notifications")."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


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
