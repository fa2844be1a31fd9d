"""The running event loop without a system call.

On Python 3.11, `asyncio.get_running_loop()` (and `asyncio._get_running_loop()`) asks the kernel for the process id
every time (`getpid`, so that a forked child never takes its parent's loop; 3.12 does this with a fork hook instead):
three such calls a request were three system calls a request on the gateway's path (perf's syscall tracepoints,
docs/benchmarks.md, session 14). An object that works on one loop keeps the loop it found and asks again only when
that loop is not the one running.
"""

from __future__ import annotations

import asyncio


def running_loop(kept: asyncio.AbstractEventLoop | None) -> asyncio.AbstractEventLoop:
    """`kept` when it is running (it is then this thread's: a loop runs in one thread, and the caller runs on one),
    else `asyncio.get_running_loop()` (RuntimeError outside a running loop), for the caller to keep."""
    if kept is not None and kept.is_running():
        return kept
    return asyncio.get_running_loop()
