"""The `tidelog` command: in-process through click's CliRunner, and through the
installed script in real processes (stdin, pipes, signals, a terminal)."""

from __future__ import annotations

import base64
import json
import os
import pty
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tidelog
from conformance.conftest import snapshot
from tidelog.cli.app import cli
from tidelog.cli.output import record_line
from tidelog.partitioner import partition_for_key

SCRIPT = Path(sys.executable).with_name("tidelog")
# The installed console script when the venv has it, else the module.
TIDELOG = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "tidelog.cli"]


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "cli.db")


@pytest.fixture
def run(db):
    """Invoke the command in-process: run("topics", "list", input=...)."""

    def invoke(*args, input=None, env=None):
        return CliRunner().invoke(cli, ["--db", db, *args], input=input, env=env, catch_exceptions=False)

    return invoke


def lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def proc(db, *args, **kwargs):
    return subprocess.run([*TIDELOG, "--db", db, *args], capture_output=True, text=True, timeout=60, **kwargs)


def committed(db, group, topic, partition):
    with tidelog.open(db) as log:
        return log.consumer(group).committed(topic, partition)


# --- through the real entry point, in other processes -------------------------


def test_produce_from_stdin_then_consume_through_the_script(db):
    assert proc(db, "topics", "create", "orders", "--partitions", "2").returncode == 0
    records = "".join(json.dumps({"orderId": n}) + "\n" for n in range(1, 8))
    out = proc(db, "produce", "orders", "--partition", "1", "--key", "user-7", "--json", input=records)
    assert out.returncode == 0, out.stderr
    [sent] = lines(out.stdout)
    assert (sent["partition"], sent["first_offset"], sent["last_offset"], sent["count"]) == (1, 1, 7, 7)

    out = proc(db, "consume", "orders", "--group", "billing")
    assert out.returncode == 0, out.stderr
    got = lines(out.stdout)
    assert [r["data"] for r in got] == [{"orderId": n} for n in range(1, 8)]
    assert {(r["topic"], r["partition"], r["key"], r["format"]) for r in got} == {
        ("orders", 1, "user-7", "json")
    }
    assert [r["offset"] for r in got] == list(range(1, 8))
    assert committed(db, "billing", "orders", 1) == 7
    # A second run has nothing left to print.
    again = proc(db, "consume", "orders", "--group", "billing")
    assert (again.returncode, again.stdout) == (0, "")


def test_python_dash_m_tidelog_is_the_command(db):
    out = subprocess.run(
        [sys.executable, "-m", "tidelog", "--db", db, "topics", "create", "t"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert [t.name for t in tidelog.open(db).topics()] == ["t"]


def test_python_dash_m_runs_the_same_command(db):
    out = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "--db", db, "topics", "create", "t", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["partitions"] == 1


def test_errors_through_the_script_exit_1_with_one_line_and_2_on_usage(db):
    assert proc(db, "topics", "create", "other").returncode == 0
    out = proc(db, "consume", "missing", "--group", "g")
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and "topic 'missing' does not exist" in out.stderr
    usage = proc(db, "consume", "missing")  # --group is required
    assert usage.returncode == 2
    assert "--group" in usage.stderr


@pytest.mark.parametrize(
    "partition_args, stop_signal",
    [(["--partition", "0"], signal.SIGINT), ([], signal.SIGTERM)],
    ids=["one-partition-sigint", "all-partitions-sigterm"],
)
def test_follow_wakes_on_another_process_and_a_signal_commits_the_last_printed(
    db, partition_args, stop_signal
):
    with tidelog.open(db) as log:
        log.create_topic("events", partitions=2)
        log.producer().send_batch("events", [{"n": 1}, {"n": 2}], partition=0)
    follower = subprocess.Popen(
        [*TIDELOG, "--db", db, "consume", "events", "--group", "tail", "--follow", *partition_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        printed = [json.loads(follower.stdout.readline()) for _ in range(2)]
        assert [r["data"] for r in printed] == [{"n": 1}, {"n": 2}]
        # Caught up, it now waits; a producer in another process wakes it.
        sent = proc(db, "produce", "events", "--partition", "0", "--json", input='{"n": 3}\n{"n": 4}\n')
        assert sent.returncode == 0, sent.stderr
        printed += [json.loads(follower.stdout.readline()) for _ in range(2)]
        assert [r["data"] for r in printed] == [{"n": n} for n in range(1, 5)]
        follower.send_signal(stop_signal)
        rest, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    assert follower.returncode == 0, err
    # stderr says only the assignment changes (a member with --follow), stdout nothing more.
    assert rest == "" and all(line.startswith("tail: ") for line in err.splitlines()), err
    assert committed(db, "tail", "events", 0) == printed[-1]["offset"] == 4


def test_progress_bar_on_a_terminal_and_none_when_piped(db, tmp_path):
    with tidelog.open(db) as log:
        log.create_topic("bulk")
    data = tmp_path / "records.ndjson"
    data.write_text("".join(f'{{"n": {n}}}\n' for n in range(5000)))

    # stderr on a terminal: the bar is drawn there, stdout keeps the result.
    leader, follower_fd = pty.openpty()
    with data.open("rb") as stdin:
        p = subprocess.Popen(
            [*TIDELOG, "--db", db, "produce", "bulk", "--json"],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=follower_fd,
        )
        os.close(follower_fd)
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            drawn += chunk
        out, _ = p.communicate(timeout=60)
    os.close(leader)
    assert p.returncode == 0
    assert b"producing" in drawn and b"100%" in drawn
    assert sum(r["count"] for r in lines(out.decode())) == 5000

    # Piped: nothing on stderr.
    with data.open("rb") as stdin:
        piped = subprocess.run(
            [*TIDELOG, "--db", db, "produce", "bulk", "--json"], stdin=stdin, capture_output=True, timeout=60
        )
    assert piped.returncode == 0 and piped.stderr == b""
    assert lines(piped.stdout.decode())[0]["first_offset"] == 5001


# --- in-process -------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    value=json_values | st.text() | st.binary(),
    key=st.none() | st.text(max_size=10) | st.binary(max_size=10),
    headers=st.lists(
        st.tuples(st.text(min_size=1, max_size=5), st.text(max_size=5) | st.binary(max_size=5)), max_size=3
    ),
    producer=st.none() | st.from_regex(r"[a-z0-9.-]{1,8}", fullmatch=True),
)
def test_a_record_line_is_one_line_of_json_that_gives_the_record_back(
    tmp_path, value, key, headers, producer
):
    with tidelog.open(str(tmp_path / "lines.db")) as log:
        log.create_topic("t")
        sent = log.producer(producer).send("t", value, key=key, headers=headers)
        [msg] = log.read("t", 0, after=sent.offset - 1, limit=1)
    line = record_line(msg)
    assert line.endswith("\n") and "\n" not in line[:-1]
    got = json.loads(line)

    def raw(field):  # a key or header value as printed, back to bytes
        return (
            None
            if field is None
            else field.encode()
            if isinstance(field, str)
            else base64.b64decode(field["base64"])
        )

    assert got["format"] == msg.format
    assert (raw(got["data"]) if msg.format == "bytes" else got["data"]) == msg.data
    assert raw(got["key"]) == msg.key
    assert [(name, raw(v)) for name, v in got["headers"]] == msg.headers
    assert got["producer"] == producer
    assert (got["topic"], got["partition"], got["offset"], got["timestamp"]) == (
        "t",
        0,
        sent.offset,
        sent.timestamp,
    )


def test_topics_create_list_describe_grow_delete(run, db):
    r = run("topics", "create", "orders", "--partitions", "2")
    assert r.exit_code == 0 and "created topic orders (2 partitions)" in r.stdout
    r = run("topics", "create", "orders", "--partitions", "2", "--json")
    assert json.loads(r.stdout)["new"] is False
    run("produce", "orders", "--partition", "1", input="1\n2\n3\n")
    r = run("topics", "list")
    header, row = r.stdout.splitlines()
    assert header.split() == ["NAME", "PARTITIONS", "RECORDS", "CREATED"]
    assert row.split()[:3] == ["orders", "2", "3"]
    [listed] = lines(run("--json", "topics", "list").stdout)
    assert (listed["name"], listed["partitions"], listed["records"]) == ("orders", 2, 3)
    desc = json.loads(run("topics", "describe", "orders", "--json").stdout)
    assert [(p["partition"], p["first_offset"], p["last_offset"]) for p in desc["partitions"]] == [
        (0, 1, 0),
        (1, 1, 3),
    ]
    table = run("topics", "describe", "orders").stdout.splitlines()
    assert table[-1].split() == ["1", "1", "3", "3"]
    assert run("topics", "add-partitions", "orders", "4").exit_code == 0
    with tidelog.open(db) as log:
        assert log.topic("orders").partitions == 4
    assert run("topics", "delete", "orders").stdout == "deleted topic orders\n"
    with tidelog.open(db) as log:
        assert log.topics() == []


def test_records_carry_key_headers_producer_and_every_value_format(run, db):
    run("topics", "create", "mixed")
    r = run(
        "produce",
        "mixed",
        "--key",
        "k1",
        "--header",
        "trace=abc",
        "--header",
        "x=a=b",
        "--producer",
        "cli",
        "--data",
        '{"a": [1, 2]}',
    )
    assert r.exit_code == 0, r.stderr
    with tidelog.open(db) as log:
        producer = log.producer()
        producer.send("mixed", b"\x00\xffraw", key=b"\xfe\x01")
        producer.send("mixed", "plain text")
        producer.send("mixed", {"base64": "not bytes"})
    got = lines(run("read", "mixed", "--partition", "0", "--limit", "10").stdout)
    assert got[0]["key"] == "k1"
    assert got[0]["headers"] == [["trace", "abc"], ["x", "a=b"]]
    assert got[0]["producer"] == "cli"
    assert (got[0]["format"], got[0]["data"]) == ("json", {"a": [1, 2]})
    assert got[1]["format"] == "bytes"
    assert base64.b64decode(got[1]["data"]["base64"]) == b"\x00\xffraw"
    assert base64.b64decode(got[1]["key"]["base64"]) == b"\xfe\x01"
    assert (got[2]["format"], got[2]["data"]) == ("text", "plain text")
    # A JSON object shaped like the marker is told apart by its format.
    assert (got[3]["format"], got[3]["data"]) == ("json", {"base64": "not bytes"})
    assert [r["offset"] for r in got] == [1, 2, 3, 4]
    assert all(isinstance(r["timestamp"], int) and r["timestamp"] > 0 for r in got)


def test_produce_stdin_in_atomic_batches_and_reports_ranges(run, db):
    run("topics", "create", "t")
    r = run("produce", "t", "--batch", "3", "--json", input="1\n2\n\n3\n4\n5\n")
    sent = lines(r.stdout)
    assert [(s["first_offset"], s["count"]) for s in sent] == [(1, 3), (4, 2)]
    r = run("produce", "t", "--batch", "2", input="6\n7\n8\n")
    assert r.stdout.splitlines() == ["t/0@6..8 (3 records)"]  # merged into one range
    # A bad line stops the command before its batch: earlier batches stay.
    r = run("produce", "t", "--batch", "2", input="9\n10\n11\n{oops\n12\n")
    assert r.exit_code == 1
    assert r.stderr.strip() == (
        "Error: line 4 is not JSON (Expecting property name enclosed in double quotes at column 2); "
        "lines 3 to 4 were not written, the 2 records before were"
    )
    assert [m.data for m in tidelog.open(db).read("t", 0, after=8)] == [9, 10]


def test_consume_no_commit_leaves_the_group_where_it_was(run, db):
    run("topics", "create", "t")
    run("produce", "t", input="1\n2\n3\n")
    first = run("consume", "t", "--group", "g", "--no-commit")
    second = run("consume", "t", "--group", "g", "--no-commit")
    assert [r["data"] for r in lines(first.stdout)] == [1, 2, 3]
    assert first.stdout == second.stdout
    assert committed(db, "g", "t", 0) == 0
    run("consume", "t", "--group", "g", "--limit", "2")
    assert committed(db, "g", "t", 0) == 2


def test_consume_from_earliest_latest_and_an_offset(run, db):
    run("topics", "create", "t")
    run("produce", "t", input="".join(f"{n}\n" for n in range(1, 11)))
    run("consume", "t", "--group", "g", "--limit", "6")
    assert committed(db, "g", "t", 0) == 6
    # earliest re-reads from the start without rewinding the group.
    r = run("consume", "t", "--group", "g", "--from", "earliest", "--limit", "3")
    assert [x["offset"] for x in lines(r.stdout)] == [1, 2, 3]
    assert committed(db, "g", "t", 0) == 6
    # N starts at offset N; committing past the old position moves the group.
    r = run("consume", "t", "--group", "g", "--from", "8")
    assert [x["offset"] for x in lines(r.stdout)] == [8, 9, 10]
    assert committed(db, "g", "t", 0) == 10
    # latest prints only what arrives after it started: nothing here.
    r = run("consume", "t", "--group", "other", "--from", "latest")
    assert (r.exit_code, r.stdout) == (0, "")
    assert committed(db, "other", "t", 0) == 0


def test_consume_limit_spans_partitions_and_exclude_producer_skips(run, db):
    run("topics", "create", "t", "--partitions", "3")
    for p in range(3):
        run("produce", "t", "--partition", str(p), input=f"{p}\n{p}\n")
    run("produce", "t", "--partition", "2", "--producer", "me", "--data", '"mine"')
    r = run("consume", "t", "--group", "g", "--limit", "3")
    assert [(x["partition"], x["offset"]) for x in lines(r.stdout)] == [(0, 1), (0, 2), (1, 1)]
    r = run("consume", "t", "--group", "g", "--exclude-producer", "me")
    rest = lines(r.stdout)
    assert [(x["partition"], x["offset"]) for x in rest] == [(1, 2), (2, 1), (2, 2)]
    # The skipped record counts as done: every partition is committed to its end.
    assert [committed(db, "g", "t", p) for p in range(3)] == [2, 2, 3]


def test_follow_in_process_wakes_on_a_send_and_stops_at_limit(run, db):
    run("topics", "create", "live")

    def send_later():
        time.sleep(0.3)
        with tidelog.open(db) as log:
            log.producer().send_batch("live", ["a", "b"], partition=0)

    sender = threading.Thread(target=send_later)
    sender.start()
    r = run("consume", "live", "--group", "g", "--follow", "--limit", "2")
    sender.join()
    assert [x["data"] for x in lines(r.stdout)] == ["a", "b"]
    assert committed(db, "g", "live", 0) == 2


def test_groups_describe_lag_and_offsets_set(run, db):
    run("topics", "create", "t", "--partitions", "2")
    run("produce", "t", "--partition", "0", input="".join(f"{n}\n" for n in range(5)))
    run("produce", "t", "--partition", "1", input="1\n")
    run("consume", "t", "--group", "g", "--partition", "0", "--limit", "2")
    rows = lines(run("groups", "describe", "g", "--json").stdout)
    assert [(x["partition"], x["committed"], x["last_offset"], x["lag"]) for x in rows] == [
        (0, 2, 5, 3),
        (1, 0, 1, 1),
    ]
    table = run("groups", "describe", "g").stdout.splitlines()
    assert table[0] == "g: a stream group, no live member"
    assert table[1].split() == ["TOPIC", "PARTITION", "COMMITTED", "LAST", "LAG", "MEMBER", "CLIENT"]
    assert table[2].split() == ["t", "0", "2", "5", "3", "-", "-"]  # no live member owns it
    [listed] = lines(run("groups", "list", "--json").stdout)
    assert listed == {"group": "g", "kind": "stream", "topics": ["t"], "lag": 4}

    # offsets --set moves the group back; the next consume resumes at N + 1.
    r = run("offsets", "g", "t", "--partition", "0", "--set", "1")
    assert r.exit_code == 0 and r.stdout.splitlines()[1].split() == ["t", "0", "1", "5", "4"]
    assert committed(db, "g", "t", 0) == 1
    r = run("consume", "t", "--group", "g", "--partition", "0", "--limit", "1")
    assert lines(r.stdout)[0]["offset"] == 2
    shown = lines(run("offsets", "g", "t", "--json").stdout)
    assert [(x["partition"], x["committed"]) for x in shown] == [(0, 2), (1, 0)]


def test_db_comes_from_tidelog_url_and_a_later_flag_wins(db, tmp_path):
    runner = CliRunner()
    r = runner.invoke(cli, ["topics", "create", "from-env"], env={"TIDELOG_URL": db})
    assert r.exit_code == 0
    other = str(tmp_path / "other.db")
    r = runner.invoke(
        cli, ["--db", db, "topics", "create", "elsewhere", "--db", other], env={"TIDELOG_URL": None}
    )
    assert r.exit_code == 0
    with tidelog.open(db) as log:
        assert [t.name for t in log.topics()] == ["from-env"]
    with tidelog.open(other) as log:
        assert [t.name for t in log.topics()] == ["elsewhere"]


def test_serve_without_the_server_extra_names_it(run, monkeypatch):
    # As if granian were not installed (tests/test_first_run.py runs a venv without the extra).
    monkeypatch.setitem(sys.modules, "granian", None)
    r = run("serve", "--port", "0")
    assert r.exit_code == 1
    assert (
        r.stderr
        == "Error: tidelog serve needs the server extra (granian missing): pip install 'tidelog[server]'\n"
    )


def test_serve_tls_needs_cert_and_key(run, tmp_path):
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    r = run("serve", "--tls-cert", str(cert))
    assert r.exit_code == 2 and "--tls-cert and --tls-key go together" in r.stderr


def test_missing_cli_extra_names_it(monkeypatch, capsys):
    import tidelog.cli as entry

    monkeypatch.setitem(sys.modules, "click", None)
    monkeypatch.delitem(sys.modules, "tidelog.cli.app")
    with pytest.raises(SystemExit) as exit_:
        entry.main(["topics", "list"])
    assert exit_.value.code == 1
    assert "pip install 'tidelog[cli]'" in capsys.readouterr().err


# --- bad input: a specific error, and nothing written ----------------------------

BAD_INPUT = [
    # (arguments, stdin, exit code, part of the message)
    (["--no-auto-create", "produce", "nope", "--data", "1"], None, 1, "topic 'nope' does not exist"),
    (["produce", "nope", "--data", "1", "--no-auto-create"], None, 1, "topic 'nope' does not exist"),
    # Auto-create on: input refused before the first write creates no topic.
    (["produce", "nope", "--partition", "1", "--data", "1"], None, 1, "partition 1 does not exist"),
    (["produce", "nope"], '{"a": 1}\nnot json\n', 1, "line 2 is not JSON"),
    (["produce", "nope", "--data", "{oops"], None, 2, "not JSON"),
    (["produce", "t", "--partition", "2", "--data", "1"], None, 1, "partition 2 does not exist"),
    (["produce", "bad name", "--data", "1"], None, 1, "invalid topic name"),
    (["produce", "t"], '{"a": 1}\nnot json\n', 1, "line 2 is not JSON"),
    (["produce", "t"], "NaN\n", 1, "line 1 was not written"),
    (["produce", "t", "--producer", "bad name", "--data", "1"], None, 1, "invalid producer name"),
    (["produce", "t", "--header", "novalue", "--data", "1"], None, 2, "is not NAME=VALUE"),
    (["produce", "t", "--header", "=v", "--data", "1"], None, 2, "is not NAME=VALUE"),
    (["produce", "t", "--data", "{oops"], None, 2, "not JSON"),
    (["produce", "t", "--partition", "-1", "--data", "1"], None, 2, "--partition"),
    (["produce", "t", "--batch", "0"], "1\n", 2, "--batch"),
    (["consume", "nope", "--group", "g"], None, 1, "topic 'nope' does not exist"),
    (["consume", "t", "--group", "g", "--partition", "5"], None, 1, "partition 5 does not exist"),
    (["consume", "t", "--group", "bad name"], None, 1, "invalid group name"),
    (["consume", "t", "--group", "g", "--from", "99"], None, 1, "--from 99 is past the end"),
    (["consume", "t", "--group", "g", "--from", "0"], None, 2, "offset 0 is before the first record"),
    (
        ["consume", "t", "--group", "g", "--from", "soon"],
        None,
        2,
        "is not earliest, latest, an offset N or -N",
    ),
    (["consume", "t", "--group", "g", "--from", "-x"], None, 2, "--from"),
    (["produce", "t", "--format", "xml"], "a\n", 2, "--format"),
    (["produce", "t", "--key-delimiter", ""], "a\n", 2, "--key-delimiter"),
    (["produce", "t", "--format", "text"], b"ok\n\xff\n", 1, "line 2 is not UTF-8"),
    (["consume", "t", "--group", "g", "--limit", "0"], None, 2, "--limit"),
    (["consume", "t", "--group", "g", "--limit", "-1"], None, 2, "--limit"),
    (["consume", "t", "--group", "g", "--exclude-producer", "bad name"], None, 1, "invalid producer name"),
    (["consume", "t"], None, 2, "--group"),
    (["read", "t", "--partition", "9"], None, 1, "partition 9 does not exist"),
    (["read", "t", "--partition", "0", "--after", "-1"], None, 2, "--after"),
    (["read", "t"], None, 2, "--partition"),
    (["topics", "create", "bad name"], None, 1, "invalid topic name"),
    (["topics", "create", "t", "--partitions", "3"], None, 1, "exists with 2 partitions"),
    (["topics", "create", "u", "--partitions", "0"], None, 2, "--partitions"),
    (["topics", "create", "u", "--partitions", "-1"], None, 2, "--partitions"),
    (["topics", "describe", "nope"], None, 1, "topic 'nope' does not exist"),
    (["topics", "delete", "nope"], None, 1, "topic 'nope' does not exist"),
    (["topics", "add-partitions", "t", "1"], None, 1, "partitions never shrink"),
    (["topics", "add-partitions", "t", "-1"], None, 2, "PARTITIONS"),
    (["groups", "describe", "nope"], None, 1, "group 'nope' does not exist"),
    (["groups", "describe", "g", "--topic", "nope"], None, 1, "topic 'nope' does not exist"),
    (["offsets", "nope", "t"], None, 1, "group 'nope' does not exist"),
    (["offsets", "g", "nope", "--partition", "0", "--set", "1"], None, 1, "topic 'nope' does not exist"),
    (["offsets", "g", "t", "--partition", "0", "--set", "99"], None, 1, "past the end"),
    (["offsets", "new", "t", "--partition", "0", "--set", "99"], None, 1, "past the end"),
    (["offsets", "g", "t", "--partition", "0", "--set", "-1"], None, 2, "--set"),
    (["offsets", "g", "t", "--set", "1"], None, 2, "--set needs --partition"),
    (["nonsense"], None, 2, "No such command"),
    (["queues", "stats", "t", "--group", "nope"], None, 1, "queue group 'nope' does not exist"),
    (["queues", "peek", "nope"], None, 1, "topic 'nope' does not exist"),
    (["queues", "peek", "t", "--limit", "0"], None, 2, "--limit"),
    (["queues", "list", "bad name"], None, 1, "invalid topic name"),
]


@pytest.mark.parametrize(
    "args, stdin, code, message", BAD_INPUT, ids=[" ".join(case[0]) for case in BAD_INPUT]
)
def test_bad_input_is_refused_and_changes_nothing(run, db, args, stdin, code, message):
    with tidelog.open(db) as log:
        log.create_topic("t", partitions=2)
        log.producer().send_batch("t", [1, 2, 3], partition=0)
        log.consumer("g").commit("t", 0, 2)
        before = snapshot(log)
    r = run(*args, input=stdin)
    assert r.exit_code == code
    assert r.stdout == ""
    assert message in r.stderr
    if code == 1:
        assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1
    with tidelog.open(db) as log:
        assert snapshot(log) == before


def test_consume_without_partition_joins_the_group_as_a_member(db):
    with tidelog.open(db) as log:
        log.create_topic("shared", partitions=4)
    members = [
        subprocess.Popen(
            [*TIDELOG, "--db", db, "consume", "shared", "--group", "g", "--follow"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        with tidelog.open(db) as log:
            deadline = time.monotonic() + 30
            # Wait until the two members split the partitions between them.
            while time.monotonic() < deadline:
                held = [len(m.partitions) for m in log.group("g").members()]
                if sorted(held) == [2, 2]:
                    break
                time.sleep(0.1)
            assert sorted(held) == [2, 2]
            producer = log.producer()
            for p in range(4):
                producer.send_batch("shared", [f"{p}-{i}" for i in range(5)], partition=p)
            while time.monotonic() < deadline and any(x.lag for x in log.describe_group("g", ["shared"])):
                time.sleep(0.1)
    finally:
        for m in members:
            m.send_signal(signal.SIGINT)
        outs = [m.communicate(timeout=30) for m in members]
    assert [m.returncode for m in members] == [0, 0], [err for _, err in outs]
    printed = [{(r["partition"], r["offset"]) for r in lines(out)} for out, _ in outs]
    assert printed[0] | printed[1] == {(p, o) for p in range(4) for o in range(1, 6)}
    assert {p for p, _ in printed[0]}.isdisjoint({p for p, _ in printed[1]})
    assert all(committed(db, "g", "shared", p) == 5 for p in range(4))


# --- --db mistakes (issue 20) -------------------------------------------------


def test_a_db_that_names_no_file_is_an_error_for_commands_that_read(tmp_path):
    missing = tmp_path / "nosuch.db"
    for args in (("topics", "list"), ("groups", "list"), ("consume", "orders", "-g", "g")):
        out = proc(str(missing), *args)
        assert out.returncode == 1, args
        assert out.stderr.startswith(f"Error: no log at {missing}") and "--create" in out.stderr
        assert not missing.exists()
    # A relative path from another directory names the directory it was resolved in.
    out = subprocess.run(
        [*TIDELOG, "--db", "nosuch.db", "topics", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 1 and f"nosuch.db ({tmp_path / 'nosuch.db'})" in out.stderr
    assert not missing.exists()


def test_create_and_commands_that_write_start_a_new_log(tmp_path):
    listed = proc(str(tmp_path / "new.db"), "--create", "topics", "list")
    assert listed.returncode == 0 and (tmp_path / "new.db").exists()
    made = proc(str(tmp_path / "made.db"), "topics", "create", "orders")
    assert made.returncode == 0
    assert [t.name for t in tidelog.open(str(tmp_path / "made.db")).topics()] == ["orders"]


def test_a_bare_host_and_port_is_a_server(serve, tmp_path):
    server = serve()
    with tidelog.open(server.url) as log:
        log.create_topic("served", 2)
    cwd = tmp_path / "shell"
    cwd.mkdir()
    out = subprocess.run(
        [*TIDELOG, "--db", f"127.0.0.1:{server.port}", "--json", "topics", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )
    assert out.returncode == 0, out.stderr
    assert [t["name"] for t in lines(out.stdout)] == ["served"]
    assert list(cwd.iterdir()) == []  # no file named after the address


def test_db_help_names_every_store_url(run):
    text = run("--help").output
    for form in ("sqlite:///", "postgresql://", "http://host:port", "host:port"):
        assert form in text


# --- kcat-style produce and consume (issue 20) --------------------------------


def test_produce_text_lines_keys_and_bytes_as_kcat_does(run, db):
    run("topics", "create", "logs")
    r = run("produce", "logs", "--format", "text", "--partition", "0", input="GET /a 404\n{not json}\n")
    assert r.exit_code == 0, r.output
    r = run(
        "produce", "logs", "--format", "bytes", "-K", ":", "--partition", "0", input="u-7:\x01raw\nnokey\n"
    )
    assert r.exit_code == 0, r.output
    r = run("produce", "logs", "--format", "text", "--data", "one line")
    assert r.exit_code == 0, r.output
    with tidelog.open(db) as log:
        got = [(m.key, m.data) for m in log.read("logs", 0)]
    assert got == [
        (None, "GET /a 404"),
        (None, "{not json}"),
        (b"u-7", b"\x01raw"),
        (None, b"nokey"),
        (None, "one line"),
    ]


def test_a_file_without_keys_spreads_over_partitions_and_keys_pick_theirs(run, db):
    run("topics", "create", "spread", "--partitions", "4")
    r = run(
        "produce", "spread", "--format", "text", "--json", input="".join(f"line {i}\n" for i in range(40))
    )
    assert r.exit_code == 0, r.output
    with tidelog.open(db) as log:
        counts = [p.records for p in log.describe("spread").partitions]
        assert counts == [10, 10, 10, 10]  # round-robin, record by record
        r = run("produce", "spread", "-K", "=", input="".join(f"k{i % 3}={i}\n" for i in range(30)))
        assert r.exit_code == 0, r.output
        keyed = 0
        for p in range(4):
            for m in log.read("spread", p, limit=1000):
                if m.key is not None:
                    keyed += 1
                    assert partition_for_key(m.key, 4) == p
        assert keyed == 30


def test_consume_from_minus_n_is_the_last_n_of_each_partition(run, db):
    with tidelog.open(db) as log:
        log.create_topic("t", 2)
        log.producer().send_batch("t", list(range(20)), partition=0)
        log.producer().send_batch("t", [100, 101], partition=1)
    r = run("consume", "t", "--group", "g", "--from", "-3", "--no-commit")
    assert r.exit_code == 0, r.output
    assert sorted(rec["data"] for rec in lines(r.stdout)) == [17, 18, 19, 100, 101]


# --- queue groups from the shell (issue 20) -----------------------------------


def test_queues_list_stats_and_peek_show_each_state(run, db):
    with tidelog.open(db) as log:
        q = log.queue("jobs", visibility_timeout=60, max_deliveries=1)
        for i in range(5):
            q.send({"n": i})
        q.send({"n": "later"}, delay=3600)
        leased = q.receive(max_messages=2)
        q.reject(q.receive()[0])
        before = snapshot(log)
    r = run("--json", "queues", "list")
    assert r.exit_code == 0, r.output
    (row,) = [x for x in lines(r.stdout) if x["group"] == "jobs"]
    assert (row["available"], row["in_flight"], row["delayed"], row["dead_lettered"]) == (2, 2, 1, 1)
    r = run("--json", "queues", "stats", "jobs")
    assert lines(r.stdout)[0]["in_flight"] == 2
    r = run("--json", "queues", "in-flight", "jobs")
    held = lines(r.stdout)
    assert [(p["offset"], p["delivery_count"]) for p in held] == [(d.offset, 1) for d in leased]
    peeked = lines(run("queues", "peek", "jobs").stdout)  # what a receive takes next, then the delayed
    assert [(p["data"], p["delayed"]) for p in peeked] == [
        ({"n": 3}, False),
        ({"n": 4}, False),
        ({"n": "later"}, True),
    ]
    text = run("queues", "stats", "jobs").output
    assert "in_flight" in text and "dead_lettered" in text
    described = run("groups", "describe", "jobs")
    assert [line.split()[:5] for line in described.stdout.splitlines()] == [
        ["jobs:", "a", "queue", "group", "(progress"],
        ["TOPIC", "AVAILABLE", "IN", "FLIGHT", "DELAYED"],
        ["jobs", "2", "2", "1", "1"],
    ]
    with tidelog.open(db) as log:
        assert snapshot(log) == before  # looking changes nothing


# --- what tidelog serve says when it starts (issue 20) --------------------------


def _first_lines(proc: subprocess.Popen, want: str, limit: float = 30) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if want in line:
            return lines
    raise AssertionError(f"no {want!r} in {lines}")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_serve_says_where_it_listens_and_what_it_serves(tmp_path, fmt):
    from tidelog.server.http.thread import free_port

    port, resp_port = free_port(), free_port()
    proc = subprocess.Popen(
        [
            *TIDELOG,
            "--db",
            str(tmp_path / "s.db"),
            "serve",
            "--port",
            str(port),
            "--resp-port",
            str(resp_port),
            "--log-format",
            fmt,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = _first_lines(proc, "ready")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    text = "".join(lines)
    for needed in (
        f"http://127.0.0.1:{port}",
        f"127.0.0.1:{resp_port}",
        "/docs",
        "/metrics",
        "s.db",
        "no token",
    ):
        assert needed in text, (needed, text)
    if fmt == "json":
        for line in lines:
            if line.startswith("{"):
                assert json.loads(line)["level"] == "info"
        assert any(line.startswith("{") and "ready" in line for line in lines)


def test_serve_refuses_a_bad_log_level(run):
    r = run("serve", "--log-level", "loud")
    assert r.exit_code == 2 and "--log-level" in r.stderr


# --- newcomers' papercuts (issue 31) ----------------------------------------------


def test_produce_prints_where_each_record_went(run):
    run("topics", "create", "t", "--partitions", "2")
    one = run("produce", "t", "--partition", "1", "--data", '{"n": 1}')
    assert one.stdout == "t/1@1\n"
    many = run("produce", "t", "--partition", "0", input="1\n2\n3\n")
    assert many.stdout == "t/0@1..3 (3 records)\n"


def test_help_says_what_each_option_means_and_cuts_no_summary(run):
    for args in ([], ["queues"], ["dlq"], ["groups"], ["topics"], ["jobs"]):
        commands = run(*args, "--help").stdout.partition("Commands:")[2]
        assert commands and "..." not in commands, (args, commands)
    serve_help = " ".join(run("serve", "--help").stdout.split())
    assert "--port INTEGER RANGE The HTTP port" in serve_help
    assert "0 (the default) picks: one a core on PostgreSQL; one on SQLite" in serve_help


JOBS_MODULE = """
import os, pathlib, tidelog

jobs = tidelog.Jobs(tidelog.open(os.environ["MODULE_DB"]), queue="work", visibility_timeout=1)


@jobs.job("touch")
def touch(payload):
    pathlib.Path(payload).write_text("ran")
"""


def test_jobs_run_runs_on_db_and_logs_a_redelivery(tmp_path):
    (tmp_path / "myjobs.py").write_text(JOBS_MODULE)
    module_db, other_db, marker = tmp_path / "module.db", tmp_path / "other.db", tmp_path / "ran"
    with tidelog.open(str(other_db)) as log:
        q = log.queue("work", visibility_timeout=1)
        q.send({"job": "touch", "payload": str(marker)})
        q.receive(visibility_timeout=0.2)  # a runner took it and was killed: its lease runs out
    env = {**os.environ, "MODULE_DB": str(module_db)}
    runner = subprocess.Popen(
        [*TIDELOG, "--db", str(other_db), "jobs", "run", "myjobs:jobs"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline and runner.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), "the job did not run on --db"
    finally:
        runner.send_signal(signal.SIGTERM)
        _, err = runner.communicate(timeout=30)
    assert runner.returncode == 0, err
    assert f"running the jobs of myjobs:jobs on {other_db}" in err
    assert "job 'touch' (offset 1) delivered again: delivery 2 of 5" in err


TICKING_MODULE = """
import os, pathlib, tidelog

jobs = tidelog.Jobs(tidelog.open(os.environ["MODULE_DB"]), queue="work")


@jobs.periodic("* * * * * *", name="heartbeat")
def heartbeat(tick):
    with open(os.environ["TICKS"], "a") as f:
        f.write(f"{tick['tick']}\\n")
"""


def _run_jobs_until_ticks(tmp_path: Path, db: str, ticks: int, *options: str) -> str:
    """`tidelog --db DB jobs run` of TICKING_MODULE until `ticks` ticks ran; its stderr."""
    marker = tmp_path / "ticks"
    marker.unlink(missing_ok=True)
    env = {**os.environ, "MODULE_DB": str(tmp_path / "module.db"), "TICKS": str(marker)}
    runner = subprocess.Popen(
        [*TIDELOG, "--db", db, "jobs", "run", "ticking:jobs", *options],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and runner.poll() is None:
            if marker.exists() and len(marker.read_text().splitlines()) >= ticks:
                break
            time.sleep(0.05)
        assert marker.exists() and len(marker.read_text().splitlines()) >= ticks, "the ticks did not run"
    finally:
        runner.send_signal(signal.SIGTERM)
        _, err = runner.communicate(timeout=30)
    assert runner.returncode == 0, err
    return err


def test_jobs_run_logs_routine_work_at_debug(tmp_path, serve):
    # A runner on a server polls it all the time, and a six-field cron ticks each second:
    # neither the requests (httpx logs each at INFO) nor the ticks are news at INFO.
    (tmp_path / "ticking.py").write_text(TICKING_MODULE)
    server = serve()
    err = _run_jobs_until_ticks(tmp_path, server.url, 3)
    assert "job runner started: queue 'work'" in err and f"on {server.url}" in err  # what INFO is for
    assert "HTTP Request" not in err, err
    assert "enqueued tick" not in err, err
    assert len(err.splitlines()) <= 3, err
    # --log-level debug shows the routine work.
    err = _run_jobs_until_ticks(tmp_path, server.url, 2, "--log-level", "debug")
    assert "enqueued tick" in err and "HTTP Request" in err
