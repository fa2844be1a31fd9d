"""`python -m mma2a.supervisor` run by hand (not by `mma2a serve --workers N`): one line saying what it takes, status 2,
nothing started. The plan comes in its environment (`$MMA2A_SUPERVISOR_PLAN`), never as an argument: it may hold an
external NATS's credentials, and a command line is every user's of the host to read."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mma2a.supervisor import PLAN_ENV

SAID = "error: python -m mma2a.supervisor takes the plan `mma2a serve --workers N` makes, in its environment ("


@pytest.mark.parametrize(("args", "plan", "why"), [
    ([], None, "$MMA2A_SUPERVISOR_PLAN is not set"),
    (["not json"], None, "it takes no arguments, got 'not json'"),
    (['{"count": 2}'], '{"count": 2}', "it takes no arguments, got '{\"count\": 2}'"),
    ([], "nats://user:hunter2@host", "$MMA2A_SUPERVISOR_PLAN is not such a plan: JSONDecodeError: Expecting value: "
                                     "line 1 column 1 (char 0)"),
    ([], '{"count": 2, "nats": "nats://user:hunter2@host"}', "$MMA2A_SUPERVISOR_PLAN is not such a plan: KeyError: "
                                                             "'argv'"),
])
def test_a_plan_it_cannot_read_is_one_line_and_status_2(args: list[str], plan: str | None, why: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != PLAN_ENV} | ({PLAN_ENV: plan} if plan is not None else {})
    r = subprocess.run([sys.executable, "-m", "mma2a.supervisor", *args], capture_output=True, text=True, timeout=60,
                       env=env)
    assert (r.returncode, r.stderr) == (2, f"{SAID}{why}); run `mma2a serve --workers N` instead\n")
    assert "hunter2" not in r.stderr  # what the variable holds is never said: a plan may hold credentials
