"""Cluster mode's decision history: every gateway publishes its decisions to one JetStream stream, and every
gateway indexes the whole stream into its own SQLite file, so `/admin/history` on any gateway answers for all.

The pipeline's `record()` makes the decision's row (alike decisions' shapes memoised, as the local recorder
does) and appends it to a bounded deque (drops are counted, never a wait). A publisher task
(`publisher.StreamPublisher`) sends batches (one JSON document per batch), gathering for `linger_s` first: at
thousands of decisions a second one stream message (and one read by every follower) carries hundreds of them, not
one or two. A follower task reads the stream from the position the local file last saved and hands each message as
it came to the local recorder, whose writer process reads its rows and saves the position in the same transaction —
so a restarted gateway resumes exactly where its file stops.

The workers of `serve --workers N` share one `data_dir`, so one history file: only the first worker
follows the stream into it (`follow=False` for the others: the same rows indexed N times into one
file cost N times the CPU and contend for its lock); every worker publishes and reads the file.

A batch goes out as a message per client (on a subject naming it), each at most `MESSAGE_BYTES`, and every gateway
counts what each client's messages take of the stream from a headers-only consumer of it; a client past its share
(`history.max_bytes_per_client`) has its own oldest messages purged, never another's (`history_shares`, S17-6).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson
from nats.js import api

from ..gateway.history.record import DecisionRecord, Row, ShapeMemo, rows_to_json, to_row
from .history_shares import (CLIENTS_HEADER, ROWS_HEADER, StreamShares, client_of, client_token, read_shared_header,
                             shared_header, stored_bytes)
from .link import Member, ensure_stream
from .publisher import StreamPublisher

if TYPE_CHECKING:
    from ..gateway.history import HistoryRecorder

log = logging.getLogger("mma2a.cluster")
LINGER_S = 0.05  # how long the publisher gathers decisions before it sends a batch short of `publisher.BATCH`
MESSAGE_BYTES = 512 << 10
"""A client's decisions of one batch go in messages of about this much at most (NATS takes 1 MiB by default: a batch of
200 decisions of new shapes of 64 parts, ~9 MB, was refused whole, other clients' decisions in it too)."""
ROW_BYTES = 96  # what a row adds to a message besides its detail, receivers and id (its other fields, as JSON)
FRONT_S = 10.0  # how often the counts learn the stream's first sequence
SAID_CLIENTS = 1024  # clients whose first purge was logged, remembered (then each is said once again, at most)


class JetStreamHistory(StreamPublisher[Row]):
    """The `HistorySink` of a clustered gateway."""

    kind = "history"
    encode_on_loop = True  # rows made as decisions are recorded: a batch of 200 is ~80 µs of orjson

    def __init__(self, cluster: Member, local: HistoryRecorder, *, capacity: int, max_age_s: float,
                 max_bytes: int, max_bytes_per_client: int | None = None, follow: bool = True,
                 linger_s: float = LINGER_S) -> None:
        super().__init__(cluster, capacity=capacity, linger_s=linger_s)
        self.local = local
        self.follow = follow
        self.max_age_s, self.max_bytes = max_age_s, max_bytes
        self.shares = StreamShares(max_bytes_per_client if max_bytes_per_client is not None else max_bytes // 4,
                                   max_age_s)
        self.purged = 0  # decisions of clients past their share this gateway purged from the stream
        self.heard = 0  # the last stream sequence counted
        self._said: OrderedDict[str, None] = OrderedDict()  # clients whose first purge was logged
        self._purging: set[asyncio.Task[Any]] = set()
        self._tokens: dict[str | None, str] = {}  # sender -> its subjects' token (a few µs of SHA-256 each, once)
        self._memo = ShapeMemo()  # the request path's (the event loop's thread), as the local recorder's

    # --- the request path -----------------------------------------------------------------
    def record(self, entry: DecisionRecord) -> None:
        """The decision's row, made at once with the shapes of alike decisions memoised (~2 µs; made later on a thread
        without the memo it cost ~10 µs, under the loop's GIL), queued for the publisher."""
        try:
            row = to_row(entry, self._memo)
        except Exception:  # features no JSON takes: this decision is lost, and counted
            log.exception("history: a decision not recorded")
            self.dropped += 1
            self.on_dropped(1)
            return
        self.put(row)

    def encode(self, batch: list[Row]) -> bytes:
        return rows_to_json(batch)

    def on_dropped(self, count: int) -> None:
        self.cluster.gw.metrics.history.labels("dropped").inc(count)

    def on_failed(self, count: int, exc: Exception) -> None:  # these decisions are lost for the history, and counted
        self.cluster.gw.metrics.history.labels("dropped").inc(count)

    def messages(self, batch: list[Row]) -> list[tuple[str, list[Row], dict[str, str] | None]]:
        """The batch's messages, each about `MESSAGE_BYTES` at most: the decisions of clients well within their share of
        the stream together, each client's bytes of it in a header; those of a client holding more (`shares.separate`)
        in messages of their own, on a subject naming it."""
        groups: dict[str | None, tuple[list[Row], list[int], set[bytes]]] = {}  # rows, [their own bytes], shapes
        for row in batch:  # one pass (~0.3 µs a row): each client's rows and about what they take of a message
            group = groups.get(row[2])
            if group is None:
                group = groups[row[2]] = ([], [0], set())
            group[0].append(row)
            group[1][0] += len(row[7]) + len(row[0]) + (len(row[8]) if row[8] else 0)
            group[2].add(row[6].parts_json)
        out: list[tuple[str, list[Row], dict[str, str] | None]] = []
        shared: list[Row] = []
        parts: dict[str, int] = {}  # each client's bytes of the shared message
        total = 0
        for sender, (rows, own, shapes) in groups.items():
            size = own[0] + ROW_BYTES * len(rows) + sum(map(len, shapes))
            if sender is None:
                shared += rows
                total += size
                continue
            token = self._tokens.get(sender)
            if token is None:
                if len(self._tokens) >= 4096:
                    self._tokens.clear()
                token = self._tokens[sender] = client_token(sender)
            if not self.shares.separate(token):
                shared += rows
                parts[token] = size
                total += size
                continue
            subject = f"{self.subject}.{token}"
            for chunk in ([rows] if size <= MESSAGE_BYTES else [c for c, _ in _chunks(rows, self._tokens)]):
                out.append((subject, chunk, {ROWS_HEADER: str(len(chunk))}))
        if shared:  # one message unless it would be larger than MESSAGE_BYTES
            chunks = [(shared, parts)] if total <= MESSAGE_BYTES else _chunks(shared, self._tokens)
            for chunk, chunk_parts in chunks:
                out.append((self.subject, chunk, {CLIENTS_HEADER: shared_header(chunk_parts)} if chunk_parts else None))
        return out

    # --- lifecycle --------------------------------------------------------------------------
    async def setup(self) -> None:
        self.refused = await ensure_stream(self.cluster.js, self.stream, self.subjects, max_age_s=self.max_age_s,
                                           max_bytes=self.max_bytes, replicas=self.cluster.config.replicas,
                                           setting="history.max_bytes", sizing=self.cluster.sizing)
        counting = await self._counting()  # before anything is published: this gateway's first messages counted too
        self.start_publishing()
        if counting is not None:
            self._tasks.append(asyncio.create_task(self._count(counting)))
        self._tasks.append(asyncio.create_task(self._front()))
        if self.follow:
            self._tasks.append(asyncio.create_task(self._follow()))

    async def stop(self) -> None:
        await super().stop()
        for task in list(self._purging):
            task.cancel()

    # --- each client's share of the stream ------------------------------------------------------
    async def _counting(self) -> Any:
        """A headers-only consumer of every message of the stream published from now on (None: the stream refused).
        What the stream held before is not read (25–26 µs of the loop's CPU a message, headers only, at load 14–15, bench/history_stream.py --count-cost: 256 MiB of
        one-decision messages, ~500,000, would be ~12 s at each start): it was counted by the gateways running then, and
        what is left of a client's goes with its next cut, which purges every message of the client up to its
        sequence."""
        try:
            return await self.cluster.js.subscribe(
                self.subjects, stream=self.stream, ordered_consumer=True,
                config=api.ConsumerConfig(headers_only=True, deliver_policy=api.DeliverPolicy.NEW))
        except Exception as exc:  # the stream refused (said at start): nothing to count
            log.warning("history: the stream %s is not counted per client: %s", self.stream, exc or type(exc).__name__)
            return None

    async def _count(self, sub: Any) -> None:
        """Count each message `sub` brings (its subject, sequence, size and decisions); purge a client's oldest past its
        share."""
        prefix = f"{self.cluster.names.cluster}.history."
        try:
            async for msg in sub.messages:
                self.heard = seq = msg.metadata.sequence.stream
                if not msg.subject.startswith(prefix):
                    continue
                client = client_of(msg.subject)
                headers = msg.headers or {}
                if client is None:
                    shared = headers.get(CLIENTS_HEADER)
                    if shared:
                        self.shares.counted_shared(seq, read_shared_header(shared), time.monotonic())
                    continue
                try:
                    value, rows = int(headers.get("Nats-Msg-Size", 0)), int(headers.get(ROWS_HEADER, 0))
                except ValueError:
                    continue
                cut = self.shares.counted(client, seq, stored_bytes(msg.subject, value, headers), rows, time.monotonic())
                if cut is not None:
                    task = asyncio.create_task(self._purge(client, *cut))
                    self._purging.add(task)
                    task.add_done_callback(self._purging.discard)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _front(self) -> None:
        """Every `FRONT_S`, the stream's first sequence: what aged out or was discarded before it leaves the counts."""
        while True:
            await asyncio.sleep(FRONT_S)
            with contextlib.suppress(Exception):  # NATS away: next time
                self.shares.expire(int((await self.cluster.js.stream_info(self.stream)).state.first_seq))

    async def _purge(self, client: str, upto: int, rows: int) -> None:
        """Remove `client`'s messages up to `upto` from the stream (every gateway's: one request by subject); the
        decisions are counted, and the client's first purge said, where the request removed them (the other gateways,
        reaching the same cut, find them gone)."""
        request = orjson.dumps({"filter": f"{self.cluster.names.cluster}.history.*.{client}", "seq": upto + 1})
        try:
            reply = await self.cluster.nc.request(f"$JS.API.STREAM.PURGE.{self.stream}", request, timeout=5.0)
            purged = int(orjson.loads(reply.data).get("purged", 0))
        except Exception as exc:  # NATS away: the next message past the share purges again (its cut covers these)
            log.warning("history: %s's decisions past its share of the stream %s not purged: %s", client, self.stream,
                        exc or type(exc).__name__)
            return
        if not purged:
            return
        self.purged += rows
        self.cluster.gw.metrics.history.labels("purged").inc(rows)
        if client not in self._said:
            self._said[client] = None
            if len(self._said) > SAID_CLIENTS:
                self._said.popitem(last=False)
            log.warning("history: client %s's decisions take more than its share of the stream %s "
                        "(history.max_bytes_per_client, %d bytes): its oldest are purged from it (%d decisions now; "
                        "further purges are counted in mma2a_history_decisions_total{fate=\"purged\"})",
                        client, self.stream, self.shares.share, rows)

    # --- following the stream into the local file -------------------------------------------------
    async def _follow(self) -> None:
        start = await asyncio.to_thread(self.local.store.position) + 1
        sub = await self.cluster.js.subscribe(
            self.subjects, stream=self.stream, ordered_consumer=True,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, config=api.ConsumerConfig(opt_start_seq=start))
        try:
            async for msg in sub.messages:  # the writer reads the rows (or says it skipped a message holding none)
                position = msg.metadata.sequence.stream
                while not self.local.ingest(msg.data, position):  # the writer is behind: wait, never drop
                    await asyncio.sleep(0.05)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


def _chunks(rows: list[Row], tokens: dict[str | None, str]) -> Iterator[tuple[list[Row], dict[str, int]]]:
    """Rows in runs of about `MESSAGE_BYTES` as JSON at most (each shape once a run; a row larger than that alone), with
    the bytes each client's rows take of each (a shape counted to the first client whose row has it; `tokens`: each
    sender's token)."""
    chunk: list[Row] = []
    shapes: set[bytes] = set()
    parts: dict[str, int] = {}
    used = 0
    for row in rows:
        size = len(row.detail) + len(row.message_id) + ROW_BYTES + (len(row.receivers_json) if row.receivers_json else 0)
        shape = 0 if row.shape.parts_json in shapes else len(row.shape.parts_json)
        if chunk and used + size + shape > MESSAGE_BYTES:
            yield chunk, parts
            chunk, shapes, parts, used = [], set(), {}, 0
            shape = len(row.shape.parts_json)
        size += shape
        chunk.append(row)
        shapes.add(row.shape.parts_json)
        used += size
        if row.sender is not None:
            token = tokens.get(row.sender) or client_token(row.sender)
            parts[token] = parts.get(token, 0) + size
    if chunk:
        yield chunk, parts
