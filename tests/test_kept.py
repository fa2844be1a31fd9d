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


def test_a_decisions_row_and_its_memoised_shape_hold_their_lengths():
    """The history's queue holds up to `history.queue` rows and its ShapeMemo up to 1,024 shapes: each row's JSON
    (parts' details, receivers) and each shape's hold their lengths, not 4 KiB each."""
    from mma2a.gateway.history import DecisionRecord, PartSummary, to_row
    from mma2a.gateway.history.record import Row, ShapeMemo
    from mma2a.routing import PartRoute, Target

    def row(i: int) -> Row:
        route = PartRoute(0, "image/png", ("r1",), (Target(f"vision-{i}"),), ("route_to",))
        parts = (PartSummary(0, "image/png", {"width": i, "height": 2 * i}), PartSummary(1, "text/plain", {}))
        return to_row(DecisionRecord(f"m-{i}", 1.0, "client-a", parts, (route,), "TASK_STATE_COMPLETED", 0.01,
                                     receivers=(f"vision-{i}", "chat")))

    r = row(1)
    assert r.receivers_json is not None and len(r.detail) > 10  # (features: JSON by orjson, not the one-size fast path)
    assert held(lambda i: row(i).detail) <= len(r.detail) + 64
    assert held(lambda i: row(i).receivers_json) <= len(r.receivers_json) + 64
    memo = ShapeMemo()

    def shape(i: int) -> bytes:
        route = PartRoute(0, "image/png", ("r1",), (Target(f"v{i}"),), ("route_to",))
        return memo.shape(DecisionRecord(f"m-{i}", 1.0, None, (PartSummary(0, "image/png", {}),), (route,),
                                         "TASK_STATE_COMPLETED", 0.01)).parts_json

    assert held(shape) < 2048  # the memo's own entry besides (its key, the route, the Shape): ~1.1 KB; 4 KiB more before
