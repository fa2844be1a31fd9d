"""Durable delivery: a message accepted by one gateway reaches its agent even if that gateway dies.

Ingress: for a route to a durable agent the gateway publishes the adapted message to the
delivery stream (`Nats-Msg-Id` = agent + a digest of (client, `messageId`): the key the
gateway's own dedupe, task ownership and pins use, so JetStream drops a duplicate publish
of the same client within its window and another client's reuse of the id is a new
message) and answers once the dispatcher replies — or, past the
timeout, with the accepted task still `SUBMITTED`. A publish JetStream did not
acknowledge is not accepted, and the client is told so (retrying with the same
`messageId` is always safe).

Dispatch: every dispatching gateway pulls from one durable consumer (JetStream's queue
group). For each message: a KV record per message id claims it (`sending`, with the
owner), the agent is called, the record becomes `done` with the result, then the message
is acked. A record already `done` means a duplicate (redelivery, a client retry, a
publish after the window): acked without calling the agent. A `sending` record whose
owner is alive means a slow delivery: wait. One whose owner stopped heartbeating is in
doubt — the owner died between claiming and recording — and is delivered again
(at-least-once for that window only; counted as `inDoubt`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import uuid
from typing import Any

import nats
import orjson
from nats.js import api
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError

from ..errors import AgentRPCError, MMA2AError
from ..ext import EXTENSION_URI
from ..gateway.state.aggregate import LegResult
from ..serving import cancel_tasks

from .link import Member, ensure_kv

log = logging.getLogger("mma2a.cluster.delivery")

CONSUMER = "dispatch"
FETCH_S = 5.0  # an idle dispatcher's pull request lives this long (each one a request, a timer and its expiry's
# status on the nats-server and the gateway; it was 1 s)


def delivery_id(client: str | None, agent: str, message_id: str) -> str:
    """The delivery's id: the agent, then a digest of (client, messageId) — the client is part of the key (one
    client's id never finds another's outcome), and the client's messageId never reaches a NATS header as it came."""
    digest = hashlib.sha256(orjson.dumps([client, message_id])).hexdigest()[:40]
    return f"{agent}:{digest}"


def record_key(msg_id: str) -> str:
    return hashlib.sha256(msg_id.encode()).hexdigest()[:40]


class DurableDelivery:
    """Both halves of durable delivery for one gateway: publishing (ingress) and dispatching."""

    def __init__(self, cluster: Member) -> None:
        self.cluster = cluster
        self.delivered_kv: Any = None
        self._waiting: dict[str, list[asyncio.Future[dict[str, Any]]]] = {}
        self._reply_sub: Any = None
        self._task: asyncio.Task[Any] | None = None
        self._pull: Any = None  # the dispatcher's pull subscription
        self._active: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self._delivering: set[str] = set()
        self.counts = {"published": 0, "duplicatePublish": 0, "delivered": 0, "duplicates": 0, "inDoubt": 0,
                       "retried": 0, "failed": 0, "notAccepted": 0}

    def stats(self) -> dict[str, int]:
        return dict(self.counts)

    @property
    def ack_wait(self) -> float:
        gw = self.cluster.gw.config
        return max(self.cluster.config.ack_wait_s, gw.timeout_s * (gw.retries + 1) + 1.0)

    async def setup(self) -> None:
        c, names, js = self.cluster.config, self.cluster.names, self.cluster.js
        self.delivered_kv = await ensure_kv(js, names.bucket("delivered"), ttl=c.delivered_ttl_s, replicas=c.replicas,
                                            max_bytes=c.delivered_bucket_bytes, setting="cluster.delivered_bucket_bytes",
                                            sizing=self.cluster.sizing)
        cfg = api.StreamConfig(
            name=names.delivery_stream, subjects=[names.deliver_filter], retention=api.RetentionPolicy.WORK_QUEUE,
            storage=api.StorageType.FILE, duplicate_window=c.dedupe_window_s, num_replicas=c.replicas,
        )
        try:
            await js.stream_info(names.delivery_stream)
        except NotFoundError:
            with contextlib.suppress(Exception):  # another gateway may create it at the same moment
                await js.add_stream(cfg)
        self._reply_sub = await self.cluster.nc.subscribe(names.reply_subject(self.cluster.id), cb=self._on_reply)
        if c.dispatch:
            self._task = asyncio.create_task(self._dispatch_loop())

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            await cancel_tasks([self._task])
        await self._close_pull()
        if self._active:  # finish what was claimed (a graceful stop leaves nothing in doubt)
            await asyncio.wait(list(self._active), timeout=10)
        for futs in self._waiting.values():
            for f in futs:
                if not f.done():
                    f.cancel()

    async def _close_pull(self) -> None:
        """Close the dispatcher's inbox once nothing fetches from it. nats-py's fetch reads a stale status (the
        reply to an earlier fetch that expired) off the queue without marking it done, and the connection's
        drain waits for every queued message to be done: left open, the inbox held each stop for the whole
        drain timeout (30 s). What was fetched and not acked is redelivered by JetStream, as after a crash."""
        sub, self._pull = self._pull, None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    # --- ingress ------------------------------------------------------------------------
    async def deliver(self, agent: str, params: dict[str, Any], client: str | None) -> LegResult:
        """Publish one leg of `client` durably; its result once delivered, a SUBMITTED task if that takes too long."""
        message = params.get("message") or {}
        message_id = str(message.get("messageId") or uuid.uuid4())
        mid = delivery_id(client, agent, message_id)
        body = orjson.dumps({"agent": agent, "params": params, "client": client, "gateway": self.cluster.id,
                             "at": time.time()})
        headers = {"Nats-Msg-Id": mid, "Mma2a-Reply": self.cluster.names.reply_subject(self.cluster.id)}
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(mid, []).append(fut)
        try:
            try:
                ack = await self.cluster.js.publish(self.cluster.names.deliver_subject(agent), body, headers=headers,
                                                    timeout=5.0)
            except Exception as exc:
                self.counts["notAccepted"] += 1
                return LegResult(agent, error=f"durable delivery to {agent}: message {message_id} not accepted "
                                              f"(NATS: {exc or type(exc).__name__}); retry with the same messageId")
            self.counts["duplicatePublish" if ack.duplicate else "published"] += 1
            try:
                outcome = await self._await_record(mid, client, fut, self.ack_wait,
                                                   first_wait=0.0 if ack.duplicate else 1.0)
            except (asyncio.TimeoutError, TimeoutError):
                return LegResult(agent, result={"task": _submitted(message, agent, mid, ack)})
        finally:
            futs = self._waiting.get(mid)
            if futs is not None:
                with contextlib.suppress(ValueError):
                    futs.remove(fut)
                if not futs:
                    del self._waiting[mid]
        if "error" in outcome:
            return LegResult(agent, error=outcome["error"])
        return LegResult(agent, result=outcome["result"])

    async def _await_record(self, mid: str, client: str | None, fut: asyncio.Future[dict[str, Any]], timeout: float,
                            *, first_wait: float) -> dict[str, Any]:
        """The delivery's outcome: from the dispatcher's reply, else (a duplicate publish, a reply lost in a
        NATS restart) from the delivered record, polled with a growing interval. A record is answered only to
        the client that made it (its key holds the client already; the check keeps a record of another shape out)."""
        deadline = time.monotonic() + timeout
        key = record_key(mid)
        wait = first_wait
        while True:
            if wait > 0:
                with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                    await asyncio.wait_for(asyncio.shield(fut), min(wait, max(0.0, deadline - time.monotonic())))
            if fut.done():
                return fut.result()
            with contextlib.suppress(Exception):  # not there yet, or NATS briefly away
                rec = orjson.loads((await self.delivered_kv.get(key)).value)
                if rec.get("state") == "done" and rec.get("client") == client and \
                        isinstance(outcome := rec.get("outcome"), dict):
                    return outcome
            if time.monotonic() >= deadline:
                raise TimeoutError
            wait = min(0.5, max(0.05, wait * 2))

    async def _on_reply(self, msg: Any) -> None:
        mid = (msg.headers or {}).get("Nats-Msg-Id")
        for f in self._waiting.get(mid or "", ()):
            if not f.done():
                f.set_result(orjson.loads(msg.data))

    # --- dispatch -----------------------------------------------------------------------
    async def _subscribe(self) -> Any:
        names = self.cluster.names
        cfg = api.ConsumerConfig(
            durable_name=CONSUMER, ack_policy=api.AckPolicy.EXPLICIT, ack_wait=self.ack_wait,
            max_deliver=self.cluster.config.max_deliver, max_ack_pending=20_000, filter_subject=names.deliver_filter,
        )
        return await self.cluster.js.pull_subscribe(names.deliver_filter, durable=CONSUMER,
                                                    stream=names.delivery_stream, config=cfg)

    async def _dispatch_loop(self) -> None:
        limit = self.cluster.config.dispatch_concurrency
        sub = None
        while not self._stopping:
            try:
                if sub is None:
                    sub = self._pull = await self._subscribe()
                free = limit - len(self._active)
                if free <= 0:
                    await asyncio.wait(list(self._active), return_when=asyncio.FIRST_COMPLETED)
                    continue
                try:
                    # one at a time, each returned the moment it arrives: a batch fetch holds its first
                    # message until the batch fills or the fetch times out (up to 1 s at low load); an idle
                    # dispatcher asks again every FETCH_S (a stop cancels the wait)
                    msgs = await sub.fetch(batch=1, timeout=FETCH_S)
                except (asyncio.TimeoutError, nats.errors.TimeoutError):
                    continue
                for m in msgs:
                    t = asyncio.create_task(self._handle(m))
                    self._active.add(t)
                    t.add_done_callback(self._active.discard)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS restarting, consumer being recreated
                log.info("dispatcher: %s; retrying", exc or type(exc).__name__)
                if not self.cluster.nc.is_connected or isinstance(exc, NotFoundError):
                    await self._close_pull()  # a fresh one is made: the old inbox would hold the drain too
                    sub = None
                await asyncio.sleep(0.25)

    async def _handle(self, msg: Any) -> None:
        """Deliver one message; NATS trouble mid-way (a restart) is retried here while the message is ours."""
        deadline = time.monotonic() + self.ack_wait * 0.8
        while True:
            try:
                await self._deliver_one(msg)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if time.monotonic() > deadline or self._stopping:  # JetStream redelivers after ack_wait
                    log.warning("dispatcher: %s left for redelivery: %s", (msg.headers or {}).get("Nats-Msg-Id"), exc)
                    with contextlib.suppress(Exception):
                        await msg.nak(delay=0.5)
                    return
                await asyncio.sleep(0.25)
                with contextlib.suppress(Exception):
                    await msg.in_progress()

    async def _deliver_one(self, msg: Any) -> None:
        headers = msg.headers or {}
        mid = headers.get("Nats-Msg-Id", "")
        reply = headers.get("Mma2a-Reply")
        key = record_key(mid)
        kv, me = self.delivered_kv, self.cluster.id
        client = orjson.loads(msg.data).get("client")
        claim = orjson.dumps({"state": "sending", "owner": me, "at": time.time(), "id": mid, "client": client})
        try:
            current = await kv.get(key)
        except KeyNotFoundError:
            current = None
        if current is not None:
            rec = orjson.loads(current.value)
            if rec.get("state") == "done":
                self.counts["duplicates"] += 1
                await msg.ack()
                await self._reply(reply, mid, rec["outcome"])
                return
            owner = rec.get("owner", "")
            fresh = time.time() - float(rec.get("at", 0)) < self.ack_wait
            if mid in self._delivering or (fresh and owner != me and await self.cluster.is_alive(owner)):
                await msg.nak(delay=1.0)  # being delivered right now: look again later
                return
            try:
                await kv.update(key, claim, last=current.revision)
            except KeyWrongLastSequenceError:
                await msg.nak(delay=0.5)
                return
            self.counts["inDoubt"] += 1
            log.warning("dispatcher: %s was being delivered by %s, which stopped; delivering again", mid, owner)
        else:
            try:
                await kv.create(key, claim)
            except KeyWrongLastSequenceError:
                await msg.nak(delay=0.5)
                return
        self._delivering.add(mid)
        try:
            await self._call_agent(msg, mid, key, reply)
        finally:
            self._delivering.discard(mid)

    async def _call_agent(self, msg: Any, mid: str, key: str, reply: str | None) -> None:
        kv, me = self.delivered_kv, self.cluster.id
        body = orjson.loads(msg.data)
        agent, params = body["agent"], body["params"]
        gw = self.cluster.gw
        try:
            # for the client it was accepted for (a peer gateway is told who, in a fresh assertion each delivery)
            result = await gw.pipeline.call_agent(gw.directory.get(agent), "SendMessage", params,
                                                  principal=body.get("client"))
            outcome: dict[str, Any] = {"result": result}
        except AgentRPCError as exc:  # the agent got it and said no: delivered
            outcome = {"error": f"agent error {exc.code}: {exc.message}"}
        except MMA2AError as exc:
            if "unreachable" not in exc.message:  # a timeout or a broken answer: the agent may have it
                self.counts["inDoubt"] += 1
            deliveries = msg.metadata.num_delivered if msg.metadata else 1
            if deliveries < self.cluster.config.max_deliver:
                with contextlib.suppress(Exception):
                    await kv.delete(key)
                self.counts["retried"] += 1
                await msg.nak(delay=min(30.0, 0.5 * 2 ** min(deliveries, 6)))
                return
            self.counts["failed"] += 1
            outcome = {"error": f"durable delivery to {agent} failed after {deliveries} attempts: {exc.message}"}
        done = orjson.dumps({"state": "done", "owner": me, "at": time.time(), "id": mid, "client": body.get("client"),
                             "outcome": outcome})
        deadline = time.monotonic() + self.ack_wait * 4
        while True:  # the agent has it: the record must be written, even across a NATS restart
            try:
                await kv.put(key, done)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.25)
        with contextlib.suppress(Exception):  # a lost ack only brings a redelivery, answered from the record
            await msg.ack()
        self.counts["delivered"] += 1
        await self._reply(reply, mid, outcome)

    async def _reply(self, reply: str | None, mid: str, outcome: dict[str, Any]) -> None:
        if reply:
            with contextlib.suppress(Exception):
                await self.cluster.nc.publish(reply, orjson.dumps(outcome), headers={"Nats-Msg-Id": mid})


def _submitted(message: dict[str, Any], agent: str, mid: str, ack: Any) -> dict[str, Any]:
    """The answer for a message accepted durably but not delivered within the wait."""
    return {
        "id": str(uuid.uuid4()),
        "contextId": message.get("contextId") or str(uuid.uuid4()),
        "status": {"state": "TASK_STATE_SUBMITTED"},
        "metadata": {EXTENSION_URI: {"durable": {"id": mid, "agent": agent, "stream": ack.stream, "seq": ack.seq}}},
    }
