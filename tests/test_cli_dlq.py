"""`tidelog dlq list|redrive` on SQLite and PostgreSQL, in-process and through
the installed command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import tidelog
from pgschema import postgres_schema
from tidelog.cli.app import cli

SCRIPT = Path(sys.executable).with_name("tidelog")
TIDELOG = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "tidelog.cli"]


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path):
    if request.param == "sqlite":
        yield str(tmp_path / "dlq.db")
        return
    with postgres_schema() as pg:
        yield pg


def fill(url: str) -> None:
    """orders with three records, all rejected by the queue group 'workers'."""
    with tidelog.open(url) as log:
        log.create_topic("orders")
        q = log.queue("orders", "workers")
        for i in range(3):
            q.send({"n": i}, key=f"k{i}", headers={"trace": str(i)})
        for d in q.receive(max_messages=3):
            q.reject(d, reason="bad input")


def run(url, *args):
    return CliRunner().invoke(cli, ["--db", url, *args], catch_exceptions=False)


def test_list_and_redrive(url):
    fill(url)
    listed = run(url, "dlq", "list", "orders.dlq", "--json")
    assert listed.exit_code == 0, listed.output
    rows = [json.loads(line) for line in listed.output.splitlines()]
    assert [(r["offset"], r["origin_topic"], r["origin_offset"], r["reason"]) for r in rows] == [
        (i, "orders", i, "bad input") for i in (1, 2, 3)
    ]
    table = run(url, "dlq", "list", "orders.dlq").output
    assert "orders/0@2" in table and "bad input" in table

    one = run(url, "dlq", "redrive", "orders.dlq", "--offset", "2", "--yes")
    assert one.exit_code == 0 and "orders.dlq@2 -> orders/0@4" in one.output
    with tidelog.open(url) as log:
        back = log.read("orders", 0, after=3)
        assert [(m.data, m.key, dict(m.headers)["trace"]) for m in back] == [({"n": 1}, b"k1", b"1")]
        assert [d.offset for d in tidelog.deadletters.dead_letters(log, "orders.dlq")] == [1, 3]

    bad = run(url, "dlq", "redrive", "orders.dlq", "--offset", "2", "--yes")  # moved already
    assert bad.exit_code == 1 and "no record at offset 2" in bad.output
    rest = json.loads(run(url, "dlq", "redrive", "orders.dlq", "--json", "--yes").output)
    assert [(m["dead_letter_offset"], m["offset"]) for m in rest["moved"]] == [(1, 5), (3, 6)]


def test_bad_input_through_the_installed_command(tmp_path):
    db = str(tmp_path / "dlq.db")
    fill(db)

    def proc(*args):
        return subprocess.run([*TIDELOG, "--db", db, *args], capture_output=True, text=True, timeout=60)

    nosuch = proc("dlq", "redrive", "nosuch.dlq")
    assert nosuch.returncode == 1 and "topic 'nosuch.dlq' does not exist" in nosuch.stderr
    zero = proc("dlq", "redrive", "orders.dlq", "--offset", "0")
    assert zero.returncode == 2 and "--offset" in zero.stderr
    with tidelog.open(db) as log:
        assert len(tidelog.deadletters.dead_letters(log, "orders.dlq")) == 3
    done = proc("dlq", "redrive", "orders.dlq", "--yes")
    assert done.returncode == 0 and "redrove 3 dead letter(s)" in done.stderr
