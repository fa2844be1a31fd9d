"""`mma2a.cpus`: how many workers `--workers auto` starts (CPUs, a cgroup's quota); a worker's event loop bound to one
CPU, the threads it starts later free to run anywhere."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mma2a.cpus import allowed_cpus, cpu_quota, free_thread, pin_loop_thread, usable_cpus

needs_two = pytest.mark.skipif(len(allowed_cpus()) < 2, reason="binding a thread to one CPU of one shows nothing")


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


@needs_two
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


@needs_two
def test_a_cpu_the_process_may_not_run_on_changes_nothing() -> None:
    async def body() -> dict[str, object]:
        return {"pinned": pin_loop_thread(max(allowed_cpus()) + 1, asyncio.get_running_loop()), "loop": mask()}

    got = in_a_loop_thread(body)
    assert got == {"pinned": False, "loop": set(allowed_cpus())}


@needs_two
def test_workers_get_a_cpu_each_only_when_there_is_one_for_each() -> None:
    from mma2a.cli.workers import worker_cpus

    cpus = allowed_cpus()
    n = len(cpus)
    assert worker_cpus(n, None) == tuple(cpus)  # the default: as many workers as CPUs (`--workers auto`)
    assert worker_cpus(n - 1, None) == ()  # fewer: another `serve --workers` would bind to the same first CPUs
    assert worker_cpus(n - 1, True) == tuple(cpus[:n - 1])  # unless asked (`--pin-cpus`)
    assert worker_cpus(n + 1, True) == worker_cpus(n + 1, None) == ()  # more workers than CPUs: never
    assert worker_cpus(n, False) == ()  # `--no-pin-cpus`


def cgroup_v2(tmp: Path, limits: dict[str, str]) -> tuple[Path, Path]:
    """A cgroup v2 tree under `tmp` (`limits`: a cgroup's path -> its cpu.max) and a /proc/self/cgroup naming the
    deepest."""
    root = tmp / "cgroup"
    for path, cpu_max in limits.items():
        d = root / path.strip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.max").write_text(cpu_max + "\n")
    own = tmp / "self_cgroup"
    own.write_text(f"0::{max(limits, key=len)}\n")
    return root, own


def test_the_cgroup_v2_quota_is_the_least_along_the_path(tmp_path: Path) -> None:
    root, own = cgroup_v2(tmp_path, {"/": "max 100000", "/kubepods": "400000 100000", "/kubepods/pod1": "150000 100000",
                                     "/kubepods/pod1/c": "max 100000"})
    assert cpu_quota(root, own) == 1.5  # the pod's 1.5 CPUs binds its container, whose own has no limit
    root, own = cgroup_v2(tmp_path / "none", {"/": "max 100000", "/a": "max 100000"})
    assert cpu_quota(root, own) is None


def test_the_cgroup_v1_cpu_controller_quota_is_read(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    d = root / "cpu,cpuacct" / "docker" / "abc"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text("200000\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    (root / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")
    (root / "cpu,cpuacct" / "cpu.cfs_period_us").write_text("100000\n")
    own = tmp_path / "self_cgroup"
    own.write_text("12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n")
    assert cpu_quota(root, own) == 2.0
    assert cpu_quota(root, tmp_path / "missing") is None  # no /proc/self/cgroup: no limit known


def test_workers_auto_is_what_the_quota_lets_run_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mma2a.cpus as cpus
    from mma2a.cli.workers import worker_count

    n = len(allowed_cpus())
    assert worker_count("auto") == usable_cpus()
    monkeypatch.setattr(cpus, "cpu_quota", lambda: 0.5)  # half a CPU's time: one worker
    assert usable_cpus() == 1 and worker_count("auto") == 1
    monkeypatch.setattr(cpus, "cpu_quota", lambda: 1.2)  # more than one CPU's time: two keep it busy
    assert usable_cpus() == min(n, 2)
    monkeypatch.setattr(cpus, "cpu_quota", lambda: 64.0)  # more time than CPUs: the CPUs
    assert usable_cpus() == n
