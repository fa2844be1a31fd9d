"""One CPU for each worker's event loop (`serve --workers N`), every other thread free to run anywhere.

The supervisor gives worker i the i-th CPU this host lets it run on (when there are at least as many as workers:
`Plan.cpus`); once the worker serves, `pin_loop_thread` binds the thread running its event loop to that CPU. Every
request of a worker runs on that thread, and unpinned the kernel moved the two loops of a 2-core host between the
cores as wrk and the agent woke (cold caches after each move) and at times ran both on one core: pinned, on this
machine, `--workers 2` served 1.04-1.06x the requests at 0.98-0.99x the CPU a request of unpinned workers on an idle
host, and 1.2-1.4x at 0.92x beside the other sessions' load (docs/benchmarks.md).

Only the loop's thread is bound. A thread inherits the mask of the thread that starts it, so the pools a worker starts
later from its loop (the perception models', the JSON body's, the resolver's, asyncio's default executor) first run
`free_thread`: the models of one busy worker may still use every core the others leave idle. Threads a library starts
from the loop thread itself (gRPC's, once `grpc_listen` serves) share its CPU.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

_free: frozenset[int] | None = None  # the CPUs this process could run on before its loop thread was bound (None: not)


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on, in order (its affinity mask: a container's cpuset, `taskset`); [] where the
    platform has no affinity."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def pin_loop_thread(cpu: int, loop: asyncio.AbstractEventLoop) -> bool:
    """Bind the calling thread (the one running `loop`) to `cpu`, and give `loop` a default executor whose threads run
    anywhere. False, and nothing changed, when `cpu` is not one this process may run on (the host's CPUs changed since
    the supervisor looked)."""
    global _free
    free = frozenset(allowed_cpus())
    if cpu not in free:
        return False
    _free = free
    os.sched_setaffinity(0, {cpu})  # 0: the calling thread (Linux affinity is a thread's)
    loop.set_default_executor(ThreadPoolExecutor(initializer=free_thread, thread_name_prefix="asyncio"))
    return True


def free_thread() -> None:
    """A pool's thread initializer: this thread runs on every CPU its process could before its loop was bound."""
    if _free is not None:
        os.sched_setaffinity(0, _free)
