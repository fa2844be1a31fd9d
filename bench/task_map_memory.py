"""bench/task_map_memory: what the task map holds in memory at its byte budget (`limits.task_bytes`), in process.

A `TaskMap` with the default budget (16 MiB; `--budget`) is filled with several times what it keeps of one shape of
record, then the heap its records hold is read with tracemalloc (every allocation since the map was made, after a
collection) beside what the map counts (`bytes`) and how many records it keeps:
- `agent_task`: an agent's own task (`put_leg`, the commonest record): UUID-long task and context ids, an owner;
- `agent_task_short`: the same with short ids (the bench's fast agent: `<port>-<n>`), no owner (auth off);
- `fan_out`: a fan-out's record (`put`): two legs and a small aggregate (status, one artifact, the request's ids).
With `--before SRC` the same from another source tree (a `src/` holding mma2a/), in a fresh process each.

    .venv/bin/python bench/task_map_memory.py [--budget 16777216] [--before /tmp/old/src] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OWNER = "jwt:https://issuer.example/alice"
ROUTE = [{"index": 0, "modality": "text/plain", "matched": [], "targets": ["fast"], "via": [[]], "actions": ["capability"],
          "dropped": None, "bottleneck": False}]


def shapes() -> dict[str, Any]:
    from mma2a.gateway.state.tasks import DownstreamTask, TaskRecord

    def agent_task(m: Any, i: int) -> None:
        m.put_leg(f"{i:08d}-0000-4000-8000-000000000000", "fast", f"{i:08d}-ctx0-4000-8000-000000000000", ROUTE, OWNER)

    def agent_task_short(m: Any, i: int) -> None:
        m.put_leg(f"40123-{i}", "fast", f"c-{i}", ROUTE, None)

    def fan_out(m: Any, i: int) -> None:
        gid = f"gw-{i:08d}-0000-4000-8000-000000000000"
        agg = {"id": gid, "contextId": f"{i:08d}-ctx0-4000-8000-000000000000", "status": {"state": "TASK_STATE_COMPLETED"},
               "artifacts": [{"artifactId": f"a-{i}", "parts": [{"text": "an answer of some forty characters each"}]}],
               "history": [{"messageId": f"m-{i}", "role": "ROLE_USER", "parts": [{"text": "hello"}]}]}
        m.put(TaskRecord(gid, [DownstreamTask("vision", f"v-{i:08d}-0000-4000-8000-000000000000"),
                               DownstreamTask("speech", f"s-{i:08d}-0000-4000-8000-000000000000")],
                         aggregate=agg, route=ROUTE, owner=OWNER))

    return {"agent_task": agent_task, "agent_task_short": agent_task_short, "fan_out": fan_out}


def measure(budget: int) -> dict[str, Any]:
    from mma2a.gateway.state.tasks import TaskMap

    out = {}
    for name, make in shapes().items():
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            m = TaskMap(capacity=10**9, max_bytes=budget, max_bytes_per_owner=None)
            for i in range(budget // 100):  # several times what the budget keeps: the oldest go
                make(m, i)
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        out[name] = {"records": len(m), "counted_bytes": m.bytes, "held_bytes": held,
                     "held_over_budget": round(held / budget, 3), "held_per_record": round(held / max(1, len(m)))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=int, default=16 << 20)
    ap.add_argument("--before", help="another source tree (a src/ holding mma2a/)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.budget)))
        return
    trees = {"now": str(ROOT / "src"), **({"before": str(Path(args.before).resolve())} if args.before else {})}
    result: dict[str, Any] = {"budget": args.budget}
    for label, src in trees.items():
        out = subprocess.run([sys.executable, __file__, "--child", "--budget", str(args.budget)], check=True,
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": src}).stdout
        result[label] = json.loads(out)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for label in trees:
        for name, r in result[label].items():
            print(f"{label:6s} {name:16s} {r['records']:7d} records kept, held {r['held_bytes'] / 2**20:6.1f} MiB "
                  f"({r['held_over_budget']:.2f}x the budget, {r['held_per_record']} B a record; counted "
                  f"{r['counted_bytes'] / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
