"""The SQLite decision store: one row per decision, retention by age and size, and shapes: what alike decisions
share (their parts' routes as JSON, with the filter tags those imply) stored once and referenced by id.

The file is opened in WAL mode, so queries read while the writer thread commits. Writes
come in batches (one transaction, multi-row statements); queries page by keyset (`id < cursor`),
newest first. Every method blocks: callers on the event loop use `asyncio.to_thread`.
"""

from __future__ import annotations

import hashlib
import heapq
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson

from .record import Row, Shape, merge_parts, shape_tags, split_parts

SCHEMA = """
CREATE TABLE IF NOT EXISTS shapes (
  id INTEGER PRIMARY KEY, digest INTEGER NOT NULL, parts BLOB NOT NULL, size INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS shapes_digest ON shapes(digest);
CREATE TABLE IF NOT EXISTS shape_tags (
  kind TEXT NOT NULL, value TEXT NOT NULL, shape INTEGER NOT NULL, PRIMARY KEY (kind, value, shape)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS decisions (
  id INTEGER PRIMARY KEY, message_id TEXT NOT NULL, ts REAL NOT NULL, sender TEXT, outcome TEXT NOT NULL,
  error TEXT, latency_ms REAL NOT NULL, shape INTEGER NOT NULL, detail BLOB NOT NULL, receivers BLOB,
  size INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS decisions_ts ON decisions(ts);
CREATE INDEX IF NOT EXISTS decisions_sender ON decisions(sender, id);
CREATE INDEX IF NOT EXISTS decisions_outcome ON decisions(outcome, id);
CREATE INDEX IF NOT EXISTS decisions_shape ON decisions(shape, id);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) SELECT 'bytes',
  (SELECT COALESCE(SUM(size), 0) FROM decisions) + (SELECT COALESCE(SUM(size), 0) FROM shapes);
CREATE TABLE IF NOT EXISTS minutes (
  kind TEXT NOT NULL, value TEXT NOT NULL, minute INTEGER NOT NULL, n INTEGER NOT NULL, latency_sum REAL NOT NULL,
  latency_max REAL NOT NULL, PRIMARY KEY (kind, minute, value)) WITHOUT ROWID;
"""

TAG_KINDS = {"modality": "m", "agent": "a", "rule": "r"}
COUNT_KINDS = {"modality": "m", "agent": "a", "outcome": "o"}
ROW_OVERHEAD = 64  # bytes counted per decision (and per shape) besides its JSON (ids, time, indexes)
TAG_BYTES = 40  # per filter row of a shape
MERGE_MAX = 256  # a tag filter matching more shapes than this walks the decisions instead of merging per shape
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


def _per_minute(rows: Sequence[Row]) -> list[Any]:
    """The batch folded into the rollup's rows, (kind, value, minute, count, latency sum, latency max) for each
    modality and agent tag and each outcome, flattened for `_insert`. Alike rows share one shape (the writer's
    memo's), so rows are grouped by it first and each group's tags read once."""
    groups: dict[tuple[int, str, int], list[Any]] = {}
    for r in rows:
        key = (id(r.shape), r.outcome, int(r.time // 60))
        cur = groups.get(key)
        if cur is None:
            groups[key] = [r.shape.tags, 1, r.latency_ms, r.latency_ms]
        else:
            cur[1] += 1
            cur[2] += r.latency_ms
            if r.latency_ms > cur[3]:
                cur[3] = r.latency_ms
    agg: dict[tuple[str, str, int], list[Any]] = {}
    for (_, outcome, minute), (tags, n, total, peak) in groups.items():
        for kind, value in (*[t for t in tags if t[0] in ("m", "a")], ("o", outcome)):
            cur = agg.get((kind, value, minute))
            if cur is None:
                agg[(kind, value, minute)] = [n, total, peak]
            else:
                cur[0] += n
                cur[1] += total
                cur[2] = max(cur[2], peak)
    return [x for (kind, value, minute), (n, total, peak) in agg.items() for x in (kind, value, minute, n, total, peak)]


_INSERT_DECISIONS = ("INSERT INTO decisions (id, message_id, ts, sender, outcome, error, latency_ms, shape, detail, "
                     "receivers, size)")
_INSERT_SHAPES = "INSERT INTO shapes (id, digest, parts, size)"
_INSERT_SHAPE_TAGS = "INSERT OR IGNORE INTO shape_tags (kind, value, shape)"
_INSERT_MINUTES = "INSERT INTO minutes (kind, value, minute, n, latency_sum, latency_max)"
_ON_MINUTE = ("ON CONFLICT (kind, minute, value) DO UPDATE SET n = n + excluded.n, "
              "latency_sum = latency_sum + excluded.latency_sum, latency_max = MAX(latency_max, excluded.latency_max)")
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


def _insert_rows(db: sqlite3.Connection, rows: Sequence[Row], ids: Sequence[int]) -> int:
    """Insert decisions with the given ids (inside the caller's transaction), their shapes first if new;
    returns the bytes they add to the running total.

    Shape ids are looked up afresh in every transaction, never remembered across them (another
    writer on the file may have pruned a shape since): the batch's distinct shapes are read by
    multi-row `IN` lookups, and the new ones inserted with their filter rows by multi-row
    statements, so a batch of unalike decisions costs a few statements, not a few per decision."""
    distinct: dict[bytes, Shape] = {}
    for r in rows:
        distinct.setdefault(r.shape.parts_json, r.shape)
    keys = list(distinct)
    digests = [shape_digest(k) for k in keys]
    shape_ids: dict[bytes, int] = {}
    for start in range(0, len(keys), _CHUNK):
        chunk = digests[start:start + _CHUNK]
        shape_ids.update((parts, sid) for sid, parts in db.execute(
            f"SELECT id, parts FROM shapes WHERE digest IN ({', '.join('?' * len(chunk))})", chunk) if parts in distinct)
    added = 0
    new = [(k, d) for k, d in zip(keys, digests, strict=True) if k not in shape_ids]
    if new:
        first = db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM shapes").fetchone()[0]
        values: list[Any] = []
        tags: list[Any] = []
        for sid, (key, digest) in enumerate(new, first):
            size = shape_bytes(distinct[key])
            added += size
            shape_ids[key] = sid
            values += (sid, digest, key, size)
            tags += [x for kind, value in distinct[key].tags for x in (kind, value, sid)]
        _insert(db, _INSERT_SHAPES, 4, values)
        _insert(db, _INSERT_SHAPE_TAGS, 3, tags)
    for start in range(0, len(rows), _CHUNK):  # flattened a chunk at a time, between the inserts
        values = []
        for i, r in zip(ids[start:start + _CHUNK], rows[start:start + _CHUNK], strict=True):
            size = len(r.detail) + len(r.message_id) + (len(r.receivers_json) if r.receivers_json else 0) + ROW_OVERHEAD
            added += size
            values += (i, r.message_id, r.time, r.sender, r.outcome, r.error, r.latency_ms,
                       shape_ids[r.shape.parts_json], r.detail, r.receivers_json, size)
        _insert(db, _INSERT_DECISIONS, 11, values)
    return added


def shape_digest(parts_json: bytes) -> int:
    """What shapes are looked up by: 8 bytes of BLAKE2b (an index of those, not of the JSON; equal JSON confirms)."""
    return int.from_bytes(hashlib.blake2b(parts_json, digest_size=8).digest(), "big", signed=True)


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def iso_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class HistoryStore:
    """One SQLite file. `write` belongs to one thread (the recorder's); queries may come from any thread."""

    def __init__(self, path: str | Path, *, max_age_s: float = 7 * 24 * 3600, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_age_s, self.max_bytes = max_age_s, max_bytes
        self._writer = self._connect()
        self._writer.execute("PRAGMA auto_vacuum=INCREMENTAL")  # only takes on a new file; lets prune give space back
        self._writer.execute("PRAGMA journal_mode=WAL")
        self._open_schema()
        self._reader = self._connect()
        self._reader.execute("PRAGMA query_only=ON")
        self._read_lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=10000")
        return conn

    def _open_schema(self) -> None:
        """Create the tables, or bring a file from before shapes (whole parts JSON in every row, a filter row per
        decision and tag) to them, in one transaction: its decisions keep their ids, times and contents."""
        db = self._writer
        db.execute("BEGIN IMMEDIATE")
        try:
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
                    _insert_rows(db, rows, [b[0] for b in batch])
                db.execute("DROP TABLE decisions_v1")
                db.execute("UPDATE meta SET value = (SELECT COALESCE(SUM(size), 0) FROM decisions) + "
                           "(SELECT COALESCE(SUM(size), 0) FROM shapes) WHERE key = 'bytes'")
            else:
                columns = {r[1] for r in db.execute("PRAGMA table_info(shapes)")}
                if columns and "digest" not in columns:
                    self._add_digests()
                for statement in _statements(SCHEMA):
                    db.execute(statement)
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
        db.execute("INSERT INTO shapes (id, digest, parts, size) SELECT id, shape_digest(parts), parts, size FROM shapes_old")
        db.execute("DROP TABLE shapes_old")

    def close(self) -> None:
        self._writer.close()
        with self._read_lock:
            self._reader.close()

    # --- writing ---------------------------------------------------------------------------
    def write(self, rows: Sequence[Row], position: int | None = None) -> None:
        """Insert a batch in one transaction (ids assigned under the write lock, so several processes may share a file).

        Rows and the per-minute rollup go in by multi-row statements (`_insert`), a shape not
        stored yet (with its filter rows) before the first row that has it; the bytes the batch
        adds go to the running total in `meta` in the same transaction.

        `position` (cluster mode: the stream sequence of the batch's last row) is saved in the
        same transaction, so a restart resumes the stream exactly where the file stops.
        """
        if not rows and position is None:
            return
        db = self._writer
        db.execute("BEGIN IMMEDIATE")
        try:
            if rows:
                first = db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM decisions").fetchone()[0]
                added = _insert_rows(db, rows, range(first, first + len(rows)))
                _insert(db, _INSERT_MINUTES, 6, _per_minute(rows), _ON_MINUTE)
                db.execute("UPDATE meta SET value = value + ? WHERE key = 'bytes'", (added,))
            if position is not None:
                db.execute("INSERT INTO meta (key, value) VALUES ('stream_position', ?) "
                           "ON CONFLICT (key) DO UPDATE SET value = MAX(value, excluded.value)", (position,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def prune(self, now: float) -> int:
        """Delete decisions older than `max_age_s`, then the oldest until the rest fit `max_bytes`; returns how many.

        Deletion goes by id (write order): every decision up to the newest one past the age,
        or up to the one where the newest rows fill 90% of the byte budget. The total comes
        from the running count in `meta`, and only the rows to be deleted are read (their
        sizes, from the oldest up), so a prune costs what it removes, not the table's size. A shape
        goes with the last decision that has it.
        """
        db = self._writer
        db.execute("BEGIN IMMEDIATE")
        try:
            total = db.execute("SELECT value FROM meta WHERE key = 'bytes'").fetchone()[0]
            cut = db.execute(  # through the time index: the rows past the age, not the newest down to them
                "SELECT MAX(id) FROM decisions INDEXED BY decisions_ts WHERE ts < ?", (now - self.max_age_s,)).fetchone()[0]
            gone = 0
            if cut is not None:
                gone = db.execute("SELECT COALESCE(SUM(size), 0) FROM decisions WHERE id <= ?", (cut,)).fetchone()[0]
            if total - gone > self.max_bytes:  # keep the newest rows that fit in 90% of the budget
                row = db.execute(
                    "SELECT id, gone FROM (SELECT id, SUM(size) OVER (ORDER BY id ROWS UNBOUNDED PRECEDING) AS gone "
                    "FROM decisions WHERE id > ?) WHERE gone >= ? LIMIT 1",
                    (cut or 0, total - gone - int(self.max_bytes * 0.9))).fetchone()
                if row is not None:
                    cut, gone = row[0], gone + row[1]
            removed = 0
            if cut is not None:
                shapes = [r[0] for r in db.execute("SELECT DISTINCT +shape FROM decisions WHERE id <= ?", (cut,))]
                removed = db.execute("DELETE FROM decisions WHERE id <= ?", (cut,)).rowcount
                for shape in shapes:  # shapes no decision refers to any more go too, their filter rows by key
                    if db.execute("SELECT 1 FROM decisions WHERE shape = ? LIMIT 1", (shape,)).fetchone() is None:
                        parts, size = db.execute("DELETE FROM shapes WHERE id = ? RETURNING parts, size", (shape,)).fetchone()
                        db.executemany("DELETE FROM shape_tags WHERE kind = ? AND value = ? AND shape = ?",
                                       [(kind, value, shape) for kind, value in shape_tags(orjson.loads(parts))])
                        gone += size
                db.execute("UPDATE meta SET value = value - ? WHERE key = 'bytes'", (gone,))
                oldest = db.execute("SELECT MIN(ts) FROM decisions").fetchone()[0]
                db.execute("DELETE FROM minutes WHERE kind IN ('m', 'a', 'o') AND minute < ?",
                           (int((oldest if oldest is not None else now) // 60),))
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

    def query(self, f: HistoryFilter) -> tuple[list[dict[str, Any]], str | None]:
        """Matching decisions, newest first, and the cursor of the next page (None on the last).

        With a modality, agent or rule filter, the decisions of the shapes that carry every such
        tag are merged newest first, or the decisions walked and their shapes tested (`_walk`);
        either stops at `limit` rows. Other filters are checked on the way.
        """
        tags = f.tag_filters()
        where: list[str] = []
        params: list[Any] = []
        if f.before is not None:
            where.append("d.id < ?")
            params.append(f.before)
        if f.since is not None:
            where.append("+d.ts >= ?")  # unary +: walk an id order, test the time
            params.append(f.since)
        if f.until is not None:
            where.append("+d.ts < ?")
            params.append(f.until)
        for column in ("sender", "outcome"):
            if (value := getattr(f, column)) is not None:
                where.append(f"{{index}}d.{column} = ?")  # its index, or (merging shapes) tested on the way
                params.append(value)
        with self._read_lock:
            db = self._reader
            db.execute("BEGIN")  # one snapshot: the decisions and their shapes
            try:
                rows = self._walk(tags, where, params, f.limit + 1)
                more = len(rows) > f.limit
                rows = rows[:f.limit]
                ids = sorted({r[7] for r in rows})
                shapes = {sid: orjson.loads(parts) for sid, parts in db.execute(
                    f"SELECT id, parts FROM shapes WHERE id IN ({', '.join('?' * len(ids))})", ids)} if ids else {}
            finally:
                db.execute("COMMIT")
        out = []
        for _, mid, ts, sender, outcome, error, latency, shape, detail, receivers in rows:
            item: dict[str, Any] = {"messageId": mid, "time": iso_time(ts), "sender": sender,
                                    "parts": merge_parts(shapes.get(shape, ()), orjson.loads(detail)), "outcome": outcome,
                                    "latencyMs": latency}
            if error:
                item["error"] = error
            if receivers:
                item["receivers"] = orjson.loads(receivers)
            out.append(item)
        return out, (str(rows[-1][0]) if more and rows else None)

    def _walk(self, tags: list[tuple[str, str]], where: list[str], params: list[Any], limit: int) -> list[Any]:
        """Up to `limit` decision rows matching the tags and `where`, newest first (the read lock held).

        When one of the tags is on at most `MERGE_MAX` shapes, the shapes that carry every tag
        are merged newest first through the (shape, id) index. Otherwise the decisions are
        walked newest first (by id, or by the sender or outcome index when those are filtered)
        and each one's shape looked up in the tag index: a common tag stops after a few rows.
        """
        db = self._reader
        cond = "".join(f" AND {w}" for w in where).format(index="")
        if not tags:
            return db.execute(f"SELECT {_COLUMNS} FROM decisions d WHERE 1{cond} ORDER BY d.id DESC LIMIT ?",
                              [*params, limit]).fetchall()
        few: list[int] | None = None
        first = -1
        for i, (kind, value) in enumerate(tags):
            found = [r[0] for r in db.execute("SELECT shape FROM shape_tags WHERE kind = ? AND value = ? LIMIT ?",
                                              (kind, value, MERGE_MAX + 1))]
            if not found:
                return []
            if len(found) <= MERGE_MAX and (few is None or len(found) < len(few)):
                few, first = found, i
        if few is None:
            tests = "".join(" AND EXISTS (SELECT 1 FROM shape_tags t WHERE t.kind = ? AND t.value = ? AND t.shape = d.shape)"
                            for _ in tags)
            return db.execute(f"SELECT {_COLUMNS} FROM decisions d WHERE 1{tests}{cond} ORDER BY d.id DESC LIMIT ?",
                              [*[x for t in tags for x in t], *params, limit]).fetchall()
        shapes = [s for s in few if all(  # the other tags, tested on these few shapes
            db.execute("SELECT 1 FROM shape_tags WHERE kind = ? AND value = ? AND shape = ?", (*t, s)).fetchone()
            for j, t in enumerate(tags) if j != first)]
        cond = "".join(f" AND {w}" for w in where).format(index="+")  # unary +: the shape's index, not theirs
        sql = f"SELECT {_COLUMNS} FROM decisions d WHERE d.shape = ?{cond} ORDER BY d.id DESC LIMIT ?"
        walks = [db.execute(sql, [shape, *params, limit]) for shape in shapes]
        return list(islice(heapq.merge(*walks, key=itemgetter(0), reverse=True), limit))

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

    def position(self) -> int:
        """The last stream position written (0 for a file that never followed a stream)."""
        rows = self._read("SELECT value FROM meta WHERE key = 'stream_position'", ())
        return int(rows[0][0]) if rows else 0

    def stats(self) -> dict[str, Any]:
        """How many decisions the file holds and the bytes they count against `max_bytes` (the running total)."""
        count = self._read("SELECT COUNT(*) FROM decisions", ())[0][0]
        size = self._read("SELECT value FROM meta WHERE key = 'bytes'", ())[0][0]
        return {"decisions": count, "bytes": size, "path": str(self.path)}
