"""`mma2a serve --port 0`: the gateway listens on a free port and says which (its banner, its Agent Card's URLs);
the flag used to be taken as no flag at all (0 is false), so the config's port (8800 by default) was used."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.timeout(120)


def test_serve_with_port_0_listens_on_a_free_port_and_says_it(tmp_path: Path) -> None:
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text("listen: 127.0.0.1:8800\nfeatures: false\nlog_decisions: false\n")
    proc = subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--config", str(cfg), "--port", "0",
                             "--log-level", "warning"], stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    try:
        assert proc.stderr is not None
        line = ""
        while "mma2a gateway on " not in line:  # the banner comes once it serves (EOF: it exited, said above)
            line = proc.stderr.readline()
            assert line, f"serve exited with {proc.wait()}"
        found = re.search(r"mma2a gateway on http://127\.0\.0\.1:(\d+) ", line)
        assert found is not None, line
        port = int(found.group(1))
        assert port not in (0, 8800), line
        card = httpx.get(f"http://127.0.0.1:{port}/.well-known/agent-card.json", timeout=30).json()
        assert {i["url"] for i in card["supportedInterfaces"]} == {f"http://127.0.0.1:{port}"}, card
    finally:
        proc.terminate()
        proc.wait(60)


@pytest.mark.parametrize("cpu", ["\u00b2", "x1"])
def test_a_worker_cpu_that_is_no_number_is_said_in_one_line_and_the_worker_serves(tmp_path: Path, cpu: str) -> None:
    """Security probe S16-6: `MMA2A_WORKER_CPU` (the supervisor's, or anyone's by hand) was checked with `str.isdigit`,
    which takes '²' (and other Unicode digits `int` refuses): a `ValueError` traceback on the event loop's first turn,
    and the worker exited (status 1). Now the same one line as for a CPU it may not run on, and it serves."""
    import os

    cfg = tmp_path / "gateway.yaml"
    cfg.write_text("listen: 127.0.0.1:0\nfeatures: false\nlog_decisions: false\n")
    proc = subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--config", str(cfg), "--worker",
                             "--log-level", "warning"], stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "MMA2A_WORKER_CPU": cpu})
    said = []
    try:
        assert proc.stderr is not None
        while not said or "mma2a gateway on " not in said[-1]:
            said.append(proc.stderr.readline())
            assert said[-1], f"serve exited with {proc.wait()}: {''.join(said)[-2000:]}"
    finally:
        proc.terminate()
        proc.wait(60)
    assert said[:-1] == [f"mma2a serve: CPU {cpu} is not one this gateway may run on; its event loop runs anywhere\n"]
