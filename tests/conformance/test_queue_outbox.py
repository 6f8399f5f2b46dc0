"""Transactional enqueue (the outbox): `with log.transaction(conn) as tx:
tx.send(...)` on the application's own connection. A record exists if and
only if the application's change committed; offsets stay dense and waiters
wake, in this process and in others."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import threading

import pytest

import tidelog
from pgschema import postgres_schema

from .conftest import snapshot

outbox = pytest.mark.store_feature("outbox")


def connect(store, url=None):
    """The application's own connection to the log's database."""
    if store.name == "sqlite":
        return sqlite3.connect(url or store.url, timeout=30)
    import psycopg

    return psycopg.connect(url or store.url)


@pytest.fixture
def app(store):
    log = store.open()
    log.create_topic("emails")
    conn = connect(store)
    conn.execute("CREATE TABLE orders (id integer PRIMARY KEY, state text)")
    conn.commit()
    yield log, conn
    conn.close()
    log.close()


def orders(conn):
    rows = conn.execute("SELECT id, state FROM orders ORDER BY id").fetchall()
    conn.commit()
    return [tuple(r) for r in rows]


def last_offset(log, topic="emails"):
    return log.describe(topic).partitions[0].last_offset


@outbox
def test_a_commit_writes_both(app):
    log, conn = app
    q = log.queue("emails")
    with log.transaction(conn) as tx:
        conn.execute("INSERT INTO orders VALUES (1, 'paid')")
        first = tx.send("emails", {"order": 1})
        batch = tx.send_batch("emails", [{"order": 1, "n": 2}, {"order": 1, "n": 3}], priority=3)
    assert (first.offset, batch.first_offset, batch.count) == (1, 2, 2)
    assert orders(conn) == [(1, "paid")]
    assert [d.offset for d in q.receive(max_messages=10)] == [2, 3, 1]  # priority 3 first


@outbox
def test_a_rollback_leaves_no_record_and_no_gap(app):
    log, conn = app
    q = log.queue("emails")
    before = snapshot(log)
    with pytest.raises(RuntimeError, match="payment failed"), log.transaction(conn) as tx:
        conn.execute("INSERT INTO orders VALUES (1, 'paid')")
        assert tx.send("emails", {"order": 1}).offset == 1
        raise RuntimeError("payment failed")
    assert orders(conn) == []
    assert snapshot(log) == before
    assert q.receive() == []
    assert q.send({"next": True}).offset == 1  # the rolled-back offset is taken again: no gap


@outbox
def test_joining_the_callers_open_transaction(app, store):
    log, conn = app
    if store.name == "sqlite":
        conn.execute("BEGIN")
    else:
        conn.execute("SELECT 1")  # psycopg opens a transaction
    conn.execute("INSERT INTO orders VALUES (7, 'new')")
    with log.transaction(conn) as tx:
        tx.send("emails", b"joined")
    conn.rollback()  # the caller's transaction decides: nothing
    assert last_offset(log) == 0 and orders(conn) == []


@outbox
def test_dense_offsets_with_rollbacks_and_other_writers(app, store):
    log, conn = app
    committed: list[bytes] = []
    errors: list[BaseException] = []

    def outbox() -> None:
        own = connect(store)  # a connection of this thread (sqlite3 objects stay in theirs)
        try:
            for n in range(30):
                try:
                    with log.transaction(own) as tx:
                        own.execute(
                            "INSERT INTO orders VALUES (?, 'x')"
                            if store.name == "sqlite"
                            else "INSERT INTO orders VALUES (%s, 'x')",
                            (n,),
                        )
                        tx.send("emails", f"tx-{n}".encode())
                        if n % 3 == 0:
                            raise KeyError("roll back")
                    committed.append(f"tx-{n}".encode())
                except KeyError:
                    pass
        except BaseException as e:
            errors.append(e)
        finally:
            own.close()

    def plain() -> None:
        try:
            with store.open() as other:
                for n in range(30):
                    other.producer().send("emails", f"plain-{n}".encode())
                    committed.append(f"plain-{n}".encode())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=outbox), threading.Thread(target=plain)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    rows = log.read("emails", 0, after=0, limit=1000)
    assert [m.offset for m in rows] == list(range(1, 51))
    assert sorted(m.value for m in rows) == sorted(committed)
    assert len(orders(conn)) == 20


RECEIVER = textwrap.dedent(
    """
    import sys, tidelog
    with tidelog.open(sys.argv[1]) as log:
        q = log.queue("emails")
        print("ready", flush=True)
        got = q.receive(wait=60)
        print(got[0].offset, got[0].value.decode(), flush=True)
    """
)


@outbox
def test_a_second_process_receives_what_commits(app, store):
    log, conn = app
    log.queue("emails")  # the group exists before the receiver looks
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", RECEIVER, store.url], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(KeyError), log.transaction(conn) as tx:
            tx.send("emails", b"rolled-back")
            raise KeyError("no")
        with log.transaction(conn) as tx:
            conn.execute("INSERT INTO orders VALUES (1, 'paid')")
            tx.send("emails", b"committed")
        out, _ = proc.communicate(timeout=60)
        assert out.split() == ["1", "committed"]
    finally:
        proc.kill()
        proc.wait()


@outbox
def test_bad_uses_write_nothing(app, store, tmp_path):
    log, conn = app
    before = snapshot(log)
    with pytest.raises(tidelog.InvalidRequest), log.transaction("not a connection") as tx:
        tx.send("emails", b"x")
    if store.name == "sqlite":
        other = sqlite3.connect(str(tmp_path / "other.db"))
        try:
            with (
                pytest.raises(tidelog.InvalidRequest, match="not this log's file"),
                log.transaction(other) as tx,
            ):
                tx.send("emails", b"x")
        finally:
            other.close()
    else:
        with postgres_schema() as url:
            other = connect(store, url)
            try:
                with (
                    pytest.raises(tidelog.InvalidRequest, match="not this log's"),
                    log.transaction(other) as tx,
                ):
                    tx.send("emails", b"x")
            finally:
                other.close()
    tx = log.transaction(conn)
    with pytest.raises(tidelog.InvalidRequest, match="inside the block"):
        tx.send("emails", b"x")
    with tx:
        pass
    with pytest.raises(tidelog.InvalidRequest, match="ended"):
        tx.send("emails", b"x")
    with pytest.raises(tidelog.InvalidRequest, match="used once"), tx:
        pass
    with pytest.raises(tidelog.UnknownTopic), log.transaction(conn) as tx:
        conn.execute("INSERT INTO orders VALUES (5, 'x')")
        tx.send("no-such-topic", b"x")
    with pytest.raises(tidelog.InvalidRequest, match="priority"), log.transaction(conn) as tx:
        tx.send("emails", b"x", priority=10)
    assert orders(conn) == []
    assert snapshot(log) == before


@pytest.mark.parametrize("store", ["http"], indirect=True)
def test_a_store_without_a_connection_to_share_says_so(store):
    with store.open() as log, pytest.raises(tidelog.ConfigurationError, match="SQLite or PostgreSQL"):
        log.transaction(object())
