"""Decision history: every routing decision kept (SQLite by default, a JetStream stream in cluster mode),
queried through the admin API, `mma2a history` and the console. Payload bytes are never kept."""

from __future__ import annotations

from .config import HistoryConfig
from .record import OUTCOMES, DecisionRecord, HistorySink, PartSummary, refused_parts, to_row
from .recorder import HistoryRecorder
from .store import HistoryFilter, HistoryStore

__all__ = ["OUTCOMES", "DecisionRecord", "HistoryConfig", "HistoryFilter", "HistoryRecorder", "HistorySink",
           "HistoryStore", "PartSummary", "refused_parts", "to_row"]
