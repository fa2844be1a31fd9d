"""What a cluster keeps for push notifications, so a gateway restart loses neither the clients' configs nor
the deliveries it had pending (`mma2a.cluster.push.PushJournalKV`, JetStream KV; a lone gateway has none).

Records are JSON; keys are digests (`record_key`). A config record is `{"owner", "config", "gateway"}` (a
deleted one: `{"deleted": true, "gateway"}`, so a gateway can tell its own changes from others' in the watch);
a delivery record is `{"owner", "config", "task", "body", "gateway"}`: the gateway that holds it. At `open` a
gateway takes back its own deliveries and those of gateways that stopped heartbeating, and keeps doing so
for gateways that stop later.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Protocol

import orjson

OnConfig = Callable[[dict[str, object]], None]  # a config record from another gateway (or loaded at open)
OnDelivery = Callable[[str, dict[str, object]], None]  # (key, a delivery record this gateway now holds)


def record_key(owner: str | None, task_id: str, config_id: str) -> str:
    """A KV-safe key for (owner, task, config): the owner is part of it, so one client's record never names another's."""
    return hashlib.sha256(orjson.dumps([owner, task_id, config_id])).hexdigest()[:48]


class PushJournal(Protocol):
    """Durable push state shared by a cluster's gateways. Writes are queued and applied in order."""

    @property
    def gateway(self) -> str:
        """This gateway's id in the cluster (written into its records)."""

    async def open(self, on_config: OnConfig, on_delivery: OnDelivery) -> None:
        """Load every config (then follow other gateways' changes) and take over pending deliveries."""

    async def written(self) -> None:
        """Until the changes made so far are where every gateway reads them (a bounded wait)."""

    async def caught_up(self) -> None:
        """Until every config change the cluster holds now is applied here (a bounded wait)."""

    def put_config(self, key: str, record: dict[str, object]) -> None: ...

    def delete_config(self, key: str, record: dict[str, object]) -> None:
        """Mark a config deleted (`record`: its owner, taskId and id, for the other gateways to drop it)."""

    def put_delivery(self, key: str, record: dict[str, object]) -> None: ...

    def delete_delivery(self, key: str) -> None: ...

    async def close(self) -> None:
        """Write what is queued, stop following."""
