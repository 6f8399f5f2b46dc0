"""`tidelog groups list | describe` and `consume --follow`'s assignment on stderr:
who owns what, as `kafka-consumer-groups --describe` shows it, for tidelog's
stream groups, Kafka clients' groups and queue groups (issue 31)."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import tidelog
from pgschema import postgres_schema
from tidelog import classic_groups as cg
from tidelog.cli.app import cli

SCRIPT = Path(sys.executable).with_name("tidelog")
TIDELOG = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "tidelog.cli"]


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path):
    if request.param == "sqlite":
        path = str(tmp_path / "g.db")
        tidelog.open(path).close()
        yield path
    else:
        with postgres_schema() as pg:
            yield pg


def run(url, *args):
    result = CliRunner().invoke(cli, ["--db", url, *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def rows(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_describe_names_the_member_and_client_that_own_each_partition(url):
    with tidelog.open(url) as log:
        log.create_topic("orders", partitions=2)
        log.producer().send_batch("orders", [1, 2, 3], partition=0)
        log.consumer("billing").commit("orders", 0, 1)
        a = log.consumer("billing", topics=["orders"], heartbeat_interval=0)
        b = log.consumer("billing", topics=["orders"], heartbeat_interval=0)
        try:
            a.poll(timeout=0)
            b.poll(timeout=0)
            a.poll(timeout=0)
            owners = {tp: m.member_id for m in (a, b) for tp in m.assignment()}
            described = run(url, "groups", "describe", "billing", "--json")
            got = {(r["topic"], r["partition"]): r for r in rows(described.stdout)}
            assert set(got) == {("orders", 0), ("orders", 1)}
            client = f"{socket.gethostname()}:{os.getpid()}"
            for tp, r in got.items():
                assert (r["member"], r["client"], r["kind"]) == (owners[tp], client, "stream")
            assert (got["orders", 0]["committed"], got["orders", 0]["lag"]) == (1, 2)
            text = run(url, "groups", "describe", "billing")
            # The title on stdout with its table (piped, the two stay in order), nothing on stderr.
            title = text.stdout.splitlines()[0]
            assert title.startswith("billing: a stream group, generation") and "2 member(s)" in title
            assert text.stderr == ""
            assert owners["orders", 0] in text.stdout and client in text.stdout
            members = rows(run(url, "groups", "describe", "billing", "--members", "--json").stdout)
            assert sorted((m["member"], tuple(map(tuple, m["partitions"]))) for m in members) == sorted(
                (m.member_id, tuple(m.assignment())) for m in (a, b)
            )
        finally:
            a.close()
            b.close()
        alone = rows(run(url, "groups", "describe", "billing", "--json").stdout)
        assert {r["member"] for r in alone} == {None}  # no live member: nobody owns a partition


def test_list_shows_a_queue_groups_work_not_a_lag(url):
    with tidelog.open(url) as log:
        q = log.queue("jobs", "workers")
        q.send("a")
        q.send("b")
        q.receive()
        log.consumer("audit").commit("jobs", 0, 1)
    listed = {r["group"]: r for r in rows(run(url, "groups", "list", "--json").stdout)}
    workers = listed["workers"]
    assert (workers["kind"], workers["topics"], workers["available"], workers["in_flight"]) == (
        "queue",
        ["jobs"],
        1,
        1,
    )
    assert workers["oldest_available_age_ms"] >= 0 and "lag" not in workers
    assert (listed["audit"]["kind"], listed["audit"]["lag"]) == ("stream", 1)
    text = run(url, "groups", "list").stdout.splitlines()
    assert text[0].split() == [
        "GROUP",
        "KIND",
        "TOPICS",
        "LAG",
        "AVAILABLE",
        "IN",
        "FLIGHT",
        "OLDEST",
        "AGE",
        "S",
    ]
    line = next(x for x in text if x.startswith("workers")).split()
    assert line[:6] == ["workers", "queue", "jobs", "-", "1", "1"]
    described = run(url, "groups", "describe", "workers")
    assert described.stderr == ""
    title, header, line = described.stdout.splitlines()
    assert title == "workers: a queue group (progress per record, not an offset)"
    assert header.split()[0] == "TOPIC" and line.split()[:5] == ["jobs", "1", "1", "0", "0"]


def test_a_stream_group_and_a_queue_group_of_one_name_show_both(url):
    with tidelog.open(url) as log:
        log.create_topic("orders")
        log.producer().send_batch("orders", ["a", "b"])
        q = log.queue("jobs", "workers")
        q.send("job")
        log.consumer("workers").commit("orders", 0, 1)  # "workers" reads orders by offset too
        log.queue("jobs", "solo")
    listed = [(r["group"], r["kind"], r["topics"]) for r in rows(run(url, "groups", "list", "--json").stdout)]
    assert ("workers", "queue", ["jobs"]) in listed and ("workers", "stream", ["orders"]) in listed
    assert [kind for group, kind, _ in listed if group == "solo"] == ["queue"]  # one kind, one row
    table = [line.split()[:4] for line in run(url, "groups", "list").stdout.splitlines()]
    assert ["workers", "queue", "jobs", "-"] in table and ["workers", "stream", "orders", "1"] in table
    described = rows(run(url, "groups", "describe", "workers", "--json").stdout)
    assert [(r["kind"], r["topic"]) for r in described] == [("queue", "jobs"), ("stream", "orders")]
    assert (described[0]["available"], described[1]["lag"]) == (1, 1)
    text = run(url, "groups", "describe", "workers").stdout
    assert "workers: a queue group" in text and "workers: a stream group, no live member" in text
    assert text.index("workers: a queue group") < text.index("workers: a stream group")


def assignment(pairs: dict[str, list[int]]) -> bytes:
    """Kafka's ConsumerProtocolAssignment, as a Kafka client's leader writes it."""
    out = struct.pack(">hi", 0, len(pairs))
    for topic, partitions in pairs.items():
        out += struct.pack(">h", len(topic)) + topic.encode()
        out += struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
    return out + struct.pack(">i", -1)


def test_describe_a_kafka_clients_group(url):
    with tidelog.open(url) as log:
        log.create_topic("clicks", partitions=2)
        log.producer().send("clicks", "x", partition=1)
        now = int(time.time() * 1000)
        request = cg.JoinRequest(
            "", None, "my-consumer", "/127.0.0.9", 30_000, 30_000, "consumer", [("range", b"")], False
        )
        joined = log.store.classic_run("dash", now, cg.join(request, now, lambda: "m-1"))
        log.store.classic_run(
            "dash",
            now,
            cg.sync(joined.member, joined.generation, {joined.member: assignment({"clicks": [0, 1]})}, now),
        )
    got = rows(run(url, "groups", "describe", "dash", "--json").stdout)
    assert [(r["partition"], r["member"], r["client"], r["host"], r["kind"], r["lag"]) for r in got] == [
        (0, "m-1", "my-consumer", "/127.0.0.9", "kafka", 0),
        (1, "m-1", "my-consumer", "/127.0.0.9", "kafka", 1),
    ]
    listed = {r["group"]: r for r in rows(run(url, "groups", "list", "--json").stdout)}
    assert listed["dash"]["kind"] == "kafka"
    assert cg.assigned_partitions(b"\x00") == []  # not an assignment: nothing, not an error


def test_consume_follow_says_its_assignment_changes_on_stderr(tmp_path):
    db = str(tmp_path / "f.db")
    with tidelog.open(db) as log:
        log.create_topic("events", partitions=2)
    proc = subprocess.Popen(
        [*TIDELOG, "--db", db, "consume", "events", "--group", "watchers", "--follow"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()

    def wait_for(text: str, limit: float = 20) -> None:
        deadline = time.monotonic() + limit
        while not any(text in line for line in said):
            assert proc.poll() is None and time.monotonic() < deadline, (text, said)
            time.sleep(0.05)

    try:
        wait_for("watchers: assigned events/0, events/1")
        with tidelog.open(db) as log:
            other = log.consumer("watchers", topics=["events"], heartbeat_interval=0.2, session_timeout=6)
            try:
                deadline = time.monotonic() + 20
                while len(other.assignment()) != 1 and time.monotonic() < deadline:
                    other.poll(timeout=0.1)
                wait_for("watchers: revoked events/")
            finally:
                other.close()
        said.clear()
        wait_for("; holds events/0, events/1 (generation", 20)  # both back once it left
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
        reader.join(timeout=5)
    assert proc.returncode == 0
