"""The SQLite decision store: one row per decision, a tag table for the filters, retention by age and size.

The file is opened in WAL mode, so queries read while the writer thread commits. Writes
come in batches (one transaction, `executemany`); queries page by keyset (`id < cursor`),
newest first. Every method blocks: callers on the event loop use `asyncio.to_thread`.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from .record import Row

SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
  id INTEGER PRIMARY KEY, message_id TEXT NOT NULL, ts REAL NOT NULL, sender TEXT, outcome TEXT NOT NULL,
  error TEXT, latency_ms REAL NOT NULL, parts BLOB NOT NULL, receivers BLOB, size INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS decisions_ts ON decisions(ts);
CREATE INDEX IF NOT EXISTS decisions_sender ON decisions(sender, id);
CREATE INDEX IF NOT EXISTS decisions_outcome ON decisions(outcome, id);
CREATE TABLE IF NOT EXISTS tags (
  kind TEXT NOT NULL, value TEXT NOT NULL, decision_id INTEGER NOT NULL, ts REAL NOT NULL, latency_ms REAL NOT NULL,
  PRIMARY KEY (kind, value, decision_id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tags_decision ON tags(decision_id);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) SELECT 'bytes', COALESCE(SUM(size), 0) FROM decisions;
CREATE TABLE IF NOT EXISTS minutes (
  kind TEXT NOT NULL, value TEXT NOT NULL, minute INTEGER NOT NULL, n INTEGER NOT NULL, latency_sum REAL NOT NULL,
  latency_max REAL NOT NULL, PRIMARY KEY (kind, minute, value)) WITHOUT ROWID;
"""

TAG_KINDS = {"modality": "m", "agent": "a", "rule": "r"}
COUNT_KINDS = {"modality": "m", "agent": "a", "outcome": "o"}
ROW_OVERHEAD = 64  # bytes counted per decision besides its JSON (ids, time, indexes)
TAG_BYTES = 40


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
    """What one decision counts against `max_bytes`: its JSON, its id, and a share for columns, indexes and tags."""
    return len(r.parts_json) + len(r.message_id) + ROW_OVERHEAD + TAG_BYTES * len(r.tags)


def _per_minute(rows: Sequence[Row]) -> list[Any]:
    """The batch folded into the rollup's rows, (kind, value, minute, count, latency sum, latency max) for each
    modality and agent tag and each outcome, flattened for `_insert`. Alike rows share one tags tuple (the row
    memo's), so rows are grouped by it first and each group's tags read once."""
    groups: dict[tuple[int, str, int], list[Any]] = {}
    for r in rows:
        key = (id(r.tags), r.outcome, int(r.time // 60))
        cur = groups.get(key)
        if cur is None:
            groups[key] = [r.tags, 1, r.latency_ms, r.latency_ms]
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


_INSERT_DECISIONS = "INSERT INTO decisions (id, message_id, ts, sender, outcome, error, latency_ms, parts, receivers, size)"
_INSERT_TAGS = "INSERT OR IGNORE INTO tags (kind, value, decision_id, ts, latency_ms)"
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
        self._writer.executescript(SCHEMA)
        self._reader = self._connect()
        self._reader.execute("PRAGMA query_only=ON")
        self._read_lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=10000")
        return conn

    def close(self) -> None:
        self._writer.close()
        with self._read_lock:
            self._reader.close()

    # --- writing ---------------------------------------------------------------------------
    def write(self, rows: Sequence[Row], position: int | None = None) -> None:
        """Insert a batch in one transaction (ids assigned under the write lock, so several processes may share a file).

        Rows, filter tags and the per-minute rollup go in by multi-row statements (`_insert`);
        the bytes the batch adds go to the running total in `meta` in the same transaction.

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
                added = 0
                for start in range(0, len(rows), _CHUNK):  # flattened a chunk at a time, between the inserts
                    decisions: list[Any] = []
                    tags: list[Any] = []
                    for i, r in enumerate(rows[start:start + _CHUNK], first + start):
                        size = row_bytes(r)
                        added += size
                        decisions += (i, r.message_id, r.time, r.sender, r.outcome, r.error, r.latency_ms, r.parts_json,
                                      r.receivers_json, size)
                        for kind, value in r.tags:
                            tags += (kind, value, i, r.time, r.latency_ms)
                    _insert(db, _INSERT_DECISIONS, 10, decisions)
                    _insert(db, _INSERT_TAGS, 5, tags)
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
        sizes, from the oldest up), so a prune costs what it removes, not the table's size.
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
                db.execute("DELETE FROM tags WHERE decision_id <= ?", (cut,))
                removed = db.execute("DELETE FROM decisions WHERE id <= ?", (cut,)).rowcount
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

        With a modality, agent or rule filter the walk starts from that tag's index, newest
        first, and stops at `limit` rows; other filters are checked on the way.
        """
        tags = f.tag_filters()
        where: list[str] = []
        params: list[Any] = []
        if tags:
            kind, value = tags[0]
            source, key = "tags t JOIN decisions d ON d.id = t.decision_id", "t.decision_id"
            where += ["t.kind = ?", "t.value = ?"]
            params += [kind, value]
            time_col = "t.ts"
            for kind, value in tags[1:]:
                where.append("EXISTS (SELECT 1 FROM tags x WHERE x.kind = ? AND x.value = ? AND x.decision_id = d.id)")
                params += [kind, value]
        else:
            source, key, time_col = "decisions d", "d.id", "+d.ts"  # unary +: walk the primary key, test the time
        if f.before is not None:
            where.append(f"{key} < ?")
            params.append(f.before)
        if f.since is not None:
            where.append(f"{time_col} >= ?")
            params.append(f.since)
        if f.until is not None:
            where.append(f"{time_col} < ?")
            params.append(f.until)
        for column in ("sender", "outcome"):
            if (value := getattr(f, column)) is not None:
                where.append(f"d.{column} = ?" if not tags else f"+d.{column} = ?")
                params.append(value)
        rows = self._read(
            "SELECT d.id, d.message_id, d.ts, d.sender, d.outcome, d.error, d.latency_ms, d.parts, d.receivers "
            f"FROM {source} WHERE {' AND '.join(where) or '1'} ORDER BY {key} DESC LIMIT ?", [*params, f.limit + 1])
        more = len(rows) > f.limit
        rows = rows[:f.limit]
        out = []
        for id_, mid, ts, sender, outcome, error, latency, parts, receivers in rows:
            item: dict[str, Any] = {"messageId": mid, "time": iso_time(ts), "sender": sender,
                                    "parts": orjson.loads(parts), "outcome": outcome, "latencyMs": latency}
            if error:
                item["error"] = error
            if receivers:
                item["receivers"] = orjson.loads(receivers)
            out.append(item)
        return out, (str(rows[-1][0]) if more and rows else None)

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
