"""bench/task_records: what recording one task costs a worker of `serve --workers N` on the request path, in process:
a lone gateway's `TaskMap.put_leg` beside `ClusterTaskMap.put_leg` over the workers' task files (cluster/task_files.py:
the record appended to this worker's file in /dev/shm), for records without an owner (auth off) and for one client
past its byte budget (`limits.task_bytes_per_client`: its oldest record forgotten, and shared as removed, at every
record). With `--before SRC` the same from another source tree, in fresh processes alternating between the trees.

    .venv/bin/python bench/task_records.py [--before /tmp/old/src] [--records 20000] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(m: object, records: int, owner: str | None) -> float:
    route = [{"agent": "fast", "reason": "capability", "modality": "text/plain"}]
    put = m.put_leg  # type: ignore[attr-defined]
    t0 = time.process_time()
    for i in range(records):
        tid = f"task-{i:08d}-xxxxxxxxxxxxxxxxxxxxxx"
        put(tid, "fast", f"ctx-{i:08d}-yyyyyyyyyyyyyyyyyy", route, owner)
    return (time.process_time() - t0) / records * 1e6


async def child(records: int) -> dict[str, float]:
    from mma2a.cluster.tasks import ClusterTaskMap
    from mma2a.gateway.state.tasks import TaskMap

    out = {}
    for owner in (None, "client-a"):
        key = "owner" if owner else "no owner"
        out[f"lone, {key}"] = timed(TaskMap(), records, owner)
        d = tempfile.mkdtemp(dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
        m = ClusterTaskMap(types.SimpleNamespace(id="w0"), files_dir=d)
        await m.open()
        out[f"files, {key}"] = timed(m, records, owner)
        assert m.files is not None
        m.files.close()
        shutil.rmtree(d, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", help="another source tree (a src/ holding mma2a/)")
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.records))))
        return
    trees = {"this": str(ROOT / "src")}
    if args.before:
        trees = {"before": str(Path(args.before).resolve()), **trees}
    got: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
    load = os.getloadavg()[0]
    for _ in range(args.runs):
        for name, src in trees.items():
            out = subprocess.run([sys.executable, __file__, "--child", "--records", str(args.records)],
                                 env={**os.environ, "PYTHONPATH": src}, capture_output=True, text=True, check=True)
            got[name].append(json.loads(out.stdout))
    print(f"us of CPU a record (median of {args.runs} fresh processes, {args.records} records; load {load:.1f} -> "
          f"{os.getloadavg()[0]:.1f}); 'owner': one client past its budget (4 MiB: ~10,000 records)")
    cols = list(got[next(iter(trees))][0])
    print("| tree | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name, rows in got.items():
        print(f"| {name} | " + " | ".join(f"{statistics.median(r[c] for r in rows):.2f}" for c in cols) + " |")


if __name__ == "__main__":
    main()
