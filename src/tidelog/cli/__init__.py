"""The `tidelog` command line: a thin translation of the core API.

`main` is the script's entry point. It imports the click application lazily
so that a missing `cli` extra ends in a one-line message, not a traceback.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    try:
        from .app import cli
    except ModuleNotFoundError as e:
        if e.name not in ("click", "tabulate"):
            raise
        sys.stderr.write(f"tidelog: the command line needs {e.name}: pip install 'tidelog[cli]'\n")
        raise SystemExit(1) from None
    cli.main(args=argv, prog_name="tidelog")


__all__ = ["main"]
