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
CREATE INDEX IF NOT EXISTS decisions_message ON decisions(message_id);
CREATE TABLE IF NOT EXISTS tags (
  kind TEXT NOT NULL, value TEXT NOT NULL, decision_id INTEGER NOT NULL, ts REAL NOT NULL, latency_ms REAL NOT NULL,
  PRIMARY KEY (kind, value, decision_id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tags_decision ON tags(decision_id);
CREATE INDEX IF NOT EXISTS tags_time ON tags(kind, ts);
"""

TAG_KINDS = {"modality": "m", "agent": "a", "rule": "r"}
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
        return [(TAG_KINDS[k], v) for k in ("modality", "agent", "rule") if (v := getattr(self, k)) is not None]


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
    def write(self, rows: Sequence[Row]) -> None:
        """Insert a batch in one transaction (ids assigned under the write lock, so several processes may share a file)."""
        if not rows:
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
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def prune(self, now: float) -> int:
        """Delete decisions older than `max_age_s`, then the oldest until the rest fit `max_bytes`; returns how many."""
        db = self._writer
        db.execute("BEGIN IMMEDIATE")
        try:
            cutoff = now - self.max_age_s
            db.execute("DELETE FROM tags WHERE decision_id IN (SELECT id FROM decisions WHERE ts < ?)", (cutoff,))
            removed = db.execute("DELETE FROM decisions WHERE ts < ?", (cutoff,)).rowcount
            total = db.execute("SELECT COALESCE(SUM(size), 0) FROM decisions").fetchone()[0]
            if total > self.max_bytes:  # keep the newest rows that fit in 90% of the budget
                row = db.execute(
                    "SELECT id FROM (SELECT id, SUM(size) OVER (ORDER BY id DESC) AS kept FROM decisions) "
                    "WHERE kept > ? ORDER BY id DESC LIMIT 1", (int(self.max_bytes * 0.9),)).fetchone()
                if row is not None:
                    db.execute("DELETE FROM tags WHERE decision_id <= ?", (row[0],))
                    removed += db.execute("DELETE FROM decisions WHERE id <= ?", (row[0],)).rowcount
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
        """Matching decisions, newest first, and the cursor of the next page (None on the last)."""
        where: list[str] = ["1"]
        params: list[Any] = []
        if f.before is not None:
            where.append("d.id < ?")
            params.append(f.before)
        if f.since is not None:
            where.append("+d.ts >= ?")  # unary +: walk the primary key newest first, test the time on the way
            params.append(f.since)
        if f.until is not None:
            where.append("+d.ts < ?")
            params.append(f.until)
        if f.sender is not None:
            where.append("d.sender = ?")
            params.append(f.sender)
        if f.outcome is not None:
            where.append("d.outcome = ?")
            params.append(f.outcome)
        for kind, value in f.tag_filters():
            if value.endswith("/*"):  # a family: every value with that prefix, by index range
                where.append("d.id IN (SELECT decision_id FROM tags WHERE kind = ? AND value >= ? AND value < ?)")
                params += [kind, value[:-1], value[:-2] + "0"]  # '0' sorts right after '/'
            else:
                where.append("d.id IN (SELECT decision_id FROM tags WHERE kind = ? AND value = ?)")
                params += [kind, value]
        rows = self._read(
            "SELECT d.id, d.message_id, d.ts, d.sender, d.outcome, d.error, d.latency_ms, d.parts, d.receivers "
            f"FROM decisions d WHERE {' AND '.join(where)} ORDER BY d.id DESC LIMIT ?", [*params, f.limit + 1])
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
        """Decisions per `by` value (modality, agent or outcome) per time bucket, with mean and max latency."""
        if by == "outcome":
            sql = ("SELECT CAST(ts / ? AS INTEGER) AS b, outcome, COUNT(*), AVG(latency_ms), MAX(latency_ms) "
                   "FROM decisions WHERE ts >= ? AND ts < ? GROUP BY b, outcome ORDER BY b")
            params: list[Any] = [bucket, since, until]
        else:
            sql = ("SELECT CAST(ts / ? AS INTEGER) AS b, value, COUNT(*), AVG(latency_ms), MAX(latency_ms) "
                   "FROM tags WHERE kind = ? AND ts >= ? AND ts < ? GROUP BY b, value ORDER BY b")
            params = [bucket, TAG_KINDS[by], since, until]
        series: dict[str, list[list[Any]]] = {}
        for b, key, count, avg, peak in self._read(sql, params):
            series.setdefault(key, []).append([iso_time(b * bucket), count, round(avg, 3), round(peak, 3)])
        return [{"key": k, "points": v} for k, v in sorted(series.items())]

    def stats(self) -> dict[str, Any]:
        count, size = self._read("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM decisions", ())[0]
        return {"decisions": count, "bytes": size, "path": str(self.path)}
