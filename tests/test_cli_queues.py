"""`tidelog produce` with the queue's options: --priority (and --dedup-id)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import tidelog
from tidelog.cli.app import cli


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "cli.db")
    with tidelog.open(path) as log:
        log.create_topic("jobs", partitions=1)
    return path


def run(db, *args, input=None):
    return CliRunner().invoke(cli, ["--db", db, *args], input=input, catch_exceptions=False)


def test_produce_with_priority_is_received_first(db):
    assert run(db, "produce", "jobs", "--data", '"low"').exit_code == 0
    assert run(db, "produce", "jobs", "--priority", "7", input='"high-1"\n"high-2"\n').exit_code == 0
    with tidelog.open(db) as log:
        got = log.queue("jobs").receive(max_messages=10)
        assert [d.data for d in got] == ["high-1", "high-2", "low"]


@pytest.mark.parametrize("bad", ["10", "-1", "x"])
def test_bad_priority_writes_nothing(db, bad):
    result = run(db, "produce", "jobs", "--priority", bad, "--data", "1")
    assert result.exit_code == 2 and "--priority" in result.output
    with tidelog.open(db) as log:
        assert log.describe("jobs").partitions[0].last_offset == 0


def test_produce_with_a_dedup_id_appends_once(db):
    first = run(db, "--json", "produce", "jobs", "--data", '"pay"', "--dedup-id", "order-42")
    again = run(db, "--json", "produce", "jobs", "--data", '"pay again"', "--dedup-id", "order-42")
    assert first.exit_code == again.exit_code == 0
    assert first.output == again.output  # the same partition and offset
    with tidelog.open(db) as log:
        assert log.describe("jobs").partitions[0].last_offset == 1


@pytest.mark.parametrize(
    "args",
    [
        ["--data", "1", "--dedup-id", "x" * 129],
        ["--data", "1", "--dedup-id", ""],
        ["--dedup-id", "from-stdin"],
    ],
)
def test_bad_dedup_ids_write_nothing(db, args):
    result = run(db, "produce", "jobs", *args, input="1\n")
    assert result.exit_code == 2 and "dedup" in result.output
    with tidelog.open(db) as log:
        assert log.describe("jobs").partitions[0].last_offset == 0
