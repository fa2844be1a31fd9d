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
_frozen = [0]  # objects `gc.freeze` moved out of sight, counted once when it ran: `gc.get_freeze_count()` walks them
# all (4-30 ms on a started gateway), which at every collection would add that to the pauses measured here


def _recorder(out: TextIO) -> Any:
    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            _started[0] = time.perf_counter()
            return
        took = time.perf_counter() - _started[0]
        out.write(json.dumps([info["generation"], took, info["collected"], time.time(), gc.get_threshold(),
                              _frozen[0]]) + "\n")
        out.flush()

    return on_gc


def _counting_freeze(freeze: Any) -> Any:
    def counted() -> None:
        freeze()
        _frozen[0] = gc.get_freeze_count()

    return counted


if __name__ == "__main__":
    gc.callbacks.append(_recorder(open(sys.argv[1], "a", buffering=1)))  # noqa: SIM115 (open for the process's life)
    gc.freeze = _counting_freeze(gc.freeze)  # the server's `settle_heap` freezes once: counted then
    from mma2a.cli import main

    sys.argv = ["mma2a", *sys.argv[2:]]
    main()
