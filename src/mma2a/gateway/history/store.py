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
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
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


def _per_minute(rows: Sequence[Row]) -> dict[tuple[str, str, int], list[float]]:
    """The batch folded into (kind, value, minute) -> [count, latency sum, latency max] for the rollup table."""
    agg: dict[tuple[str, str, int], list[float]] = {}
    for r in rows:
        minute = int(r.time // 60)
        keys = [(k, v, minute) for k, v in r.tags if k in ("m", "a")] + [("o", r.outcome, minute)]
        for key in keys:
            cur = agg.get(key)
            if cur is None:
                agg[key] = [1, r.latency_ms, r.latency_ms]
            else:
                cur[0] += 1
                cur[1] += r.latency_ms
                cur[2] = max(cur[2], r.latency_ms)
    return agg


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

        `position` (cluster mode: the stream sequence of the batch's last row) is saved in the
        same transaction, so a restart resumes the stream exactly where the file stops.
        """
        if not rows and position is None:
            return
        db = self._writer
        db.execute("BEGIN IMMEDIATE")
        try:
            first = db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM decisions").fetchone()[0]
            db.executemany(
                "INSERT INTO decisions (id, message_id, ts, sender, outcome, error, latency_ms, parts, receivers, size) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(first + i, r.message_id, r.time, r.sender, r.outcome, r.error, r.latency_ms, r.parts_json,
                  r.receivers_json, len(r.parts_json) + len(r.message_id) + ROW_OVERHEAD + TAG_BYTES * len(r.tags))
                 for i, r in enumerate(rows)])
            db.executemany(
                "INSERT OR IGNORE INTO tags (kind, value, decision_id, ts, latency_ms) VALUES (?, ?, ?, ?, ?)",
                [(kind, value, first + i, r.time, r.latency_ms) for i, r in enumerate(rows) for kind, value in r.tags])
            db.executemany(
                "INSERT INTO minutes (kind, value, minute, n, latency_sum, latency_max) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (kind, minute, value) DO UPDATE SET n = n + excluded.n, "
                "latency_sum = latency_sum + excluded.latency_sum, latency_max = MAX(latency_max, excluded.latency_max)",
                [(kind, value, minute, *agg) for (kind, value, minute), agg in _per_minute(rows).items()])
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
        or up to the one where the newest rows fill 90% of the byte budget.
        """
        db = self._writer
        db.execute("BEGIN IMMEDIATE")
        try:
            cutoff = now - self.max_age_s
            cut = db.execute("SELECT MAX(id) FROM decisions WHERE ts < ?", (cutoff,)).fetchone()[0]
            total = db.execute("SELECT COALESCE(SUM(size), 0) FROM decisions WHERE id > ?", (cut or 0,)).fetchone()[0]
            if total > self.max_bytes:  # keep the newest rows that fit in 90% of the budget
                row = db.execute(
                    "SELECT id FROM (SELECT id, SUM(size) OVER (ORDER BY id DESC) AS kept FROM decisions) "
                    "WHERE kept > ? ORDER BY id DESC LIMIT 1", (int(self.max_bytes * 0.9),)).fetchone()
                cut = max(cut or 0, row[0]) if row is not None else cut
            removed = 0
            if cut is not None:
                db.execute("DELETE FROM tags WHERE decision_id <= ?", (cut,))
                removed = db.execute("DELETE FROM decisions WHERE id <= ?", (cut,)).rowcount
                oldest = db.execute("SELECT MIN(ts) FROM decisions").fetchone()[0]
                db.execute("DELETE FROM minutes WHERE minute < ?", (int((oldest if oldest is not None else now) // 60),))
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
        count, size = self._read("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM decisions", ())[0]
        return {"decisions": count, "bytes": size, "path": str(self.path)}
