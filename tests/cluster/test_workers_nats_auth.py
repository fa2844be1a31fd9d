"""Security probe P8: the nats-server `serve --workers N` starts for its workers took connections without credentials,
and NATS access is admin access (docs/operations.md, "Securing NATS"): any process of the host could connect to the
loopback port the banner prints, write an agent into `mma2a_agents` (and rules), and read every client's push configs
(their webhook credentials), blobs, deliveries and learning. It now requires a token made at start, written to a
0600 config file (never on its command line, which every user of the host can read) and given to the workers in
their environment."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import nats
import pytest
from nats.errors import Error as NatsError

from tests.agents import RecordingExecutor, make_card, run_agent

from .test_security import rpc
from .test_workers import serve_workers

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
