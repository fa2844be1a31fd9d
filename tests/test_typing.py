"""`mypy --strict` over all of src/ (the `[tool.mypy]` section of pyproject.toml) is part of the test suite.

It runs mypy as a subprocess from the repository root, with its incremental cache in `.mypy_cache`,
so a re-run after a small change takes seconds; a failure lists mypy's errors as they are.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_config_covers_all_of_src() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert config["strict"] is True
    assert config["files"] == ["src/mma2a"], f"[tool.mypy] files must be all of src/mma2a, got {config['files']}"


@pytest.mark.timeout(900)
def test_mypy_strict_is_clean() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--show-error-codes"],
        cwd=ROOT, capture_output=True, text=True,
    )
    report = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0, f"mypy --strict over src/ (run `python -m mypy` from the repository root):\n{report}"
