"""What each extra installs: `pip install 'tidelog[server]'` gives a working
`tidelog serve` with its HTTP and Redis fronts (issue 20: the extras did not
add up). Read from pyproject.toml, the file pip reads."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

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
