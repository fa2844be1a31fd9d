"""Deliveries to the clients' webhooks: at least once, retried with backoff, bounded per client.

One pending delivery per (client, task, config): a notification carries the whole task (a `StreamResponse`
`{"task": ...}`), so a newer one waiting replaces an older one not yet sent, and one that arrives while
an attempt is in flight goes right after it. A 2xx answer delivers; a timeout, a refused connection,
408, 425, 429 or a 5xx is retried after `backoff_s` doubling to `max_backoff_s`, `max_attempts` in all;
any other answer (a redirect, 4xx) is final. Each outcome goes to the metrics and the decision history.
Connections go only to addresses the `urls` policy allows, resolved at connect time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from ...payload.ssrf import URLPolicy, guarded_connector
from ..config import PushSettings
from .store import ClientHook

log = logging.getLogger("mma2a.gateway.push")

_RETRIED = frozenset({408, 425, 429})


@dataclass
class Delivery:
    """One notification on its way to one client webhook."""

    hook: ClientHook
    task_id: str
    body: bytes
    attempts: int = 0
    sending: bool = False
    newer: bytes | None = None  # arrived while an attempt was in flight: sent next
    created: float = field(default_factory=time.monotonic)

    @property
    def key(self) -> tuple[str | None, str, str]:
        return (self.hook.owner, self.task_id, self.hook.id)

    @property
    def size(self) -> int:
        return len(self.body) + len(self.newer or b"")


Outcome = Callable[[Delivery, str, str], None]  # (delivery, "delivered" | "failed" | "refused", detail)
Journal = Callable[[Delivery, bool], None]  # (delivery, still pending): kept (its newest body) or done


class Outbox:
    """Pending deliveries and the tasks that send them."""

    def __init__(self, settings: PushSettings, policy: URLPolicy | None, *, on_outcome: Outcome | None = None,
                 journal: Journal | None = None, sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        """`policy`: the `urls` policy every connection is checked against (None: `urls.check` is off); `journal`:
        told of each pending delivery and of its end (a cluster keeps them, `journal.py`); a stop or a crash
        leaves the pending ones there."""
        self.settings = settings
        self.policy = policy
        self.on_outcome = on_outcome
        self.journal = journal
        self.sleep = sleep
        self._pending: dict[tuple[str | None, str, str], Delivery] = {}
        self._owned: dict[str | None, tuple[int, int]] = {}  # owner -> (pending, bytes)
        self._tasks: set[asyncio.Task[None]] = set()
        self._all = asyncio.Semaphore(settings.max_concurrent_deliveries)
        self._per: dict[str | None, asyncio.Semaphore] = {}
        self._session: aiohttp.ClientSession | None = None

    def pending(self, owner: str | None = None) -> int:
        return self._owned.get(owner, (0, 0))[0]

    def __len__(self) -> int:
        return len(self._pending)

    def enqueue(self, hook: ClientHook, task_id: str, body: bytes) -> bool:
        """Queue `body` for `hook`; False (counted `refused`) when the client's pending deliveries are at their bound."""
        key = (hook.owner, task_id, hook.id)
        d = self._pending.get(key)
        if d is not None:  # coalesce: the newer task replaces what is not sent yet
            before = d.size
            if d.sending:
                d.newer = body
            else:
                d.body, d.hook = body, hook
            self._count(hook.owner, 0, d.size - before)
            if self.journal is not None:
                self.journal(d, True)
            return True
        s = self.settings
        n, b = self._owned.get(hook.owner, (0, 0))
        if n >= s.max_pending_per_client or b + len(body) > s.max_pending_bytes_per_client:
            why = (f"{n} deliveries pending, the most is {s.max_pending_per_client}" if n >= s.max_pending_per_client
                   else f"{b} bytes pending, the most is {s.max_pending_bytes_per_client}")
            self._outcome(Delivery(hook, task_id, body), "refused", why)
            return False
        d = Delivery(hook, task_id, body)
        self._pending[key] = d
        self._count(hook.owner, 1, len(body))
        if self.journal is not None:
            self.journal(d, True)
        task = asyncio.create_task(self._run(d), name=f"push {task_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    def _count(self, owner: str | None, dn: int, db: int) -> None:
        n, b = self._owned.get(owner, (0, 0))
        n, b = n + dn, b + db
        if n > 0:
            self._owned[owner] = (n, b)
        else:
            self._owned.pop(owner, None)

    def _outcome(self, d: Delivery, outcome: str, detail: str) -> None:
        if outcome != "delivered":  # the URL without its query (a client may put a secret there)
            log.warning("push to %s for task %s: %s (%s)", d.hook.url.partition("?")[0], d.task_id, outcome, detail)
        if self.on_outcome is not None:
            self.on_outcome(d, outcome, detail)

    async def _run(self, d: Delivery) -> None:
        s = self.settings
        try:
            while True:
                d.attempts += 1
                ok, final, detail = await self._attempt(d)
                if ok or final or d.attempts >= s.max_attempts:
                    self._outcome(d, "delivered" if ok else "failed", detail if not ok else f"attempt {d.attempts}")
                    if d.newer is None:
                        if self.journal is not None:
                            self.journal(d, False)  # done: only an outcome ends it (a stop leaves it pending)
                        return
                    d.body, d.newer, d.attempts = d.newer, None, 0  # the newer task next
                    continue
                if d.newer is not None:  # a newer task replaces the one that failed
                    d.body, d.newer = d.newer, None
                await self.sleep(min(s.backoff_s * 2 ** (d.attempts - 1), s.max_backoff_s))
        finally:
            self._pending.pop(d.key, None)
            self._count(d.hook.owner, -1, -d.size)

    async def _attempt(self, d: Delivery) -> tuple[bool, bool, str]:
        """(delivered, final, detail) of one POST."""
        per = self._per.setdefault(d.hook.owner, asyncio.Semaphore(self.settings.max_concurrent_per_client))
        async with per, self._all:
            d.sending = True
            try:
                async with self._client().post(d.hook.url, data=d.body, headers=d.hook.headers(),
                                               allow_redirects=False) as resp:
                    if 200 <= resp.status < 300:
                        return True, True, ""
                    retry = resp.status >= 500 or resp.status in _RETRIED
                    return False, not retry, f"HTTP {resp.status}"
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                return False, False, f"{type(exc).__name__}: {exc}"[:300]
            except Exception as exc:  # noqa: BLE001 - URLForbidden (the address moved where policy refuses) and the like
                return False, True, f"{type(exc).__name__}: {exc}"[:300]
            finally:
                d.sending = False
                if len(self._per) > 4096 and not self._per[d.hook.owner].locked():
                    self._per.pop(d.hook.owner, None)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = guarded_connector(self.policy) if self.policy is not None else aiohttp.TCPConnector()
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=False,
                timeout=aiohttp.ClientTimeout(total=self.settings.timeout_s))
        return self._session

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None
