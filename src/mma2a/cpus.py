"""The CPUs a process may use, and one of them for each worker's event loop (`serve --workers N`).

How many: `usable_cpus` is what `--workers auto` starts, the CPUs this process may run on (its affinity mask: a
container's cpuset, `taskset`) or fewer where its cgroup grants less CPU time than that (`cpu_quota`: a container's
CPU limit, a Kubernetes pod's `limits.cpu`), rounded up — a pod limited to 2 CPUs on a 64-core node starts 2 workers,
not 64 that would share the time of 2.

Which: the supervisor gives worker i the i-th CPU this host lets it run on (when there are exactly as many as workers,
or when asked: `Plan.cpus`); once the worker serves, `pin_loop_thread` binds the thread running its event loop to that
CPU. Every request of a worker runs on that thread; left to the kernel, it moves the loops between the cores as other
processes wake (docs/benchmarks.md, "`serve --workers 2` in session 15", counts the moves and what binding saves).

`serve --pin-cpus` with one process binds its loop the same way, to the first CPU it may run on.

Only the loop's thread is bound. A thread inherits the mask of the thread that starts it, so the pools a worker starts
later from its loop (the perception models', the JSON body's, the resolver's, asyncio's default executor) first run
`free_thread`: the models of one busy worker may still use every core the others leave idle. Threads started before
the worker serves (the history writer's, gRPC's) were never bound; a thread a library starts later from the loop
thread itself shares its CPU. The loop's default executor is given as the loop starts (`free_default_executor`), so
it is the one executor for the loop's life: asyncio would make its own at the first `to_thread` (a DNS look-up at
start), and one given later left that one's threads idle until the process exited (uvloop has no handle to it).
"""

from __future__ import annotations

import asyncio
import math
import os
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_free: frozenset[int] | None = None  # the CPUs this process could run on before its loop thread was bound (None: not)
_given: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()  # loops given `free_default_executor`


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on, in order (its affinity mask: a container's cpuset, `taskset`); [] where the
    platform has no affinity."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def cpu_quota(cgroups: Path = Path("/sys/fs/cgroup"), own: Path = Path("/proc/self/cgroup")) -> float | None:
    """The CPUs' worth of time this process's cgroup grants it (quota / period: 1.5 is one and a half CPUs), the least
    along its path to the root (a parent's limit binds its children); None where none is set or none can be read.
    cgroup v2 (`cpu.max`: "QUOTA PERIOD", "max" for none) and v1's `cpu` controller (`cpu.cfs_quota_us`, -1 for none,
    and `cpu.cfs_period_us`)."""
    try:
        lines = own.read_text().splitlines()
    except OSError:
        return None
    found: list[float] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: one hierarchy
            for d in _up(cgroups, path):
                found += _ratio(d / "cpu.max", None)
        elif "cpu" in controllers.split(","):  # v1: the cpu controller's hierarchy (mounted as cpu or cpu,cpuacct)
            for name in (controllers, "cpu", "cpu,cpuacct"):
                if (cgroups / name).is_dir():
                    for d in _up(cgroups / name, path):
                        found += _ratio(d / "cpu.cfs_quota_us", d / "cpu.cfs_period_us")
                    break
    return min(found) if found else None


def _up(root: Path, path: str) -> list[Path]:
    """The cgroup directory of `path` under `root` and each of its parents up to `root` (those that exist: a
    container sees its own cgroup as its root)."""
    parts = [p for p in path.split("/") if p]
    dirs = [root.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]
    return [d for d in dirs if d.is_dir()]


def _ratio(quota_file: Path, period_file: Path | None) -> list[float]:
    """[quota / period] when the file(s) set a limit, else []."""
    try:
        if period_file is None:  # v2's cpu.max: "max 100000" or "150000 100000"
            quota, _, period = quota_file.read_text().strip().partition(" ")
        else:
            quota, period = quota_file.read_text().strip(), period_file.read_text().strip()
        q, p = int(quota), int(period)
    except (OSError, ValueError):  # no such file, "max", unreadable
        return []
    return [q / p] if q > 0 and p > 0 else []


def usable_cpus() -> int:
    """How many CPUs this process can keep busy: those it may run on, or its cgroup's time for fewer, rounded up
    (at least 1)."""
    cpus = len(allowed_cpus()) or os.cpu_count() or 1
    quota = cpu_quota()
    return max(1, min(cpus, math.ceil(quota - 1e-9))) if quota is not None else cpus


def free_default_executor(loop: asyncio.AbstractEventLoop) -> None:
    """Give `loop`, before anything runs on it, the default executor it keeps: its threads run `free_thread` first
    (nothing while the loop's thread is unbound; every CPU the process could use once it is)."""
    loop.set_default_executor(ThreadPoolExecutor(initializer=free_thread, thread_name_prefix="asyncio"))
    _given.add(loop)


def pin_loop_thread(cpu: int, loop: asyncio.AbstractEventLoop) -> bool:
    """Bind the calling thread (the one running `loop`) to `cpu`; the loop's default executor runs its threads
    anywhere (given at the start by `free_default_executor`, as `serve` does; else given now, and one asyncio made
    before stays as it is). False, and nothing changed, when `cpu` is not one this process may run on (the host's
    CPUs changed since the supervisor looked)."""
    global _free
    free = frozenset(allowed_cpus())
    if cpu not in free:
        return False
    _free = free
    os.sched_setaffinity(0, {cpu})  # 0: the calling thread (Linux affinity is a thread's)
    if loop not in _given:
        free_default_executor(loop)
    return True


def free_process(pid: int) -> None:
    """A child process started by a bound thread (it inherits that thread's CPU) runs on every CPU its parent could
    (the history's writer process: beside its worker's loop, not on its CPU)."""
    if _free is not None:
        os.sched_setaffinity(pid, _free)


def free_thread() -> None:
    """A pool's thread initializer: this thread runs on every CPU its process could before its loop was bound."""
    if _free is not None:
        os.sched_setaffinity(0, _free)
