"""Security probe P9: what the gateway keeps on disk was readable by every user of the host (directories and files
made with the process's umask, 0755 and 0644 by default): another local user read the clients' payloads under
`data_dir/blobs` and the decision history (who sent what, where it went, ratings' comments). The blob store's
directories are 0700 and the history file 0600, also when they existed before."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mma2a.gateway.history.store import HistoryStore
from mma2a.payload.store import LocalBlobStore


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_payloads_and_history_are_this_users_alone(tmp_path: Path) -> None:
    old = os.umask(0o022)  # a common default: what the gateway made was world-readable
    try:
        (tmp_path / "blobs" / "objects").mkdir(parents=True, mode=0o755)  # a store made before: fixed at open too
        LocalBlobStore(tmp_path / "blobs")
        history = HistoryStore(tmp_path / "data" / "history.sqlite3")
    finally:
        os.umask(old)
    assert {d: mode(tmp_path / "blobs" / d) for d in ("objects", "tmp", "uploads")} == dict.fromkeys(
        ("objects", "tmp", "uploads"), 0o700)
    assert mode(tmp_path / "data") == 0o700 and mode(tmp_path / "data" / "history.sqlite3") == 0o600
    wal = tmp_path / "data" / "history.sqlite3-wal"
    assert not wal.exists() or mode(wal) == 0o600
    history.close()
