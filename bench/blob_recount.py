"""What a local blob store's start costs for the quota counts (`LocalBlobStore._count_held`): N blobs with their
sidecars and N/10 uploads written straight into a temporary directory in the store's layout, then the store opened
three times (the directory cache warm after the first). Reruns with: python bench/blob_recount.py [N ...]."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from mma2a.payload import LocalBlobStore


def fill(root: Path, n: int) -> None:
    for i in range(n):
        key = f"{i:064x}"
        sub = root / "objects" / key[:2]
        sub.mkdir(parents=True, exist_ok=True)
        (sub / key).write_bytes(b"x" * 100)
        (sub / f"{key}.json").write_text(json.dumps({"size": 100, "mediaType": "text/plain", "owner": f"c{i % 7}"}))
    (root / "uploads").mkdir(parents=True, exist_ok=True)
    for i in range(n // 10):
        uid = f"{i:032x}"
        (root / "uploads" / f"{uid}.part").write_bytes(b"y" * 10)
        (root / "uploads" / f"{uid}.json").write_text(json.dumps({"mediaType": "text/plain", "owner": "c1"}))


def main() -> None:
    for n in [int(a) for a in sys.argv[1:]] or [10_000]:
        with tempfile.TemporaryDirectory() as d:
            fill(Path(d), n)
            runs = []
            for _ in range(3):
                t0 = time.process_time()
                store = LocalBlobStore(d)
                runs.append(time.process_time() - t0)
            assert store.quota.total == n * 100 + (n // 10) * 10
            print(f"{n} blobs + {n // 10} uploads: open CPU s {' '.join(f'{r:.3f}' for r in runs)}, "
                  f"{1e6 * min(runs) / (n + n // 10):.1f} us per file, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
