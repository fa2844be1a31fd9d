"""The keys a JetStream KV bucket holds, and each one's current entry, read without a watch.

nats-py's `KeyValue.keys` lists them with a watch (an ordered consumer) whose end-of-values signal can come before the
values while other members rewrite keys: a listing then missed keys, or had none (`cluster status` said "no gateways"
of two serving workers; a config catch-up could miss a rule or agent change until it changed again). Here the keys are
the subjects of the bucket's stream, as JetStream answers `STREAM.INFO` with a subjects filter: under the stream's
lock, so a key rewritten meanwhile is in the answer. One answer carries at most the server's limit of subjects
(100,000 in nats-server 2.15.1, a constant: JSMaxSubjectDetails; `total`, `limit` and `offset` in the answer say how
many there are and where it starts); past it the subjects are read in pages by offset into the sorted list, each page
starting at the previous one's last subject, so subjects removed meanwhile before a page's start (a key aged out or
purged), which move the rest back, are seen and the page is read again from further back: a key held throughout the
listing is in it.

A deleted or purged key keeps a marker message on its subject, so it is listed: `current` says it apart (its marker's
entry, `operation` KV_DEL or KV_PURGE), as `KeyValue.get` does (KeyNotFoundError).

A bucket of many keys whose values are all wanted (the uploads' records a prune and a recount read; the clients' push
configs a gateway loads at start and the pending deliveries each takeover round reads) is streamed instead
(`streamed_entries`): a consumer of the listing's own delivers the last message of each key, a batch pulled at a time,
so nothing is read one `get` a key, nothing is parsed in one piece, and only what the caller keeps is held
(docs/security.md, S17-5; docs/benchmarks.md, "Push listings streamed"). `held_keys` and `current` stay for the
operator's buckets (a config catch-up: rules, modalities, agents; `cluster status`: agents, modalities, members):
few keys, and a catch-up applies each key's current value once, where a streamed listing gives a key rewritten
meanwhile twice, its value of before first."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
from collections.abc import AsyncIterator
from typing import Any

import orjson
from nats import errors as nats_errors
from nats.js import api
from nats.js.errors import KeyNotFoundError, NotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from ..errors import ClusterError
from ..serving import cancel_tasks

AT_ONCE = 32  # entries read at once by `current`
STREAM_WAIT_S = 10.0  # the longest `streamed_entries` waits for the next message of a listing
STREAM_BATCH = 256  # messages a listing pulls at a time (what it holds unread)
LISTING_IDLE_S = 60.0  # a listing's consumer left behind (its gateway gone mid-listing) is removed by the server after


@dataclasses.dataclass(frozen=True, slots=True)
class Streamed:
    """One message of a streamed listing: a key's value (None: a delete's or purge's marker), its revision, and
    whether it was written after the listing began (`late`: the key may be listed again, with its value of before)."""

    key: str
    value: bytes | None
    revision: int
    late: bool


async def streamed_entries(js: Any, bucket: str, keys: str = ">") -> AsyncIterator[Streamed]:
    """Every key of `bucket` matching `keys` (a subject filter under the bucket's prefix) with its last value
    (`streamed_last` on the bucket's stream)."""
    async for entry in streamed_last(js, f"KV_{bucket}", f"$KV.{bucket}.", keys):
        yield entry


async def streamed_last(js: Any, stream: str, prefix: str, keys: str = ">") -> AsyncIterator[Streamed]:
    """The last message of every subject of `stream` matching `prefix + keys` (its key: the subject past `prefix`), in
    the order of the stream, by one consumer of this listing alone (the last message of each key, no acks, in
    memory, deleted at the end; its stream named, as NATS permissions refuse a lookup), pulled `STREAM_BATCH` at a
    time, so what waits to be read is one batch, whatever the bucket holds (a pushed one queued them all in the
    client: +118 MB at 262,144 records, bench/upload_records.py). It ends once the consumer has passed what the stream
    held when the listing began and has nothing pending: a key held throughout is listed. A key rewritten meanwhile
    may come twice (its value of before, then its new one, `late`); a key whose message of before was replaced before
    it was delivered comes once, `late`. A listing the server stops feeding for `STREAM_WAIT_S` raises
    `ClusterError`."""
    try:
        last = int((await js.get_last_msg(stream, prefix + keys)).seq)
    except NotFoundError:
        return  # no such bucket, or no key yet
    name = f"mma2a-listing-{secrets.token_hex(8)}"
    await js.add_consumer(stream, config=api.ConsumerConfig(
        name=name, filter_subject=prefix + keys, deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
        ack_policy=api.AckPolicy.NONE, mem_storage=True, inactive_threshold=LISTING_IDLE_S))
    sub = await js.pull_subscribe_bind(stream=stream, name=name)
    try:
        while True:
            try:
                batch = await sub.fetch(STREAM_BATCH, timeout=STREAM_WAIT_S)
            except (asyncio.TimeoutError, TimeoutError, nats_errors.TimeoutError):
                raise ClusterError(f"the listing of {stream} stopped: no message for {STREAM_WAIT_S:g} s",
                                   field="cluster") from None
            for msg in batch:
                meta = msg.metadata
                seq = int(meta.sequence.stream)
                op = (msg.headers or {}).get("KV-Operation")
                yield Streamed(msg.subject[len(prefix):], None if op in (KV_DEL, KV_PURGE) else msg.data, seq,
                               seq > last)
                if meta.num_pending == 0 and seq >= last:
                    return
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        with contextlib.suppress(Exception):  # else gone once idle for LISTING_IDLE_S
            await js.delete_consumer(stream, name)


async def held_keys(js: Any, bucket: str) -> list[str]:
    """Every key `bucket` holds a message for (its value, or the marker a delete or purge left), sorted; [] when the
    bucket does not exist."""
    prefix = f"$KV.{bucket}."
    try:
        subjects = await stream_subjects(js, f"KV_{bucket}", prefix + ">")
    except NotFoundError:
        return []
    return [subject[len(prefix):] for subject in subjects]


async def stream_subjects(js: Any, stream: str, subjects_filter: str) -> list[str]:
    """Every subject of `stream` matching `subjects_filter` that holds a message, sorted, read in as many pages as the
    server needs (a NotFoundError when there is no such stream)."""
    out: list[str] = []
    offset, back, last = 0, 1, ""
    while True:
        page, total = await _page(js, stream, subjects_filter, offset)
        if offset > 0 and (not page or page[0] > last):
            # subjects before this page's start went away since the previous page: the rest moved back, and some
            # after `last` may now be before `offset`: read again from further back (at 0 nothing can be before)
            offset, back = max(0, offset - back), back * 2
            continue
        out.extend(s for s in page if s > last)  # a subject added meanwhile before `last` moved the rest on: read once
        if not page or offset + len(page) >= total:
            return out
        last, back = page[-1], 1
        offset += max(1, len(page) - 1)  # the next page starts at this one's last subject


async def key_count(js: Any, bucket: str) -> tuple[int, int]:
    """How many keys `bucket` holds a message for (a value, or the marker a delete or purge left: a KV stream holds one
    subject a key) and the bytes its stream holds, from one `STREAM.INFO` (the stream's `num_subjects`, which nats-py's
    `stream_info` leaves out), whatever the keys' number; (0, 0) when the bucket does not exist."""
    try:
        resp = await js._api_request(f"{js._prefix}.STREAM.INFO.KV_{bucket}", b"{}", timeout=js._timeout)
    except NotFoundError:
        return 0, 0
    state = resp.get("state") or {}
    return int(state.get("num_subjects") or 0), int(state.get("bytes") or 0)


async def _page(js: Any, stream: str, subjects_filter: str, offset: int) -> tuple[list[str], int]:
    """One `STREAM.INFO` answer: its subjects from `offset` on, sorted, and how many match in all. nats-py's
    `stream_info` sends no offset, nor returns the total: the request goes through its JetStream API call."""
    resp = await js._api_request(f"{js._prefix}.STREAM.INFO.{stream}",
                                 orjson.dumps({"subjects_filter": subjects_filter, "offset": offset}),
                                 timeout=js._timeout)
    subjects = (resp.get("state") or {}).get("subjects") or {}
    return sorted(subjects), int(resp.get("total") or 0)


async def current(kv: KeyValue, keys: list[str], *, deleted: bool = False) -> list[KeyValue.Entry]:
    """The current entry of each key, in the order of `keys` (read `AT_ONCE` at a time). A key whose last message is a
    delete's or purge's marker: that marker's entry (its `operation` KV_DEL or KV_PURGE) when `deleted`, else left
    out; a key gone meanwhile (aged out) left out. Any other error is raised."""
    found: list[KeyValue.Entry | None] = [None] * len(keys)
    todo = iter(range(len(keys)))

    async def reader() -> None:  # AT_ONCE of them, each reading the next key not read yet
        for i in todo:
            try:
                found[i] = await kv.get(keys[i])
            except KeyNotFoundError as exc:
                if deleted and exc.op is not None and isinstance(exc.entry, KeyValue.Entry):
                    found[i] = dataclasses.replace(exc.entry, operation=exc.op)

    readers = [asyncio.create_task(reader()) for _ in range(min(AT_ONCE, len(keys)))]
    try:
        await asyncio.gather(*readers)
    finally:  # one failed (or the listing was cancelled): the others stop too
        await cancel_tasks(readers)
    return [e for e in found if e is not None]
