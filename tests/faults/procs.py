"""Real processes for fault tests: an a2a-sdk agent (`python -m tests.faults.procs agent ...`) that logs every
message it receives and completes, and a gateway (`mma2a serve`) from a config file.

The agent appends `got <messageId>` when a message arrives and `done <messageId>` when it
answers, flushing each line, so a test can tell delivered from completed after a kill.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _agent_main(port: int, name: str, delay: float, log: str) -> None:
    from a2a.helpers.proto_helpers import new_task_from_user_message
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.tasks import TaskUpdater
    from a2a.types import Part

    from mma2a.agents.runtime import agent_app, make_card
    from mma2a.serving import Server, uvicorn_config

    out = open(log, "a", buffering=1)

    class Slow(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            assert context.message is not None
            mid = context.message.message_id
            out.write(f"got {mid}\n")
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
            await asyncio.sleep(delay)
            updater = TaskUpdater(event_queue, task.id, task.context_id)
            await updater.complete(updater.new_agent_message([Part(text=f"{name} did {mid}")]))
            out.write(f"done {mid}\n")

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            return None

    card = make_card(name, "slow test agent", input_modes=["text/plain"], output_modes=["text/plain"], skill="slow")
    Server(uvicorn_config(agent_app(card, Slow(), f"http://127.0.0.1:{port}/"), "127.0.0.1", port)).run()


def free_port() -> int:
    from mma2a.serving import free_port as fp

    return fp()


def wait_up(url: str, path: str = "/.well-known/agent-card.json", timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + path, timeout=1).status_code == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@contextlib.contextmanager
def agent_process(name: str, log: Path, *, delay: float = 0.0) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.faults.procs", "agent", "--port", str(port), "--name", name,
                             "--delay", str(delay), "--log", str(log)], cwd=ROOT, env=_env())
    url = f"http://127.0.0.1:{port}"
    try:
        wait_up(url)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@contextlib.contextmanager
def gateway_process(config: dict[str, Any], tmp: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    cfg_path = tmp / "gateway.yaml"
    cfg_path.write_text(yaml.safe_dump({"listen": f"127.0.0.1:{port}", "features": False, "log_decisions": False,
                                        **config}))
    errlog = open(tmp / "gateway.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--config", str(cfg_path), "--log-level", "warning"],
                            cwd=ROOT, env=_env(), stderr=errlog)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_up(url, "/healthz")
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        errlog.close()


def log_lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["agent"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", default="slow")
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    _agent_main(a.port, a.name, a.delay, a.log)
