"""`_kept.kept`: JSON bytes stored for later hold their length, not the buffer orjson wrote them into."""

from __future__ import annotations

import gc
import tracemalloc

import orjson

from mma2a._kept import kept

TASK = {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"},
        "artifacts": [{"artifactId": "a", "parts": [{"text": "x" * 2000}]}],
        "history": [{"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hello " * 100}]}]}


def held(make) -> int:
    """Bytes 100 documents made by `make` hold, as tracemalloc counts them."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        docs = [make(i) for i in range(100)]
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - before - len(docs) * 8) // len(docs)  # less the list's slots
    finally:
        tracemalloc.stop()


def test_a_kept_document_holds_its_length():
    for doc in ({"id": "x"}, {"task": TASK}):  # a small one (orjson 3.12+: a 4 KiB buffer) and a push body of ~2.8 KB
        data = orjson.dumps(doc)
        assert kept(data) == data and type(kept(data)) is bytes
        assert held(lambda i, doc=doc: kept(orjson.dumps({**doc, "n": i}))) <= len(data) + 64  # a bytes header and slack
