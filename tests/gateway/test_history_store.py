"""The history store and its writer on a real SQLite file: batches, drops, retention by age and size, caps."""

from __future__ import annotations

import time

import orjson

from mma2a.gateway.history import DecisionRecord, HistoryFilter, HistoryRecorder, HistoryStore, PartSummary, to_row
from mma2a.gateway.history.record import MAX_FEATURE_BYTES, ShapeMemo, cap_features, outcome_class
from mma2a.routing import PartRoute, Target, TransformStep


def record(mid: str, ts: float, modality: str = "image/png", agent: str = "vision", features: dict | None = None,
           outcome: str = "TASK_STATE_COMPLETED") -> DecisionRecord:
    route = PartRoute(0, modality, ("r1",), (Target(agent, (TransformStep("asr", modality, "text/plain"),)),), ("route_to",))
    return DecisionRecord(mid, ts, "client-a", (PartSummary(0, modality, features or {}),), (route,), outcome, 0.012)


def test_rows_carry_targets_transforms_and_tags():
    row = to_row(record("x", 1.0, "audio/wav; rate=16000", "writer"))
    parts = row.parts()
    assert parts == [{"index": 0, "modality": "audio/wav; rate=16000", "kind": "text", "size": None, "features": {},
                      "targets": ["writer"], "matched": ["r1"], "transforms": [[{"agent": "asr", "from": "audio/wav; rate=16000",
                                                                                  "to": "text/plain"}]],
                      "dropped": None, "bottleneck": False}]
    assert set(row.tags) == {("m", "audio/wav"), ("f", "audio/*"), ("a", "writer"), ("a", "asr"), ("r", "r1")}
    assert row.latency_ms == 12.0 and row.outcome == "completed"
    assert outcome_class("refused -32602: parts[0]: bad") == ("refused", "-32602: parts[0]: bad")
    assert outcome_class("TASK_STATE_INPUT_REQUIRED") == ("input-required", None)
    assert outcome_class("TASK_STATE_SOMETHING_NEW") == ("unknown", None)


def test_the_shape_memo_reuses_alike_decisions_and_only_those():
    """Rows made through the writer's memo equal rows made afresh: alike decisions (equal routes, parts of the same
    index, modality and kind) share one shape, whatever their sizes and features (each decision's own detail);
    other routes or modalities do not."""
    memo = ShapeMemo()
    base = record("a", 1.0)
    alike = base._replace(message_id="b", time=2.0, outcome="TASK_STATE_FAILED")
    other_size = base._replace(message_id="c", parts=(PartSummary(0, "image/png", {}, "text", 99),))
    featured = base._replace(message_id="d", parts=(PartSummary(0, "image/png", {"width": 3}),))
    equal_routes = base._replace(message_id="f", routes=tuple(PartRoute(*r) for r in base.routes))
    other_routes = base._replace(message_id="e", routes=(PartRoute(0, "image/png", (), (Target("ocr"),), ("route_to",)),))
    other_modality = base._replace(message_id="g", parts=(PartSummary(0, "image/jpeg"),))
    for entry in (base, alike, other_size, featured, other_routes, alike, equal_routes, other_modality):
        assert to_row(entry, memo) == to_row(entry)
    first = to_row(base, memo)
    for entry in (alike, other_size, featured, equal_routes):
        assert to_row(entry, memo).shape is first.shape
    assert to_row(other_size, memo).parts()[0]["size"] == 99
    assert to_row(featured, memo).parts()[0]["features"] == {"width": 3}
    assert to_row(other_routes, memo).shape != first.shape and ("a", "ocr") in to_row(other_routes, memo).tags
    assert to_row(other_modality, memo).shape != first.shape


def test_features_are_capped_in_bytes():
    huge = {"text": "x" * 10_000, "objects": [f"o{i}" for i in range(1000)], "nested": {"a": {"b": {"c": {"d": 1}}}}}
    capped = cap_features(huge)
    assert len(capped["text"]) == 200 and len(capped["objects"]) == 16
    many = {f"k{i}": "v" * 150 for i in range(50)}
    kept = cap_features(many)
    assert kept["_truncated"] is True and len(orjson.dumps(kept)) <= MAX_FEATURE_BYTES


def test_writer_batches_and_counts_drops_when_the_queue_is_full(tmp_path):
    store = HistoryStore(tmp_path / "h.sqlite3")
    drops, writes = [], []
    rec = HistoryRecorder(store, capacity=3, batch=2, on_drop=lambda: drops.append(1), on_write=writes.append)
    now = time.time()
    for i in range(5):  # the writer is not running yet: the queue fills, the rest are dropped, nothing blocks
        rec.record(record(f"m{i}", now + i))
    assert rec.dropped == 2 and len(drops) == 2
    rec.start()
    assert rec.flush(10.0)
    assert writes == [2, 1]  # batches of at most 2
    got, cursor = store.query(HistoryFilter(limit=10))
    assert [d["messageId"] for d in got] == ["m2", "m1", "m0"] and cursor is None
    rec.stop()


def test_retention_by_age_then_by_size(tmp_path):
    store = HistoryStore(tmp_path / "h.sqlite3", max_age_s=3600, max_bytes=10**9)
    now = time.time()
    store.write([to_row(record(f"old{i}", now - 7200 + i)) for i in range(10)])
    store.write([to_row(record(f"new{i}", now - 60 + i, features={"pad": "p" * 150})) for i in range(100)])
    assert store.prune(now) == 10
    assert store.stats()["decisions"] == 100
    size = store.stats()["bytes"]
    small = HistoryStore(tmp_path / "h.sqlite3", max_age_s=3600, max_bytes=size // 2)
    removed = small.prune(now)
    left, _ = small.query(HistoryFilter(limit=1000))
    assert removed > 50 and small.stats()["bytes"] <= size // 2
    assert [d["messageId"] for d in left] == [f"new{i}" for i in range(99, 99 - len(left), -1)]  # the newest stay
    orphans = small._read("SELECT COUNT(*) FROM shapes WHERE id NOT IN (SELECT shape FROM decisions)", ())
    assert orphans == [(0,)]  # no shape outlives its decisions, no filter row its shape
    assert small._read("SELECT COUNT(*) FROM shape_tags WHERE shape NOT IN (SELECT id FROM shapes)", ()) == [(0,)]


def test_two_stores_on_one_file_share_it(tmp_path):
    """Two gateways (or a restart while the old one drains) may write the same file: ids never collide."""
    a, b = HistoryStore(tmp_path / "h.sqlite3"), HistoryStore(tmp_path / "h.sqlite3")
    now = time.time()
    for i in range(5):
        a.write([to_row(record(f"a{i}", now))])
        b.write([to_row(record(f"b{i}", now, agent="writer"))])
    got, _ = a.query(HistoryFilter(limit=100, agent="writer"))
    assert [d["messageId"] for d in got] == [f"b{i}" for i in range(4, -1, -1)]
    assert a.stats()["decisions"] == 10


def test_a_recorders_frame_is_stored_once_and_each_recorder_numbers_its_own(tmp_path):
    """A frame of a recorder's own decisions commits its number with its rows: the same frame again (sent to the next
    writer after one died between its commit and its acknowledgement) is skipped; another recorder on the file (another
    worker, or the gateway restarted) numbers its frames apart; a recorder silent for a day is forgotten by the prune."""
    from mma2a.gateway.history.store import RECORDER_TTL_S

    store = HistoryStore(tmp_path / "h.sqlite3")
    now = time.time()
    first = [to_row(record(f"a{i}", now)) for i in range(3)]
    assert store.write(first, frame=(11, 1))
    size = store.stats()["bytes"]
    assert not store.write(first, frame=(11, 1))  # committed already: nothing written, nothing counted
    assert store.stats() == {"decisions": 3, "bytes": size, "path": str(store.path)}
    assert store.write([to_row(record("w0", now))], frame=(-7, 1))  # another recorder's frame 1
    assert store.write([to_row(record("a3", now))], frame=(11, 2))
    assert not store.write([to_row(record("again", now))], frame=(11, 1))  # below the last: committed before it
    got, _ = store.query(HistoryFilter(limit=100))
    assert sorted(d["messageId"] for d in got) == ["a0", "a1", "a2", "a3", "w0"]
    assert store._read("SELECT id, frame FROM recorders ORDER BY id", ()) == [(-7, 1), (11, 2)]
    store.prune(now + RECORDER_TTL_S - 60)
    assert len(store._read("SELECT id FROM recorders", ())) == 2
    store.prune(now + RECORDER_TTL_S + 60)
    assert store._read("SELECT id FROM recorders", ()) == []


def test_a_file_from_before_frame_numbers_gets_their_table_on_opening(tmp_path):
    path = tmp_path / "h.sqlite3"
    old = HistoryStore(path)
    old.write([to_row(record("kept", time.time()))])
    old._writer.execute("DROP TABLE recorders")  # as a file of session 16 had it
    old.close()
    store = HistoryStore(path)
    assert store.write([to_row(record("new", time.time()))], frame=(5, 1))
    assert not store.write([to_row(record("new", time.time()))], frame=(5, 1))
    got, _ = store.query(HistoryFilter(limit=10))
    assert [d["messageId"] for d in got] == ["new", "kept"]


def test_rows_from_a_stream_keep_their_position_and_a_full_queue_says_wait(tmp_path):
    from mma2a.gateway.history.record import rows_from_json, rows_to_json

    now = time.time()
    rows = [to_row(record(f"s{i}", now + i, features={"objects": ["cat"]})) for i in range(3)]
    assert rows_from_json(rows_to_json(rows)) == rows
    doc = orjson.loads(rows_to_json(rows))
    assert doc["shapes"] == 2 and len(doc["parts"]) == 1  # alike rows: their shape sent once
    v1 = orjson.dumps({"shapes": 1, "rows": [  # a batch of session 15's gateways (every row with its parts)
        [r.message_id, r.time, r.sender, r.outcome, r.error, r.latency_ms, orjson.Fragment(r.shape.parts_json),
         orjson.Fragment(r.detail), None] for r in rows]})
    assert rows_from_json(v1) == rows
    for bad in (b"{", b"[[1, 2]]", b'"x"', b'{"rows": [["m", 1, null, "completed", null, 1.0, {}, [], null]]}', b'{"rows": 3}',
                b'{"shapes": 2, "parts": [[]], "rows": [["m", 1, null, "completed", null, 1.0, 1, "[1]", null]]}',
                b'{"shapes": 2, "parts": [[]], "rows": [["m", 1, null, "completed", null, 1.0, 0, "[1", null]]}',
                b'{"shapes": 2, "parts": [[]], "rows": [["m", 1, null, "completed", null, 1.0, 0, [1], null]]}',
                b'{"shapes": 2, "parts": [3], "rows": []}'):
        try:
            rows_from_json(bad)
        except ValueError as exc:
            assert str(exc).startswith("not a batch of history rows")
        else:
            raise AssertionError(f"{bad!r} accepted")
    store = HistoryStore(tmp_path / "h.sqlite3")
    rec = HistoryRecorder(store, capacity=2)
    assert store.position() == 0
    assert rec.ingest(rows_to_json(rows[:2]), 7) and rec.ingest(rows_to_json(rows[2:]), 9)
    assert not rec.ingest(rows_to_json(rows), 10)  # full: the caller waits
    rec.start()
    assert rec.flush(10.0)
    assert store.position() == 9 and store.stats()["decisions"] == 3
    rec.stop()


def _sum_of_sizes(store: HistoryStore) -> int:
    return store._read("SELECT (SELECT COALESCE(SUM(size), 0) FROM decisions) + (SELECT COALESCE(SUM(size), 0) "
                       "FROM shapes)", ())[0][0]


def test_a_batch_across_statement_chunks_keeps_every_row_tag_and_count(tmp_path):
    """Rows go in by multi-row statements of 64, 32, ... rows: a batch of 203 alike and unalike decisions (1 to 5
    tags each) comes back whole, with consecutive ids, every tag row, and the rollup counting each decision once."""
    store = HistoryStore(tmp_path / "h.sqlite3")
    now = 1_800_000_000.0
    memo = ShapeMemo()
    entries = [record(f"m{i}", now + i / 1000, modality=("image/png", "audio/wav", "text/plain")[i % 3],
                      agent=f"agent{i % 7}", features={"n": i} if i % 5 == 0 else None) for i in range(203)]
    rows = [to_row(e, memo) for e in entries]
    store.write(rows)
    got, _ = store.query(HistoryFilter(limit=1000))
    assert [d["messageId"] for d in got] == [f"m{i}" for i in range(202, -1, -1)]
    assert [d["parts"] for d in reversed(got)] == [r.parts() for r in rows]
    ids = [i for (i,) in store._read("SELECT id FROM decisions ORDER BY id", ())]
    assert ids == list(range(ids[0], ids[0] + 203))
    shapes = {r.shape for r in rows}
    assert len(shapes) == 21  # 3 modalities x 7 agents, each stored once with its filter rows
    assert store._read("SELECT COUNT(*) FROM shapes", ())[0][0] == len(shapes)
    assert store._read("SELECT COUNT(*) FROM shape_tags", ())[0][0] == sum(len(s.tags) for s in shapes)
    for i in (0, 64, 128, 192, 202):  # one decision from each chunk, found by each of its tags
        for kind, value in rows[i].tags:
            key = {"m": "modality", "f": "modality", "a": "agent", "r": "rule"}[kind]
            hits, _ = store.query(HistoryFilter(limit=1000, before=ids[i] + 1, **{key: value}))
            assert hits[0]["messageId"] == f"m{i}", (i, kind, value)
    by_outcome = store.counts("outcome", now - 60, now + 60, 60)
    assert sum(p[1] for s in by_outcome for p in s["points"]) == 203
    by_agent = store.counts("agent", now - 60, now + 60, 60)
    assert sum(p[1] for s in by_agent for p in s["points"]) == 203 * 2  # each: its target and its transformer
    assert store.stats()["bytes"] == _sum_of_sizes(store)


def test_the_running_byte_total_matches_the_rows_through_writes_prunes_sharing_and_reopening(tmp_path):
    """`max_bytes` is enforced from a total kept in the same transactions as the rows, not from a SUM over the
    table: after writes from two stores on one file, pruning by age and by size, and reopening, it is still the
    sum of the rows' sizes, and a file written before the total existed gets it on opening."""
    path = tmp_path / "h.sqlite3"
    a, b = HistoryStore(path, max_age_s=3600), HistoryStore(path, max_age_s=3600)
    now = time.time()
    for i in range(20):  # the old ones first: pruning by age goes by write order
        a.write([to_row(record(f"a{i}-{j}", now - 7200 + i * 10 + j)) for j in range(3)])
    for i in range(20):
        (a if i % 2 else b).write([to_row(record(f"b{i}", now - 60 + i, features={"pad": "p" * (10 * i)}))])
    assert a.stats()["bytes"] == b.stats()["bytes"] == _sum_of_sizes(a) > 0
    assert a.prune(now) == 60  # every a-row is past the age
    assert a.stats()["bytes"] == _sum_of_sizes(a) and a.stats()["decisions"] == 20
    budget = a.stats()["bytes"] // 2
    small = HistoryStore(path, max_age_s=3600, max_bytes=budget, max_bytes_per_client=budget)  # the whole bound
    assert small.prune(now) > 0
    assert _sum_of_sizes(small) <= budget * 0.9 and small.stats()["bytes"] == _sum_of_sizes(small)
    left, _ = small.query(HistoryFilter(limit=100))
    assert left[0]["messageId"] == "b19" and left[-1]["messageId"] == f"b{20 - len(left)}"  # the newest, in a row
    assert small.prune(now) == 0  # within the budget now: nothing more goes
    for s in (a, b, small):
        s.close()
    old = HistoryStore(path)
    old._writer.execute("DELETE FROM meta WHERE key = 'bytes'")  # as a file from before the running total
    old.close()
    reopened = HistoryStore(path)
    assert reopened.stats()["bytes"] == _sum_of_sizes(reopened) > 0


def test_a_prune_reads_what_it_deletes_not_the_whole_table(tmp_path):
    """Pruning 10 decisions costs SQLite about the same work in a file of 3,000 or of 30,000 decisions: the byte
    bound comes from the running total, the cut from the span that holds it (at most a span's rows are read
    besides those deleted), and the deletes go by id (counted in virtual machine steps through SQLite's progress
    handler, not timed)."""
    def steps_to_prune(total: int) -> int:
        store = HistoryStore(tmp_path / f"h{total}.sqlite3", max_age_s=3600)
        now = time.time()
        store.write([to_row(record(f"old{i}", now - 7200 + i)) for i in range(10)])
        for start in range(0, total - 10, 500):
            store.write([to_row(record(f"new{i}", now - 60)) for i in range(start, min(total - 10, start + 500))])
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        store._writer.set_progress_handler(count, 100)
        assert store.prune(now) == 10
        store._writer.set_progress_handler(None, 0)
        assert store.stats()["decisions"] == total - 10
        return steps[0]

    small, large = steps_to_prune(3000), steps_to_prune(30_000)
    assert large < small * 2, (small, large)


def test_the_writer_writes_everything_queued_before_it_stops(tmp_path):
    """Decisions recorded just before shutdown are on disk after `stop()`: a new store on the file finds every one,
    with its tags (the writer's slices and pauses do not lose the tail of the queue)."""
    path = tmp_path / "h.sqlite3"
    rec = HistoryRecorder(HistoryStore(path), capacity=5000, batch=500)
    rec.start()
    now = time.time()
    for i in range(1234):
        rec.record(record(f"m{i}", now + i / 1e4, agent=f"agent{i % 3}"))
    rec.stop()
    store = HistoryStore(path)
    assert store.stats()["decisions"] == 1234 and store.stats()["bytes"] == _sum_of_sizes(store)
    got, _ = store.query(HistoryFilter(limit=1000, agent="agent1"))
    assert len(got) == 411 and got[0]["messageId"] == "m1231"


def test_a_tag_filter_over_hundreds_of_shapes_and_several_spans_agrees_with_a_plain_filter(tmp_path):
    """A filter's spans are read newest first, each row's shape tested against the filter's tags: over 276 shapes
    (distinct modalities) and several spans, the answers are what a plain filter over every decision answers,
    page after page."""
    store = HistoryStore(tmp_path / "h.sqlite3")
    now = 1_800_000_000.0
    many = 276  # distinct modalities: as many shapes, all routed to `writer`
    entries = [record(f"m{i}", now + i, modality=f"text/x-k{i % many}", agent="writer" if i % 3 else "vision",
                      outcome="TASK_STATE_FAILED" if i % 4 == 0 else "TASK_STATE_COMPLETED") for i in range(5 * many)]
    for start in range(0, len(entries), 200):  # 1,380 decisions in batches: two spans
        store.write([to_row(e, ShapeMemo()) for e in entries[start:start + 200]])
    assert store._read("SELECT COUNT(*) FROM spans", ()) == [(2,)]

    def pages(f: HistoryFilter) -> list[str]:
        out, cursor = [], None
        while True:
            got, cursor = store.query(HistoryFilter(**{**f.__dict__, "before": int(cursor) if cursor else None}))
            out += [d["messageId"] for d in got]
            if cursor is None:
                return out

    wanted = {  # filter -> the decisions it must find, newest first
        HistoryFilter(agent="writer", limit=50): [e for e in entries if e.routes[0].targets[0].agent == "writer"],
        HistoryFilter(agent="vision", limit=30): [e for e in entries if e.routes[0].targets[0].agent == "vision"],
        HistoryFilter(agent="writer", outcome="failed", limit=7):
            [e for e in entries if e.routes[0].targets[0].agent == "writer" and e.outcome == "TASK_STATE_FAILED"],
        HistoryFilter(modality="text/x-k5", limit=2): [e for e in entries if e.parts[0].modality == "text/x-k5"],
        HistoryFilter(modality="text/*", rule="r1", since=now + 100, limit=64): [e for e in entries if e.time >= now + 100],
        HistoryFilter(agent="nobody"): [],
    }
    for f, expected in wanted.items():
        assert pages(f) == [e.message_id for e in reversed(expected)], f


def test_a_file_from_before_shapes_is_brought_to_them_on_opening(tmp_path):
    """A history file written before shapes (whole parts JSON in every row, a filter row per decision and tag) is
    converted when opened: every decision keeps its id, time and parts, the filters find it, the byte total is the
    sum of the sizes; a stream batch of that time is still read."""
    import sqlite3

    from mma2a.gateway.history.record import rows_from_json

    path = tmp_path / "h.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript("""
CREATE TABLE decisions (id INTEGER PRIMARY KEY, message_id TEXT NOT NULL, ts REAL NOT NULL, sender TEXT,
  outcome TEXT NOT NULL, error TEXT, latency_ms REAL NOT NULL, parts BLOB NOT NULL, receivers BLOB, size INTEGER NOT NULL);
CREATE INDEX decisions_ts ON decisions(ts);
CREATE INDEX decisions_sender ON decisions(sender, id);
CREATE INDEX decisions_outcome ON decisions(outcome, id);
CREATE TABLE tags (kind TEXT NOT NULL, value TEXT NOT NULL, decision_id INTEGER NOT NULL, ts REAL NOT NULL,
  latency_ms REAL NOT NULL, PRIMARY KEY (kind, value, decision_id)) WITHOUT ROWID;
CREATE INDEX tags_decision ON tags(decision_id);
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO meta (key, value) VALUES ('bytes', 999), ('stream_position', 41);
CREATE TABLE minutes (kind TEXT NOT NULL, value TEXT NOT NULL, minute INTEGER NOT NULL, n INTEGER NOT NULL,
  latency_sum REAL NOT NULL, latency_max REAL NOT NULL, PRIMARY KEY (kind, minute, value)) WITHOUT ROWID;
""")
    now = 1_800_000_000.0
    old_parts = []
    for i in range(40):
        parts = [{"index": 0, "modality": ("image/png", "audio/wav")[i % 2], "kind": "raw", "size": 100 + i,
                  "features": {"width": i} if i % 3 == 0 else {}, "targets": [f"agent{i % 4}"], "matched": ["r1"] if i % 5 == 0 else [],
                  "transforms": [], "dropped": None, "bottleneck": False}]
        old_parts.append(parts)
        db.execute("INSERT INTO decisions VALUES (?, ?, ?, ?, ?, NULL, 1.5, ?, ?, 10)",
                   (i + 7, f"m{i}", now + i, "client-a", "completed", orjson.dumps(parts), b'["x"]' if i == 3 else None))
    db.close()
    store = HistoryStore(path)
    got, _ = store.query(HistoryFilter(limit=100))
    assert [d["messageId"] for d in got] == [f"m{i}" for i in range(39, -1, -1)]
    assert [d["parts"] for d in reversed(got)] == old_parts and got[-4]["receivers"] == ["x"]
    assert [i for (i,) in store._read("SELECT id FROM decisions ORDER BY id", ())] == list(range(7, 47))
    assert store._read("SELECT COUNT(*) FROM shapes", ())[0][0] == 8  # 4 (modality, agent) pairs, with and without r1
    hits, _ = store.query(HistoryFilter(modality="image/*", agent="agent2", limit=100))
    assert [d["messageId"] for d in hits] == [f"m{i}" for i in range(39, -1, -1) if i % 4 == 2 and i % 2 == 0]
    assert [d["messageId"] for d in store.query(HistoryFilter(rule="r1"))[0]] == [f"m{i}" for i in (35, 30, 25, 20, 15, 10, 5, 0)]
    assert store.stats()["bytes"] == _sum_of_sizes(store) and store.position() == 41
    assert store.prune(now + 10_000_000) == 40 and store._read("SELECT COUNT(*) FROM shapes", ()) == [(0,)]
    store.close()
    old_batch = orjson.dumps([["s1", now, None, "completed", None, 2.0, old_parts[3], ["x"], [["m", "audio/wav"]]]])
    (row,) = rows_from_json(old_batch)
    assert row.parts() == old_parts[3] and row.receivers_json == b'["x"]' and ("a", "agent3") in row.tags


def test_a_file_whose_shapes_have_no_digest_gets_them_on_opening(tmp_path):
    """Shapes were first looked up by their JSON: such a file is rebuilt with digests when opened, and its decisions
    are found, written to and pruned as any other's."""
    path = tmp_path / "h.sqlite3"
    store = HistoryStore(path)
    now = time.time()
    store.write([to_row(record(f"m{i}", now - 7200 + i, agent=f"agent{i % 3}")) for i in range(6)])
    db = store._writer
    db.executescript("""
BEGIN;
CREATE TABLE early (id INTEGER PRIMARY KEY, parts BLOB NOT NULL UNIQUE, size INTEGER NOT NULL);
INSERT INTO early SELECT id, parts, size FROM shapes;
DROP TABLE shapes;
ALTER TABLE early RENAME TO shapes;
CREATE INDEX shape_tags_shape ON shape_tags(shape);
COMMIT;
""")
    store.close()
    store = HistoryStore(path, max_age_s=3600)
    assert "digest" in {r[1] for r in store._read("PRAGMA table_info(shapes)", ())}
    # shapes from before are everyone's (no sender): a decision without a sender finds its own among them
    store.write([to_row(record("new", now, agent="agent1"))._replace(sender=None)])
    assert store._read("SELECT COUNT(*) FROM shapes", ()) == [(3,)]  # the new decision found its shape
    got, _ = store.query(HistoryFilter(agent="agent1"))
    assert [d["messageId"] for d in got] == ["new", "m4", "m1"]
    assert store.prune(now) == 6 and store._read("SELECT COUNT(*) FROM shape_tags", ())[0][0] == len(
        to_row(record("new", now, agent="agent1")).tags)
    assert store.stats()["bytes"] == _sum_of_sizes(store)


def test_a_file_from_before_spans_is_brought_to_them_on_opening(tmp_path):
    """A file of session 6 (four indexes over the decisions, no spans, shapes without their newest decision) is
    converted when opened: the indexes go, its decisions are noted in spans, and every filter, the next page and
    pruning by age find what they found before."""
    path = tmp_path / "h.sqlite3"
    store = HistoryStore(path, max_age_s=3600)
    now = time.time()
    entries = [record(f"m{i}", now - 7200 + i if i < 1500 else now - 60 + i / 100, agent=f"agent{i % 3}",
                      outcome="TASK_STATE_FAILED" if i % 5 == 0 else "TASK_STATE_COMPLETED") for i in range(2500)]
    for start in range(0, 2500, 500):
        store.write([to_row(e) for e in entries[start:start + 500]])
    store._writer.executescript("""
BEGIN;
DROP TABLE spans;
DROP TABLE span_keys;
DROP INDEX shapes_last;
ALTER TABLE shapes DROP COLUMN last_id;
CREATE INDEX decisions_ts ON decisions(ts);
CREATE INDEX decisions_sender ON decisions(sender, id);
CREATE INDEX decisions_outcome ON decisions(outcome, id);
CREATE INDEX decisions_shape ON decisions(shape, id);
COMMIT;
""")
    store.close()
    store = HistoryStore(path, max_age_s=3600)
    indexes = {name for (name,) in store._read("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'decisions'", ())}
    assert not indexes
    assert store._read("SELECT first_id, last_id, n FROM spans ORDER BY first_id", ()) == [(1, 1024, 1024), (1025, 2048, 1024),
                                                                                        (2049, 2500, 452)]
    failed, cursor = store.query(HistoryFilter(agent="agent1", outcome="failed", limit=50))
    expected = [e.message_id for e in reversed(entries) if e.message_id.endswith(("0", "5")) and int(e.message_id[1:]) % 3 == 1]
    assert [d["messageId"] for d in failed] == expected[:50]
    rest, _ = store.query(HistoryFilter(agent="agent1", outcome="failed", limit=1000, before=int(cursor or 0)))
    assert [d["messageId"] for d in rest] == expected[50:]
    recent, _ = store.query(HistoryFilter(since=now - 120, sender="client-a", limit=2000))
    assert len(recent) == 1000
    store.write([to_row(record("new", now, agent="agent0"))])
    assert store.prune(now) == 1500
    assert store._read("SELECT COUNT(*) FROM shapes", ()) == [(3,)]
    assert store._read("SELECT MIN(first_id) FROM spans", ()) == [(1025,)]
    assert store.stats()["bytes"] == _sum_of_sizes(store)
    assert store.prune(now + 7200) == 1001  # all: no shape, span or key outlives its decisions
    for table in ("shapes", "shape_tags", "spans", "span_keys", "decisions"):
        assert store._read(f"SELECT COUNT(*) FROM {table}", ()) == [(0,)], table
    assert store.stats()["bytes"] == 0


def test_flows_count_parts_per_modality_and_target_with_how_they_got_there(tmp_path):
    """The console's route map: parts per (modality, target) from the decisions' shapes, in the span only, the newest
    `limit` of it; transforms name their transformers, drops and refusals are flows of their own."""
    store = HistoryStore(tmp_path / "h.sqlite3")
    now = 1_800_000_000.0
    native = PartRoute(0, "image/png", (), (Target("vision"),), ("capability",))
    dropped = PartRoute(0, "image/png", ("no-blur",), (), ("drop",), dropped="blurred")
    entries = [record(f"t{i}", now + i, "audio/wav", "writer") for i in range(3)]  # through asr, 1 failed
    entries[0] = entries[0]._replace(outcome="TASK_STATE_FAILED")
    entries += [DecisionRecord(f"n{i}", now + 10 + i, None, (PartSummary(0, "image/png"),), (native,),
                               "TASK_STATE_COMPLETED", 0.01) for i in range(2)]
    entries += [DecisionRecord("d", now + 20, None, (PartSummary(0, "image/png"),), (dropped,), "TASK_STATE_COMPLETED", 0.01),
                DecisionRecord("r", now + 21, None, (PartSummary(0, "model/obj"),), (), "refused -32005: nobody", 0.01),
                DecisionRecord("old", now - 7200, None, (PartSummary(0, "image/png"),), (native,), "TASK_STATE_COMPLETED", 0.01)]
    store.write([to_row(e) for e in entries])
    got = store.flows(now - 60, now + 60)
    assert got["decisions"] == 7 and got["truncated"] is False
    assert got["flows"] == [
        {"modality": "audio/wav", "target": "writer", "kind": "transform", "via": ["asr"], "parts": 3, "failed": 1},
        {"modality": "image/png", "target": "vision", "kind": "native", "via": [], "parts": 2, "failed": 0},
        {"modality": "image/png", "target": "(dropped)", "kind": "dropped", "via": [], "parts": 1, "failed": 0},
        {"modality": "model/obj", "target": "(refused)", "kind": "refused", "via": [], "parts": 1, "failed": 1}]
    newest = store.flows(now - 60, now + 60, limit=2)  # the newest two: the drop and the refusal
    assert newest["truncated"] is True and newest["decisions"] == 2
    assert {f["target"] for f in newest["flows"]} == {"(dropped)", "(refused)"}
    assert store.flows(now + 1000, now + 2000) == {"decisions": 0, "truncated": False, "flows": []}


def test_one_clients_decisions_past_its_share_evict_only_its_own(tmp_path):
    """`max_bytes_per_client`: mallory's flood (far past her quarter of `max_bytes`) loses her own oldest decisions,
    never alice's, nor those without a client (auth off: everyone's, held to `max_bytes` alone); each sender's
    running total stays the sum of its rows, and a file from before the shares gets its totals on opening."""
    path = tmp_path / "h.sqlite3"
    store = HistoryStore(path, max_age_s=3600, max_bytes=400_000)
    assert store.max_bytes_per_client == 100_000
    now = time.time()
    store.write([to_row(record(f"alice{i}", now - 100 + i)._replace(sender="alice")) for i in range(20)])
    store.write([to_row(record(f"anon{i}", now - 90 + i)._replace(sender=None)) for i in range(5)])
    pad = {"pad": "m" * 150}
    for batch in range(10):
        store.write([to_row(record(f"mallory{batch}-{i}", now - 50 + batch, features=pad)._replace(sender="mallory"))
                     for i in range(100)])
    held = dict(store._writer.execute("SELECT sender, bytes FROM senders"))
    assert held["mallory"] > 100_000 and held == _sizes_by_sender(store)
    assert store.prune(now) > 0
    after = _sizes_by_sender(store)
    assert 0 < after["mallory"] <= 90_000 and after["alice"] == held["alice"]
    held = after
    assert dict(store._writer.execute("SELECT sender, bytes FROM senders")) == held
    assert store.stats()["bytes"] == _sum_of_sizes(store)
    alice, _ = store.query(HistoryFilter(sender="alice", limit=100))
    assert len(alice) == 20  # every one of hers kept
    mine, _ = store.query(HistoryFilter(sender="mallory", limit=1000))
    assert mine[0]["messageId"] == "mallory9-99"  # her newest kept, her oldest gone
    assert len([d for d, in store._writer.execute("SELECT message_id FROM decisions WHERE sender IS NULL")]) == 5
    store._writer.execute("DROP TABLE senders")  # as a file from before the shares
    store.close()
    reopened = HistoryStore(path, max_age_s=3600, max_bytes=400_000)
    assert dict(reopened._writer.execute("SELECT sender, bytes FROM senders")) == _sizes_by_sender(reopened)


def _sizes_by_sender(store):
    """Each sender's decisions and shapes (a shape is its sender's: S17-1)."""
    return dict(store._writer.execute("SELECT sender, SUM(size) FROM (SELECT sender, size FROM decisions UNION ALL "
                                      "SELECT sender, size FROM shapes) WHERE sender IS NOT NULL GROUP BY sender"))


def test_a_share_larger_than_the_whole_is_refused_naming_both():
    import pytest
    from pydantic import ValidationError

    from mma2a.gateway.history import HistoryConfig

    with pytest.raises(ValidationError, match=r"max_bytes_per_client \(2000\) must not be more than max_bytes \(1000\)"):
        HistoryConfig(max_bytes=1000, max_bytes_per_client=2000)
    assert HistoryConfig(max_bytes=1000, max_bytes_per_client=1000).max_bytes_per_client == 1000
