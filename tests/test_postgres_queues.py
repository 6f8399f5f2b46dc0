"""What the PostgreSQL store adds to the queue-group contract.

The conformance suite (test_queues, test_queue_processes, test_streams) runs
on PostgreSQL as on SQLite; these tests cover what only PostgreSQL has: the
same answers as the SQLite store to one random script of sends, receives,
acks, nacks, extends, rejects and clock ticks, the forward migration of a
version-1 log, row locks (a receive skips a lease
whose row another transaction holds, rather than waiting for it, but waits
for a release in flight, which may put a record ahead of the rest), dead
letters appended densely by many connections at once, and the triggers that
clear queue state with its topic.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Iterator

import pytest

import tidelog
from pgschema import postgres_schema
from tidelog import leasing
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


def test_a_version_1_log_migrates_forward_and_serves_queues(pg_url, monkeypatch):
    migrations = schema.migrations
    monkeypatch.setattr(schema, "migrations", lambda dialect: migrations(dialect)[:1])
    monkeypatch.setattr(schema, "latest", lambda dialect: 1)
    # Today's append statements need the later columns, so the version-1
    # log gets its topic only; the records go in after the migration.
    with tidelog.open(pg_url) as log:
        log.create_topic("jobs", partitions=1)
    with raw(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('tidelog_queue_state')").fetchone()[0] is None
    monkeypatch.undo()
    with tidelog.open(pg_url) as log:
        log.producer().send_batch("jobs", [b"a", b"b", b"c"])
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


def test_a_receive_waits_for_a_release_in_flight(pg_url):
    with tidelog.open(pg_url) as log:
        q = log.queue("jobs", visibility_timeout=600)
        q.send_batch([b"1", b"2"])
        (first,) = q.receive()
        with raw(pg_url) as releaser, raw(pg_url) as watcher:
            got: list = []
            with releaser.transaction():
                # A nack to the front, between its update and its commit.
                releaser.execute("SELECT FROM tidelog_queue_groups WHERE grp = 'jobs' FOR SHARE")
                releaser.execute('UPDATE tidelog_queue_state SET due = 0, receipt = NULL WHERE "offset" = 1')
                receiver = threading.Thread(target=lambda: got.extend(q.receive()))
                receiver.start()
                for _ in range(600):  # until the receive waits for the releaser
                    blocked = watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                        (releaser.info.backend_pid,),
                    ).fetchone()[0]
                    if blocked or not receiver.is_alive():
                        break
                    time.sleep(0.05)
                assert blocked == 1, "the receive did not wait for the release"
            receiver.join(timeout=60)
        # Released to the front: delivered again before offset 2.
        assert [(d.offset, d.delivery_count) for d in got] == [(first.offset, 2)]


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


class Twins:
    """The same queue on SQLite and on PostgreSQL, driven by one script."""

    def __init__(self, pg_url: str, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
        receipts = itertools.count()
        monkeypatch.setattr(leasing, "new_receipt", lambda: f"r{next(receipts):09d}")
        self.clock = Clock()
        self.logs = [tidelog.open(path, clock=self.clock), tidelog.open(pg_url, clock=self.clock)]
        for log in self.logs:
            log.create_topic("jobs", partitions=2)
        self.queues = [log.queue("jobs", visibility_timeout=5, max_deliveries=3) for log in self.logs]
        self.held: list[list] = [[], []]

    def both(self, act) -> list:
        """act(side, queue, held) on each side; results (or exception types) per side."""
        out = []
        for side in (0, 1):
            try:
                out.append(act(side, self.queues[side], self.held[side]))
            except tidelog.TidelogError as e:
                out.append(type(e).__name__)
        return out

    def close(self) -> None:
        for log in self.logs:
            log.close()


def shown(deliveries) -> list[tuple]:
    return [(d.partition, d.offset, d.value, d.delivery_count, d.lease_deadline) for d in deliveries]


@pytest.mark.parametrize("seed", range(3))
def test_queue_groups_answer_as_on_sqlite(pg_url, tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    twins = Twins(pg_url, str(tmp_path / "twin.db"), monkeypatch)
    try:
        for step in range(160):
            kind = rng.choice(
                ["send", "send", "batch", "receive", "receive", "poll", "settle", "settle", "tick"]
            )
            if kind == "send":
                value, delay, partition = f"v{step}".encode(), rng.choice([0, 0, 0, 3]), rng.randrange(2)
                got = twins.both(
                    lambda s, q, h, v=value, d=delay, p=partition: q.send(v, delay=d, partition=p).offset
                )
            elif kind == "batch":
                values, partition = (
                    [f"b{step}.{i}".encode() for i in range(rng.randint(2, 6))],
                    rng.randrange(2),
                )
                got = twins.both(
                    lambda s, q, h, vs=values, p=partition: q.send_batch(vs, partition=p).first_offset
                )
            elif kind in ("receive", "poll"):
                n, visibility = rng.randint(1, 6), rng.choice([None, 1, 8])

                def receive(side, q, held, n=n, visibility=visibility, kind=kind):
                    if kind == "poll":
                        ds, next_due = q.poll(n, visibility_timeout=visibility)
                    else:
                        ds, next_due = q.receive(n, visibility_timeout=visibility), None
                    held.extend(ds)
                    return shown(ds), next_due

                got = twins.both(receive)
            elif kind == "settle" and twins.held[0]:
                i, how = (
                    rng.randrange(len(twins.held[0])),
                    rng.choice(["ack", "nack", "back", "delay", "extend", "reject"]),
                )

                def settle(side, q, held, i=i, how=how):
                    d = held[i]
                    if how == "ack":
                        return q.ack(d)
                    if how in ("nack", "back", "delay"):
                        return q.nack(d, back=how == "back", delay=2 if how == "delay" else None)
                    if how == "extend":
                        return q.extend(d, 4).lease_deadline
                    return q.reject(d, reason="no")

                got = twins.both(settle)
            else:
                twins.clock.now += rng.choice([500, 1000, 2500, 6000])
                got = twins.both(lambda s, q, h: tuple(q.stats()))
            assert got[0] == got[1], f"step {step} ({kind}): sqlite {got[0]!r}, postgres {got[1]!r}"
        dead = [
            [(m.offset, m.value, m.headers) for m in log.read("jobs.dlq", 0, limit=1000)]
            for log in twins.logs
        ]
        assert dead[0] == dead[1]
        assert dead[0], "the script dead-lettered nothing: it tests less than it should"
    finally:
        twins.close()
