"""Push notifications through the gateway, as every binding sees them: the four config methods,
SendMessage's inline config (`configuration.taskPushNotificationConfig`), and the webhook agents call.

A config is for a task the caller owns (another client's task is not found, as on GetTask); its URL
passes the `urls` policy (the SSRF guard) when it is given, and every connection again when it is used
(`outbox`). It is never passed to an agent: SendMessage goes on without it, and the agent gets the
gateway's own webhook instead (`follow`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from ..._kept import kept
from ...errors import InvalidParams, MMA2AError, PushNotSupported, TaskNotFound, URLForbidden
from ..access.clients import current_sender
from ..access.federation import check_bound
from ..config import PushSettings
from ..history.record import DecisionRecord, HistorySink
from ..stages.calls import AgentCaller
from ..stages.task_ops import TaskOperations
from ..state.aggregate import TERMINAL
from ..state.push_journal import PushJournal, record_key
from ..state.tasks import TaskMap, TaskRecord
from .follow import Follower, NotificationRefused, WebhookLeg
from .outbox import Delivery, Outbox
from .store import ClientHook, PushConfigStore, normalize

if TYPE_CHECKING:
    from ..access.guard import MessageGuard
    from ..observe.metrics import GatewayMetrics

log = logging.getLogger("mma2a.gateway.push")

INLINE = "taskPushNotificationConfig"  # SendMessageConfiguration's field (A2A 1.0 JSON)
_INLINE_NAMES = (INLINE, "task_push_notification_config", "pushNotificationConfig")

Send = Callable[..., Awaitable[dict[str, Any]]]


def split_inline(configuration: Mapping[str, Any] | None) -> tuple[Mapping[str, Any] | None, Any]:
    """(the configuration without its push config, the push config or None)."""
    if not configuration or not any(k in configuration for k in _INLINE_NAMES):
        return configuration, None
    raw = next(configuration[k] for k in _INLINE_NAMES if k in configuration)
    rest = {k: v for k, v in configuration.items() if k not in _INLINE_NAMES}
    return rest, raw


class PushService:
    """The clients' configs, the deliveries and the follows of one gateway."""

    def __init__(self, settings: PushSettings, *, tasks: TaskMap, task_ops: TaskOperations, caller: AgentCaller,
                 guard: MessageGuard | None = None, webhook_base: str | None = None,
                 history: HistorySink | None = None, metrics: GatewayMetrics | None = None) -> None:
        self.settings = settings
        self.tasks = tasks
        self.task_ops = task_ops
        self.guard = guard
        self.history = history
        self.metrics = metrics
        self.store = PushConfigStore(settings)
        policy = guard.url_policy if guard is not None and guard.urls.check else None
        self.outbox = Outbox(settings, policy, on_outcome=self._outcome, journal=self._journal_delivery)
        self.follower = Follower(settings, caller, task_ops.current, self.store.has, self.notify, webhook_base)
        self.journal: PushJournal | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self, journal: PushJournal | None) -> None:
        """Expire old configs from now on; in a cluster, the configs every gateway keeps and the deliveries this one
        takes over (its own from before a restart, and those of gateways that stopped), from `journal`, where every
        change is written from then on."""
        self._sweeper = asyncio.create_task(self._sweep_loop())
        if journal is None:
            return
        self.journal = journal
        await journal.open(self._config_from_cluster, self._delivery_from_cluster)

    def expire(self, now: float | None = None) -> int:
        """Forget the configs older than `config_ttl_s` whose task is not followed; how many went."""
        gone = self.store.expire((time.time() if now is None else now) - self.settings.config_ttl_s,
                                 self.follower.following)
        for hook in gone:
            if self.journal is not None:
                task_id = str(hook.config["taskId"])
                self.journal.delete_config(record_key(hook.owner, task_id, hook.id),
                                           {"owner": hook.owner, "taskId": task_id, "id": hook.id})
        return len(gone)

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(min(60.0, self.settings.config_ttl_s / 4))
            self.expire()

    def _config_from_cluster(self, record: dict[str, Any]) -> None:
        owner = record.get("owner")
        owner = owner if isinstance(owner, str) else None
        if record.get("deleted"):
            self.store.delete(owner, str(record.get("taskId")), str(record.get("id")))
            return
        config, at = record.get("config"), record.get("at")
        at = float(at) if isinstance(at, (int, float)) else None
        if isinstance(config, dict) and (at is None or at > time.time() - self.settings.config_ttl_s):
            try:
                self.store.put(owner, config, at=at)
            except MMA2AError as exc:  # past a bound of this gateway's (another's settings differ): not kept here
                log.warning("push: a config from the cluster was not kept: %s", exc.message)

    def _delivery_from_cluster(self, key: str, record: dict[str, Any]) -> None:
        owner, config, task_id, body = record.get("owner"), record.get("config"), record.get("task"), record.get("body")
        if not isinstance(config, dict) or not isinstance(task_id, str) or not isinstance(body, str):
            return
        hook = ClientHook(owner if isinstance(owner, str) else None, config, len(orjson.dumps(config)))
        self.outbox.enqueue(hook, task_id, body.encode())

    def _journal_delivery(self, d: Delivery, pending: bool) -> None:
        if self.journal is None:
            return
        key = record_key(d.hook.owner, d.task_id, d.hook.id)
        if pending:
            self.journal.put_delivery(key, {"owner": d.hook.owner, "config": d.hook.config, "task": d.task_id,
                                            "body": (d.newer or d.body).decode()})
        else:
            self.journal.delete_delivery(key)

    def _journal_config(self, hook: ClientHook) -> None:
        if self.journal is not None:
            self.journal.put_config(record_key(hook.owner, str(hook.config["taskId"]), hook.id),
                                    {"owner": hook.owner, "config": hook.config, "at": hook.at})

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def _check_enabled(self) -> None:
        if not self.settings.enabled:
            raise PushNotSupported("push notifications are not enabled on this gateway (push.enabled)")

    # --- the config methods -------------------------------------------------------------------------------
    async def _owned_task(self, task_id: str, target: str | None) -> TaskRecord:
        """The caller's task (TaskNotFound otherwise, as GetTask answers); one the gateway never saw (auth off, on
        `/agents/{name}/`) is asked of its agent, which answers TaskNotFound for a task it does not know either."""
        if not isinstance(task_id, str) or not task_id:
            raise TaskNotFound("task '' not found", field="taskId")
        await self.tasks.fetch(task_id)  # in a cluster: a task made by another gateway
        rec = self.task_ops.task_record(task_id, target)
        if self.tasks.find(task_id) is None:
            await self.task_ops.current(rec, 0)
        return rec

    async def _check_url(self, url: str, where: str) -> None:
        scheme = url.partition(":")[0].lower()
        if scheme not in ("http", "https"):
            raise URLForbidden(f"{where}: a webhook URL must be http or https, got {scheme!r}", field=where)
        if self.guard is not None:
            await self.guard.check_url(url, where)

    async def _caught_up(self) -> None:
        """In a cluster, the config changes made through other gateways applied here first, so a client's config
        methods read what it did through any of them (as through one)."""
        if self.journal is not None:
            await self.journal.caught_up()

    async def _written(self) -> None:
        """In a cluster, this change written where every gateway reads it before the answer leaves."""
        if self.journal is not None:
            await self.journal.written()

    async def create(self, raw: Mapping[str, Any], target: str | None) -> dict[str, Any]:
        """CreateTaskPushNotificationConfig: the config as kept (its id defaulted to the task id)."""
        self._check_enabled()
        await self._caught_up()
        task_id = raw.get("taskId")
        config = normalize(str(task_id or ""), raw, "params")
        rec = await self._owned_task(str(task_id or ""), target)  # the task first, as an a2a-sdk agent checks
        await self._check_url(config["url"], "params.url")
        task = await self.task_ops.current(rec)
        running = (task.get("status") or {}).get("state") not in TERMINAL
        if running and not self.follower.following(rec.task_id):
            self._check_room("params")
        hook = self.store.put(current_sender(), config)
        self._journal_config(hook)
        self._start(rec, task, running)
        await self._written()
        return dict(hook.config)

    def _check_room(self, where: str) -> None:
        """A config that needs a new follow, refused naming the bound when the client (or the gateway) has no room
        for one: kept and never delivered would be worse."""
        reason = self.follower.room(current_sender())
        if reason is not None:
            raise InvalidParams(f"{where}: {reason}", field=where)

    async def _configs_task(self, task_id: str, target: str | None) -> None:
        """For get, list, delete: the caller's task, or one it holds configs of (a config is only ever kept for a task
        its owner has: after a restart in a cluster the configs are back before the task map knows the task)."""
        if isinstance(task_id, str) and task_id:
            await self.tasks.fetch(task_id)
        if isinstance(task_id, str) and self.tasks.find(task_id) is None and self.store.of_owner(current_sender(), task_id):
            check_bound("task", task_id)  # a peer gateway's assertion names this task (as `_owned_task`'s lookup checks)
            return
        await self._owned_task(task_id, target)

    async def get(self, task_id: str, config_id: str, target: str | None) -> dict[str, Any]:
        self._check_enabled()
        await self._caught_up()
        await self._configs_task(task_id, target)
        hook = self.store.get(current_sender(), task_id, config_id or task_id)
        if hook is None:
            raise TaskNotFound(f"push config {config_id!r} of task {task_id!r} not found", field="id")
        return dict(hook.config)

    async def list(self, task_id: str, target: str | None) -> list[dict[str, Any]]:
        self._check_enabled()
        await self._caught_up()
        await self._configs_task(task_id, target)
        return [dict(h.config) for h in self.store.of_owner(current_sender(), task_id)]

    async def delete(self, task_id: str, config_id: str, target: str | None) -> None:
        """Deleting a config that is not there is no error (as a2a-sdk agents answer)."""
        self._check_enabled()
        await self._caught_up()
        await self._configs_task(task_id, target)
        owner, cid = current_sender(), config_id or task_id
        if self.store.delete(owner, task_id, cid) and self.journal is not None:
            self.journal.delete_config(record_key(owner, task_id, cid), {"owner": owner, "taskId": task_id, "id": cid})
            await self._written()

    def _start(self, rec: TaskRecord, task: dict[str, Any], running: bool) -> None:
        """A config just kept for a task: the task as it is now (a config set on a running task hears of it at once
        only when it moves), and a follow while it runs."""
        self.follower.changed(rec.task_id, task)
        if running:
            self.follower.follow(rec)
        self.follower.settle(rec.task_id)

    # --- SendMessage ---------------------------------------------------------------------------------------
    def wants(self, configuration: Mapping[str, Any] | None) -> bool:
        """Whether a SendMessage needs this service: it carries a push config, or some task has configs."""
        if self.store.count:
            return True
        if not configuration:  # the common case: one attribute read, one truth test (a few tens of ns)
            return False
        return INLINE in configuration or "task_push_notification_config" in configuration \
            or "pushNotificationConfig" in configuration

    async def send(self, send: Send, message: dict[str, Any], configuration: Mapping[str, Any] | None,
                   target: str | None) -> dict[str, Any]:
        """SendMessage with the push config kept here (checked before anything is sent), never passed on."""
        rest, raw = split_inline(configuration)
        config = await self._inline(raw, message)
        result = await send(message, rest, target=target)
        task = result.get("task")
        if isinstance(task, dict) and isinstance(task.get("id"), str):
            self._after(task, config)
            if config is not None:
                await self._written()
        return result

    async def send_stream(self, stream: Callable[..., AsyncIterator[dict[str, Any]]], message: dict[str, Any],
                          configuration: Mapping[str, Any] | None, target: str | None) -> AsyncIterator[dict[str, Any]]:
        rest, raw = split_inline(configuration)
        config = await self._inline(raw, message)
        first: dict[str, Any] | None = None
        async for event in stream(message, rest, target=target):
            if first is None and isinstance(event.get("task"), dict):
                first = event["task"]
                if config is not None:
                    self._keep(first["id"], config)
                    await self._written()
            yield event
        if first is not None and self.store.has(first["id"]):
            rec = self.tasks.find(first["id"])
            if rec is not None:
                task = await self.task_ops.current(rec)
                self._after(task, None)

    async def _inline(self, raw: Any, message: Mapping[str, Any]) -> dict[str, Any] | None:
        """SendMessage's push config checked (shape, size, URL, the client's room for one more config and for one
        more followed task) before the message goes anywhere; None when there is none (or push is off: dropped, as
        an agent without push ignores it)."""
        if raw is None or not self.settings.enabled:
            return None
        where = f"params.configuration.{INLINE}"
        if not isinstance(raw, Mapping):
            raise InvalidParams(f"{where}: must be an object", field=where)
        config = normalize("", raw, where)
        await self._check_url(config["url"], f"{where}.url")
        size = len(orjson.dumps(config))
        if size > self.settings.max_config_bytes:
            raise InvalidParams(f"{where}: a push config of {size} bytes, the most is {self.settings.max_config_bytes}",
                                field=where)
        n, _ = self.store.owned(current_sender())
        if n >= self.settings.max_configs_per_client:
            raise InvalidParams(f"{where}: this client holds {n} push configs, the most is "
                                f"{self.settings.max_configs_per_client}; delete some first", field=where)
        task_id = message.get("taskId")
        if not (isinstance(task_id, str) and self.follower.following(task_id)):  # the task may run on: a new follow
            self._check_room(where)
        return config

    def _keep(self, task_id: str, config: dict[str, Any]) -> None:
        kept = {**config, "taskId": task_id, "id": config["id"] or task_id}
        try:
            self._journal_config(self.store.put(current_sender(), kept, f"params.configuration.{INLINE}"))
        except MMA2AError as exc:  # raced past a bound since it was checked: the task runs, unnotified, and says why
            log.warning("push: the config of task %s was not kept: %s", task_id, exc.message)

    def _after(self, task: dict[str, Any], config: dict[str, Any] | None) -> None:
        tid = task["id"]
        if config is not None:
            self._keep(tid, config)
        if not self.store.has(tid):
            return
        if self.follower.changed(tid, task):
            self.notify(tid, task)
        rec = self.tasks.find(tid)
        if rec is not None and (task.get("status") or {}).get("state") not in TERMINAL:
            self.follower.follow(rec)
        self.follower.settle(tid)

    # --- notifications -------------------------------------------------------------------------------------
    def notify(self, task_id: str, task: dict[str, Any]) -> None:
        """The task (as the gateway shows it) to every webhook of its configs."""
        hooks = self.store.for_task(task_id)
        if not hooks:
            return
        body = kept(orjson.dumps({"task": task}))  # pending until delivered (retries: minutes), counted by its length
        for hook in hooks:
            self.outbox.enqueue(hook, task_id, body)

    def _outcome(self, d: Delivery, outcome: str, detail: str) -> None:
        if self.metrics is not None:
            self.metrics.push_deliveries.labels(outcome).inc()
        if self.history is not None:
            self.history.record(DecisionRecord(f"push:{d.task_id}:{d.hook.id}", time.time(), d.hook.owner, (), (),
                                               f"push {outcome}" + (f": {detail}" if detail else ""),
                                               time.monotonic() - d.created))

    # --- the webhook agents call ---------------------------------------------------------------------------
    async def webhook(self, request: Request) -> Response:
        """POST /push/{leg}: an agent's notification, accepted only with its leg's secret and about its leg's task."""
        token = request.headers.get("x-a2a-notification-token") or request.headers.get("a2a-notification-token")
        webhooks = self.follower.webhooks
        try:
            leg: WebhookLeg = webhooks.verify(request.path_params["leg"], token)
        except NotificationRefused as exc:
            log.info("push: a call to the gateway's webhook refused (%d): %s", exc.status, exc.message)
            return _answer(exc.status, exc.message)
        limit = self.settings.max_notification_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return _answer(413, f"a notification is at most {limit} bytes")
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    return _answer(413, f"a notification is at most {limit} bytes")
        except ClientDisconnect:
            return Response(status_code=400)
        try:
            event = orjson.loads(bytes(body))
            webhooks.check_event(leg, event)
        except orjson.JSONDecodeError as exc:
            return _answer(400, f"the notification is not JSON: {exc}")
        except NotificationRefused as exc:
            log.warning("push: a notification from agent %s refused (%d): %s", leg.agent, exc.status, exc.message)
            return _answer(exc.status, exc.message)
        await self.follower.on_webhook(leg)
        return Response(status_code=200)

    async def close(self) -> None:
        """Stop following and sending; in a cluster the pending deliveries stay in the journal for whoever takes
        them over (this gateway after a restart, or another)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self.follower.close()
        await self.outbox.close()
        if self.journal is not None:
            await self.journal.close()


def _answer(status: int, message: str) -> Response:
    return Response(orjson.dumps({"error": {"code": status, "message": message}}), status_code=status,
                    media_type="application/json")
