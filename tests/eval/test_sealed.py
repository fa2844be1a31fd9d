"""The sealed held-out set and the frozen captioner, checked by reading the source (nothing here imports either).

- `mma2a.eval.heldout` is imported by `mma2a.eval.runner` and by no other module of the package, the tests, the
  benches or the scripts (absolute, relative or by name through importlib);
- its bytes and the captioner's are the ones pinned here: a change to either is a change to what the evaluation
  measures, and must say so in docs/evaluation.md (and update the pin in the same commit).
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEALED = "mma2a.eval.heldout"
READER = ROOT / "src" / "mma2a" / "eval" / "runner.py"

PINNED = {
    "src/mma2a/eval/heldout.py": "b4a76c6c4f449f805067e9c4d8a1be6faf136d91365a3c6fd2fe8cc3bebfc117",
    "src/mma2a/agents/captioner.py": "931bc6c629526a1862dfbce8bad94b3cc26876de833f28a835b050c80b58a74c",
}
"""SHA-256 of the sealed set's generator (sealed from the commit that added it, issue 35) and of the captioner (frozen
before the signal task kinds were written; unchanged since c01555e)."""


def _module_name(path: Path) -> str | None:
    """The dotted name of a module under src/ (None for tests, benches and scripts: they import absolutely)."""
    src = ROOT / "src"
    if src in path.parents:
        parts = path.relative_to(src).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return None


def _imports(path: Path) -> set[str]:
    """Every module `path` imports (relative imports resolved), and every `import_module("...")` string in it."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = _module_name(path)
    package = here.rsplit(".", 1)[0] if here and not path.name == "__init__.py" else here
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = (package or "").split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__"):
            found.update(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
    return found


def _sources() -> list[Path]:
    return [p for top in ("src", "tests", "bench", "scripts") for p in (ROOT / top).rglob("*.py")
            if ".venv" not in p.parts]


def test_only_the_runner_imports_the_sealed_set():
    # a module that never spells "heldout" cannot import it: only those are parsed
    mention = [p for p in _sources() if "heldout" in p.read_text(encoding="utf-8")]
    importers = sorted(str(p.relative_to(ROOT)) for p in mention
                       if any(name == SEALED or name.startswith(SEALED + ".") for name in _imports(p)))
    assert importers == [str(READER.relative_to(ROOT))]


def test_the_import_scan_sees_each_spelling(tmp_path):
    """The scan itself: absolute, from-package, relative and importlib spellings are all found."""
    spellings = ["import mma2a.eval.heldout", "from mma2a.eval import heldout", "from mma2a.eval.heldout import HELDOUT",
                 "import importlib\nimportlib.import_module('mma2a.eval.heldout')"]
    for i, text in enumerate(spellings):
        f = tmp_path / f"m{i}.py"
        f.write_text(text + "\n")
        assert any(n == SEALED or n.startswith(SEALED + ".") for n in _imports(f)), text
    src_like = ROOT / "src" / "mma2a" / "eval" / "tasks.py"  # a relative import resolves against its package
    assert "mma2a.eval.media" in _imports(src_like)


def test_the_sealed_set_and_the_captioner_are_the_pinned_bytes():
    for rel, digest in PINNED.items():
        assert hashlib.sha256((ROOT / rel).read_bytes()).hexdigest() == digest, (
            f"{rel} changed: a change to the sealed set or the frozen captioner changes what the evaluation measures; "
            "say so in docs/evaluation.md and update the pin")
