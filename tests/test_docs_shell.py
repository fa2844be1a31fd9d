"""Every shell block of README.md and docs/*.md runs as pasted (issue 23).

Each file's `bash` blocks run in order in one fresh directory (with `docs/` linked in, so
paths like `docs/examples/rules.yaml` resolve), with the `mma2a` script on PATH. Servers a
block starts in the background keep running for the next blocks and are stopped at the
end. The only edit is the port numbers (8800, 9101, ...): each is replaced, consistently in
one file, by a free port, so parallel test runs on one machine do not collide; `mma2a send`'s
default gateway follows through `MMA2A_GATEWAY`. A block the
suite cannot run says why just before it: `<!-- no-test: reason -->`. Every fence must name
its language, so a shell block cannot pass unnoticed as plain text.

A block's time budget (`mma2a send --wait 60`) is a person's machine's: on a CI host under load (another test file's
servers and models on the same two cores) the README's three agents and gateway took 36 s of its 60 s to start and the
whole block 73 s of the 120 s a test gets (load 14). It is replaced by `BUDGET_S`, a safety net, as the ports are, and
the test gets 900 s: a block's output is what is asserted, never how fast it came.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from mma2a.serving import free_port

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
SKIP = re.compile(r"<!-- no-test: ((?:(?!-->).)+?) -->\s*\Z", re.S)  # the comment just before the fence
SHELL = {"bash", "sh", "shell", "console"}
PORT = re.compile(r"(?<=127\.0\.0\.1:)(\d{4,5})\b|(?<=--port )(\d{4,5})\b")
BUDGET = re.compile(r"(?<=--wait )(\d+)\b")
BUDGET_S = "300"
MAX_SKIPS = 11  # few, each with its reason in the markdown (the 11th: the Kubernetes walkthrough, operations.md)

# What the blocks of a file must print (stdout of all its blocks together), besides exiting 0.
EXPECTED = {
    # the gateway example: a real photo, a spoken voice note and a question, each answered by the agent that fits it;
    # every line of the output README shows is checked as well (PRINTED)
    "README.md": ["part 0 (text/plain) → analyst [capability]", "part 1 (image/jpeg) → vision [capability]",
                  "part 2 (audio/wav) → speech [capability]", " completed\n", "analyst/answer: ",
                  "vision/answer: 600x400 image; objects: cup", "; no defect found;", "speech/answer: ", "coffee cup"],
    "rules.md": ["docs/examples/rules.yaml: 3 rules OK (default capability:any)", "-> vision  [capability]"],
    "features.md": ['"file": "line-3.mp4"', '"codec": "h264"'],
}


# Files whose first `text` block is the output their shell blocks print: each of its lines must be a line of that
# output (`…` stands for what differs from run to run, such as a task id), so the docs show what a run shows.
PRINTED = {"README.md"}


@dataclass
class Block:
    file: Path
    line: int
    lang: str
    code: str
    skip: str | None


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        before = SKIP.search(text[: m.start()])
        out.append(Block(path, text.count("\n", 0, m.start()) + 1, m.group(1).strip(), m.group(2),
                         before.group(1) if before else None))
    return out


def shell_blocks(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.lang in SHELL and b.skip is None]


def test_every_fence_names_its_language_and_every_skip_says_why() -> None:
    unnamed = [f"{b.file.name}:{b.line}" for f in FILES for b in blocks(f) if not b.lang]
    assert unnamed == [], "fences without a language (bash, text, yaml, python, json ...)"
    skipped = [(f"{b.file.name}:{b.line}", b.skip) for f in FILES for b in blocks(f) if b.skip is not None]
    assert all(reason and len(reason) > 10 for _, reason in skipped), skipped
    # docs/benchmarks.md is made of measurements (minutes each, bench/): its skips are not counted against the docs
    assert len([s for s in skipped if not s[0].startswith("benchmarks.md:")]) <= MAX_SKIPS, skipped
    assert {b.file.name for f in FILES for b in shell_blocks(f)} >= set(EXPECTED)


def _stop(groups: list[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                pass
        if sig == signal.SIGTERM:
            time.sleep(1.0)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", [f for f in FILES if shell_blocks(f)], ids=lambda p: p.name)
def test_shell_blocks_run_as_pasted(path: Path, tmp_path: Path) -> None:
    (tmp_path / "docs").symlink_to(ROOT / "docs")
    ports: dict[str, str] = {}

    def port(m: re.Match[str]) -> str:
        found = m.group(0)
        return ports.setdefault(found, str(free_port()))

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "100"}
    runnable = shell_blocks(path)
    for block in runnable:
        PORT.sub(port, block.code)  # number the ports in order of appearance
    if "8800" in ports:
        env["MMA2A_GATEWAY"] = f"http://127.0.0.1:{ports['8800']}"
    groups: list[int] = []
    printed = []
    try:
        for i, block in enumerate(runnable):
            out, err = tmp_path / f"block{i}.out", tmp_path / f"block{i}.err"
            with out.open("w") as o, err.open("w") as e:
                script = BUDGET.sub(BUDGET_S, PORT.sub(port, block.code))
                proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], cwd=tmp_path,
                                        env=env, stdout=o, stderr=e, start_new_session=True)
                groups.append(proc.pid)
                code = proc.wait(timeout=600)
            printed.append(out.read_text())
            assert code == 0, f"{path.name}:{block.line} exited {code}\nstdout:\n{out.read_text()}\nstderr:\n{err.read_text()[-4000:]}"
    finally:
        _stop(groups)
    stdout = "".join(printed)
    for want in EXPECTED.get(path.name, []):
        assert want in stdout, f"{path.name}: {want!r} not in what its blocks printed:\n{stdout}"
    if path.name in PRINTED:
        shown = next(b for b in blocks(path) if b.lang == "text")
        for line in shown.code.splitlines():
            pattern = r"\S*".join(re.escape(piece) for piece in line.split("…"))
            assert re.search(f"^{pattern}$", stdout, re.M), \
                f"{path.name}:{shown.line}: {line!r} is not a line of what its blocks printed:\n{stdout}"


# --- Python blocks of the library docs (issue 40: a pasted block raised NameError, another used top-level await) ----

PYTHON_DOCS = [ROOT / "docs" / "payloads.md", ROOT / "docs" / "sdk.md"]
MARK = re.compile(r"<!-- (example|fragment): ((?:(?!-->).)+?) -->\s*\Z", re.S)


def python_blocks(path: Path) -> list[tuple[Block, str | None]]:
    """Each Python block with its mark: `example` (run by tests/sdk/test_docs_examples.py), `fragment` (code that
    stands inside a coroutine or shows a signature), or None: a whole program, run as pasted."""
    text = path.read_text(encoding="utf-8")
    out = []
    for b in blocks(path):
        if b.lang != "python":
            continue
        start = sum(len(line) + 1 for line in text.splitlines()[: b.line - 1])
        mark = MARK.search(text[:start])
        out.append((b, mark.group(1) if mark else None))
    return out


@pytest.mark.parametrize("path", PYTHON_DOCS, ids=lambda p: p.name)
def test_python_blocks_run_as_pasted_or_say_what_they_are(path: Path, tmp_path: Path) -> None:
    import ast

    found = python_blocks(path)
    assert found, f"{path.name} has no Python block"
    for block, mark in found:
        where = f"{path.name}:{block.line}"
        if mark is not None:  # a fragment still parses (await allowed, as inside a coroutine)
            compile(block.code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT | ast.PyCF_ONLY_AST)
            continue
        proc = subprocess.run([sys.executable, "-c", block.code], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120, env={**os.environ, "MMA2A_URL_SECRET": ""})
        assert proc.returncode == 0, f"{where} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
