"""The SQLite decision store: one row per decision, retention by age and size, and shapes: what alike decisions
share (their parts' routes as JSON, with the filter tags those imply) stored once and referenced by id.

A decision's row is its table's only B-tree entry: no index is kept per decision. What queries
need to skip rows is kept per *span* instead (about `SPAN_ROWS` consecutive decisions, one or a
few of the writer's batches): its id range, its time range, and its keys — the filter tags of its
shapes, its senders and its outcomes. A query walks the spans that may hold a match, newest
first, and reads only their rows (a range of ids); a shape keeps the id of its newest decision,
so pruning knows when a shape goes, and is counted there. A shape is its sender's (decisions of two
clients never share one), so a client's shapes count in its share and go with its decisions.

The file is opened in WAL mode, so queries read while the writer thread commits. Writes
come in batches (one transaction, multi-row statements); queries page by keyset (`id < cursor`),
newest first. Every method blocks: callers on the event loop use `asyncio.to_thread`.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from .record import Row, Shape, base_modality, merge_parts, shape_tags, split_parts

SCHEMA = """
CREATE TABLE IF NOT EXISTS shapes (
  id INTEGER PRIMARY KEY, digest INTEGER NOT NULL, parts BLOB NOT NULL, size INTEGER NOT NULL,
  last_id INTEGER NOT NULL DEFAULT 0, sender TEXT);
CREATE INDEX IF NOT EXISTS shapes_digest ON shapes(digest);
CREATE INDEX IF NOT EXISTS shapes_last ON shapes(last_id);
CREATE TABLE IF NOT EXISTS shape_tags (
  kind TEXT NOT NULL, value TEXT NOT NULL, shape INTEGER NOT NULL, PRIMARY KEY (kind, value, shape)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS decisions (
  id INTEGER PRIMARY KEY, message_id TEXT NOT NULL, ts REAL NOT NULL, sender TEXT, outcome TEXT NOT NULL,
  error TEXT, latency_ms REAL NOT NULL, shape INTEGER NOT NULL, detail BLOB NOT NULL, receivers BLOB,
  size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS spans (
  first_id INTEGER PRIMARY KEY, last_id INTEGER NOT NULL, ts_min REAL NOT NULL, ts_max REAL NOT NULL, n INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS spans_ts ON spans(ts_min);
CREATE TABLE IF NOT EXISTS span_keys (
  span INTEGER NOT NULL, kind TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (span, kind, value)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) SELECT 'bytes',
  (SELECT COALESCE(SUM(size), 0) FROM decisions) + (SELECT COALESCE(SUM(size), 0) FROM shapes);
CREATE TABLE IF NOT EXISTS senders (sender TEXT PRIMARY KEY, bytes INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS recorders (id INTEGER PRIMARY KEY, frame INTEGER NOT NULL, ts REAL NOT NULL);
CREATE TABLE IF NOT EXISTS minutes (
  kind TEXT NOT NULL, value TEXT NOT NULL, minute INTEGER NOT NULL, n INTEGER NOT NULL, latency_sum REAL NOT NULL,
  latency_max REAL NOT NULL, PRIMARY KEY (kind, minute, value)) WITHOUT ROWID;
"""
OLD_INDEXES = ("decisions_ts", "decisions_sender", "decisions_outcome", "decisions_shape")  # one per decision, before spans

FLOW_DECISIONS = 100_000  # the route map reads at most this many decisions, the newest of its span
FLOW_SHAPE_BYTES = 8 << 20  # ... and at most this much of their shapes' JSON, the shapes of most decisions first
PAGE_BYTES = 4 << 20  # a page of decisions holds at most about this much of their parts' JSON (at least one decision)
BUSY_TIMEOUT_MS = 10_000  # how long a connection waits for another's write lock
TAG_KINDS = {"modality": "m", "agent": "a", "rule": "r"}
COUNT_KINDS = {"modality": "m", "agent": "a", "outcome": "o"}
ROW_OVERHEAD = 64  # bytes counted per decision (and per shape) besides its JSON (ids, time, indexes)
TAG_BYTES = 40  # per filter row of a shape
SPAN_ROWS = 1024  # a batch extends the newest span while that holds fewer decisions than this
RECORDER_TTL_S = 24 * 3600
"""A recorder's last committed frame (`recorders`) is kept this long after its last commit: a frame is sent again
within seconds of its writer's death (the next starts within 30 s), and a recorder lives as long as its gateway process
(a restart, or another worker, numbers its frames under another id)."""
_COLUMNS = "d.id, d.message_id, d.ts, d.sender, d.outcome, d.error, d.latency_ms, d.shape, d.detail, d.receivers"


@dataclass(frozen=True)
class HistoryFilter:
    """A validated query: every field optional; `before` is the keyset cursor (a decision id)."""

    since: float | None = None
    until: float | None = None
    modality: str | None = None  # exact (`image/png`) or a family (`image/*`)
    agent: str | None = None
    rule: str | None = None
    sender: str | None = None
    outcome: str | None = None
    limit: int = 100
    before: int | None = None

    def tag_filters(self) -> list[tuple[str, str]]:
        """(kind, value) pairs for the tag table; a modality family (`image/*`) has its own kind."""
        pairs = [(k, v) for k in ("modality", "agent", "rule") if (v := getattr(self, k)) is not None]
        return [("f" if k == "modality" and v.endswith("/*") else TAG_KINDS[k], v) for k, v in pairs]


def row_bytes(r: Row) -> int:
    """What one decision counts against `max_bytes`: its own JSON, its id, and a share for columns and indexes
    (its shape is counted once, when first stored: `shape_bytes`)."""
    return len(r.detail) + len(r.message_id) + (len(r.receivers_json) if r.receivers_json else 0) + ROW_OVERHEAD


def shape_bytes(shape: Shape) -> int:
    return len(shape.parts_json) + ROW_OVERHEAD + TAG_BYTES * len(shape.tags)


_INSERT_DECISIONS = ("INSERT INTO decisions (id, message_id, ts, sender, outcome, error, latency_ms, shape, detail, "
                     "receivers, size)")
_INSERT_SHAPES = "INSERT INTO shapes (id, digest, parts, size, sender)"
_INSERT_SHAPE_TAGS = "INSERT OR IGNORE INTO shape_tags (kind, value, shape)"
_INSERT_SPAN_KEYS = "INSERT OR IGNORE INTO span_keys (span, kind, value)"
_INSERT_MINUTES = "INSERT INTO minutes (kind, value, minute, n, latency_sum, latency_max)"
_ON_MINUTE = ("ON CONFLICT (kind, minute, value) DO UPDATE SET n = n + excluded.n, "
              "latency_sum = latency_sum + excluded.latency_sum, latency_max = MAX(latency_max, excluded.latency_max)")
_INSERT_SENDERS = "INSERT INTO senders (sender, bytes)"
_ON_SENDER = "ON CONFLICT (sender) DO UPDATE SET bytes = bytes + excluded.bytes"
_CHUNK = 64  # rows per INSERT statement, at most
_SQL: dict[tuple[str, int], str] = {}


def _insert(db: sqlite3.Connection, head: str, width: int, values: Sequence[Any], tail: str = "") -> None:
    """Insert flattened rows (`width` values each) by multi-row `VALUES` statements of 64, 32, ..., 1 rows.

    One statement per chunk, not one per row: Python's sqlite3 releases the GIL around every
    step, and under load each release is a hand-off to the event loop's thread and back.
    Chunks are powers of two, so a handful of prepared statements (cached by the connection)
    serve every batch.
    """
    n, i = len(values) // width, 0
    while i < n:
        k = min(_CHUNK, 1 << ((n - i).bit_length() - 1))
        sql = _SQL.get((head, k))
        if sql is None:
            row = "(" + ", ".join("?" * width) + ")"
            sql = _SQL.setdefault((head, k), f"{head} VALUES {', '.join([row] * k)} {tail}")
        db.execute(sql, values[i * width:(i + k) * width])
        i += k


def _insert_rows(db: sqlite3.Connection, rows: Sequence[Row], ids: Sequence[int]) -> tuple[int, dict[int, Shape]]:
    """Insert decisions with the given ids inside the caller's transaction, their shapes first if new; returns
    the bytes they add to the running total and the batch's shapes by id.

    A shape is its sender's (decisions without a sender share theirs): its bytes count in its sender's share, and
    it goes with its sender's decisions when they are pruned, so a client's decisions of new shapes each (parts of
    media types of its choosing: ~45 KB a decision of 64 parts, its row ~200 B) count against its own share, never
    the whole file's alone (docs/security.md S17-1).

    Shape ids are looked up afresh in every transaction, never remembered across them (another
    writer on the file may have pruned a shape since): the batch's distinct shapes are read by
    multi-row `IN` lookups, and the new ones inserted with their filter rows by multi-row
    statements, so a batch of unalike decisions costs a few statements, not a few per decision."""
    distinct: dict[tuple[str | None, bytes], Shape] = {}
    for r in rows:
        distinct.setdefault((r.sender, r.shape.parts_json), r.shape)
    keys = list(distinct)
    digests = [shape_digest(parts, sender) for sender, parts in keys]
    shape_ids: dict[tuple[str | None, bytes], int] = {}
    for start in range(0, len(keys), _CHUNK):
        chunk = digests[start:start + _CHUNK]
        shape_ids.update(((sender, parts), sid) for sid, parts, sender in db.execute(
            f"SELECT id, parts, sender FROM shapes WHERE digest IN ({', '.join('?' * len(chunk))})", chunk)
            if (sender, parts) in distinct)
    added = 0
    by_sender: dict[str, int] = {}
    new = [(k, d) for k, d in zip(keys, digests, strict=True) if k not in shape_ids]
    if new:
        first = db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM shapes").fetchone()[0]
        values: list[Any] = []
        tags: list[Any] = []
        for sid, (key, digest) in enumerate(new, first):
            size = shape_bytes(distinct[key])
            added += size
            if key[0] is not None:
                by_sender[key[0]] = by_sender.get(key[0], 0) + size
            shape_ids[key] = sid
            values += (sid, digest, key[1], size, key[0])
            tags += [x for kind, value in distinct[key].tags for x in (kind, value, sid)]
        _insert(db, _INSERT_SHAPES, 5, values)
        _insert(db, _INSERT_SHAPE_TAGS, 3, tags)
    for start in range(0, len(rows), _CHUNK):  # flattened a chunk at a time, between the inserts
        values = []
        for i, (mid, ts, sender, outcome, error, latency, shape, detail, receivers) in zip(
                ids[start:start + _CHUNK], rows[start:start + _CHUNK], strict=True):
            size = len(detail) + len(mid) + (len(receivers) if receivers else 0) + ROW_OVERHEAD
            added += size
            if sender is not None:
                by_sender[sender] = by_sender.get(sender, 0) + size
            values += (i, mid, ts, sender, outcome, error, latency, shape_ids[(sender, shape.parts_json)], detail,
                       receivers, size)
        _insert(db, _INSERT_DECISIONS, 11, values)
    _insert(db, _INSERT_SENDERS, 2, [x for item in by_sender.items() for x in item], _ON_SENDER)
    return added, {shape_ids[k]: s for k, s in distinct.items()}


def _note_batch(db: sqlite3.Connection, first: int, last: int, shapes: dict[int, Shape]) -> None:
    """After decisions `first`..`last` went in (inside the caller's transaction): each shape's newest decision, the
    per-minute rollup (decisions, latency sum and max per modality, agent and outcome) and the span. SQLite groups
    the batch's rows (by shape, outcome and minute: a few groups), so Python reads a handful of rows, not each
    decision, and the grouping runs with the GIL released."""
    groups = db.execute(
        "SELECT shape, outcome, CAST(ts / 60 AS INTEGER), COUNT(*), SUM(latency_ms), MAX(latency_ms), MIN(ts), MAX(ts), "
        "MAX(id) FROM decisions WHERE id BETWEEN ? AND ? GROUP BY 1, 2, 3", (first, last)).fetchall()
    keys: set[tuple[str, str]] = {("s", s) for (s,) in db.execute(
        "SELECT DISTINCT sender FROM decisions WHERE id BETWEEN ? AND ? AND sender IS NOT NULL", (first, last))}
    newest: dict[int, int] = {}
    agg: dict[tuple[str, str, int], list[Any]] = {}
    for shape, outcome, minute, n, total, peak, _, _, top in groups:
        newest[shape] = max(top, newest.get(shape, 0))
        tags = shapes[shape].tags
        keys.update(tags)
        keys.add(("o", outcome))
        for kind, value in (*[t for t in tags if t[0] in ("m", "a")], ("o", outcome)):
            cur = agg.get((kind, value, minute))
            if cur is None:
                agg[(kind, value, minute)] = [n, total, peak]
            else:
                cur[0] += n
                cur[1] += total
                cur[2] = max(cur[2], peak)
    db.executemany("UPDATE shapes SET last_id = MAX(last_id, ?) WHERE id = ?", [(i, sid) for sid, i in newest.items()])
    _insert(db, _INSERT_MINUTES, 6, [x for (kind, value, minute), (n, total, peak) in agg.items()
                                     for x in (kind, value, minute, n, total, peak)], _ON_MINUTE)
    _add_span(db, first, last, min(g[6] for g in groups), max(g[7] for g in groups), last - first + 1, keys)


def _add_span(db: sqlite3.Connection, first: int, last: int, ts_min: float, ts_max: float, n: int,
              keys: set[tuple[str, str]]) -> None:
    """Note decisions `first`..`last` (inside the caller's transaction): the newest span grows to hold them while it
    has fewer than `SPAN_ROWS` and ends just before `first`; otherwise they start a span of their own."""
    span = db.execute("SELECT first_id, last_id, n FROM spans ORDER BY first_id DESC LIMIT 1").fetchone()
    if span is not None and span[1] == first - 1 and span[2] < SPAN_ROWS:
        db.execute("UPDATE spans SET last_id = ?, ts_min = MIN(ts_min, ?), ts_max = MAX(ts_max, ?), n = n + ? "
                   "WHERE first_id = ?", (last, ts_min, ts_max, n, span[0]))
        first = span[0]
    else:
        db.execute("INSERT INTO spans (first_id, last_id, ts_min, ts_max, n) VALUES (?, ?, ?, ?, ?)",
                   (first, last, ts_min, ts_max, n))
    _insert(db, _INSERT_SPAN_KEYS, 3, [x for kind, value in keys for x in (first, kind, value)])


def shape_digest(parts_json: bytes, sender: str | None = None) -> int:
    """What shapes are looked up by: 8 bytes of BLAKE2b of the JSON and its sender (an index of those, not of the
    JSON; equal JSON and sender confirm). A shape without a sender's is the JSON's alone, as before shapes had one."""
    data = parts_json if sender is None else sender.encode("utf-8", "surrogatepass") + b"\x00" + parts_json
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big", signed=True)


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def iso_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class HistoryStore:
    """One SQLite file. `write` belongs to one thread (the recorder's); queries may come from any thread."""

    def __init__(self, path: str | Path, *, max_age_s: float = 7 * 24 * 3600, max_bytes: int = 256 * 1024 * 1024,
                 max_bytes_per_client: int | None = None) -> None:
        """`max_bytes_per_client`: what one sender's decisions may count of `max_bytes` (default a quarter; decisions
        without a sender, of a gateway without authentication, are everyone's: the whole)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.max_age_s, self.max_bytes = max_age_s, max_bytes
        self.max_bytes_per_client = max_bytes_per_client if max_bytes_per_client is not None else max_bytes // 4
        self._writer = self._connect()
        self.path.chmod(0o600)  # who sent what, where it went, ratings' comments: this user's alone (SQLite gives its
        # -wal and -shm files the database file's mode)
        self._writer.execute("PRAGMA auto_vacuum=INCREMENTAL")  # only takes on a new file; lets prune give space back
        self._writer.execute("PRAGMA journal_mode=WAL")
        self._open_schema()
        self._reader = self._connect()
        self._reader.execute("PRAGMA query_only=ON")
        self._read_lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        return conn

    def _open_schema(self) -> None:
        """Create the tables, or bring an older file to them in one transaction: from before shapes (whole parts
        JSON in every row, a filter row per decision and tag), or from before spans (four indexes over the
        decisions); its decisions keep their ids, times and contents."""
        db = self._writer
        db.execute("BEGIN IMMEDIATE")
        try:
            had_spans = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'spans'").fetchone() is not None
            had_senders = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'senders'").fetchone() is not None
            if "parts" in {row[1] for row in db.execute("PRAGMA table_info(decisions)")}:
                for index in ("decisions_ts", "decisions_sender", "decisions_outcome", "tags_decision"):
                    db.execute(f"DROP INDEX IF EXISTS {index}")
                db.execute("ALTER TABLE decisions RENAME TO decisions_v1")
                db.execute("DROP TABLE IF EXISTS tags")
                db.execute("DELETE FROM meta WHERE key = 'bytes'")  # recounted below, shapes once
                for statement in _statements(SCHEMA):
                    db.execute(statement)
                old = db.execute("SELECT id, message_id, ts, sender, outcome, error, latency_ms, parts, receivers "
                                 "FROM decisions_v1 ORDER BY id")
                while batch := old.fetchmany(1000):
                    rows = [Row(mid, ts, sender, outcome, error, latency, *split_parts(orjson.loads(parts)), receivers)
                            for _, mid, ts, sender, outcome, error, latency, parts, receivers in batch]
                    _insert_rows(db, rows, [b[0] for b in batch])  # spans and newest decisions: `_add_spans`
                db.execute("DROP TABLE decisions_v1")
                db.execute("UPDATE meta SET value = (SELECT COALESCE(SUM(size), 0) FROM decisions) + "
                           "(SELECT COALESCE(SUM(size), 0) FROM shapes) WHERE key = 'bytes'")
            else:
                columns = {r[1] for r in db.execute("PRAGMA table_info(shapes)")}
                if columns and "digest" not in columns:
                    self._add_digests()
                elif columns and "last_id" not in columns:
                    db.execute("ALTER TABLE shapes ADD COLUMN last_id INTEGER NOT NULL DEFAULT 0")
                if columns and "sender" not in {r[1] for r in db.execute("PRAGMA table_info(shapes)")}:
                    # a file from before shapes were their senders': its shapes stay everyone's (no sender), go
                    # with the oldest-first prune as before, and count in no share; new ones are their sender's
                    db.execute("ALTER TABLE shapes ADD COLUMN sender TEXT")
                for statement in _statements(SCHEMA):
                    db.execute(statement)
            if not had_spans:
                self._add_spans()
            if not had_senders:  # a file from before per-client shares: each sender's bytes counted once
                db.execute("DELETE FROM senders")
                db.execute("INSERT INTO senders (sender, bytes) SELECT sender, SUM(size) FROM (SELECT sender, size "
                           "FROM decisions UNION ALL SELECT sender, size FROM shapes) WHERE sender IS NOT NULL "
                           "GROUP BY sender")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _add_digests(self) -> None:
        """A file from the first days of shapes (looked up by their JSON, filter rows indexed by shape): shapes
        rebuilt with their digests, the old indexes dropped (inside `_open_schema`'s transaction)."""
        db = self._writer
        db.create_function("shape_digest", 1, shape_digest, deterministic=True)
        db.execute("DROP INDEX IF EXISTS shape_tags_shape")
        db.execute("ALTER TABLE shapes RENAME TO shapes_old")
        db.execute(_statements(SCHEMA)[0])
        db.execute("INSERT INTO shapes (id, digest, parts, size, last_id) SELECT id, shape_digest(parts), parts, size, "
                   "(SELECT COALESCE(MAX(d.id), 0) FROM decisions d WHERE d.shape = shapes_old.id) FROM shapes_old")
        db.execute("DROP TABLE shapes_old")

    def _add_spans(self) -> None:
        """A file from before spans: its decisions noted in spans of `SPAN_ROWS`, each shape's newest decision on
        it, the per-decision indexes dropped (inside `_open_schema`'s transaction)."""
        db = self._writer
        for index in OLD_INDEXES:
            db.execute(f"DROP INDEX IF EXISTS {index}")
        tags: dict[int, list[tuple[str, str]]] = {}
        for kind, value, shape in db.execute("SELECT kind, value, shape FROM shape_tags"):
            tags.setdefault(shape, []).append((kind, value))
        newest: dict[int, int] = {}
        old = db.execute("SELECT id, ts, sender, outcome, shape FROM decisions ORDER BY id")
        while batch := old.fetchmany(SPAN_ROWS):
            keys: set[tuple[str, str]] = set()
            for i, _, sender, outcome, shape in batch:
                newest[shape] = i
                keys.add(("o", outcome))
                if sender is not None:
                    keys.add(("s", sender))
            for shape in {b[4] for b in batch}:
                keys.update(tags.get(shape, ()))
            times = [b[1] for b in batch]
            _add_span(db, batch[0][0], batch[-1][0], min(times), max(times), len(batch), keys)
        db.executemany("UPDATE shapes SET last_id = ? WHERE id = ?", [(i, sid) for sid, i in newest.items()])

    def close(self) -> None:
        self._writer.close()
        with self._read_lock:
            self._reader.close()

    # --- writing ---------------------------------------------------------------------------
    def defer_checkpoints(self) -> None:
        """Commits no longer copy the WAL into the file (and fsync it) now and then: `checkpoint()` does, called by
        whoever may wait for the disk (the recorder's thread), not by the event loop that commits."""
        self._writer.execute("PRAGMA wal_autocheckpoint=0")

    def checkpoint(self) -> None:
        """Copy what the WAL holds into the file, without waiting for readers (SQLite's PASSIVE checkpoint)."""
        self._writer.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def write(self, rows: Sequence[Row], position: int | None = None, *, wait: bool = True,
              frame: tuple[int, int] | None = None) -> bool:
        """Insert a batch in one transaction (ids assigned under the write lock, so several processes may share a file);
        False when `frame` says it is already in the file (nothing written).

        Rows and the per-minute rollup go in by multi-row statements (`_insert`), a shape not
        stored yet (with its filter rows) before the first row that has it; the batch's ids, times
        and keys go to its span, and the bytes it adds to the running total in `meta`, all in the
        same transaction.

        `position` (cluster mode: the stream sequence of the batch's last row) is saved in the
        same transaction, so a restart resumes the stream exactly where the file stops.

        `frame` (a recorder's own decisions: its id, and the frame's number in its sequence, from 1) is saved in the
        same transaction as the recorder's last committed frame; a frame at or below it was committed by a writer that
        died before it said so, and is skipped: each decision stored once.

        `wait=False`: when another connection holds the write lock, raise `sqlite3.OperationalError`
        ("database is locked") at once instead of waiting up to the busy timeout.
        """
        if not rows and position is None and frame is None:
            return True
        db = self._writer
        if wait:
            db.execute("BEGIN IMMEDIATE")
        else:
            db.execute("PRAGMA busy_timeout=0")
            try:
                db.execute("BEGIN IMMEDIATE")
            finally:
                db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        try:
            if frame is not None:
                done = db.execute("SELECT frame FROM recorders WHERE id = ?", (frame[0],)).fetchone()
                if done is not None and done[0] >= frame[1]:
                    db.execute("COMMIT")
                    return False
                db.execute("INSERT INTO recorders (id, frame, ts) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                           "frame = excluded.frame, ts = excluded.ts", (*frame, time.time()))
            if rows:
                first = db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM decisions").fetchone()[0]
                added, shapes = _insert_rows(db, rows, range(first, first + len(rows)))
                _note_batch(db, first, first + len(rows) - 1, shapes)
                db.execute("UPDATE meta SET value = value + ? WHERE key = 'bytes'", (added,))
            if position is not None:
                db.execute("INSERT INTO meta (key, value) VALUES ('stream_position', ?) "
                           "ON CONFLICT (key) DO UPDATE SET value = MAX(value, excluded.value)", (position,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return True

    def prune(self, now: float) -> int:
        """Delete each sender's oldest decisions past its share (`prune_senders`), then decisions older than
        `max_age_s`, then the oldest until the rest fit `max_bytes`; returns how many."""
        return self.prune_senders() + self._prune(now)

    def prune_senders(self) -> int:
        """Delete the oldest decisions of every sender whose decisions and shapes count more than
        `max_bytes_per_client`, until they fit in 90% of it; returns how many. So one client's traffic evicts its own
        oldest decisions, never another's (the global bound, `_prune`, then applies to what is left). A shape of the
        sender's goes with its newest decision (each is counted there, in the order the decisions go)."""
        db = self._writer
        over = db.execute("SELECT sender, bytes FROM senders WHERE bytes > ?", (self.max_bytes_per_client,)).fetchall()
        removed = 0
        for sender, held in over:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(  # the sender's own rows (and shapes), oldest first, until enough of them have gone
                    "SELECT id FROM (SELECT d.id, SUM(d.size + COALESCE(s.size, 0)) OVER (ORDER BY d.id ROWS UNBOUNDED "
                    "PRECEDING) AS gone FROM decisions d LEFT JOIN shapes s ON s.last_id = d.id AND s.sender = d.sender "
                    "WHERE d.sender = ?) WHERE gone >= ? LIMIT 1",
                    (sender, held - int(self.max_bytes_per_client * 0.9))).fetchone()
                if row is not None:
                    cut = row[0]
                    sizes = db.execute("DELETE FROM decisions WHERE id <= ? AND sender = ? RETURNING size",
                                       (cut, sender)).fetchall()
                    removed += len(sizes)
                    gone = sum(size for size, in sizes) + self._drop_shapes(
                        "sender = ? AND last_id <= ?", (sender, cut))
                    db.execute("UPDATE senders SET bytes = bytes - ? WHERE sender = ?", (gone, sender))
                    db.execute("UPDATE meta SET value = value - ? WHERE key = 'bytes'", (gone,))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        # the spans' keys stay (a query reads a span's rows anyway)
        return removed

    def _drop_shapes(self, where: str, params: Sequence[Any]) -> int:
        """Delete the shapes `where` selects, with their filter rows (inside the caller's transaction); their bytes."""
        db = self._writer
        gone = 0
        for sid, parts, size in db.execute(f"DELETE FROM shapes WHERE {where} RETURNING id, parts, size",
                                           params).fetchall():
            db.executemany("DELETE FROM shape_tags WHERE kind = ? AND value = ? AND shape = ?",
                           [(kind, value, sid) for kind, value in shape_tags(orjson.loads(parts))])
            gone += size
        return gone

    def _prune(self, now: float) -> int:
        """Delete decisions older than `max_age_s`, then the oldest until the rest fit `max_bytes`; returns how many.

        Deletion goes by id (write order): every decision up to the newest one past the age
        (found in the newest span that began before it), or up to the one where the newest rows
        fill 90% of the byte budget. The total comes from the running count in `meta`, and only
        the rows to be deleted are read (their sizes and shapes, from the oldest up), so a prune
        costs what it removes, not the table's size. A shape goes with its newest decision, a
        span with its last; a recorder's last frame a day after its last commit (`RECORDER_TTL_S`).
        """
        db = self._writer
        db.execute("BEGIN IMMEDIATE")
        try:
            total = db.execute("SELECT value FROM meta WHERE key = 'bytes'").fetchone()[0]
            cutoff = now - self.max_age_s
            cut = None
            span = db.execute("SELECT first_id, last_id FROM spans WHERE first_id = "
                              "(SELECT MAX(first_id) FROM spans WHERE ts_min < ?)", (cutoff,)).fetchone()
            if span is not None:
                cut = db.execute("SELECT MAX(id) FROM decisions WHERE id BETWEEN ? AND ? AND ts < ?",
                                 (*span, cutoff)).fetchone()[0]
            gone = 0
            if cut is not None:  # the decisions and the shapes whose newest decision is one of them
                gone = db.execute("SELECT COALESCE(SUM(size), 0) FROM decisions WHERE id <= ?", (cut,)).fetchone()[0] \
                    + db.execute("SELECT COALESCE(SUM(size), 0) FROM shapes WHERE last_id BETWEEN 1 AND ?",
                                 (cut,)).fetchone()[0]
            if total - gone > self.max_bytes:  # keep the newest rows that fit in 90% of the budget (a shape counted
                row = db.execute(  # with its newest decision: it goes with it)
                    "SELECT id FROM (SELECT d.id, SUM(d.size + COALESCE(s.size, 0)) OVER (ORDER BY d.id ROWS UNBOUNDED "
                    "PRECEDING) AS gone FROM decisions d LEFT JOIN shapes s ON s.last_id = d.id WHERE d.id > ?) "
                    "WHERE gone >= ? LIMIT 1",
                    (cut or 0, total - gone - int(self.max_bytes * 0.9))).fetchone()
                if row is not None:
                    cut = row[0]
            removed = 0
            if cut is not None:
                held = dict(db.execute("SELECT sender, SUM(size) FROM decisions WHERE id <= ? AND sender IS NOT NULL "
                                       "GROUP BY sender", (cut,)).fetchall())
                gone = db.execute("SELECT COALESCE(SUM(size), 0) FROM decisions WHERE id <= ?", (cut,)).fetchone()[0]
                shapes = [r[0] for r in db.execute("SELECT DISTINCT shape FROM decisions WHERE id <= ?", (cut,))]
                removed = db.execute("DELETE FROM decisions WHERE id <= ?", (cut,)).rowcount
                for shape in shapes:  # shapes whose newest decision went go too, their filter rows by key
                    found = db.execute("DELETE FROM shapes WHERE id = ? AND last_id <= ? RETURNING parts, size, sender",
                                       (shape, cut)).fetchone()
                    if found is not None:
                        db.executemany("DELETE FROM shape_tags WHERE kind = ? AND value = ? AND shape = ?",
                                       [(kind, value, shape) for kind, value in shape_tags(orjson.loads(found[0]))])
                        gone += found[1]
                        if found[2] is not None:
                            held[found[2]] = held.get(found[2], 0) + found[1]
                db.executemany("UPDATE senders SET bytes = bytes - ? WHERE sender = ?",
                               [(size, sender) for sender, size in held.items()])
                db.execute("DELETE FROM senders WHERE bytes <= 0")
                db.execute("UPDATE meta SET value = value - ? WHERE key = 'bytes'", (gone,))
                whole = db.execute("SELECT MAX(first_id) FROM spans WHERE last_id <= ?", (cut,)).fetchone()[0]
                if whole is not None:
                    db.execute("DELETE FROM span_keys WHERE span <= ?", (whole,))
                    db.execute("DELETE FROM spans WHERE first_id <= ?", (whole,))
                db.execute(  # the span cut in two keeps its keys (a query reads its rows anyway), not its old times
                    "UPDATE spans SET ts_min = COALESCE((SELECT MIN(ts) FROM decisions WHERE id > ? AND id <= spans.last_id), ts_min) "
                    "WHERE first_id = (SELECT MIN(first_id) FROM spans) AND first_id <= ?", (cut, cut))
                oldest = db.execute("SELECT MIN(ts_min) FROM spans").fetchone()[0]
                db.execute("DELETE FROM minutes WHERE kind IN ('m', 'a', 'o') AND minute < ?",
                           (int((oldest if oldest is not None else now) // 60),))
            db.execute("DELETE FROM recorders WHERE ts < ?", (now - RECORDER_TTL_S,))  # gateways long gone
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if removed:
            db.execute("PRAGMA incremental_vacuum")
        return removed

    # --- reading ---------------------------------------------------------------------------
    def _read(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._read_lock:
            return self._reader.execute(sql, params).fetchall()

    def query(self, f: HistoryFilter, max_bytes: int | None = PAGE_BYTES) -> tuple[list[dict[str, Any]], str | None]:
        """Matching decisions, newest first, and the cursor of the next page (None on the last). A page ends early,
        with a cursor, past `max_bytes` of its decisions' parts as stored (each its shape's JSON and its own detail;
        at least one decision): a client's decisions of 64 parts of long media types are ~48 KB each, and a page
        of 1,000 of them (48 MB) held the gateway's event loop (docs/security.md S17-2). The page is found from the
        sizes alone (ids, shapes, lengths), then only its decisions and shapes are read: what a query holds is a page,
        whatever `limit` (read whole before the cut, each decision past the page added its detail and shape: ~20 KB
        each for 64 parts of long media types, ~100 MB at a replay's 5,000)."""
        with self._read_lock:
            db = self._reader
            db.execute("BEGIN")  # one snapshot: the decisions and their shapes
            try:
                found = self._walk(f, f.limit + 1, "d.id, d.shape, length(d.detail)")
                more = len(found) > f.limit
                found = found[:f.limit]
                if max_bytes is not None and found:
                    sizes = self._in(db, "SELECT id, length(parts) FROM shapes WHERE id IN ({})",
                                     sorted({r[1] for r in found}))
                    used = 0
                    for i, (_, shape, detail) in enumerate(found):
                        used += sizes.get(shape, 0) + detail
                        if used > max_bytes and i > 0:
                            found, more = found[:i], True
                            break
                rows = sorted(self._in(db, f"SELECT id, {_COLUMNS.replace('d.id, ', '')} FROM decisions d "
                                           "WHERE id IN ({})", [r[0] for r in found], whole=True).items(),
                              reverse=True)
                raw = self._in(db, "SELECT id, parts FROM shapes WHERE id IN ({})", sorted({r[1][6] for r in rows}))
            finally:
                db.execute("COMMIT")
        shapes = {sid: orjson.loads(parts) for sid, parts in raw.items()}
        out = []
        for _, (mid, ts, sender, outcome, error, latency, shape, detail, receivers) in rows:
            item: dict[str, Any] = {"messageId": mid, "time": iso_time(ts), "sender": sender,
                                    "parts": merge_parts(shapes.get(shape, ()), orjson.loads(detail)), "outcome": outcome,
                                    "latencyMs": latency}
            if error:
                item["error"] = error
            if receivers:
                item["receivers"] = orjson.loads(receivers)
            out.append(item)
        return out, (str(found[-1][0]) if more and found else None)

    @staticmethod
    def _in(db: sqlite3.Connection, sql: str, ids: Sequence[int], whole: bool = False) -> dict[int, Any]:
        """`sql` (its `IN ({})` filled) over `ids` in chunks of 500: each row's first column to its second (`whole`: to
        the rest of its columns)."""
        out: dict[int, Any] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            for row in db.execute(sql.format(", ".join("?" * len(chunk))), chunk):
                out[row[0]] = row[1:] if whole else row[1]
        return out

    def _walk(self, f: HistoryFilter, limit: int, columns: str = _COLUMNS) -> list[Any]:
        """Up to `limit` decision rows (`columns` of them) matching `f`, newest first (the read lock held).

        The spans whose times overlap the filter's and whose keys hold each of its tags, its
        sender and its outcome are the only ones that may hold a match; runs of adjacent such
        spans are read newest first as id ranges, each row tested (its shape through the tag
        table), until `limit` rows are found.
        """
        db = self._reader
        keys = [*f.tag_filters(), *((k, v) for k, v in (("s", f.sender), ("o", f.outcome)) if v is not None)]
        span_where = ["1"]
        span_params: list[Any] = []
        where: list[str] = []
        params: list[Any] = []
        if f.before is not None:
            span_where.append("first_id < ?")
            span_params.append(f.before)
            where.append("id < ?")
            params.append(f.before)
        if f.since is not None:
            span_where.append("ts_max >= ?")
            span_params.append(f.since)
            where.append("ts >= ?")
            params.append(f.since)
        if f.until is not None:
            span_where.append("ts_min < ?")
            span_params.append(f.until)
            where.append("ts < ?")
            params.append(f.until)
        for kind, value in keys:
            span_where.append("EXISTS (SELECT 1 FROM span_keys k WHERE k.span = first_id AND k.kind = ? AND k.value = ?)")
            span_params += (kind, value)
            if kind == "s" or kind == "o":
                where.append(f"{'sender' if kind == 's' else 'outcome'} = ?")
                params.append(value)
            else:
                where.append("shape IN (SELECT shape FROM shape_tags WHERE kind = ? AND value = ?)")
                params += (kind, value)
        ranges: list[list[int]] = []  # runs of adjacent candidate spans, newest first
        for first, last in db.execute(
                f"SELECT first_id, last_id FROM spans WHERE {' AND '.join(span_where)} ORDER BY first_id DESC", span_params):
            if ranges and ranges[-1][0] == last + 1:
                ranges[-1][0] = first
            else:
                ranges.append([first, last])
        sql = f"SELECT {columns} FROM decisions d WHERE id BETWEEN ? AND ?{''.join(f' AND {w}' for w in where)} " \
              "ORDER BY id DESC LIMIT ?"
        out: list[Any] = []
        for first, last in ranges:
            out += db.execute(sql, [first, last, *params, limit - len(out)]).fetchall()
            if len(out) >= limit:
                break
        return out

    def counts(self, by: str, since: float, until: float, bucket: int) -> list[dict[str, Any]]:
        """Decisions per `by` value (modality, agent or outcome) per time bucket (whole minutes), with mean and
        max latency, from the per-minute rollup the writer keeps; the span is widened to whole minutes."""
        if bucket % 60:
            raise ValueError("bucket: a whole number of minutes, in seconds")
        step = bucket // 60
        rows = self._read(
            "SELECT minute / ? AS b, value, SUM(n), SUM(latency_sum) / SUM(n), MAX(latency_max) FROM minutes "
            "WHERE kind = ? AND minute >= ? AND minute < ? GROUP BY b, value ORDER BY b",
            [step, COUNT_KINDS[by], int(since // 60), -int(-until // 60)])
        series: dict[str, list[list[Any]]] = {}
        for b, key, count, avg, peak in rows:
            series.setdefault(key, []).append([iso_time(b * bucket), count, round(avg, 3), round(peak, 3)])
        return [{"key": k, "points": v} for k, v in sorted(series.items())]

    def flows(self, since: float, until: float, limit: int = FLOW_DECISIONS) -> dict[str, Any]:
        """Where parts went between `since` and `until`: parts per (modality, target) over the newest `limit` decisions
        of the span, with how they got there (`native`, `transform` with the transformers, `dropped`, `refused`) and how
        many of their decisions did not complete. Read from each decision's shape: a few shapes serve many decisions;
        at most `FLOW_SHAPE_BYTES` of shapes are read, those of most decisions first (`decisions` counts the decisions
        of the shapes read; `truncated` says the span held more)."""
        with self._read_lock:
            db = self._reader
            db.execute("BEGIN")
            try:
                lo, hi = db.execute("SELECT MIN(first_id), MAX(last_id) FROM spans WHERE ts_max >= ? AND ts_min <= ?",
                                    (since, until)).fetchone()
                if lo is None:
                    return {"decisions": 0, "truncated": False, "flows": []}
                past = db.execute("SELECT id FROM decisions WHERE id BETWEEN ? AND ? AND ts >= ? AND ts <= ? "
                                  "ORDER BY id DESC LIMIT 1 OFFSET ?", (lo, hi, since, until, limit)).fetchone()
                truncated = past is not None  # the span holds more: read the newest `limit`, after that one
                groups = db.execute(
                    "SELECT shape, outcome, COUNT(*) FROM decisions WHERE id BETWEEN ? AND ? AND ts >= ? AND ts <= ? "
                    "GROUP BY shape, outcome", (past[0] + 1 if truncated else lo, hi, since, until)).fetchall()
                uses: dict[int, int] = {}
                for sid, _, n in groups:
                    uses[sid] = uses.get(sid, 0) + n
                ids = sorted(uses)
                sizes: dict[int, int] = {}
                for i in range(0, len(ids), 500):
                    chunk = ids[i:i + 500]
                    sizes.update(db.execute(f"SELECT id, length(parts) FROM shapes WHERE id IN "
                                            f"({', '.join('?' * len(chunk))})", chunk))
                # the shapes of most decisions first, up to FLOW_SHAPE_BYTES of their JSON: one client's decisions of a
                # new shape each (~45 KB) made the map parse the whole file, holding the gateway's loop (S17-2)
                chosen: list[int] = []
                used = 0
                for sid in sorted(sizes, key=lambda k: (-uses[k], k)):
                    used += sizes[sid]
                    if used > FLOW_SHAPE_BYTES and chosen:
                        truncated = True
                        break
                    chosen.append(sid)
                chosen.sort()
                shapes: dict[int, list[dict[str, Any]]] = {}
                for i in range(0, len(chosen), 500):
                    chunk = chosen[i:i + 500]
                    for sid, parts in db.execute(f"SELECT id, parts FROM shapes WHERE id IN ({', '.join('?' * len(chunk))})",
                                                 chunk):
                        shapes[sid] = orjson.loads(parts)
            finally:
                db.execute("COMMIT")
        groups = [g for g in groups if g[0] in shapes]
        seen = sum(g[2] for g in groups)  # at most `limit`
        flows: dict[tuple[str, str, str, tuple[str, ...]], list[int]] = {}
        for sid, outcome, n in groups:
            bad = 0 if outcome in ("completed", "message") else n
            for part in shapes.get(sid, ()):
                modality = base_modality(str(part.get("modality", "")))
                via = tuple(dict.fromkeys(str(step.get("agent")) for chain in part.get("transforms") or ()
                                          for step in chain if isinstance(step, dict)))
                edges: list[tuple[str, str, tuple[str, ...]]]
                if part.get("dropped"):
                    edges = [("(dropped)", "dropped", ())]
                elif not part.get("targets"):
                    edges = [("(refused)" if outcome == "refused" else "(no target)", "refused", ())]
                else:
                    edges = [(str(t), "transform" if via else "native", via) for t in part["targets"]]
                for target, kind, chain in edges:
                    cur = flows.setdefault((modality, target, kind, chain), [0, 0])
                    cur[0] += n
                    cur[1] += bad
        ranked = sorted(flows.items(), key=lambda item: (-item[1][0], item[0][0], item[0][1]))
        rows = [{"modality": m, "target": t, "kind": k, "via": list(v), "parts": c[0], "failed": c[1]}
                for (m, t, k, v), c in ranked]
        return {"decisions": seen, "truncated": truncated, "flows": rows}

    def position(self) -> int:
        """The last stream position written (0 for a file that never followed a stream)."""
        rows = self._read("SELECT value FROM meta WHERE key = 'stream_position'", ())
        return int(rows[0][0]) if rows else 0

    def committed_frame(self, recorder: int) -> int:
        """The last frame of recorder `recorder` the file holds (0: none)."""
        rows = self._read("SELECT frame FROM recorders WHERE id = ?", (recorder,))
        return int(rows[0][0]) if rows else 0

    def stats(self) -> dict[str, Any]:
        """How many decisions the file holds and the bytes they count against `max_bytes` (the running total)."""
        count = self._read("SELECT COUNT(*) FROM decisions", ())[0][0]
        size = self._read("SELECT value FROM meta WHERE key = 'bytes'", ())[0][0]
        return {"decisions": count, "bytes": size, "path": str(self.path)}
