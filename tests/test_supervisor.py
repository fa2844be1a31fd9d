"""`python -m mma2a.supervisor` run by hand (not by `mma2a serve --workers N`): one line saying what it takes, status 2,
nothing started."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("args", [[], ["not json"], ['{"count": 2}']])
def test_a_plan_it_cannot_read_is_one_line_and_status_2(args: list[str]) -> None:
    r = subprocess.run([sys.executable, "-m", "mma2a.supervisor", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.startswith("error: python -m mma2a.supervisor takes the plan `mma2a serve --workers N` makes")
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1
