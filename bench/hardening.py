"""The hardening probes, before and after: each attack or accident against a real `tidelog serve`.

    python bench/hardening.py --before SRC --after SRC [--markdown]

SRC is a tidelog `src` directory (e.g. `git archive 86e4afe src | tar -x -C /tmp/before`
gives /tmp/before/src). Every module in bench/probes/ is run once against each tree, in
turn (one probe module at a time, so they do not load each other), and prints
`{"probe", "measure", "value", "unit"}` lines; this script pairs them by (module, probe,
measure) and prints one table: before, after. The figures are the probes' own (RSS,
stall ms, seconds until a frozen lease is released, whether a refused request changed the
store's dump); the load average before and after is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

PROBES = Path(__file__).parent / "probes"
TIMEOUT_S = 600


def load() -> str:
    return open("/proc/loadavg").read().split()[0]


def run(module: Path, src: str) -> tuple[dict[tuple[str, str], tuple[object, str]], str]:
    """(probe, measure) -> (value, unit) of one probe module against one tree; and its error, if any."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        done = subprocess.run(
            [sys.executable, str(module), "--src", src],
            capture_output=True,
            text=True,
            env=env,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return {}, f"no end in {TIMEOUT_S} s"
    rows: dict[tuple[str, str], tuple[object, str]] = {}
    for line in done.stdout.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and {"probe", "measure", "value"} <= row.keys():
            rows[(str(row["probe"]), str(row["measure"]))] = (row["value"], str(row.get("unit", "")))
    error = (
        "" if done.returncode == 0 else (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    )
    return rows, error


def shown(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return json.dumps(value) if not isinstance(value, str) else value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the tidelog src tree from before")
    parser.add_argument("--after", required=True, help="the tidelog src tree from after")
    parser.add_argument("--only", nargs="*", help="probe modules to run (file stems), default all")
    args = parser.parse_args()
    modules = sorted(p for p in PROBES.glob("*.py") if not args.only or p.stem in args.only)
    print(f"load before: {load()}", file=sys.stderr)
    print("| probes | probe | measure | before | after | unit |")
    print("| --- | --- | --- | ---: | ---: | --- |")
    for module in modules:
        before, before_error = run(module, args.before)
        after, after_error = run(module, args.after)
        for key in list(dict.fromkeys([*before, *after])):
            b, unit = before.get(key, (None, ""))
            a, unit_after = after.get(key, (None, unit))
            print(f"| {module.stem} | {key[0]} | {key[1]} | {shown(b)} | {shown(a)} | {unit or unit_after} |")
        for side, error in (("before", before_error), ("after", after_error)):
            if error:
                print(f"| {module.stem} | (the {side} run) | ended with | {error[:120]} | | |")
    print(f"load after: {load()}", file=sys.stderr)


if __name__ == "__main__":
    main()
