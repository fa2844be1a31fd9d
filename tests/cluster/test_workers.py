"""`mma2a serve --workers 2`: two gateway processes on one port (SO_REUSEPORT) over the nats-server the command
starts itself. A task is answered to its owner whichever worker a follow-up reaches — each worker is killed in
turn, so one that did not make the task answers for it — and a killed worker is started again; a stream made on one
worker and dropped is resumed on the other after the first dies."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from a2a.types import GetTaskRequest, SubscribeToTaskRequest, TaskState
from a2a.utils.errors import TaskNotFoundError

from mma2a.serving import free_port
from tests.agents import RecordingExecutor, Stepper, make_card, run_agent, streaming_card

from .conftest import task_sharing, text_message
from .test_cross_worker import sdk, state, stream_until_first, texts
from .test_security import TOKENS, bearer, rpc

pytestmark = pytest.mark.timeout(300)


def banners(log: Path) -> int:
    return log.read_text(errors="replace").count("mma2a gateway on ")


def worker_pids(log: Path) -> dict[int, int]:
    """The pid each worker index runs as now (the supervisor says so at every start)."""
    return {int(i): int(p) for i, p in re.findall(r"worker (\d+) pid (\d+)", log.read_text(errors="replace"))}


async def until_banners(log: Path, proc: subprocess.Popen[bytes], n: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while banners(log) < n:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{n} workers not listening (exit {proc.poll()}):\n{log.read_text()[-3000:]}")
        await asyncio.sleep(0.05)


def listeners(port: int) -> int:
    """Sockets listening on 127.0.0.1:`port` (/proc/net/tcp: state 0A)."""
    local = f"0100007F:{port:04X}"
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for r in rows if r.split()[1] == local and r.split()[3] == "0A")


async def until_indexed(path: Path, ids: set[str], timeout_s: float = 30.0) -> dict[str, int]:
    """How many rows of the history file hold each message id, once it holds them all."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.closing(sqlite3.connect(path, timeout=10)) as db:
            rows = db.execute("SELECT message_id, COUNT(*) FROM decisions GROUP BY message_id").fetchall()
        counts = {m: n for m, n in rows if m in ids}
        if set(counts) == ids:
            return counts
        if time.monotonic() > deadline:
            raise AssertionError(f"history holds {sorted(counts)} of {sorted(ids)}")
        await asyncio.sleep(0.05)


async def until_listeners(port: int, n: int, timeout_s: float = 30.0) -> None:
    """Until `n` sockets listen on the port (a killed worker's socket is closed once its last thread is gone)."""
    deadline = time.monotonic() + timeout_s
    while listeners(port) != n:
        if time.monotonic() > deadline:
            raise AssertionError(f"{listeners(port)} sockets listen on {port}, not {n}")
        await asyncio.sleep(0.01)


# what the supervisor must not hold: it only waits (the command checks the config, then becomes the supervisor)
GATEWAY_MODULES = {"mma2a.cli", "mma2a.gateway", "mma2a.gateway.app", "mma2a.gateway.config", "mma2a.serving",
                   "mma2a.cluster.state", "mma2a.payload", "mma2a.features", "typer", "pydantic", "uvicorn",
                   "starlette", "aiohttp", "httpx", "a2a", "nats", "grpc", "google.protobuf", "opentelemetry",
                   "prometheus_client", "numpy", "PIL",
                   # nor routing and the wire types (`mma2a`'s public names load on first use)
                   "mma2a.routing", "mma2a.routing.engine", "mma2a.ext", "mma2a.modality", "mma2a.view",
                   "mma2a.schemas", "mma2a.sdk", "yaml", "orjson",
                   "hashlib"}  # its tokens are os.urandom's bytes, as `secrets` makes them, without OpenSSL's libcrypto
# the shared libraries of what it must not hold (read from the running supervisor's /proc/PID/maps)
GATEWAY_LIBRARIES = ("pydantic_core", "uvloop", "httptools", "aiohttp", "yarl", "multidict", "grpc", "_upb",
                     "cryptography", "numpy", "PIL", "_hashlib", "libcrypto")


def check_supervisor(pid: int) -> None:
    """The running supervisor of `serve --workers N` is `python -m mma2a.supervisor` (the same pid the command
    started as) and has none of the gateway's shared libraries mapped: it only waits."""
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[1:] == [b"-m", b"mma2a.supervisor", b""], cmdline  # nothing more: its plan is in its environment
    mapped = {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines() if "/" in line}
    held = sorted(path for path in mapped if any(lib in path for lib in GATEWAY_LIBRARIES))
    assert not held, held


def test_the_supervisor_imports_none_of_the_gateway() -> None:
    """`python -m mma2a.supervisor` in a fresh process: the standard library, the nats-server starter, the task
    directory and the listen socket; no gateway, command line, config code, web server, routing or OpenSSL (~16 MB
    resident where the supervisor held ~66-69, then ~23: docs/benchmarks.md)."""
    probe = "import json, sys; import mma2a.supervisor; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    loaded = set(json.loads(out.stdout))
    assert {"mma2a.supervisor", "mma2a.cluster.server", "mma2a.cluster.task_files", "mma2a.listen"} <= loaded
    assert not GATEWAY_MODULES & loaded, sorted(GATEWAY_MODULES & loaded)


def cpus_allowed(pid: int, tid: int) -> str:
    status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    return re.search(r"^Cpus_allowed_list:\s*(\S+)", status, re.M).group(1)  # type: ignore[union-attr]


def check_pinned(log: Path) -> None:
    """With `--pin-cpus`, on a host with a CPU for each worker, worker i's event loop (its main thread) runs on the i-th
    CPU the test may use, and its other threads (the history writer, the pools' threads) anywhere; on a smaller one,
    every thread anywhere."""
    allowed = sorted(os.sched_getaffinity(0))
    everywhere = cpus_allowed(os.getpid(), os.getpid())
    for index, pid in worker_pids(log).items():
        loop = cpus_allowed(pid, pid)
        assert loop == (str(allowed[index]) if len(allowed) >= 2 else everywhere), (index, loop)
        others = {cpus_allowed(pid, int(t.name)) for t in Path(f"/proc/{pid}/task").iterdir() if int(t.name) != pid}
        assert others == {everywhere}, others  # (Python 3.11 leaves a thread's name to the process: not told apart)


@dataclass
class Served:
    """`mma2a serve --workers 2` running: its port, URL, supervisor process and log."""

    port: int
    url: str
    proc: subprocess.Popen[bytes]
    log: Path


@contextlib.asynccontextmanager
async def serve_workers(tmp_path: Path, agent: str, agent_url: str, extra: dict[str, Any] | None = None,
                        args: tuple[str, ...] = ()) -> AsyncIterator[Served]:
    """`serving_workers` with auth on and every message routed to `agent` (`extra`: more of the config; `args`: more of
    the command line)."""
    config: dict[str, Any] = {
        "features": False, "log_decisions": False, "health_interval_s": 3600, "timeout_s": 20, "retries": 0,
        "auth": {"clients": [{"name": n, "token": t} for n, t in TOKENS.items()]},
        "agents": [{"name": agent, "url": agent_url}],
        "rules": json.dumps({"version": 1, "rules": [
            {"name": agent, "match": {"modality": "*/*"}, "action": {"route_to": agent}}]}),
        **(extra or {}),
    }
    async with serving_workers(tmp_path, config, args) as served:
        yield served


@contextlib.asynccontextmanager
async def serving_workers(tmp_path: Path, config: dict[str, Any], args: tuple[str, ...] = ()) -> AsyncIterator[Served]:
    """`mma2a serve --workers 2` with `config` (its `listen` a free port, its `data_dir` in `tmp_path`), until both
    workers listen, its supervisor holding none of the gateway (`check_supervisor`); it must stop cleanly (status 0)
    on SIGTERM at the end."""
    port = free_port()
    config = {"listen": f"127.0.0.1:{port}", "data_dir": str(tmp_path / "data"), **config}
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if k != "MMA2A_URL_SECRET"}  # the supervisor makes one
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--workers", "2", "--config", str(path),
                                 "--pin-cpus", "--log-level", "warning", *args], stdout=out, stderr=subprocess.STDOUT,
                                env=env)
    try:
        await until_banners(log, proc, 2)
        check_supervisor(proc.pid)
        yield Served(port, f"http://127.0.0.1:{port}", proc, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0, log.read_text()[-3000:]


async def test_serve_with_two_workers_answers_a_task_whichever_worker_gets_the_follow_up(tmp_path: Path) -> None:
    async with run_agent(make_card("echo"), RecordingExecutor(echo=True)) as agent_url, \
            serve_workers(tmp_path, "echo", agent_url) as served:
        port, url, proc, log = served.port, served.url, served.proc, served.log
        # each worker and the nats-server in a process group of its own (a terminal's ^C reaches the supervisor
        # alone, which drains the workers, then stops NATS), the workers in the supervisor's session (a session
        # is a scheduling group of its own under the kernel's autogroup: docs/operations.md)
        children = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
        names = [Path(f"/proc/{p}/comm").read_text().strip() for p in children]
        assert len(children) == 3 and names.count("nats-server") == 1, names  # two workers and the nats-server
        for child in children:
            assert os.getpgid(child) == child and os.getsid(child) == os.getsid(proc.pid)
        check_pinned(log)
        fresh = httpx.Limits(max_keepalive_connections=0)  # every request on a new connection: any worker
        async with httpx.AsyncClient(timeout=30, limits=fresh) as c:
            task = (await rpc(c, url, "alice", "SendMessage", {"message": text_message("hello")}))["result"]["task"]
            ctx = task["contextId"]
            for _ in range(6):  # each on a new connection, so on either worker: the one that did not make the task
                # reads it from the other's task files when first asked (a context, a listing, the task), for its
                # owner alone
                in_context = text_message("in alice's context")
                in_context["contextId"] = ctx
                refused = await rpc(c, url, "bob", "SendMessage", {"message": in_context})
                assert refused["error"]["message"] == f"params.message.contextId: context '{ctx}' belongs to another client"
                listed = await rpc(c, url, "alice", "ListTasks", {})
                assert task["id"] in {t["id"] for t in listed["result"]["tasks"]}, listed
                assert task["id"] not in {t["id"] for t in (await rpc(c, url, "bob", "ListTasks", {}))["result"]["tasks"]}
                assert (await rpc(c, url, "alice", "GetTask", {"id": task["id"]}))["result"]["id"] == task["id"]
                assert (await rpc(c, url, "bob", "GetTask", {"id": task["id"]}))["error"]["code"] == -32001
            sent = [text_message(f"m{i}") for i in range(6)]
            for m in sent:
                assert "result" in await rpc(c, url, "alice", "SendMessage", {"message": m})
            # the workers share one history file, which one of them indexes: every decision in it, once
            counts = await until_indexed(tmp_path / "data" / "history.sqlite3", {m["messageId"] for m in sent})
            assert set(counts.values()) == {1}, counts
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=1)) as one:
            # on one connection, so on one worker: the task records it shared through the files, in its /metrics
            local = set()
            for i in range(3):
                r = await one.post(url + "/", headers=bearer("alice"), json={
                    "jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": text_message(f"one {i}")}})
                assert "result" in r.json(), r.text
                local.add(r.extensions["network_stream"].get_extra_info("client_addr"))
            r = await one.get(url + "/metrics", headers=bearer("alice"))
            local.add(r.extensions["network_stream"].get_extra_info("client_addr"))
            assert len(local) == 1, local  # one connection throughout: the worker that made the three answers
            shared = task_sharing(r.text)
            assert shared["via"] == "files" and shared["records"] >= 3 and shared["batches"] == shared["records"], shared
            assert shared["unshared"] == shared["unsharedNow"] == 0, shared
        async with httpx.AsyncClient(timeout=30, limits=fresh) as c:
            for n, index in ((3, 0), (4, 1)):  # each worker killed in turn: the other answers alone meanwhile
                pid = worker_pids(log)[index]
                os.kill(pid, signal.SIGKILL)
                await until_listeners(port, 1)  # its socket closed: connections go to the other worker only
                for _ in range(4):
                    got = await rpc(c, url, "alice", "GetTask", {"id": task["id"]})
                    assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED", got
                cancel = await rpc(c, url, "alice", "CancelTask", {"id": task["id"]})
                assert cancel["error"]["code"] == -32002, cancel  # found, and the agent asked: not cancelable
                follow = text_message("again")
                follow["taskId"] = task["id"]
                again = await rpc(c, url, "bob", "SendMessage", {"message": follow})
                assert again["error"]["code"] == -32001, again
                await until_banners(log, proc, n)  # the killed worker started again and listening
        assert len(worker_pids(log)) == 2 and log.read_text().count("starting it again") == 2
        check_pinned(log)  # a worker started again runs its loop on its CPU again
        assert "mma2a serve: 2 workers on 127.0.0.1:" in log.read_text()


async def test_a_stream_made_on_one_worker_resumes_on_the_other_after_its_worker_dies(tmp_path: Path) -> None:
    """Which worker the kernel gives a connection is its choice, so the test makes it certain: with worker 0 killed the
    stream is made on worker 1 (the only listener) and dropped; worker 0 comes back, worker 1 is killed, and worker 0
    (now the only listener) answers GetTask and SubscribeToTask with the rest of the stream, for its owner only."""
    stepper = Stepper()
    async with run_agent(streaming_card("stepper"), stepper) as agent_url, \
            serve_workers(tmp_path, "stepper", agent_url) as served:
        port, url, proc, log = served.port, served.url, served.proc, served.log
        os.kill(worker_pids(log)[0], signal.SIGKILL)
        await until_listeners(port, 1)  # worker 1 alone: the stream is made there
        async with sdk(url, "alice") as alice:
            tid = await stream_until_first(alice, "on-worker-1")
        await until_banners(log, proc, 3)  # worker 0 is back and listening
        await until_listeners(port, 2)
        os.kill(worker_pids(log)[1], signal.SIGKILL)  # the worker that made the task dies
        await until_listeners(port, 1)  # worker 0 alone: every call below reaches it
        async with sdk(url, "alice") as alice, sdk(url, "bob") as bob:
            with pytest.raises(TaskNotFoundError):
                await bob.get_task(GetTaskRequest(id=tid))
            got = await alice.get_task(GetTaskRequest(id=tid))
            assert got.status.state == TaskState.TASK_STATE_WORKING
            assert [p.text for a in got.artifacts for p in a.parts] == ["first: on-worker-1"]
            resumed = alice.subscribe(SubscribeToTaskRequest(id=tid))
            assert state(await anext(resumed)) == TaskState.TASK_STATE_WORKING
            stepper.gate("on-worker-1").set()
            rest = [e async for e in resumed]
            assert "second: on-worker-1" in [t for e in rest for t in texts(e)], rest
            assert state(rest[-1]) == TaskState.TASK_STATE_COMPLETED, rest[-1]




def test_serve_with_workers_says_a_bad_config_or_a_taken_port_as_serve_does_and_starts_nothing(tmp_path: Path) -> None:
    """The config is checked before the command becomes the supervisor, and so before anything starts: the same one
    line as `serve`, status 2, no traceback, no nats-server or worker; so is a port another process holds (said by the
    supervisor)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("listn: 127.0.0.1:1\n")

    def serve(*args: str) -> tuple[int, str]:
        out = subprocess.run([sys.executable, "-m", "mma2a.cli", "serve", *args], capture_output=True, text=True,
                             timeout=120)
        return out.returncode, out.stderr

    said = f"error: {bad}: listn: unknown field; did you mean 'listen'?\n"
    assert serve("--config", str(bad)) == (2, said)
    assert serve("--workers", "2", "--config", str(bad)) == (2, said)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = serve("--workers", "2", "--port", str(port))
    assert (code, err) == (2, f"error: cannot listen on 127.0.0.1:{port}: address already in use (another process "
                              "listens there); choose another with --port or `listen:` in the config\n")
