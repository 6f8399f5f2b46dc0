"""What the PostgreSQL store adds to the queue-group contract.

The conformance suite (test_queues, test_queue_processes, test_streams) runs
on PostgreSQL as on SQLite; these tests cover what only PostgreSQL has: the
forward migration of a version-1 log, row locks (a receive skips a lease
whose row another transaction holds, rather than waiting for it), dead
letters appended densely by many connections at once, and the triggers that
clear queue state with its topic.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

import tidelog
from pgschema import postgres_schema
from tidelog.store import schema
from tidelog.streams import ZERO, Streams


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def pg_url() -> Iterator[str]:
    with postgres_schema() as url:
        yield url


def raw(url: str):
    import psycopg

    return psycopg.connect(url, autocommit=True)


def test_a_version_1_log_migrates_forward_and_serves_its_records_to_queues(pg_url, monkeypatch):
    migrations = schema.migrations
    monkeypatch.setattr(schema, "migrations", lambda dialect: migrations(dialect)[:1])
    monkeypatch.setattr(schema, "latest", lambda dialect: 1)
    with tidelog.open(pg_url) as log:
        log.producer().send_batch("jobs", [b"a", b"b", b"c"])
    with raw(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('tidelog_queue_state')").fetchone()[0] is None
    monkeypatch.undo()
    with tidelog.open(pg_url) as log:
        q = log.queue("jobs")
        assert [d.value for d in q.receive(max_messages=10)] == [b"a", b"b", b"c"]
    with raw(pg_url) as conn:
        versions = conn.execute("SELECT version FROM tidelog_version ORDER BY version").fetchall()
    assert versions == [(v,) for v, _ in schema.migrations("postgres")]


def test_a_receive_skips_a_lease_another_transaction_holds(pg_url):
    clock = Clock()
    with tidelog.open(pg_url, clock=clock) as log:
        q = log.queue("jobs", visibility_timeout=1)
        q.send_batch([b"1", b"2", b"3"])
        assert len(q.receive(max_messages=10)) == 3
        clock.now += 2000  # all three leases expired: due again
        with raw(pg_url) as holder, holder.transaction():
            # As an ack in flight would: the row of offset 2 is locked.
            holder.execute('SELECT 1 FROM tidelog_queue_state WHERE "offset" = 2 FOR UPDATE')
            got: list = []
            receiver = threading.Thread(target=lambda: got.extend(q.receive(max_messages=10)))
            receiver.start()
            receiver.join(timeout=60)
            assert not receiver.is_alive(), "the receive waited for a locked lease"
        assert [(d.offset, d.delivery_count) for d in got] == [(1, 2), (3, 2)]
        assert [(d.offset, d.delivery_count) for d in q.receive(max_messages=10)] == [(2, 2)]


def test_dead_letters_from_many_connections_get_dense_offsets(pg_url):
    with tidelog.open(pg_url) as log:
        q = log.queue("orders", visibility_timeout=600)
        q.send_batch([f"o{i}" for i in range(120)])
    rejected: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        try:
            with tidelog.open(pg_url) as own:  # a pool of its own: another "machine"
                mine = own.queue("orders", visibility_timeout=600)
                while got := mine.receive(max_messages=7):
                    for d in got:
                        mine.reject(d, reason="bad")
                        with lock:
                            rejected.append(d.offset)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(rejected) == list(range(1, 121))
    with tidelog.open(pg_url) as log:
        dead = log.read("orders.dlq", 0, limit=1000)
        assert [m.offset for m in dead] == list(range(1, 121))
        origins = sorted(int(dict(m.headers)["tidelog-origin-offset"]) for m in dead)
        assert origins == list(range(1, 121))
        assert log.queue("orders").stats().dead_lettered == 120


def test_deleting_a_topic_clears_its_queue_groups(pg_url):
    with tidelog.open(pg_url) as log:
        q = log.queue("jobs")
        q.send_batch([b"a", b"b"])
        q.receive()
        s = Streams(log)
        s.create_group("jobs", "redis", ZERO)
        s.read_group("jobs", "redis", "c1", 1, noack=False)
        log.producer().send("other", b"kept")
        log.queue("other").receive()
        assert log.delete_topic("jobs") is True
        with raw(pg_url) as conn:
            left = [
                conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in (
                    "tidelog_queue_groups",
                    "tidelog_queue_cursors",
                    "tidelog_queue_state",
                    "tidelog_queue_consumers",
                )
            ]
        assert left == [1, 1, 1, 0]  # what remains is the group on "other"
        # A handle on the deleted group says so; a new handle starts afresh.
        q.send(b"new")
        with pytest.raises(tidelog.UnknownGroup):
            q.receive()
        again = log.queue("jobs")
        assert [(d.offset, d.value, d.delivery_count) for d in again.receive(max_messages=5)] == [
            (1, b"new", 1)
        ]
