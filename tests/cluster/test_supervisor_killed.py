"""`mma2a serve --workers 2` whose supervisor is killed outright (SIGKILL, the OOM killer): its workers and its
nats-server go with it (docs/security.md S15-3). Before, they went on serving the port with the config of before,
unsupervised, beside the workers of the next `serve` on it (SO_REUSEPORT): a client removed from the new config was
still served on two connections of three."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from mma2a.cluster import task_files
from mma2a.serving import free_port

from .test_security import TOKENS
from .test_workers import listeners, until_banners, worker_pids

pytestmark = pytest.mark.timeout(300)


def alive(pid: int) -> bool:
    """`pid` runs (a zombie waiting for its new parent to reap it has stopped: it serves nothing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_the_workers_and_their_nats_server_stop_when_the_supervisor_is_killed(tmp_path: Path) -> None:
    port = free_port()
    config = {"listen": f"127.0.0.1:{port}", "features": False, "log_decisions": False, "health_interval_s": 3600,
              "data_dir": str(tmp_path / "data"), "faults": {"drain_timeout_s": 2},
              "auth": {"clients": [{"name": n, "token": t} for n, t in TOKENS.items()]},
              "rules": json.dumps({"version": 1, "rules": []})}
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if k != "MMA2A_URL_SECRET"}
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--workers", "2", "--config", str(path),
                                 "--log-level", "warning"], stdout=out, stderr=subprocess.STDOUT, env=env)
    children: list[int] = []
    try:
        await until_banners(log, proc, 2)
        children = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
        assert sorted(worker_pids(log).values()) == sorted(p for p in children if "mma2a.cli" in Path(
            f"/proc/{p}/cmdline").read_text(errors="replace")) and len(children) == 3  # two workers, the nats-server
        async with httpx.AsyncClient(timeout=30) as c:
            served = await c.post(f"http://127.0.0.1:{port}/", headers={
                "Authorization": f"Bearer {next(iter(TOKENS.values()))}", "A2A-Version": "1.0"},
                json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}})
        assert "result" in served.json(), served.text
        worker_env = Path(f"/proc/{worker_pids(log)[0]}/environ").read_bytes().split(b"\0")
        tasks = Path(next(v for v in worker_env if v.startswith(b"MMA2A_WORKER_TASKS=")).split(b"=", 1)[1].decode())
        nats_pid = next(p for p in children if Path(f"/proc/{p}/comm").read_text().strip() == "nats-server")
        nats_argv = Path(f"/proc/{nats_pid}/cmdline").read_bytes().split(b"\0")
        store = Path(nats_argv[nats_argv.index(b"-sd") + 1].decode())
        assert tasks.is_dir() and store.is_dir()
        proc.kill()  # the supervisor alone: nothing of it runs to stop the others
        proc.wait(30)
        deadline = time.monotonic() + 60
        while any(alive(p) for p in children):  # each got SIGTERM (the workers drain, then exit)
            assert time.monotonic() < deadline, [Path(f"/proc/{p}/cmdline").read_text() for p in children if alive(p)]
            await asyncio.sleep(0.05)
        assert listeners(port) == 0  # before: both workers listened on, with the config of before
        async with httpx.AsyncClient(timeout=5) as c:
            with pytest.raises(httpx.ConnectError):
                await c.get(f"http://127.0.0.1:{port}/healthz")
        # what it left — its task directory (in memory) and its nats-server's store — the next one removes (S15-9)
        task_files.remove_orphans(str(tasks.parent))
        task_files.remove_orphans(str(store.parent), task_files.NATS_PREFIX)
        assert not tasks.exists() and not store.exists()
    finally:
        for pid in [proc.pid, *children]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait(30)
