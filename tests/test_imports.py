"""No import cycles in src/tidelog, and the layers of DESIGN.md hold.

The imports are read from the source (ast), so the check needs none of the
optional extras. An import inside a function counts (a deferred import is
still a dependency), and so does one inside `if TYPE_CHECKING:` for the
cycles: two modules that name each other's types are one concept split in
two, whether or not the interpreter runs the import (DESIGN.md: "No import
cycles, `TYPE_CHECKING` imports included"). The layers are checked on the
imports that run. Run it alone with

    python -m pytest tests/test_imports.py -q
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src"


def modules(root: Path = SRC) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def imports(name: str, path: Path, known: set[str], *, types: bool = False) -> set[str]:
    """The modules of `known` that module `name` imports: those that run, and
    with `types` those under `if TYPE_CHECKING:` too."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node) and not types:
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in known)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    found.add(full if full in known else base)
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    visit([child])

    visit(ast.parse(path.read_text()).body)
    return found & known - {name}


def graph(root: Path = SRC, *, types: bool = False) -> dict[str, set[str]]:
    mods = modules(root)
    return {name: imports(name, path, set(mods), types=types) for name, path in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return found


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_checker_reads_type_checking_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import B\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\nelse:\n    import pkg.c\n"
    )
    (pkg / "c.py").write_text("def f():\n    from . import a\n")
    assert graph(tmp_path)["pkg.b"] == {"pkg.c"}
    assert graph(tmp_path, types=True)["pkg.b"] == {"pkg.a", "pkg.c"}
    assert cycles(graph(tmp_path)) == [["pkg.a", "pkg.b", "pkg.c"]]  # through c's deferred import
    (pkg / "c.py").write_text("")
    assert cycles(graph(tmp_path)) == []
    assert cycles(graph(tmp_path, types=True)) == [["pkg.a", "pkg.b"]]


def test_no_import_cycle_in_tidelog():
    assert cycles(graph()) == []


def test_no_import_cycle_in_tidelog_types_included():
    # Each entry is a circle of modules that import each other, some of it
    # only for types: make a third module hold what they share (a small
    # protocol, the type both need), as core.py holds what queues, groups,
    # retention, dead letters and the outbox need of the Log.
    assert cycles(graph(types=True)) == []


CORE = {
    "tidelog.errors",
    "tidelog.bounds",
    "tidelog.config",
    "tidelog.records",
    "tidelog.topics",
    "tidelog.positions",
    "tidelog.partitioner",
    "tidelog.notify",
    "tidelog.core",
    "tidelog.producer",
    "tidelog.log",
    "tidelog.groups",
    "tidelog.coordinator",
    "tidelog.assignors",
    "tidelog.queues",
    "tidelog.leasing",
    "tidelog.deadletters",
    "tidelog.outbox",
    "tidelog.jobs",
    "tidelog.runner",
    "tidelog.results",
    "tidelog.schedules",
    "tidelog.retention",
    "tidelog.streams",
    "tidelog.wire",
}


def test_layers_call_only_down():
    edges = graph()
    fronts = ("tidelog.server", "tidelog.cli", "tidelog.spark", "tidelog.worker", "tidelog.aio")
    for name, deps in edges.items():
        # The store holds SQL and no policy: it imports nothing of the core but errors and its contract.
        if name.startswith("tidelog.store."):
            assert not {d for d in deps if d in CORE} - {
                "tidelog.errors",
                "tidelog.wire",
                "tidelog.records",
            }, (
                name,
                deps,
            )
        # The core imports no front.
        if name in CORE:
            assert not [d for d in deps if d.startswith(fronts)], (name, deps)
        # Nothing in the core imports log.py: it sits on top of the core (only __init__ and fronts use it).
        if name in CORE - {"tidelog.log"}:
            assert "tidelog.log" not in deps, name
