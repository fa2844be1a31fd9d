"""bench/heap_census: what each Python process of a bench holds, written as it runs (a diagnosis aid, not a bench).

Put this directory on the processes' path (`PYTHONPATH=$PWD/src:$PWD/bench/heap_census`, which `serve --workers N`
passes on to its workers) with `CENSUS_DIR` set: Python imports `sitecustomize` at start, and every process then
writes one JSON line every `CENSUS_S` seconds (default 20) to `CENSUS_DIR/<pid>.jsonl`, from a thread:
- `argv` (its last three arguments: which process it is), `rss` (MB), `threads`;
- `objects` (what the collector tracks; `gc.freeze`d ones are not), `gc_stats` (collections per generation), `top`
  (the 30 commonest types);
- `exc`: exceptions alive by type and where their traceback starts and ends; `coro`: coroutines alive by name;
- `malloc`: glibc's `mallinfo2` (MB: `arena` the heap, `hblkhd` mmapped blocks, `uordblks` in use, `fordblks` free);
- with `CENSUS_TRIM=1`: `rss_after_trim`, the RSS once `malloc_trim(0)` has given back what it can;
- with `CENSUS_TM=N` (a `serve` process only): tracemalloc from a second after start, N frames: `traced_mb`, `tm` (top
  40 lines) and `tb` (top 8 tracebacks). Slows the process down several times.

    CENSUS_DIR=/tmp/census CENSUS_S=4 PYTHONPATH=$PWD/src:$PWD/bench/heap_census .venv/bin/python bench/connections.py ...
"""

from __future__ import annotations

import os
import sys


def _census(out_dir: str) -> None:
    import collections
    import ctypes
    import gc
    import json
    import threading
    import time
    import tracemalloc

    period = float(os.environ.get("CENSUS_S", "20"))
    out = open(os.path.join(out_dir, f"{os.getpid()}.jsonl"), "a", buffering=1)  # noqa: SIM115 (the process's life)

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                                    "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2

    def rss() -> float:
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
        return 0.0

    def where(exc: BaseException) -> str:
        tb = exc.__traceback__
        if tb is None:
            return ""
        first = tb
        while tb.tb_next is not None:
            tb = tb.tb_next
        name = lambda t: f"{t.tb_frame.f_code.co_filename.rsplit('/', 2)[-1]}:{t.tb_lineno}"  # noqa: E731
        return f"{name(first)}>{name(tb)}"

    def run() -> None:
        time.sleep(1)
        frames = int(os.environ.get("CENSUS_TM", "0"))
        if frames and "serve" in sys.argv:
            tracemalloc.start(frames)
        while True:
            time.sleep(period)
            objs = gc.get_objects()
            row = {"t": time.time(), "argv": sys.argv[-3:], "objects": len(objs),
                   "gc_stats": [s["collections"] for s in gc.get_stats()],
                   "top": collections.Counter(type(o).__name__ for o in objs).most_common(30),
                   "exc": collections.Counter(f"{type(o).__name__} {where(o)}" for o in objs
                                              if isinstance(o, BaseException)).most_common(12),
                   "coro": collections.Counter(o.__qualname__ for o in objs
                                               if type(o).__name__ == "coroutine").most_common(12)}
            del objs
            if tracemalloc.is_tracing():
                snap = tracemalloc.take_snapshot()
                row["traced_mb"] = tracemalloc.get_traced_memory()[0] / 2**20
                row["tm"] = [[str(s.traceback[0]), s.size, s.count] for s in snap.statistics("lineno")[:40]]
                row["tb"] = [[[str(f) for f in s.traceback][:8], s.size, s.count] for s in snap.statistics("traceback")[:8]]
                del snap
            mi = libc.mallinfo2()
            row["malloc"] = {k: round(getattr(mi, k) / 2**20, 1) for k in ("arena", "hblkhd", "uordblks", "fordblks")}
            row["rss"] = rss()
            row["threads"] = len(os.listdir("/proc/self/task"))
            if os.environ.get("CENSUS_TRIM"):
                libc.malloc_trim(0)
                row["rss_after_trim"] = rss()
            out.write(json.dumps(row) + "\n")

    threading.Thread(target=run, name="heap-census", daemon=True).start()


if os.environ.get("CENSUS_DIR"):
    _census(os.environ["CENSUS_DIR"])
