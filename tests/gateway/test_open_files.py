"""The gateway raises its soft RLIMIT_NOFILE to the hard limit, as servers do, so a login shell's soft limit (often
1,024) does not refuse clients with EMFILE under many connections (bench/connections.py --nofile 1024 found it: at
1,024 connections, 'cannot connect ... (Too many open files)' to every agent and ~10,000 read errors)."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.faults.procs import ROOT, free_port, wait_up

SOFT = 200  # far under what the test opens at once
CLIENTS = 300


def _env() -> dict[str, str]:  # this tree's sources first
    return {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}


def _hard() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def _lower_soft() -> None:  # in the child, before exec: a shell's `ulimit -Sn 200`
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, _hard()))


def _limits(pid: int) -> tuple[str, str]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return soft, hard
    raise AssertionError("no 'Max open files' in /proc/PID/limits")


@pytest.mark.skipif(_hard() != resource.RLIM_INFINITY and _hard() < CLIENTS * 2, reason="the hard limit is too low here")
def test_a_gateway_started_under_a_low_soft_limit_answers_more_clients_at_once_than_it(tmp_path: Path) -> None:
    port = free_port()
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(f"listen: 127.0.0.1:{port}\nfeatures: false\nlog_decisions: false\n")
    proc = subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--config", str(cfg), "--log-level", "warning"],
                            cwd=ROOT, env=_env(), preexec_fn=_lower_soft, stderr=subprocess.DEVNULL)
    socks: list[socket.socket] = []
    try:
        wait_up(f"http://127.0.0.1:{port}", "/healthz")
        soft, hard = _limits(proc.pid)
        assert soft == hard, (soft, hard)  # raised to the hard limit
        for _ in range(CLIENTS):  # all open at once: each holds one of the gateway's descriptors
            s = socket.create_connection(("127.0.0.1", port))
            s.settimeout(60)  # a bound on a failure, not a synchronisation: before the fix accept() failed with EMFILE
            socks.append(s)
        for s in socks:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        for s in socks:
            assert s.recv(64).startswith(b"HTTP/1.1 200"), "a client was not answered"
    finally:
        for s in socks:
            s.close()
        proc.kill()
        proc.wait()


def test_raise_open_files_limit_raises_the_soft_limit_and_warns_when_the_hard_one_is_low() -> None:
    code = textwrap.dedent("""
        import logging, resource
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        from mma2a.serving import raise_open_files_limit
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        got = raise_open_files_limit()
        print(got == resource.getrlimit(resource.RLIMIT_NOFILE)[0], got == hard or hard == resource.RLIM_INFINITY)
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 256))  # a low hard limit: raised to it, and said
        print(raise_open_files_limit(), resource.getrlimit(resource.RLIMIT_NOFILE))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["True True", "256 (256, 256)"]
    assert "may open only 256 files (RLIMIT_NOFILE, hard limit 256)" in out.stderr
    assert "LimitNOFILE=" in out.stderr
