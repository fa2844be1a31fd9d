"""Dependencies point one way: no import cycle between the subpackages of mma2a.

Every module's AST is read and every import counted, including those inside functions and
under `if TYPE_CHECKING:` (a lazy import is still a dependency). A cycle fails with its path.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "mma2a"


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _is_module(name: str) -> bool:
    base = SRC.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _imported(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(module imported, line) for every import statement anywhere in the file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:  # `from pkg import sub` imports the module pkg.sub
                sub = f"{origin}.{alias.name}"
                yield (sub if _is_module(sub) else origin), node.lineno


def _unit(module: str) -> str | None:
    """The subpackage (or top-level module) a module belongs to; `mma2a` for the package root."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    return ".".join(parts[:2])


def _graph(unit_of: Callable[[str], str | None]) -> dict[str, dict[str, list[str]]]:
    """unit -> unit it imports -> where (file:line), for the modules `unit_of` places in a unit."""
    graph: dict[str, dict[str, list[str]]] = {}
    for module, path in _modules():
        src = unit_of(module)
        if src is None:
            continue
        graph.setdefault(src, {})
        for target, line in _imported(module, path):
            dst = unit_of(target)
            where = f"{path.relative_to(SRC.parent)}:{line}"
            if dst is not None and dst != src and where not in graph[src].setdefault(dst, []):
                graph[src][dst].append(where)
    return graph


@functools.cache
def unit_graph() -> dict[str, dict[str, list[str]]]:
    """subpackage of mma2a -> subpackage it imports -> where (file:line)."""
    return _graph(_unit)


def find_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (depth-first search with colours)."""
    colour: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, {})):
            if colour.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if colour.get(nxt) is None and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        colour[node] = 2
        return None

    for node in sorted(graph):
        if colour.get(node) is None and (found := visit(node)) is not None:
            return found
    return None


def describe(graph: dict[str, dict[str, list[str]]], cycle: list[str]) -> str:
    return "\n".join(f"  {a} -> {b}  ({', '.join(graph[a][b][:3])})" for a, b in zip(cycle, cycle[1:], strict=False))


def test_no_import_cycle_between_subpackages() -> None:
    graph = unit_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between subpackages of mma2a: " + " -> ".join(cycle) + "\n" + describe(graph, cycle)


def test_the_gateway_does_not_know_the_cluster() -> None:
    """The gateway defines the hooks it needs (gateway/state/hooks.py); mma2a.cluster implements them."""
    graph = unit_graph()
    assert "mma2a.cluster" not in graph["mma2a.gateway"], describe(graph, ["mma2a.gateway", "mma2a.cluster"])
    assert "mma2a.gateway" in graph["mma2a.cluster"]


def test_no_module_imports_the_package_root() -> None:
    """`mma2a/__init__` is the public façade on top: inside the package, modules import each other directly."""
    users = {a: where for a, deps in unit_graph().items() for b, where in deps.items() if b == PACKAGE}
    assert not users, f"modules importing the package root: {users}"


@functools.cache
def module_graph() -> dict[str, dict[str, list[str]]]:
    """module -> module of the same subpackage it imports -> where (file:line); the subpackage's
    `__init__` left out (Python runs it before any of its modules, whatever they import)."""
    graph: dict[str, dict[str, list[str]]] = {}
    for module, path in _modules():
        unit = _unit(module)
        if unit is None or module == unit:
            continue
        graph.setdefault(module, {})
        for target, line in _imported(module, path):
            where = f"{path.relative_to(SRC.parent)}:{line}"
            if _unit(target) == unit and target not in (module, unit) and where not in graph[module].setdefault(target, []):
                graph[module][target].append(where)
    return graph


def test_no_import_cycle_between_the_modules_of_a_subpackage() -> None:
    """Inside every subpackage (gateway, cluster and cli included) modules import each other one way,
    counting imports inside functions and under TYPE_CHECKING: a module that needs a type from one
    that imports it takes a Protocol (gateway/state/hooks.py `GatewayParts`, cluster/link.py `Member`)."""
    graph = module_graph()
    assert "mma2a.gateway.stages.admission" in graph["mma2a.gateway.pipeline"]  # every subpackage is in the graph
    assert "mma2a.cluster.link" in graph["mma2a.cluster.state"] and "mma2a.cli.root" in graph["mma2a.cli.serve"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between modules: " + " -> ".join(cycle) + "\n" + describe(graph, cycle)


def test_the_cycle_finder_names_a_cycle() -> None:
    graph = {"a": {"b": ["a.py:1"]}, "b": {"c": ["b.py:2"]}, "c": {"a": ["c.py:3"]}, "d": {"a": ["d.py:4"]}}
    cycle = find_cycle(graph)
    assert cycle == ["a", "b", "c", "a"]
    assert describe(graph, cycle) == "  a -> b  (a.py:1)\n  b -> c  (b.py:2)\n  c -> a  (c.py:3)"
    assert find_cycle({"a": {"b": []}, "b": {}}) is None


_PLAIN_GATEWAY = """
import asyncio, json, sys
from mma2a.gateway.config import parse_config
import mma2a.gateway.server
from mma2a.gateway.app import Gateway

gateway = Gateway(parse_config({"listen": "127.0.0.1:0", "health_interval_s": 3600, "agents": [
    {"name": "vision", "url": "http://127.0.0.1:9"}, {"name": "analyst", "url": "http://127.0.0.1:9"}]}))

async def run():
    await gateway.start()  # the agents are down: registered later, the gateway starts all the same
    await gateway.stop()

asyncio.run(run())
print(json.dumps(sorted(sys.modules)))
"""


def test_a_plain_gateway_loads_no_optional_feature() -> None:
    """The README's gateway.yaml (agents, nothing else) imports and starts without the modules of features it does not
    configure: no numpy/Pillow/models (no rule needs features or vectors), no language profiles, no joserfc (no
    `auth.jwt`), no cryptography (no signed messages, no federation keys), no NATS or cluster code (no `cluster`),
    none of the gateway's gRPC modules and no `grpc` (no `grpc_listen`), no OpenTelemetry SDK (no exporter), and
    none of a2a-sdk's server stack (`a2a.server`, loaded by the first request past the fast JSON-RPC path:
    gateway/bindings/sdk_routes.py)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", _PLAIN_GATEWAY], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert {"mma2a.gateway.app", "mma2a.gateway.server", "mma2a.routing.learned"} <= loaded  # it ran
    unwanted = {"numpy", "PIL", "cv2", "av", "onnxruntime", "langdetect", "joserfc", "cryptography", "nats", "mma2a.cluster",
                "mma2a.gateway.access.jwt_clients", "mma2a.gateway.access.jwks", "mma2a.gateway.bindings.grpc_service",
                "mma2a.gateway.downstream.grpc_transport", "mma2a.gateway.bindings.grpc_gate", "opentelemetry.sdk", "grpc", "a2a.server",
                "mma2a.gateway.bindings.sdk_binding", "httpx"}
    assert not unwanted & loaded, sorted(unwanted & loaded)


_MAY_IMPORT = re.compile(r"^May import: (.+?)\.?$", re.M)


def _gateway_unit(module: str) -> str | None:
    """`mma2a.gateway.stages.legs` -> `stages`; a top-level module of the gateway is a unit of its own."""
    parts = module.split(".")
    return parts[2] if parts[:2] == [PACKAGE, "gateway"] and len(parts) > 2 else None


@functools.cache
def gateway_graph() -> dict[str, dict[str, list[str]]]:
    """gateway unit (subpackage or top-level module) -> gateway unit it imports -> where."""
    return _graph(_gateway_unit)


def may_import(unit: str) -> set[str]:
    """What a gateway unit's docstring allows it to import: its `May import:` line."""
    base = SRC / PACKAGE / "gateway" / unit
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    found = _MAY_IMPORT.findall(doc)
    assert len(found) == 1, f"{path.relative_to(SRC.parent)}: its docstring says once what it may import (`May import: ...`)"
    return set() if found[0] == "nothing in the gateway" else set(re.findall(r"`([a-z_]+)`", found[0]))


def test_the_gateway_is_grouped_into_subpackages_that_import_what_they_say() -> None:
    """gateway/ is grouped by concern (docs/api.md, "Layout"): each subpackage and each top-level module says in
    its docstring which others it may import, and imports nothing else; between them, no cycle."""
    graph = gateway_graph()
    packages = {p.name for p in (SRC / PACKAGE / "gateway").iterdir() if (p / "__init__.py").is_file()}
    assert {"bindings", "stages", "access", "downstream", "state", "observe", "history", "push"} <= packages
    loose = sorted(u for u in graph if u not in packages)
    assert len(loose) <= 6, f"the gateway's top level holds only what ties the packages together: {loose}"
    for unit in sorted(graph):
        allowed = may_import(unit)
        assert allowed <= set(graph), f"{unit}: its docstring allows what does not exist: {sorted(allowed - set(graph))}"
        extra = {dst: where for dst, where in graph[unit].items() if dst not in allowed}
        assert not extra, f"{unit} imports what its docstring does not allow: {extra}"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between the gateway's packages: " + " -> ".join(cycle) + "\n" + describe(graph, cycle)


def test_may_import_is_read_from_the_docstring() -> None:
    assert may_import("observe") == set()
    assert may_import("downstream") == {"access", "config", "observe"}
    assert "stages" in may_import("bindings") and "bindings" not in may_import("stages")


def test_the_sdk_binding_imports_first_in_a_fresh_process() -> None:
    """With `grpc_listen` the gateway loads `bindings.sdk_binding` at start, before anything else imported a2a-sdk's
    server routes: importing the SDK's v0.3 REST adapter first met a cycle inside the SDK, and `mma2a serve` exited
    with an ImportError (tests, which import the routes earlier, never saw it)."""
    import subprocess
    import sys

    env = {**__import__("os").environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", "import mma2a.gateway.bindings.sdk_binding"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
