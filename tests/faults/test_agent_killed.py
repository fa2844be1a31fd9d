"""An agent process killed mid-request: a pool of two delivers through the other member exactly once;
a single agent gives a FAILED task that says why, well within the timeout."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from tests.faults.procs import agent_process, log_lines
from tests.gateway.conftest import gateway, rpc

POOL_RULES = {"version": 1, "rules": [{"name": "spread", "match": {"modality": "text/*"},
                                       "action": {"load_balance": "pool", "strategy": "round_robin"}}]}


async def _kill_when_received(logs: dict[str, Path], procs: dict[str, object], mid: str) -> str:
    """SIGKILL whichever agent logs `got mid` first; returns its name."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for name, log in logs.items():
            if f"got {mid}" in log_lines(log):
                os.kill(procs[name].pid, signal.SIGKILL)  # type: ignore[attr-defined]
                return name
        await asyncio.sleep(0.01)
    raise AssertionError(f"no agent received {mid}")


def _msg(mid: str) -> dict:
    return {"message": {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": "work on this"}]}}


async def test_pool_member_killed_mid_request_the_other_delivers_once(tmp_path: Path) -> None:
    logs = {n: tmp_path / f"{n}.log" for n in ("a", "b")}
    with agent_process("a", logs["a"], delay=1.0) as (url_a, pa), agent_process("b", logs["b"], delay=1.0) as (url_b, pb):
        cfg = {"agents": [{"name": "a", "url": url_a, "groups": ["pool"]}, {"name": "b", "url": url_b, "groups": ["pool"]}],
               "rules": POOL_RULES, "features": False, "timeout_s": 10}
        async with gateway(cfg) as (gw, url):
            send = asyncio.create_task(rpc(url, "SendMessage", _msg("k-1")))
            killed = await _kill_when_received(logs, {"a": pa, "b": pb}, "k-1")
            doc = await send
            healthy = {e.name: e.healthy for e in gw.directory.entries()}
            after = await rpc(url, "SendMessage", _msg("k-2"))  # the dead member stays out of the pool
    other = "b" if killed == "a" else "a"
    task = doc["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["status"]["message"]["parts"][0]["text"] == f"{other} did k-1"
    assert log_lines(logs[other]).count("got k-1") == 1 and log_lines(logs[other]).count("done k-1") == 1
    assert "done k-1" not in log_lines(logs[killed])
    assert healthy == {killed: False, other: True}
    assert after["result"]["task"]["status"]["message"]["parts"][0]["text"] == f"{other} did k-2"


async def test_single_agent_killed_mid_request_fails_with_the_reason(tmp_path: Path) -> None:
    log = tmp_path / "solo.log"
    with agent_process("solo", log, delay=5.0) as (url_s, proc):
        cfg = {"agents": [{"name": "solo", "url": url_s}], "features": False, "timeout_s": 10}
        async with gateway(cfg) as (gw, url):
            t0 = time.monotonic()
            send = asyncio.create_task(rpc(url, "SendMessage", _msg("k-3")))
            await _kill_when_received({"solo": log}, {"solo": proc}, "k-3")
            doc = await send
            took = time.monotonic() - t0
    task = doc["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    reason = task["status"]["message"]["parts"][0]["text"]
    port = url_s.rsplit(":", 1)[1]
    assert reason.startswith("agent solo unreachable: cannot connect ("), reason  # named, never located
    assert "127.0.0.1" not in reason and port not in reason
    last = gw.directory.get("solo").last_error  # the operator reads where it was (admin API `lastError`)
    assert last is not None and last.startswith(f"agent solo unreachable: cannot connect to 127.0.0.1:{port}"), last
    assert took < 10  # the agent's death is noticed at once, not after the 10 s timeout
