"""The `mma2a` root command: `--version [--json]`, `--help`, through typer and the installed script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from typer.testing import CliRunner

from mma2a import __version__
from mma2a.cli import app
from mma2a.ext import EXTENSION_URI, PROTOCOL

EXPECTED = {"version": version("mma2a"), "extension": EXTENSION_URI, "protocol": PROTOCOL}


def _script() -> str:
    found = Path(sys.executable).with_name("mma2a")
    assert found.exists() or shutil.which("mma2a"), "the mma2a console script is not installed"
    return str(found) if found.exists() else str(shutil.which("mma2a"))


def test_version_json_with_typer() -> None:
    for args in (["--version", "--json"], ["--json", "--version"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == EXPECTED
    assert __version__ == EXPECTED["version"]


def test_version_plain() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"mma2a {EXPECTED['version']} ({PROTOCOL}, {EXTENSION_URI})\n"


def test_version_json_from_the_installed_console_script() -> None:
    proc = subprocess.run([_script(), "--version", "--json"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == EXPECTED
    assert proc.stderr == ""


def test_help_lists_the_options() -> None:
    proc = subprocess.run([_script(), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0
    assert "Usage: mma2a [OPTIONS] COMMAND [ARGS]..." in proc.stdout
    assert "--version" in proc.stdout and "--json" in proc.stdout


def test_json_without_version_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["--json"])
    assert result.exit_code == 2
    assert "Invalid value for '--json': only meaningful with --version" in result.stderr
