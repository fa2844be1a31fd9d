"""How the gateway learns that a task with push configs moved, per leg:

- an agent whose card declares `pushNotifications` gets the gateway's own webhook for its task
  (`/push/{leg}` with a per-leg secret as the notification token; the agent never sees the client's);
  a call to it is checked (`AgentWebhooks.verify`) and makes the gateway read its task afresh;
- any other agent's task is followed: `SubscribeToTask` when its card streams and the task has one leg,
  else `GetTask` every `poll_s`, doubling to `max_poll_s`.

Either way the client is notified with the task as `GetTask` through the gateway shows it (the
gateway's task id, a fan-out's legs aggregated), only when it changed, until it ends, its configs are
deleted, or `follow_max_s` passes.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...errors import MMA2AError
from ..access.budgets import ClientCounts
from ..access.clients import digest_secret
from ..config import PushSettings
from ..stages.calls import AgentCaller
from ..state.aggregate import TERMINAL
from ..state.tasks import TaskRecord

log = logging.getLogger("mma2a.gateway.push")

WEBHOOK_PATH = "/push/{leg}"


@dataclass(frozen=True, slots=True)
class WebhookLeg:
    """The gateway's webhook registered with one agent for one leg of one gateway task."""

    task_id: str  # the gateway's task
    agent: str
    agent_task_id: str
    secret_digest: bytes


class NotificationRefused(Exception):
    """An agent's call to the gateway's webhook that is not accepted: its HTTP status and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def event_task_id(event: Any) -> str | None:
    """The task id a StreamResponse (`task`, `statusUpdate`, `artifactUpdate`) is about."""
    if not isinstance(event, dict):
        return None
    if isinstance(event.get("task"), dict):
        tid = event["task"].get("id")
    else:
        inner = event.get("statusUpdate") or event.get("artifactUpdate")
        tid = inner.get("taskId") if isinstance(inner, dict) else None
    return tid if isinstance(tid, str) else None


class AgentWebhooks:
    """The legs whose agent calls the gateway's webhook; each checked by its own secret."""

    def __init__(self) -> None:
        self._legs: dict[str, WebhookLeg] = {}
        self._by_task: dict[str, list[str]] = {}

    def add(self, task_id: str, agent: str, agent_task_id: str) -> tuple[str, str]:
        """A new leg: (its key in the webhook's path, its secret, given once to the agent)."""
        key, secret = secrets.token_urlsafe(18), secrets.token_urlsafe(32)
        self._legs[key] = WebhookLeg(task_id, agent, agent_task_id, digest_secret(secret))
        self._by_task.setdefault(task_id, []).append(key)
        return key, secret

    def verify(self, key: str, token: str | None) -> WebhookLeg:
        """The leg a call is for, or `NotificationRefused`: an unknown leg (404), a missing or wrong secret (401).
        (Checked before the body is read.)"""
        leg = self._legs.get(key)
        if leg is None:
            raise NotificationRefused(404, "no such push leg (the task ended or its configs were deleted)")
        if not token or not hmac.compare_digest(digest_secret(token), leg.secret_digest):
            raise NotificationRefused(401, "wrong or missing X-A2A-Notification-Token for this push leg")
        return leg

    @staticmethod
    def check_event(leg: WebhookLeg, event: Any) -> None:
        """`NotificationRefused` (403) for a notification about a task that is not this leg's."""
        tid = event_task_id(event)
        if tid != leg.agent_task_id:
            raise NotificationRefused(403, f"this push leg is for the agent's task {leg.agent_task_id!r}, "
                                           f"the notification is about {tid!r}")

    def drop_task(self, task_id: str) -> None:
        for key in self._by_task.pop(task_id, []):
            self._legs.pop(key, None)

    def __len__(self) -> int:
        return len(self._legs)


Notify = Callable[[str, dict[str, Any]], None]  # (gateway task id, task as the gateway shows it)


def signature(task: dict[str, Any]) -> tuple[Any, ...]:
    """What makes a task worth a notification: its state, its status time, its artifacts and history lengths."""
    status = task.get("status") or {}
    return (status.get("state"), status.get("timestamp"), len(task.get("artifacts") or ()), len(task.get("history") or ()))


def _before(stamp: Any, than: Any) -> bool:
    """Whether status time `stamp` is before `than` (ISO 8601; False when either is missing or not one)."""
    if not isinstance(stamp, str) or not isinstance(than, str) or stamp == than:
        return False
    try:
        return datetime.fromisoformat(stamp) < datetime.fromisoformat(than)
    except (ValueError, TypeError):  # (TypeError: one with a zone, one without)
        return False


class Follower:
    """One follow per gateway task with push configs, whichever way its legs report."""

    def __init__(self, settings: PushSettings, caller: AgentCaller, current: Callable[[TaskRecord], Awaitable[dict[str, Any]]],
                 wanted: Callable[[str], bool], notify: Notify, webhook_base: str | None) -> None:
        """`current`: the task as the gateway shows it (TaskOperations.current); `wanted`: the task still has configs;
        `notify`: hand a changed task to the outbox; `webhook_base`: the gateway's public URL agents can call (None:
        agents are followed, never given a webhook)."""
        self.settings = settings
        self.caller = caller
        self.directory = caller.directory
        self.current = current
        self.wanted = wanted
        self.notify = notify
        self.webhook_base = webhook_base.rstrip("/") if webhook_base else None
        self.webhooks = AgentWebhooks()
        self._follows: dict[str, asyncio.Task[None]] = {}
        self._seen: dict[str, tuple[Any, ...]] = {}
        self._records: dict[str, TaskRecord] = {}
        # follows by the task's owner (push.max_follows_per_client; in a cluster with the other gateways' follows)
        self.by_owner = ClientCounts()

    def __len__(self) -> int:
        return len(self._follows)

    def changed(self, task_id: str, task: dict[str, Any]) -> bool:
        """Note `task` as the latest known; True when it differs from the one before and is not older: a read that
        began before a later state was noted (the follow's read of an agent while the answer to a follow-up came back;
        through a federation hop, two gateways long) is stale — not running again after the task ended, nor a status
        time before the one noted — and is neither noted nor notified, so a client never hears a task go back."""
        sig = signature(task)
        seen = self._seen.get(task_id)
        if seen == sig:
            return False
        if seen is not None and (seen[0] in TERMINAL and sig[0] not in TERMINAL or _before(sig[1], seen[1])):
            return False
        self._seen[task_id] = sig
        return True

    def settle(self, task_id: str) -> None:
        """Forget what a task not followed looked like (it ended: a later change notifies again)."""
        if task_id not in self._follows:
            self._seen.pop(task_id, None)

    def following(self, task_id: str) -> bool:
        return task_id in self._follows

    def room(self, owner: str | None) -> str | None:
        """Why one more task of `owner` could not be followed now (None: it could): the client's own share
        (`max_follows_per_client`), so one client cannot take every follow, or the gateway's (`max_follows`)."""
        s = self.settings
        counts = self.by_owner
        mine = counts.here(owner or "") + counts.there(owner or "")
        if mine >= s.max_follows_per_client:
            where = " (on every gateway of the cluster)" if counts.there(owner or "") else ""
            return (f"this client has {mine} running tasks followed for push notifications{where}, the most is "
                    f"{s.max_follows_per_client} (push.max_follows_per_client); wait for some to end or delete "
                    "their configs")
        if len(self._follows) >= s.max_follows:
            return (f"the gateway follows {len(self._follows)} running tasks for push notifications, its most "
                    "(push.max_follows); retry later")
        return None

    def follow(self, rec: TaskRecord) -> bool:
        """Start following a task (no-op when it is followed already); False past `max_follows` or the owner's
        `max_follows_per_client` (callers ask `room` first, so that a client is told instead)."""
        if rec.task_id in self._follows:
            return True
        reason = self.room(rec.owner)
        if reason is not None:
            log.warning("push: task %s is not followed: %s", rec.task_id, reason)
            return False
        self.by_owner.add(rec.owner or "")
        self._records[rec.task_id] = rec
        task = asyncio.create_task(self._follow(rec), name=f"push follow {rec.task_id}")
        self._follows[rec.task_id] = task
        task.add_done_callback(functools.partial(self._ended, rec.task_id))
        return True

    def _ended(self, task_id: str, _task: asyncio.Task[None]) -> None:
        self._follows.pop(task_id, None)
        rec = self._records.pop(task_id, None)
        if rec is not None:
            self.by_owner.remove(rec.owner or "")
        self._seen.pop(task_id, None)
        self.webhooks.drop_task(task_id)

    async def _follow(self, rec: TaskRecord) -> None:
        deadline = time.monotonic() + self.settings.follow_max_s
        try:
            if await self._register(rec):
                await self._wait_webhooks(rec, deadline)
            elif len(rec.legs) == 1 and self._streams(rec.legs[0].agent):
                await self._stream(rec, deadline)
            else:
                await self._poll(rec, deadline)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a follow that breaks must not take the gateway with it
            log.exception("push: following task %s failed", rec.task_id)

    def _card_says(self, agent: str, capability: str) -> bool:
        try:
            entry = self.directory.get(agent)
        except MMA2AError:
            return False
        return bool((entry.card.get("capabilities") or {}).get(capability))

    def _streams(self, agent: str) -> bool:
        return self._card_says(agent, "streaming")

    async def _register(self, rec: TaskRecord) -> bool:
        """The gateway's webhook registered with every leg's agent (all must declare push); False: follow instead."""
        if self.webhook_base is None or not rec.legs or not all(self._card_says(leg.agent, "pushNotifications")
                                                                 for leg in rec.legs):
            return False
        for leg in rec.legs:
            key, secret = self.webhooks.add(rec.task_id, leg.agent, leg.task_id)
            config = {"taskId": leg.task_id, "id": f"mma2a-{key[:12]}",
                      "url": self.webhook_base + WEBHOOK_PATH.format(leg=key), "token": secret}
            try:
                await self.caller.call(self.directory.get(leg.agent), "CreateTaskPushNotificationConfig", config)
            except MMA2AError as exc:
                log.info("push: agent %s refused the gateway's webhook for task %s (%s); following it instead",
                         leg.agent, leg.task_id, exc.message)
                self.webhooks.drop_task(rec.task_id)
                return False
        return True

    async def _wait_webhooks(self, rec: TaskRecord, deadline: float) -> None:
        """Registered: one read now (what happened before the webhook was there), then the agent's calls drive it;
        the follow ends when the task does (`on_webhook`), its configs go, or at the deadline."""
        if await self._refresh(rec):
            return
        while time.monotonic() < deadline:  # and, in case an agent's call is lost, a slow read of its own
            await asyncio.sleep(min(self.settings.max_poll_s * 6, max(0.0, deadline - time.monotonic())))
            try:
                if await self._refresh(rec):
                    return
            except MMA2AError as exc:
                log.info("push: reading task %s failed: %s", rec.task_id, exc.message)

    async def on_webhook(self, leg: WebhookLeg) -> None:
        """An agent's verified notification: the task read afresh and the client notified; ends the follow when done."""
        rec = self._records.get(leg.task_id)
        if rec is None:
            return
        if await self._refresh(rec):
            follow = self._follows.get(leg.task_id)
            if follow is not None:
                follow.cancel()

    async def _refresh(self, rec: TaskRecord) -> bool:
        """Read the task, notify if it changed; True when it is over (ended, no configs left)."""
        if not self.wanted(rec.task_id):
            return True
        task = await self.current(rec)
        if self.changed(rec.task_id, task):
            self.notify(rec.task_id, task)
        return (task.get("status") or {}).get("state") in TERMINAL

    async def _poll(self, rec: TaskRecord, deadline: float) -> None:
        delay = self.settings.poll_s
        while time.monotonic() < deadline:
            try:
                if await self._refresh(rec):
                    return
            except MMA2AError as exc:  # the agent is down or forgot the task: tried again later, until the deadline
                log.info("push: reading task %s failed: %s", rec.task_id, exc.message)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.settings.max_poll_s)

    async def _stream(self, rec: TaskRecord, deadline: float) -> None:
        leg = rec.legs[0]
        entry = self.directory.get(leg.agent)
        if await self._refresh(rec):
            return
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                async for _event in self.caller.stream(entry, "SubscribeToTask", {"id": leg.task_id}):
                    if await self._refresh(rec):
                        return
        except (MMA2AError, TimeoutError) as exc:
            log.info("push: the stream of task %s ended (%s); polling it", rec.task_id, exc)
        await self._poll(rec, deadline)

    async def close(self) -> None:
        tasks = list(self._follows.values())
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
