"""Security probe P8: the nats-server `serve --workers N` starts for its workers took connections without credentials,
and NATS access is admin access (docs/operations.md, "Securing NATS"): any process of the host could connect to the
loopback port the banner prints, write an agent into `mma2a_agents` (and rules), and read every client's push configs
(their webhook credentials), blobs, deliveries and learning. It now requires a token made at start, written to a
0600 config file (never on its command line, which every user of the host can read) and given to the workers in
their environment."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import httpx
import nats
import pytest
import yaml
from nats.errors import Error as NatsError

from mma2a.cluster.nats_urls import without_credentials
from mma2a.cluster.server import NatsServer
from tests.agents import RecordingExecutor, make_card, run_agent

from .test_security import rpc
from .test_workers import serve_workers, worker_pids

pytestmark = pytest.mark.timeout(300)


async def test_the_workers_nats_server_refuses_a_process_without_its_token(tmp_path: Path) -> None:
    async with run_agent(make_card("echo"), RecordingExecutor()) as agent_url:
        async with serve_workers(tmp_path, "echo", agent_url.rstrip("/")) as served:
            found = re.search(r"embedded nats-server at (nats://127\.0\.0\.1:\d+)", served.log.read_text())
            assert found is not None
            url = found.group(1)
            refused = []
            for creds in ({}, {"token": "guessed-token"}):
                with pytest.raises(NatsError) as err:
                    await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=5, **creds)
                refused.append(str(err.value))
            command_lines = nats_command_lines(int(url.rsplit(":", 1)[1]))
            async with httpx.AsyncClient(timeout=30) as c:
                sent = await rpc(c, served.url, "alice", "SendMessage", {"message": {
                    "messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}})
    assert all("Authorization Violation" in r for r in refused), refused
    assert "result" in sent  # the workers joined their nats-server with the token
    assert command_lines and not any(b"--auth" in c or b"token" in c for c in command_lines)


def nats_command_lines(port: int) -> list[bytes]:
    """The command line of the nats-server listening on `port` (as any user of the host reads it)."""
    out = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if cmd.split(b"\0")[0].endswith(b"nats-server") and f"\0-p\0{port}\0".encode() in cmd:
            out.append(cmd)
    return out


def descendants(pid: int) -> list[int]:
    """`pid`'s children, theirs, and so on (/proc/PID/task/TID/children)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (int(c) for c in (task / "children").read_text().split()):
            out += [child, *descendants(child)]
    return out


@pytest.mark.parametrize(("url", "shown"), [
    ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
    ("nats://gw:s3cret@127.0.0.1:4222", "nats://gw:***@127.0.0.1:4222"),
    ("nats://s3cret@nats.example:4222", "nats://***@nats.example:4222"),  # a token
    ("tls://gw:s3@c/ret@a:1,nats://b:2,nats://t0k@c:3", "tls://gw:***@a:1,nats://b:2,nats://***@c:3"),
    ("gw:s3cret@[::1]:4222", "gw:***@[::1]:4222"),  # a netloc (nats-py's connected_url.netloc)
])
def test_a_nats_url_is_said_without_its_credentials(url: str, shown: str) -> None:
    assert without_credentials(url) == shown


@pytest.mark.parametrize("form", ["password", "token"])
async def test_an_external_nats_urls_credentials_are_on_no_command_line_and_in_no_log(tmp_path: Path, form: str) -> None:
    """`serve --workers 2 --cluster nats://user:password@host:port` (or a token's `nats://token@host:port`) against a
    nats-server requiring that password (or token): the URL reaches the supervisor and its workers through their
    environment (readable by their user alone), never a command line (every user's of the host: /proc/PID/cmdline,
    `ps`); the supervisor's and the workers' lines and `cluster status` say it as `nats://user:***@...`
    (`nats://***@...`); the workers connect with it and serve. A wrong one is refused in one line that does not say it
    either."""
    password = secrets.token_urlsafe(18)
    store = tmp_path / "nats"
    store.mkdir()
    conf = store / "auth.conf"
    auth = f'user: "mma2a-gw", password: "{password}"' if form == "password" else f'token: "{password}"'
    conf.write_text(f"authorization {{ {auth} }}\njetstream {{ max_file_store: 1T }}\n")
    with NatsServer(store, args=["-c", str(conf)]) as server:
        user = "mma2a-gw:" if form == "password" else ""
        url = f"nats://{user}{password}@127.0.0.1:{server.port}"
        shown = f"nats://{user}***@127.0.0.1:{server.port}"
        async with run_agent(make_card("echo"), RecordingExecutor(echo=True)) as agent_url:
            async with serve_workers(tmp_path, "echo", agent_url.rstrip("/"), args=("--cluster", url)) as served:
                tree = [served.proc.pid, *descendants(served.proc.pid)]
                workers = list(worker_pids(served.log).values())
                holding = [p.name for p in Path("/proc").iterdir() if p.name.isdigit() and password.encode() in
                           _read(p / "cmdline")]
                environ_modes = {pid: Path(f"/proc/{pid}/environ").stat().st_mode & 0o777 for pid in workers}
                async with httpx.AsyncClient(timeout=30) as c:
                    sent = [await rpc(c, served.url, "alice", "SendMessage", {"message": {
                        "messageId": f"m-{i}", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}) for i in range(4)]
                status_config = tmp_path / "status.yaml"  # the same URL, in a file
                status_config.write_text(yaml.safe_dump({"cluster": {"nats": url}}))
                status = subprocess.run([sys.executable, "-m", "mma2a.cli", "cluster", "status", "--config",
                                         str(status_config)], capture_output=True, text=True, timeout=120)
            log = served.log.read_text()
        env = {**os.environ, "MMA2A_URL_SECRET": "a-secret-of-this-test-0123456789"}
        wrong = subprocess.run([sys.executable, "-m", "mma2a.cli", "serve", "--port", "0", "--cluster",
                                url.replace(password, "wrong-" + password)], capture_output=True, text=True,
                               timeout=120, env=env)
    assert len(tree) == 3 and len(workers) == 2 and set(workers) <= set(tree), (tree, workers)  # no nats-server here
    assert holding == [], holding  # no process of the host, the supervisor and both workers among them
    assert set(environ_modes.values()) == {0o400}, environ_modes  # where the URL is: the user's alone
    assert all("result" in s for s in sent), sent  # the workers connected with the password and serve
    assert password not in log and f"sharing state through {shown}\n" in log, log[-3000:]
    assert status.returncode == 0, status
    assert status.stdout.startswith(f"cluster mma2a on {shown}: ") and password not in status.stdout + status.stderr
    assert status.stdout.count(" current") == 2, status.stdout  # both workers joined the cluster
    assert (wrong.returncode, wrong.stderr) == (2, f"error: cluster.auth: NATS at {shown} refused the gateway's "
                                                   "credentials (nats: 'Authorization Violation'); check cluster.auth "
                                                   "(docs/operations.md, \"Securing NATS\")\n")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # a process gone meanwhile, or not ours
        return b""

