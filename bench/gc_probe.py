"""Run the `mma2a` CLI with every garbage collection recorded (bench/gateway_tail.py starts gateways through it).

    python bench/gc_probe.py OUT.jsonl serve --config gateway.yaml

Each collection appends one line to OUT.jsonl, as it ends: [generation, seconds it took, objects
collected, wall time, the thresholds, objects frozen]. Written as they happen, not at exit:
uvicorn ends a SIGTERM'd server by raising the signal again, so exit handlers never run.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from typing import Any, TextIO

_started = [0.0]


def _recorder(out: TextIO) -> Any:
    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            _started[0] = time.perf_counter()
            return
        took = time.perf_counter() - _started[0]
        out.write(json.dumps([info["generation"], took, info["collected"], time.time(), gc.get_threshold(),
                              gc.get_freeze_count()]) + "\n")
        out.flush()

    return on_gc


if __name__ == "__main__":
    gc.callbacks.append(_recorder(open(sys.argv[1], "a", buffering=1)))  # noqa: SIM115 (open for the process's life)
    from mma2a.cli import main

    sys.argv = ["mma2a", *sys.argv[2:]]
    main()
