"""Schema files shipped as package data, applied forward by version.

Files are named `<dialect>_<NNN>.sql`; version N is the highest applied.
"""

from __future__ import annotations

from importlib import resources


def migrations(dialect: str) -> list[tuple[int, str]]:
    """All (version, sql) steps for a dialect, in order."""
    steps = []
    for entry in resources.files("tidelog.store").joinpath("sql").iterdir():
        name = entry.name
        if name.startswith(dialect + "_") and name.endswith(".sql"):
            version = int(name[len(dialect) + 1 : -4])
            steps.append((version, entry.read_text()))
    steps.sort()
    return steps


def latest(dialect: str) -> int:
    steps = migrations(dialect)
    return steps[-1][0] if steps else 0
