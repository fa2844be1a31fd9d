"""The `history:` section of gateway.yaml: where decisions are kept and for how long."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class HistoryConfig(BaseModel):
    """Decision history (docs/operations.md, "Decision history"); the file lives under `data_dir`."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    file: str = "history.sqlite3"  # relative to data_dir
    max_age_s: float = Field(default=7 * 24 * 3600, gt=0)  # older decisions are deleted
    max_bytes: int = Field(default=256 * 1024 * 1024, gt=0)  # then the oldest, until the rows fit
    # what one client's decisions may count of max_bytes (default a quarter): past it its own oldest go first, so one
    # client's traffic never evicts another's decisions (those without a client, auth off, are held to max_bytes)
    max_bytes_per_client: int | None = Field(default=None, gt=0)
    queue: int = Field(default=10_000, gt=0)  # decisions waiting for the writer; beyond, they are dropped and counted
    batch: int = Field(default=500, gt=0)  # rows per transaction
    flush_interval_s: float = Field(default=0.2, gt=0)  # how long the writer gathers decisions short of a full batch
    prune_interval_s: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _share(self) -> HistoryConfig:
        if self.max_bytes_per_client is not None and self.max_bytes_per_client > self.max_bytes:
            raise ValueError(f"max_bytes_per_client ({self.max_bytes_per_client}) must not be more than max_bytes "
                             f"({self.max_bytes})")
        return self
