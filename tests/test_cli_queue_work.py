"""Queue work from the shell: `tidelog queues send | receive | ack | nack | peek |
in-flight | purge` and `tidelog dlq redrive | purge`, against an embedded log
(SQLite, PostgreSQL) and a served one (`--db http://...`), in-process and
through the installed command. A receipt printed by one command settles in a
later one, also across the file and the server on it. Refused input changes
nothing (a dump of the store before and after)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import tidelog
from dumps import dump
from pgschema import postgres_schema
from tidelog.cli.app import cli

SCRIPT = Path(sys.executable).with_name("tidelog")
TIDELOG = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "tidelog.cli"]


class Where:
    """A log the commands run against (`db`: their --db) and the store behind it (`store`)."""

    def __init__(self, db: str, store: str):
        self.db = db
        self.store = store

    def run(self, *args, input=None):
        result = CliRunner().invoke(cli, ["--db", self.db, *args], input=input, catch_exceptions=False)
        return result

    def json(self, *args, input=None):
        result = self.run(*args, input=input)
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


@pytest.fixture(params=["sqlite", "postgres", "served"])
def where(request, tmp_path, serve):
    if request.param == "sqlite":
        path = str(tmp_path / "q.db")
        tidelog.open(path).close()
        yield Where(path, path)
    elif request.param == "postgres":
        with postgres_schema() as url:
            tidelog.open(url).close()
            yield Where(url, url)
    else:
        path = str(tmp_path / "served.db")
        server = serve(path, clean_interval=0)
        yield Where(server.url, path)


def stats(where, topic="jobs", group=None):
    return where.json("queues", "stats", topic, *(["-g", group] if group else []), "--json")[0]


def test_send_peek_receive_ack_nack_across_commands(where):
    assert where.run("topics", "create", "jobs").exit_code == 0
    assert where.json("queues", "send", "jobs", "--data", '{"n": 1}', "--json") == [
        {"topic": "jobs", "partition": 0, "offset": 1}
    ]
    sent = where.run("queues", "send", "jobs", "--priority", "5", input='{"n": 2}\n\n{"n": 3}\n')
    assert sent.stdout.splitlines() == ["jobs/0@2", "jobs/0@3"]
    assert where.run("queues", "send", "jobs", "--data", '"later"', "--delay", "600").exit_code == 0

    first = where.json("queues", "receive", "jobs", "--max", "1")  # makes the group
    assert [(m["data"], m["delivery_count"]) for m in first] == [({"n": 2}, 1)]  # priority first
    # A peek shows what a receive would take next, in its order, and leases nothing.
    peeked = where.json("queues", "peek", "jobs")
    assert [(m["data"], m["priority"], m["delayed"]) for m in peeked] == [
        ({"n": 3}, 5, False),
        ({"n": 1}, 0, False),
        ("later", 0, True),
    ]
    assert stats(where)["available"] == 2 and stats(where)["in_flight"] == 1
    assert [m["offset"] for m in where.json("queues", "in-flight", "jobs", "--json")] == [2]

    more = where.json("queues", "receive", "jobs", "--max", "5", "--visibility-timeout", "120")
    assert [m["data"] for m in more] == [{"n": 3}, {"n": 1}]
    # Settled by later commands: one receipt on stdin, one as an argument.
    acked = where.run("queues", "ack", "jobs", "-", input=first[0]["receipt"] + "\n")
    assert acked.exit_code == 0 and acked.stdout.strip() == "acked 1"
    nacked = where.run("queues", "nack", "jobs", more[0]["receipt"], "--back")
    assert nacked.exit_code == 0 and nacked.stdout.strip() == "released 1"
    again = where.run("queues", "ack", "jobs", first[0]["receipt"])
    assert again.exit_code == 0, again.output  # acking twice is a no-op
    stale = where.run("queues", "ack", "jobs", more[0]["receipt"], more[1]["receipt"])
    assert stale.exit_code == 1 and stale.stdout.strip() == "acked 1"
    assert "released or expired" in stale.stderr
    now = stats(where)
    assert (now["available"], now["in_flight"], now["delayed"], now["dead_lettered"]) == (1, 0, 1, 0)
    redelivered = where.json("queues", "receive", "jobs")
    assert [(m["data"], m["delivery_count"]) for m in redelivered] == [({"n": 3}, 2)]


def test_a_queue_that_had_a_send_answers_every_verb(where):
    # Issue 38: `queues send` then `queues peek` answered "queue group 'jobs' does not
    # exist" until a first receive; the HTTP API and the console registered the group.
    sent = where.run("queues", "send", "jobs", "--data", '{"n": 1}')
    assert sent.exit_code == 0 and sent.stderr == "created queue group 'jobs' on 'jobs'\n"
    assert [m["data"] for m in where.json("queues", "peek", "jobs")] == [{"n": 1}]
    assert stats(where)["available"] == 1
    listed = where.json("queues", "list", "--json")
    assert [(q["topic"], q["group"], q["available"]) for q in listed] == [("jobs", "jobs", 1)]
    assert where.json("queues", "in-flight", "jobs", "--json") == []
    assert (
        where.run("queues", "purge", "jobs", "--yes").stdout.strip() == "purged 1 record(s) of jobs on jobs"
    )
    # --group names the group a send registers; the topic's other groups hand it out too.
    assert where.run("queues", "send", "jobs", "-g", "mailer", "--data", "2").exit_code == 0
    assert [m["data"] for m in where.json("queues", "peek", "jobs", "-g", "mailer")] == [{"n": 1}, 2]
    assert [m["data"] for m in where.json("queues", "peek", "jobs")] == [2]


def test_a_refused_send_registers_no_group(where):
    where.run("topics", "create", "jobs")
    before = dump(where.store)
    for args in (
        ["--data", "1", "--partition", "3"],  # no such partition
        ["--data", "1", "-g", "bad name"],
        ["--data", "1", "--dedup-id", ""],
    ):
        result = where.run("queues", "send", "jobs", *args)
        assert result.exit_code != 0, (args, result.output)
    assert dump(where.store) == before


def test_a_receipt_is_refused_for_another_group_or_topic_and_changes_nothing(where):
    where.run("queues", "send", "jobs", "--data", "1")
    got = where.json("queues", "receive", "jobs")
    where.run("queues", "receive", "jobs", "-g", "other")
    before = dump(where.store)
    other = where.run("queues", "ack", "jobs", got[0]["receipt"], "-g", "other")
    assert other.exit_code == 1 and "is for group 'jobs'" in other.stderr
    junk = where.run("queues", "nack", "jobs", "not-a-receipt")
    assert junk.exit_code == 1 and "not one this server issued" in junk.stderr
    assert dump(where.store) == before


def test_purge_asks_then_finishes_what_the_group_holds(where):
    where.run("queues", "send", "jobs", input="1\n2\n3\n")
    where.run("queues", "send", "jobs", "--data", "4", "--delay", "600")
    where.json("queues", "receive", "jobs")
    before = dump(where.store)
    refused = where.run("queues", "purge", "jobs", input="")
    assert refused.exit_code == 1 and "nothing was purged: not confirmed" in refused.stderr
    assert "2 available, 1 in flight, 1 delayed" in refused.stderr
    no = where.run("queues", "purge", "jobs", input="n\n")
    assert no.exit_code == 1
    assert dump(where.store) == before
    yes = where.run("queues", "purge", "jobs", input="y\n")
    assert yes.exit_code == 0 and "purged 4 record(s)" in yes.stdout
    assert stats(where)["available"] == stats(where)["in_flight"] == stats(where)["delayed"] == 0
    where.run("queues", "send", "jobs", "--data", '"after"')
    assert [m["data"] for m in where.json("queues", "receive", "jobs", "-n", "9")] == ["after"]
    with tidelog.open(where.store) as log:  # the records stay for the topic's other readers
        assert log.describe("jobs").partitions[0].last_offset == 5


def dead_letters(where, count=3):
    """orders with `count` records, each rejected by the queue group 'workers'."""
    with tidelog.open(where.store) as log:
        q = log.queue("orders", "workers")
        for i in range(count):
            q.send({"n": i})
        for d in q.receive(max_messages=count):
            q.reject(d, reason="bad input")


def test_redrive_shows_its_plan_asks_and_moves_what_it_showed(where):
    dead_letters(where)
    before = dump(where.store)
    dry = where.run("dlq", "redrive", "orders.dlq", "--dry-run")
    assert dry.exit_code == 0 and dry.stdout.splitlines() == [
        f"orders.dlq@{i} -> orders/0" for i in (1, 2, 3)
    ]
    assert "would redrive 3 dead letter(s)" in dry.stderr
    dry_json = where.json("dlq", "redrive", "orders.dlq", "--dry-run", "--json")[0]
    assert dry_json["dry_run"] is True and [m["offset"] for m in dry_json["moved"]] == [0, 0, 0]
    asked = where.run("dlq", "redrive", "orders.dlq", input="")
    assert asked.exit_code == 1 and "Redrive 3 dead letter(s) of orders.dlq to orders?" in asked.stderr
    assert dump(where.store) == before
    done = where.run("dlq", "redrive", "orders.dlq", "--offset", "2", "--yes")
    assert done.exit_code == 0 and done.stdout.strip() == "orders.dlq@2 -> orders/0@4"
    rest = where.run("dlq", "redrive", "orders.dlq", input="y\n")
    assert rest.exit_code == 0 and "redrove 2 dead letter(s)" in rest.stderr
    with tidelog.open(where.store) as log:
        assert [m.data for m in log.read("orders", 0, after=3)] == [{"n": 1}, {"n": 0}, {"n": 2}]


def test_dlq_purge_asks_and_removes_for_good(where):
    dead_letters(where)
    before = dump(where.store)
    dry = where.run("dlq", "purge", "orders.dlq", "--dry-run", "--json")
    assert json.loads(dry.stdout) == {
        "dead_letter": "orders.dlq",
        "removed": [1, 2, 3],
        "skipped": [],
        "dry_run": True,
    }
    assert where.run("dlq", "purge", "orders.dlq", input="").exit_code == 1
    assert dump(where.store) == before
    gone = where.run("dlq", "purge", "orders.dlq", "--offset", "3", "--offset", "1", "--yes")
    assert gone.exit_code == 0 and "removed 2 dead letter(s)" in gone.stderr
    listed = where.json("dlq", "list", "orders.dlq", "--json")
    assert [d["offset"] for d in listed] == [2]


def test_bad_input_is_refused_and_changes_nothing(where, tried):
    dead_letters(where, 1)
    where.run("topics", "create", "plain")
    where.run("produce", "plain", "--data", "1")
    cases = [
        (["queues", "purge", "orders", "-g", "nosuch", "--yes"], 1, "queue group 'nosuch' does not exist"),
        (["queues", "purge", "nosuch", "--yes"], 1, "does not exist"),
        (["queues", "peek", "orders", "-g", "nosuch"], 1, "queue group 'nosuch' does not exist"),
        (["queues", "ack", "orders", "x", "-g", "nosuch"], 1, "queue group 'nosuch' does not exist"),
        (
            ["queues", "receive", "orders", "-g", "fresh", "--visibility-timeout", "0"],
            2,
            "--visibility-timeout",
        ),
        (
            ["queues", "receive", "orders", "-g", "fresh", "--visibility-timeout", "-1"],
            2,
            "--visibility-timeout",
        ),
        (
            ["queues", "receive", "orders", "-g", "fresh", "--visibility-timeout", "x"],
            2,
            "--visibility-timeout",
        ),
        (
            ["queues", "receive", "orders", "-g", "fresh", "--visibility-timeout", "99999"],
            2,
            "--visibility-timeout",
        ),
        (["queues", "receive", "nosuch"], 1, "topic 'nosuch' does not exist"),
        (["queues", "send", "orders", "--data", "1", "--delay", "-1"], 2, "--delay"),
        (["queues", "send", "orders", "--data", "{"], 2, "--data"),
        (["queues", "nack", "orders", "-g", "workers", "x", "--back", "--delay", "1"], 2, "at most one"),
        (["dlq", "redrive", "plain", "--yes"], 1, "'plain' is not a dead-letter topic"),
        (["dlq", "redrive", "plain", "--dry-run"], 1, "'plain' is not a dead-letter topic"),
        (["dlq", "purge", "plain", "--yes"], 1, "'plain' is not a dead-letter topic"),
        (["dlq", "redrive", "orders", "--yes"], 1, "'orders' is not a dead-letter topic"),
        (["dlq", "redrive", "nosuch.dlq", "--yes"], 1, "topic 'nosuch.dlq' does not exist"),
    ]
    before = dump(where.store)
    for args, status, message in cases:
        result = where.run(*args)
        assert result.exit_code == status, (args, result.output)
        assert message in result.output, (args, result.output)
    assert dump(where.store) == before
    tried(cases=len(cases))


def test_a_receipt_from_the_file_settles_through_the_server_and_back(tmp_path, serve):
    path = str(tmp_path / "shared.db")
    tidelog.open(path).close()
    server = serve(path, clean_interval=0)
    on_file, served = Where(path, path), Where(server.url, path)
    on_file.run("queues", "send", "jobs", input="1\n2\n")
    got = on_file.json("queues", "receive", "jobs", "-n", "1")
    assert served.run("queues", "ack", "jobs", got[0]["receipt"]).stdout.strip() == "acked 1"
    got = served.json("queues", "receive", "jobs", "-n", "1")
    assert on_file.run("queues", "ack", "jobs", got[0]["receipt"]).stdout.strip() == "acked 1"
    assert stats(on_file)["available"] == stats(on_file)["in_flight"] == 0


def test_receive_then_ack_in_later_processes(tmp_path):
    db = str(tmp_path / "p.db")

    def proc(*args, input=None):
        return subprocess.run(
            [*TIDELOG, "--db", db, *args], input=input, capture_output=True, text=True, timeout=60
        )

    sent = proc("queues", "send", "jobs", "--data", '"x"')
    assert sent.returncode == 0 and "created queue group 'jobs'" in sent.stderr
    got = proc("queues", "receive", "jobs")
    assert got.returncode == 0 and got.stderr == ""
    receipt = json.loads(got.stdout)["receipt"]
    asked = proc("queues", "purge", "jobs")  # stdin is not a terminal and says nothing
    assert asked.returncode == 1 and "not confirmed" in asked.stderr
    acked = proc("queues", "ack", "jobs", "-", input=receipt + "\n")
    assert acked.returncode == 0 and acked.stdout.strip() == "acked 1"
