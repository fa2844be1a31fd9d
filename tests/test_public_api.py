"""The public surface says what it is (docs/api.md): the listed modules define `__all__` and every
name in it exists; the docs import only public names; the names `mma2a` loads lazily are typed."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mma2a

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(r"^\| `(mma2a(?:\.[a-z_]+)*)` \|", re.M)
IMPORT = re.compile(r"^\s*from (mma2a(?:\.[a-z_]+)*) import ([^\n#]+)", re.M)


def public_modules() -> list[str]:
    return ROW.findall((ROOT / "docs" / "api.md").read_text(encoding="utf-8"))


def test_the_public_table_lists_the_packages_users_import() -> None:
    listed = public_modules()
    assert len(listed) == len(set(listed)), "a module listed twice in docs/api.md"
    for name in ("mma2a", "mma2a.ext", "mma2a.routing", "mma2a.sdk", "mma2a.gateway", "mma2a.errors"):
        assert name in listed, f"docs/api.md: {name} is missing from the public modules"


def test_every_public_module_defines_all_and_every_name_exists() -> None:
    for name in public_modules():
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        assert isinstance(exported, list) and exported, f"{name}: a public module defines __all__"
        assert len(exported) == len(set(exported)), f"{name}.__all__ lists a name twice"
        missing = [n for n in exported if not hasattr(module, n)]
        assert not missing, f"{name}.__all__ names what the module does not have: {missing}"


def test_the_docs_import_only_public_names() -> None:
    public = set(public_modules())
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    seen = 0
    for page in pages:
        for module, names in IMPORT.findall(page.read_text(encoding="utf-8")):
            seen += 1
            where = page.relative_to(ROOT)
            assert module in public, f"{where}: imports from {module}, which docs/api.md does not list as public"
            exported = importlib.import_module(module).__all__
            for imported in (n.strip() for n in names.strip("() ").split(",") if n.strip()):
                assert imported.split(" as ")[0] in exported, f"{where}: {module}.{imported} is not in its __all__"
    assert seen >= 5  # the README and the SDK, features and payload docs show imports


def test_the_lazy_names_of_the_root_are_typed_as_what_they_are() -> None:
    """Every name of `mma2a` but `__version__` loads its module on first use (`__getattr__`); under TYPE_CHECKING the
    same names are imported from the module that serves them, so a type checker sees the real classes."""
    tree = ast.parse((ROOT / "src" / "mma2a" / "__init__.py").read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.level == 1 and imp.module
                typed.update({a.name: f"mma2a.{imp.module}" for a in imp.names})
    eager = {n for n in mma2a.__all__ if n in vars(mma2a)}
    lazy = set(mma2a.__all__) - eager
    assert lazy and set(typed) == lazy, f"lazy names {sorted(lazy)} vs typed under TYPE_CHECKING {sorted(typed)}"
    assert eager == {"__version__"}, sorted(eager)
    for name, module in typed.items():
        assert getattr(mma2a, name) is getattr(importlib.import_module(module), name), name
    assert set(mma2a.__all__) <= set(dir(mma2a))
    with pytest.raises(AttributeError, match="^module 'mma2a' has no attribute 'Rules'$"):
        mma2a.Rules  # noqa: B018
    from mma2a import client_link  # a submodule is still imported by `from mma2a import`

    assert client_link is importlib.import_module("mma2a.client_link")


def test_import_mma2a_loads_nothing_else_of_the_package() -> None:
    """`import mma2a` is cheap: no routing, wire types, yaml or orjson until a name is asked for (the supervisor of
    `serve --workers N` imports one module of the package and holds only that module's imports); `from mma2a import`
    of every public name then works in the same fresh process."""
    probe = ("import json, sys; import mma2a; before = sorted(sys.modules); "
             f"from mma2a import {', '.join(n for n in mma2a.__all__)}; print(json.dumps(before))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    loaded = set(json.loads(out.stdout))
    assert {m for m in loaded if m.startswith("mma2a")} == {"mma2a", "mma2a._version"}
    assert not {"yaml", "orjson", "pydantic", "a2a"} & loaded


def test_only_public_modules_define_all() -> None:
    """`__all__` marks a public module (docs/api.md): an internal module does not define one, so the mark means
    one thing across src and a reader can tell the two apart without the table."""
    public = set(public_modules())
    src = ROOT / "src"
    marked = set()
    for path in sorted((src / "mma2a").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, (ast.Assign, ast.AnnAssign)) and "__all__" in ast.unparse(node).split("=")[0]
               for node in tree.body):
            marked.add(name)
    assert marked == public, f"define __all__ but are not public: {sorted(marked - public)}; public without: {sorted(public - marked)}"
