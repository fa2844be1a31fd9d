"""The clients' push configs, kept by the gateway: per task, each with its owner; bounded per client,
per task and in all. The URL, token and credentials a client gives stay here: agents never see them
(the gateway registers its own webhook with them, `follow`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import time

import orjson

from ...errors import InvalidParams, TaskNotFound
from ..config import PushSettings

# the A2A 1.0 JSON fields of a TaskPushNotificationConfig the gateway keeps (tenant is the path's, not kept)
_FIELDS = ("id", "taskId", "url", "token", "authentication")


@dataclass(frozen=True, slots=True)
class ClientHook:
    """One client's push config for one of its tasks."""

    owner: str | None  # the client that registered it (None: auth off)
    config: dict[str, Any]  # A2A 1.0 JSON: id, taskId, url, token?, authentication?
    size: int  # its JSON's bytes
    at: float = 0.0  # when it was kept (seconds since the epoch): it expires `config_ttl_s` later, unless followed

    @property
    def id(self) -> str:
        return str(self.config["id"])

    @property
    def url(self) -> str:
        return str(self.config["url"])

    def headers(self) -> dict[str, str]:
        """The client's credentials for its webhook, as a2a-sdk agents send them (and a2a-go's token header)."""
        out = {"Content-Type": "application/json"}
        token = self.config.get("token")
        if token:
            out["X-A2A-Notification-Token"] = out["A2A-Notification-Token"] = str(token)
        auth = self.config.get("authentication") or {}
        if auth.get("scheme") and auth.get("credentials"):
            out["Authorization"] = f"{auth['scheme']} {auth['credentials']}"
        return out


def normalize(task_id: str, raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The config as kept: its A2A fields only, `taskId` set, an empty `id` defaulted to the task id (as a2a-sdk
    does); shape errors name the field."""
    url = raw.get("url")
    if not isinstance(url, str) or not url:
        raise InvalidParams(f"{where}.url: required, the webhook's URL", field=f"{where}.url")
    out: dict[str, Any] = {"id": raw.get("id") or task_id, "taskId": task_id, "url": url}
    if not isinstance(out["id"], str):
        raise InvalidParams(f"{where}.id: must be a string", field=f"{where}.id")
    token = raw.get("token")
    if token:
        if not isinstance(token, str):
            raise InvalidParams(f"{where}.token: must be a string", field=f"{where}.token")
        out["token"] = _header_value(token, f"{where}.token")
    auth = raw.get("authentication")
    if auth:
        if not isinstance(auth, Mapping) or not isinstance(auth.get("scheme", ""), str) \
                or not isinstance(auth.get("credentials", ""), str):
            raise InvalidParams(f"{where}.authentication: must be an object with string scheme and credentials",
                                field=f"{where}.authentication")
        out["authentication"] = {k: _header_value(auth[k], f"{where}.authentication.{k}")
                                 for k in ("scheme", "credentials") if auth.get(k)}
    return out


def _header_value(value: str, where: str) -> str:
    """A value the webhook gets in a header: visible ASCII and spaces only (a CR or LF could never be sent, so such a
    config would be kept and every delivery fail)."""
    if not value.isascii() or not all(" " <= c <= "~" for c in value):
        raise InvalidParams(f"{where}: must be printable ASCII (it is sent in a header)", field=where)
    return value


class PushConfigStore:
    """Task id -> config id -> `ClientHook`, with per-owner counts and bytes."""

    def __init__(self, settings: PushSettings) -> None:
        self.settings = settings
        self._by_task: dict[str, dict[str, ClientHook]] = {}
        self._owned: dict[str | None, tuple[int, int]] = {}  # owner -> (configs, bytes)
        self.count = 0

    def __bool__(self) -> bool:
        return self.count > 0

    def put(self, owner: str | None, config: dict[str, Any], where: str = "params", *, at: float | None = None
            ) -> ClientHook:
        """Keep (or replace, same task and id) a normalized config; `InvalidParams` naming the limit past a bound."""
        s = self.settings
        size = len(orjson.dumps(config))
        if size > s.max_config_bytes:
            raise InvalidParams(f"{where}: a push config of {size} bytes, the most is {s.max_config_bytes}",
                                field=where)
        task_id, cid = config["taskId"], config["id"]
        hooks = self._by_task.get(task_id, {})
        old = hooks.get(cid)
        if old is not None and old.owner != owner:  # another client's config of the same id: its task, not ours
            raise TaskNotFound(f"task {task_id!r} not found", field="taskId")
        if old is None:
            if len(hooks) >= s.max_configs_per_task:
                raise InvalidParams(f"{where}: task {task_id!r} has {len(hooks)} push configs, the most is "
                                    f"{s.max_configs_per_task}; delete one first", field=where)
            n, _ = self._owned.get(owner, (0, 0))
            if n >= s.max_configs_per_client:
                raise InvalidParams(f"{where}: this client holds {n} push configs, the most is "
                                    f"{s.max_configs_per_client}; delete some first", field=where)
            if self.count >= s.max_configs:
                raise InvalidParams(f"{where}: the gateway holds {self.count} push configs, its most; retry later",
                                    field=where)
        hook = ClientHook(owner, config, size, time.time() if at is None else at)
        if old is not None:
            self._account(old, -1)
        self._by_task.setdefault(task_id, {})[cid] = hook
        self._account(hook, +1)
        return hook

    def _account(self, hook: ClientHook, sign: int) -> None:
        n, b = self._owned.get(hook.owner, (0, 0))
        n, b = n + sign, b + sign * hook.size
        if n > 0:
            self._owned[hook.owner] = (n, b)
        else:
            self._owned.pop(hook.owner, None)
        self.count += sign

    def get(self, owner: str | None, task_id: str, config_id: str) -> ClientHook | None:
        hook = self._by_task.get(task_id, {}).get(config_id)
        return hook if hook is not None and hook.owner == owner else None

    def of_owner(self, owner: str | None, task_id: str) -> list[ClientHook]:
        return [h for h in self._by_task.get(task_id, {}).values() if h.owner == owner]

    def delete(self, owner: str | None, task_id: str, config_id: str) -> bool:
        hooks = self._by_task.get(task_id)
        hook = hooks.get(config_id) if hooks else None
        if hooks is None or hook is None or hook.owner != owner:
            return False
        del hooks[config_id]
        if not hooks:
            del self._by_task[task_id]
        self._account(hook, -1)
        return True

    def for_task(self, task_id: str) -> list[ClientHook]:
        """Every config of a task (all owned by the task's owner: `service` checks ownership before `put`)."""
        return list(self._by_task.get(task_id, {}).values())

    def has(self, task_id: str) -> bool:
        return task_id in self._by_task

    def forget_task(self, task_id: str) -> None:
        for hook in self._by_task.pop(task_id, {}).values():
            self._account(hook, -1)

    def expire(self, before: float, keep: Callable[[str], bool]) -> list[ClientHook]:
        """Forget the configs kept before `before` whose task `keep` does not name (a task still followed); they are
        returned."""
        gone = []
        for task_id, hooks in list(self._by_task.items()):
            if keep(task_id):
                continue
            for cid, hook in list(hooks.items()):
                if hook.at < before:
                    del hooks[cid]
                    self._account(hook, -1)
                    gone.append(hook)
            if not hooks:
                del self._by_task[task_id]
        return gone

    def owned(self, owner: str | None) -> tuple[int, int]:
        """(configs, bytes) an owner holds."""
        return self._owned.get(owner, (0, 0))
