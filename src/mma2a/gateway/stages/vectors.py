"""Sentence vectors on the request path: cached, batched across concurrent requests, off the event loop.

A request's text is looked up by the digest of its normalised form in a bounded cache
(`CachedEmbedder`); the texts that miss wait in a queue, and one worker embeds them together,
one model run at a time in a worker thread — the run holds one core and leaves the event
loop its own. Requests that arrive while a run is going join the next batch, so under load
the per-text cost falls (a batch of 8 short sentences costs about 0.6 of 8 single runs,
docs/benchmarks.md) and at low load nobody waits for a batch to fill.

A model that costs microseconds a text (`cheap`, the static table of features/static.py) skips the
queue: a text of up to `INLINE_CHARS` is embedded where it is asked for, on the event loop — the
hop to a worker thread would cost more than the embedding.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from ...routing.semantic import CachedEmbedder, normalise_text, text_key

log = logging.getLogger("mma2a.gateway")

INLINE_CHARS = 1000
"""A cheap model embeds texts up to this long on the event loop (longer ones go to the worker thread)."""


class TextVectors:
    """`await vectors(texts)`: one unit vector per text (None where it could not be had: queue full, model failed)."""

    def __init__(self, cache: CachedEmbedder, *, max_batch: int = 8, max_pending: int = 1024,
                 count: Callable[[str], None] | None = None) -> None:
        """`max_pending`: distinct texts waiting at most (past it a text goes without a vector, counted as `shed`);
        `count(result)`: told `hit` or `miss` for every text, and `shed`, `failed` or `timeout` for those left without one."""
        self.cache = cache
        one = getattr(cache.inner, "embed_one", None)  # a SentenceEncoder's: one text, one vector
        self._embed_one: Callable[[str], Any] | None = one if getattr(cache.inner, "cheap", False) and callable(one) else None
        self.inline = self._embed_one is not None
        self.max_batch = max_batch
        self.max_pending = max_pending
        self._count = count or (lambda result: None)
        self._pending: dict[bytes, tuple[str, asyncio.Future[Any]]] = {}
        self._running: dict[bytes, asyncio.Future[Any]] = {}
        self._worker: asyncio.Task[None] | None = None

    def timed_out(self, n: int) -> None:
        """`n` texts went without a vector: the feature budget ran out while they waited."""
        for _ in range(n):
            self._count("timeout")

    def warm_up(self) -> None:
        """Load the model (blocking: call it off the event loop)."""
        self.cache.inner.embed(["warm up"])

    async def vectors(self, texts: Sequence[str]) -> list[Any | None]:
        out, waits = self.lookup(texts)
        return await self.finish(out, waits) if waits else out

    def lookup(self, texts: Sequence[str]) -> tuple[list[Any | None], list[tuple[int, asyncio.Future[Any]]]]:
        """What can be had now (cached, or embedded in place by a cheap model), and a future for each text that
        must wait for the worker (queued here; `finish` awaits them). Call it on the event loop."""
        out: list[Any | None] = [None] * len(texts)
        waits: list[tuple[int, asyncio.Future[Any]]] = []
        for i, raw in enumerate(texts):
            text = normalise_text(raw)
            key = text_key(text)
            vec = self.cache.get(key)
            if vec is not None:
                self._count("hit")
                out[i] = vec
                continue
            if self._embed_one is not None and len(text) <= INLINE_CHARS:
                try:
                    vec = self._embed_one(text)
                except Exception as exc:  # noqa: BLE001 - routed without a vector, as a failed batch would be
                    log.warning("text vectors: the embedder failed on a text: %r", exc)
                    self._count("failed")
                    continue
                self.cache.put(key, vec, owned=True)
                self._count("miss")
                out[i] = vec
                continue
            fut = self._running.get(key)
            if fut is None:
                entry = self._pending.get(key)
                if entry is None:
                    if len(self._pending) >= self.max_pending:
                        self._count("shed")
                        continue
                    entry = self._pending[key] = (text, asyncio.get_running_loop().create_future())
                fut = entry[1]
            self._count("miss")
            waits.append((i, fut))
        if waits and self._worker is None:
            self._worker = asyncio.create_task(self._work())
        return out, waits

    async def finish(self, out: list[Any | None], waits: list[tuple[int, asyncio.Future[Any]]]) -> list[Any | None]:
        """`out` with the vectors `lookup` left waiting for."""
        for i, fut in waits:
            try:
                out[i] = await asyncio.shield(fut)  # a waiter that gives up leaves the others their vector
            except Exception:  # noqa: BLE001 - the model failed: logged by the worker, routed without a vector
                self._count("failed")
        return out

    async def _work(self) -> None:
        try:
            while self._pending:
                keys = list(self._pending)[: self.max_batch]
                batch = [self._pending.pop(k) for k in keys]
                self._running = dict(zip(keys, (f for _, f in batch)))
                try:
                    rows = await asyncio.to_thread(self.cache.inner.embed, [t for t, _ in batch])
                except Exception as exc:  # noqa: BLE001 - each waiter sees it; the gateway keeps serving
                    log.warning("text vectors: the embedder failed on a batch of %d: %r", len(batch), exc)
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                            fut.exception()  # retrieved: no "never retrieved" warning when every waiter left
                    continue
                finally:
                    self._running = {}
                for key, (_, fut), row in zip(keys, batch, rows):
                    self.cache.put(key, row)
                    if not fut.done():
                        fut.set_result(row)
        finally:
            self._worker = None
