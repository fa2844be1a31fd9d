"""`mma2a.affinity`: a worker's event loop bound to one CPU, the threads it starts later free to run anywhere."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from mma2a.affinity import allowed_cpus, free_thread, pin_loop_thread

pytestmark = pytest.mark.skipif(len(allowed_cpus()) < 2, reason="binding a thread to one CPU of one shows nothing")


def mask() -> set[int]:
    return os.sched_getaffinity(0)  # the calling thread's


def in_a_loop_thread(body: Callable[[], Awaitable[dict[str, object]]]) -> dict[str, object]:
    """`body()` run on an event loop in a thread of its own (the test's own thread stays free)."""
    out: dict[str, object] = {}

    async def main() -> None:
        out.update(await body())

    def run() -> None:
        asyncio.run(main())

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out


def test_the_loop_thread_is_bound_and_the_threads_it_starts_with_free_thread_run_anywhere() -> None:
    everywhere = set(allowed_cpus())
    cpu = allowed_cpus()[-1]

    async def body() -> dict[str, object]:
        pinned = pin_loop_thread(cpu, asyncio.get_running_loop())
        with ThreadPoolExecutor(1, initializer=free_thread) as freed, ThreadPoolExecutor(1) as inherited:
            return {"pinned": pinned, "loop": mask(), "to_thread": await asyncio.to_thread(mask),
                    "freed": freed.submit(mask).result(), "inherited": inherited.submit(mask).result()}

    got = in_a_loop_thread(body)
    assert got["pinned"] is True and got["loop"] == {cpu}
    assert got["to_thread"] == everywhere  # asyncio's default executor, replaced by one whose threads are free
    assert got["freed"] == everywhere
    assert got["inherited"] == {cpu}  # what a pool without `free_thread` would get: the reason for it
    assert mask() == everywhere  # the test's own thread untouched


def test_a_cpu_the_process_may_not_run_on_changes_nothing() -> None:
    async def body() -> dict[str, object]:
        return {"pinned": pin_loop_thread(max(allowed_cpus()) + 1, asyncio.get_running_loop()), "loop": mask()}

    got = in_a_loop_thread(body)
    assert got == {"pinned": False, "loop": set(allowed_cpus())}


def test_workers_get_a_cpu_each_only_when_there_is_one_for_each() -> None:
    from mma2a.cli.workers import worker_cpus

    cpus = allowed_cpus()
    n = len(cpus)
    assert worker_cpus(n, None) == tuple(cpus)  # the default: as many workers as CPUs (`--workers auto`)
    assert worker_cpus(n - 1, None) == ()  # fewer: another `serve --workers` would bind to the same first CPUs
    assert worker_cpus(n - 1, True) == tuple(cpus[:n - 1])  # unless asked (`--pin-cpus`)
    assert worker_cpus(n + 1, True) == worker_cpus(n + 1, None) == ()  # more workers than CPUs: never
    assert worker_cpus(n, False) == ()  # `--no-pin-cpus`
