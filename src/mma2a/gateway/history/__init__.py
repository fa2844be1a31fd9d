"""Decision history: every routing decision kept (SQLite by default, a JetStream stream in cluster mode),
queried through the admin API, `mma2a history` and the console. Payload bytes are never kept.

Each name loads its module when first asked for: the writer process (`writer.py`) imports the store alone, not the
configuration's pydantic models or the recorder.

May import: nothing in the gateway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `X as X`: names this package gives (mypy's explicit re-export)
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

_HOMES = {"HistoryConfig": "config", "OUTCOMES": "record", "DecisionRecord": "record", "HistorySink": "record",
          "PartSummary": "record", "refused_parts": "record", "to_row": "record", "HistoryRecorder": "recorder",
          "HistoryFilter": "store", "HistoryStore": "store"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'mma2a.gateway.history' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{home}"), name)
