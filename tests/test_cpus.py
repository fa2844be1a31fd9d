"""`mma2a.cpus`: how many workers `--workers auto` starts (CPUs, a cgroup's quota); a worker's event loop bound to one
CPU, the threads it starts later free to run anywhere."""

from __future__ import annotations

import asyncio
import os
import time
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mma2a.cpus import allowed_cpus, cpu_quota, free_default_executor, free_thread, pin_loop_thread, usable_cpus

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
def test_the_loop_keeps_one_default_executor_whose_threads_run_anywhere_before_and_after_binding() -> None:
    """`serve` gives the loop its default executor as it starts: the thread a `to_thread` started before the loop
    was bound (a DNS look-up at start) serves after it too, and one started after runs anywhere (before: binding gave
    the loop a new executor, and the first one's threads stayed idle until the process exited)."""
    everywhere = set(allowed_cpus())
    cpu = allowed_cpus()[-1]

    async def body() -> dict[str, object]:
        loop = asyncio.get_running_loop()
        first = await asyncio.to_thread(threading.get_ident)
        pinned = pin_loop_thread(cpu, loop)
        both = threading.Barrier(2, timeout=60)  # two calls at once: the executor must start a second thread

        def met() -> tuple[int, frozenset[int]]:
            both.wait()
            return threading.get_ident(), frozenset(mask())

        after = await asyncio.gather(asyncio.to_thread(met), asyncio.to_thread(met))
        return {"pinned": pinned, "loop": mask(), "first": first, "after": after}

    out: dict[str, object] = {}

    def run() -> None:
        with asyncio.Runner() as runner:
            free_default_executor(runner.get_loop())
            out.update(runner.run(body()))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    after = out["after"]
    assert out["pinned"] is True and out["loop"] == {cpu}
    assert isinstance(after, list) and len({ident for ident, _ in after}) == 2
    assert out["first"] in {ident for ident, _ in after}  # the one executor: its first thread not left idle
    assert [cpus for _, cpus in after] == [everywhere, everywhere]  # the new thread too


@needs_two
def test_serve_pin_cpus_with_one_process_binds_its_loop_and_leaves_its_other_threads_free(tmp_path: Path) -> None:
    """`mma2a serve --pin-cpus` (one process; it used to accept the flag and bind nothing): its event loop's thread
    on the first CPU it may use, said in one line; every other thread anywhere (asyncio's executor's, started to store
    a blob once it was bound)."""
    import re
    import subprocess
    import sys

    cfg = tmp_path / "gateway.yaml"
    cfg.write_text("listen: 127.0.0.1:0\nfeatures: false\nlog_decisions: false\n")
    import mma2a

    env = {**os.environ, "PYTHONPATH": str(Path(mma2a.__file__).parents[1])}  # these sources, from any directory
    proc = subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--config", str(cfg), "--pin-cpus",
                             "--log-level", "warning"], stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        while not lines or "mma2a gateway on " not in lines[-1]:  # the banner once it serves
            lines.append(proc.stderr.readline())
            assert lines[-1], f"serve exited with {proc.wait()}: {lines}"

        port = re.search(r"mma2a gateway on http://127\.0\.0\.1:(\d+) ", lines[-1]).group(1)  # type: ignore[union-attr]
        import httpx  # a blob stored: threads of asyncio's default executor started after the binding

        stored = httpx.post(f"http://127.0.0.1:{port}/blobs", content=b"x" * 100_000, timeout=30,
                            headers={"Content-Type": "application/octet-stream"})
        assert stored.status_code == 201, stored.text

        def allowed(tid: int, pid: int = proc.pid) -> str:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
            return re.search(r"^Cpus_allowed_list:\s*(\S+)", status, re.M).group(1)  # type: ignore[union-attr]

        refused = httpx.post(f"http://127.0.0.1:{port}/", timeout=30, headers={"A2A-Version": "1.0"}, json={  # a decision
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}})  # no agent: refused, recorded
        assert refused.status_code == 200 and "error" in refused.json(), refused.text
        writers: list[int] = []
        deadline = time.monotonic() + 30
        while not writers:  # the history's writer process starts with the first decision to write
            assert time.monotonic() < deadline, "no history writer process"
            writers = [int(c) for t in Path(f"/proc/{proc.pid}/task").iterdir()
                       for c in (t / "children").read_text().split()]
            time.sleep(0.02)
        everywhere = Path(f"/proc/{os.getpid()}/status").read_text().split("Cpus_allowed_list:")[1].split()[0]
        writer = allowed(writers[0], writers[0])
        while writer != everywhere and time.monotonic() < deadline:  # freed once the gateway has its pid: it was
            time.sleep(0.02)  # read once in the instant between the spawn (from the bound thread) and the freeing
            writer = allowed(writers[0], writers[0])
        loop = allowed(proc.pid)
        others = {allowed(int(t.name)) for t in Path(f"/proc/{proc.pid}/task").iterdir() if int(t.name) != proc.pid}
    finally:
        proc.terminate()
        proc.wait(60)
    first = allowed_cpus()[0]
    assert f"mma2a serve: event loop on CPU {first} (--pin-cpus), its other threads on any\n" in lines
    assert loop == str(first)  # before: every CPU
    assert others and others == {everywhere}, others
    assert writer == everywhere  # started from the bound loop thread, then freed


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
