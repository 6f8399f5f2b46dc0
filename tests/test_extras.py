"""What each extra installs: `pip install 'tidelog[server]'` gives a working
`tidelog serve` with its HTTP, Redis and Kafka fronts (issue 20: the extras did
not add up; issue 38: the server extra missed httpx). Read from pyproject.toml,
the file pip reads, and from the imports in src/tidelog (ast), with no extra
installed or missing: tests/test_first_run.py runs `make run`'s venv for real."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

PYPROJECT = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
EXTRAS = PYPROJECT["project"]["optional-dependencies"]


def closure(extra: str) -> set[str]:
    """The distributions an extra pulls in, following tidelog[...] references."""
    names: set[str] = set()
    for requirement in EXTRAS[extra]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
        if name == "tidelog":
            for inner in re.search(r"\[(.*)\]", requirement).group(1).split(","):
                names |= closure(inner.strip())
        else:
            names.add(name)
    return names


def test_the_server_extra_runs_tidelog_serve_with_both_fronts():
    server = closure("server")
    # the command (click, tabulate), HTTP (starlette on granian), the Redis front (hiredis)
    assert {"click", "tabulate", "starlette", "granian", "orjson", "hiredis"} <= server


def test_the_worker_extra_leaves_spark_to_the_spark_extra():
    assert not {"pyspark", "pyarrow"} & closure("worker")
    assert {"pyspark", "pyarrow"} <= closure("spark")


def test_periodic_jobs_run_wherever_tidelog_jobs_run_does():
    # `tidelog jobs run` comes with the server extra; its schedules need cronsim.
    assert "cronsim" in closure("jobs")
    assert "cronsim" in closure("server")
    assert "cronsim" in closure("dev")


# What each extra claims to make work: the modules a user of that extra imports (and,
# through them, everything those import when they load). A module may reach another
# extra's library only inside `try: ... except ImportError` (the one-line message that
# names the extra); a plain import of it, at the top or in a function, counts.
def _under(*prefixes: str) -> list[str]:
    return sorted(m for m in MODULES if m == prefixes[0] or m.startswith(prefixes))


SRC = Path(__file__).parents[1] / "src"
MODULES = {
    ".".join(p.relative_to(SRC).with_suffix("").parts[: -1 if p.name == "__init__.py" else None]): p
    for p in SRC.rglob("*.py")
}
CLAIMS = {
    "cli": _under("tidelog.cli."),
    "server": _under("tidelog.server", "tidelog.cli."),
    "client": ["tidelog.store.http"],
    "postgres": _under("tidelog.store.postgres"),
    "resp": _under("tidelog.server.resp"),
    "kafka": _under("tidelog.server.kafka"),
    "jobs": ["tidelog.jobs", "tidelog.schedules"],
    "worker": [m for m in _under("tidelog.worker") if m != "tidelog.worker.spark"],
    "spark": _under("tidelog.spark"),
}


def _normal(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _guarded(tree: ast.AST) -> set[int]:
    """The nodes under `try: ... except ImportError` or `if TYPE_CHECKING:`."""
    nodes: set[int] = set()
    for node in ast.walk(tree):
        catches_import = isinstance(node, ast.Try) and any(
            h.type is not None and re.search(r"ImportError|ModuleNotFoundError", ast.unparse(h.type))
            for h in node.handlers
        )
        type_checking = isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        if catches_import or type_checking:
            nodes |= {id(n) for part in node.body for n in ast.walk(part)}
    return nodes


def _imports(name: str) -> tuple[set[str], set[str]]:
    """(tidelog modules `name` imports as it loads, third-party top-level modules it imports anywhere)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    guarded = _guarded(tree)
    in_functions = {
        id(n)
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
        for part in f.body
        for n in ast.walk(part)
    }
    loads, third = set(), set()
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for imported in names:
            top = imported.split(".")[0]
            if top == "tidelog":
                while imported and imported not in MODULES:
                    imported = imported.rpartition(".")[0]
                if imported and id(node) not in in_functions:
                    loads.add(imported)
            elif top not in sys.stdlib_module_names and top != "__future__":
                third.add(top)
    return loads, third


def reached(starts: list[str]) -> dict[str, str]:
    """Third-party module -> the tidelog module that imports it, over what `starts` load."""
    seen: set[str] = set()
    todo = list(starts)
    found: dict[str, str] = {}
    while todo:
        name = todo.pop()
        if name in seen or name not in MODULES:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # its packages load first
        loads, third = _imports(name)
        todo += loads
        for top in third:
            found.setdefault(top, name)
    return found


@pytest.mark.parametrize("extra", sorted(CLAIMS))
def test_each_extra_installs_what_its_modules_import(extra):
    # Issue 38: `server/http/home.py` imported httpx, which only `client` carried, so a
    # fresh clone's `make run` (the server extra alone) crashed at start.
    distributions = {
        k: {_normal(d) for d in v} for k, v in importlib.metadata.packages_distributions().items()
    }
    have = {_normal(name) for name in closure(extra)}
    missing = {
        top: via
        for top, via in reached(CLAIMS[extra]).items()
        if not distributions.get(top, {_normal(top)}) & have
    }
    assert missing == {}, f"tidelog[{extra}] lacks what these modules import: {missing}"


def test_serve_looks_for_what_its_fronts_import():
    # need_extra() finds modules without importing them; the lists must follow the code.
    # (They may name more: swagger_ui_bundle is read as package data, not imported.)
    from tidelog import server

    fronts = {
        "HTTP_MODULES": [
            "tidelog.server.http.run",
            "tidelog.server.http.ops",
            "tidelog.server.http.console.render",
        ],
        "RESP_MODULES": _under("tidelog.server.resp"),
        "KAFKA_MODULES": _under("tidelog.server.kafka"),
    }
    seen: set[str] = set()
    for name, starts in fronts.items():
        imported = set(reached(starts)) - seen - {"uvloop"}  # uvloop is optional (Windows has none)
        seen |= imported
        assert imported <= set(getattr(server, name)), name


def test_the_server_extra_holds_what_serve_looks_for():
    from tidelog import server

    distributions = importlib.metadata.packages_distributions()
    have = {_normal(name) for name in closure("server")}
    for module in server.HTTP_MODULES + server.RESP_MODULES + server.KAFKA_MODULES:
        assert {_normal(d) for d in distributions[module]} & have, module
