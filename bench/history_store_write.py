"""bench/history_store_write: the history writer's CPU per decision in `HistoryStore.write` (what the writer process
spends; off the request path), 100,000 decisions in batches of 500 as the recorder frames them: 9 modalities, 8
agents, 12 rules, and `--senders` clients interleaved in every batch (bench/history.py's mix). Since S17-1 a shape is
its client's, so a batch of many clients' alike decisions stores and looks up a shape per client (docs/security.md).
Compare two source trees by running it with each on PYTHONPATH.

    PYTHONPATH=src .venv/bin/python bench/history_store_write.py [--senders 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile
import time

from mma2a.gateway.history import DecisionRecord, HistoryStore, PartSummary, to_row
from mma2a.gateway.history.record import ShapeMemo
from mma2a.routing import PartRoute, Target

MODALITIES = ["text/plain", "image/png", "image/jpeg", "audio/wav", "audio/ogg", "video/mp4", "application/pdf",
              "model/gltf+json", "text/markdown"]


def decision(i: int, senders: int) -> DecisionRecord:
    m = MODALITIES[i % 9]
    route = PartRoute(0, m, (f"r{i % 12}",), (Target(f"agent{i % 8}", ()),), ("route_to",))
    return DecisionRecord(f"m{i}", time.time() - 3600 + i * 0.01, f"client{i % senders}", (PartSummary(0, m, {}),),
                          (route,), "TASK_STATE_COMPLETED", 0.01)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--senders", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--decisions", type=int, default=100_000)
    args = ap.parse_args()
    memo = ShapeMemo()
    rows = [to_row(decision(i, args.senders), memo) for i in range(args.decisions)]
    per = []
    for _ in range(args.rounds):
        store = HistoryStore(pathlib.Path(tempfile.mkdtemp()) / "h.sqlite3")
        t = time.process_time()
        for start in range(0, len(rows), 500):
            store.write(rows[start:start + 500])
        per.append((time.process_time() - t) / len(rows) * 1e6)
        shapes = store._read("SELECT COUNT(*) FROM shapes", ())[0][0]
        store.close()
    print(f"senders {args.senders}: {', '.join(f'{p:.2f}' for p in per)} us of CPU a decision; {shapes} shapes stored")


if __name__ == "__main__":
    main()
