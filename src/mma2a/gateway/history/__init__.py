"""Decision history: every routing decision kept (SQLite by default, a JetStream stream in cluster mode),
queried through the admin API, `mma2a history` and the console. Payload bytes are never kept.

May import: nothing in the gateway.
"""

from __future__ import annotations

from .config import HistoryConfig as HistoryConfig
from .record import OUTCOMES as OUTCOMES
from .record import DecisionRecord as DecisionRecord
from .record import HistorySink as HistorySink
from .record import PartSummary as PartSummary
from .record import refused_parts as refused_parts
from .record import to_row as to_row
from .recorder import HistoryRecorder as HistoryRecorder
from .store import HistoryFilter as HistoryFilter
from .store import HistoryStore as HistoryStore

