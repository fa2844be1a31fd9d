"""The README's 30-second example runs and prints what the README says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_example_prints_its_comment():
    text = README.read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    expected = [line[2:] for line in code.splitlines() if line.startswith("# ")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue().strip().splitlines() == expected


def test_readme_quick_start_has_exactly_the_two_commands():
    block = re.search(r"## Quick start\n\n(?:<!-- no-test: [^\n]+ -->\n)?```bash\n(.*?)```", README.read_text(), re.S).group(1)
    assert [line.split()[0] for line in block.strip().splitlines()] == ["scripts/demo", "scripts/test"]
