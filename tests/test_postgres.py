"""What the PostgreSQL store adds to the conformance suite.

Opening (URL forms, a missing driver, schema versions, concurrent first
opens), many processes appending to one log, group commits that cross
partitions in every order, deletes racing appends, and LISTEN/NOTIFY
wake-ups across processes and schemas.
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest

import tidelog
from pgschema import PG_URL, postgres_schema
from test_processes import PRODUCER, acked, run_producers
from tidelog.store import schema


@pytest.fixture
def pg_url() -> Iterator[str]:
    with postgres_schema() as url:
        yield url


def raw(url: str):
    import psycopg

    return psycopg.connect(url, autocommit=True)


# opening -----------------------------------------------------------------------


def test_missing_driver_names_the_extra(monkeypatch):
    # None in sys.modules makes `import psycopg` fail as if it were not installed.
    monkeypatch.setitem(sys.modules, "psycopg", None)
    for name in [
        m for m in sys.modules if m == "tidelog.store.postgres" or m.startswith("tidelog.store.postgres.")
    ]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(tidelog.ConfigurationError, match=r"pip install 'tidelog\[postgres\]'"):
        tidelog.open("postgresql://nobody@127.0.0.1:1/none")


def test_postgres_and_postgresql_urls_open_one_log(pg_url):
    assert pg_url.startswith("postgresql://")
    with tidelog.open(pg_url) as a, tidelog.open("postgres://" + pg_url.split("://", 1)[1]) as b:
        a.producer().send("orders", b"x")
        assert [m.value for m in b.read("orders", 0)] == [b"x"]


def test_unreachable_server_is_a_store_error():
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(tidelog.StoreError, match="cannot connect") as err:
        tidelog.open(f"postgresql://someone:secret@127.0.0.1:{port}/test")
    assert "secret" not in str(err.value)


def test_a_schema_named_in_the_url_is_created_on_first_open(pg_url):
    import psycopg
    from psycopg import sql

    name = f"missing_{secrets.token_hex(4)}"
    url = pg_url.replace(pg_url.split("search_path%3D")[1].split("&")[0], name)
    assert name in url
    admin = psycopg.connect(PG_URL, autocommit=True)
    try:
        with tidelog.open(url) as log:
            log.producer().send("orders", b"x")
        exists = admin.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)).fetchone()
        assert exists is not None
        with tidelog.open(url) as log:
            assert log.read("orders", 0)[0].value == b"x"
    finally:
        admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        admin.close()


def test_a_role_that_may_not_create_the_schema_is_told_what_to_run(pg_url):
    import psycopg
    from psycopg import sql

    role, name = f"tl_role_{secrets.token_hex(3)}", f"missing_{secrets.token_hex(4)}"
    admin = psycopg.connect(PG_URL, autocommit=True)
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        url = pg_url.replace("postgres@", f"{role}@").replace(
            pg_url.split("search_path%3D")[1].split("&")[0], name
        )
        with pytest.raises(tidelog.ConfigurationError, match=f'CREATE SCHEMA "{name}"'):
            tidelog.open(url)
        assert admin.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)).fetchone() is None
    finally:
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
        admin.close()


def test_newer_schema_version_is_refused(pg_url):
    tidelog.open(pg_url).close()
    with raw(pg_url) as conn:
        assert conn.execute("SELECT max(version) FROM tidelog_version").fetchone()[0] == schema.latest(
            "postgres"
        )
        conn.execute("INSERT INTO tidelog_version (version) VALUES (99)")
    with pytest.raises(tidelog.ConfigurationError, match="version 99"):
        tidelog.open(pg_url)


def test_first_opens_at_once_migrate_once(pg_url):
    errors: list[BaseException] = []

    def open_and_send(i: int) -> None:
        try:
            with tidelog.open(pg_url) as log:
                log.producer().send("t", f"{i}")
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=open_and_send, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with raw(pg_url) as conn:
        versions = [(v,) for v, _ in schema.migrations("postgres")]
        assert conn.execute("SELECT version FROM tidelog_version ORDER BY version").fetchall() == versions
    with tidelog.open(pg_url) as log:
        assert sorted(m.data for m in log.read("t", 0)) == [str(i) for i in range(6)]


def test_durability_full_insists_on_synchronous_commit(pg_url):
    # The URL turns synchronous_commit off; "normal" keeps the server's and
    # the URL's settings, "full" turns it back on.
    url = pg_url.replace("search_path%3D", "synchronous_commit%3Doff%20-csearch_path%3D")
    assert url != pg_url
    for durability, expected in (("normal", "off"), ("full", "on")):
        with tidelog.open(url, durability=durability) as log, log.store._pool.connection() as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone()[0] == expected


# many writers ------------------------------------------------------------------


@pytest.mark.slow
def test_processes_get_dense_unique_offsets(pg_url):
    with tidelog.open(pg_url) as log:
        log.create_topic("shared", partitions=3)
    procs = run_producers(pg_url, 4, 100, 1) + run_producers(pg_url, 2, 30, 5)
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.extend(acked(out))
    with tidelog.open(pg_url) as log:
        total = 0
        for partition in range(3):
            msgs = log.read("shared", partition, limit=100_000)
            assert [m.offset for m in msgs] == list(range(1, len(msgs) + 1))
            total += len(msgs)
        assert total == 4 * 100 + 2 * 30 * 5
    # Every acknowledged offset is there once.
    spans = [(p, o) for p, first, count in results for o in range(first, first + count)]
    assert len(spans) == len(set(spans)) == total


@pytest.mark.slow
def test_killed_producer_leaves_whole_batches_only(pg_url):
    with tidelog.open(pg_url) as log:
        log.create_topic("shared", partitions=1)
    proc = subprocess.Popen(
        [sys.executable, "-c", PRODUCER, pg_url, "victim", "100000", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = [proc.stdout.readline() for _ in range(20)]
    os.kill(proc.pid, signal.SIGKILL)
    rest, _ = proc.communicate(timeout=30)
    confirmed = acked("".join(lines) + rest)
    assert len(confirmed) >= 20
    with tidelog.open(pg_url) as log:
        msgs = log.read("shared", 0, limit=100_000)
    assert [m.offset for m in msgs] == list(range(1, len(msgs) + 1))
    assert len(msgs) % 50 == 0
    for k in range(0, len(msgs), 50):
        batch_no = msgs[k].data.split(":")[1]
        assert [m.data for m in msgs[k : k + 50]] == [f"victim:{batch_no}:{j}" for j in range(50)]
    _, last_first, last_count = confirmed[-1]
    assert len(msgs) >= last_first + last_count - 1


def test_group_commits_over_partitions_in_any_order_all_land(pg_url):
    # Each write touches three partitions in a random order; the store locks
    # them in one order, so concurrent writes never deadlock.
    with tidelog.open(pg_url) as log:
        log.create_topic("g", partitions=3)
        errors: list[BaseException] = []

        def write(seed: int) -> None:
            rng = random.Random(seed)
            producer = log.producer()
            try:
                for _ in range(40):
                    order = rng.sample(range(3), 3)
                    log.write([producer.prepare("g", [b"v", b"w"], partition=p) for p in order])
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=write, args=(seed,)) for seed in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for partition in range(3):
            offsets = [m.offset for m in log.read("g", partition, limit=10_000)]
            assert offsets == list(range(1, 4 * 40 * 2 + 1))


def test_delete_racing_appends_leaves_no_records_behind(pg_url):
    with tidelog.open(pg_url, auto_create=False) as log:
        log.create_topic("doomed", partitions=2)
        stop = threading.Event()
        outcomes: list[str] = []

        def append(partition: int) -> None:
            producer = log.producer()
            while not stop.is_set():
                try:
                    producer.send_batch("doomed", [b"x"] * 5, partition=partition)
                except tidelog.UnknownTopic:
                    outcomes.append("gone")
                    return
            outcomes.append("stopped")

        threads = [threading.Thread(target=append, args=(p,)) for p in (0, 1)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while log.describe("doomed").records < 50 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert log.delete_topic("doomed") is True
        for t in threads:
            t.join()
    with raw(pg_url) as conn:
        left = conn.execute(
            "SELECT count(*) FROM tidelog_records r "
            "WHERE NOT EXISTS (SELECT 1 FROM tidelog_partitions p WHERE p.id = r.pid)"
        ).fetchone()[0]
    assert left == 0
    assert outcomes == ["gone", "gone"]


# stream groups, idempotent writes, retention across connections -----------------


def test_rebalances_from_many_connections_never_overlap(pg_url):
    # Members on connections of their own join, heartbeat, commit, leave and
    # rejoin at once; each membership change takes the group's row lock, so
    # no partition is ever handed to a member before its holder released it.
    partitions, rounds = 6, 25
    with tidelog.open(pg_url) as log:
        log.create_topic("work", partitions=partitions)
        producer = log.producer()
        for p in range(partitions):
            producer.send_batch("work", [b"x"] * 50, partition=p)
    holds: dict[int, list[tuple[float, float, str]]] = {p: [] for p in range(partitions)}
    lock = threading.Lock()
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def run(name: str, seed: int) -> None:
        rng = random.Random(seed)
        acquired: dict[int, float] = {}

        def assigned(tps: list) -> None:
            for _, p in tps:
                acquired[p] = time.monotonic()

        def revoked(tps: list) -> None:
            now = time.monotonic()
            with lock:
                for _, p in tps:
                    holds[p].append((acquired.pop(p), now, name))

        try:
            with tidelog.open(pg_url) as mine:
                start.wait()
                for _ in range(rounds):
                    member = mine.consumer(
                        "g",
                        topics=["work"],
                        heartbeat_interval=0,
                        member_id=name,
                        on_assign=assigned,
                        on_revoke=revoked,
                        session_timeout=60,
                    )
                    for _ in range(rng.randint(1, 4)):
                        member.heartbeat()
                        member.poll(timeout=0, max_messages=5)
                        try:
                            member.commit()
                        except tidelog.GroupError:
                            pass  # lost the partition meanwhile: refused, as fencing promises
                    member.close()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(f"m{i}", i)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for p, spans in holds.items():
        spans.sort()
        assert spans, f"partition {p} was never held"
        for (_, end, a), (begin, _, b) in zip(spans, spans[1:]):
            assert begin >= end, f"partition {p}: {a} held it until {end}, {b} from {begin}"
    with tidelog.open(pg_url) as log:
        assert log.group("g").members() == []  # everyone left
        committed = [log.consumer("g").committed("work", p) for p in range(partitions)]
        assert all(0 <= c <= 50 for c in committed) and any(committed)


def test_survivors_converge_after_concurrent_joins(pg_url):
    with tidelog.open(pg_url) as log:
        log.create_topic("work", partitions=7)
    logs = [tidelog.open(pg_url) for _ in range(5)]
    try:
        members: list = [None] * 5

        def join(i: int) -> None:
            members[i] = logs[i].consumer("g", topics=["work"], heartbeat_interval=0, member_id=f"m{i}")

        threads = [threading.Thread(target=join, args=(i,)) for i in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for _ in range(3):  # revoke, release, take over
            for m in members:
                m.heartbeat()
                m.poll(timeout=0)
        held = sorted(tp for m in members for tp in m.assignment())
        assert held == [("work", p) for p in range(7)]
        assert len({m.generation for m in members}) == 1
        view = {m.member: m.partitions for m in logs[0].group("g").members()}
        assert view == {m.member_id: m.assignment() for m in members}
    finally:
        for opened in logs:
            opened.close()


def test_one_txn_id_from_many_connections_writes_once(pg_url):
    with tidelog.open(pg_url) as log:
        log.create_topic("once", partitions=2)
    start = threading.Barrier(6)
    results: list = []
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            with tidelog.open(pg_url) as mine:
                producer = mine.producer()
                batches = [producer.prepare("once", [f"{i}".encode()] * 3, partition=p) for p in (0, 1)]
                start.wait()
                results.append(mine.write(batches, txn="the-one"))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 6 and all(r == results[0] for r in results)
    with tidelog.open(pg_url) as log:
        for p in (0, 1):
            values = [m.value for m in log.read("once", p)]
            assert len(values) == 3 and len(set(values)) == 1  # one writer's records, once


def test_cleaning_racing_a_topic_delete_is_clean(pg_url):
    with tidelog.open(pg_url, auto_create=False) as log:
        log.create_topic("old", partitions=2, retention_ms=1)
        for p in (0, 1):
            log.producer().send_batch("old", [b"x"] * 3000, partition=p)
        time.sleep(0.01)
        outcomes: list[str] = []

        def clean() -> None:
            with tidelog.open(pg_url) as mine:
                try:
                    while True:
                        mine.clean("old", chunk=50)
                except tidelog.UnknownTopic:
                    outcomes.append("gone")

        cleaner = threading.Thread(target=clean)
        cleaner.start()
        deadline = time.monotonic() + 60
        while log.describe("old").records > 5000 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert log.delete_topic("old") is True
        cleaner.join()
    assert outcomes == ["gone"]
    with raw(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM tidelog_records").fetchone()[0] == 0


# reads -------------------------------------------------------------------------


def plan_rows(plan: dict) -> list[int]:
    return [plan["Actual Rows"]] + [n for child in plan.get("Plans", []) for n in plan_rows(child)]


def test_reads_touch_at_most_limit_rows_without_statistics(pg_url):
    from tidelog.store.postgres.base import _READ_BYTES

    with tidelog.open(pg_url) as log:
        producer = log.producer()
        for _ in range(20):
            producer.send_batch("big", [b"x"] * 1000, partition=0)
        pid = log.store._pid("big", 0)
        with raw(pg_url) as conn:
            for after in (0, 9_500, 19_990):
                params = {"pid": pid, "after": after, "limit": 100}
                (plan,) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + _READ_BYTES, params).fetchone()[0]
                assert max(plan_rows(plan["Plan"])) <= 100
        assert [m.offset for m in log.read("big", 0, after=19_990)] == list(range(19_991, 20_001))


def test_reads_start_at_the_oldest_record_held(pg_url):
    # Retention removed the oldest records; a read from before them starts
    # at the first one still held.
    with tidelog.open(pg_url) as log:
        log.producer().send_batch("r", [str(i).encode() for i in range(1, 301)], partition=0)
        assert log.store.delete_prefix("r", 0, 200, 1000) == (200, sum(len(str(i)) for i in range(1, 201)))
        assert [m.offset for m in log.read("r", 0, after=0, limit=5)] == [201, 202, 203, 204, 205]
        (part,) = log.describe("r").partitions
        assert (part.first_offset, part.last_offset, part.records) == (201, 300, 100)


def test_reads_cross_compaction_gaps_wider_than_the_limit(pg_url):
    # A read's upper bound starts at the first record held past `after`, so a
    # reader never mistakes a gap for the end of the partition (before a gap
    # a read may return fewer than `limit` records).
    with tidelog.open(pg_url) as log:
        log.producer().send_batch("c", [b"x"] * 1000, partition=0)
        assert log.store.delete_offsets("c", 0, list(range(11, 991))) == 980
        assert [m.offset for m in log.read("c", 0, after=5, limit=10)] == [6, 7, 8, 9, 10]
        assert [m.offset for m in log.read("c", 0, after=10, limit=3)] == [991, 992, 993]
        (part,) = log.describe("c").partitions
        assert (part.first_offset, part.last_offset, part.records, part.bytes) == (1, 1000, 20, 20)


def test_counters_match_the_records_held(pg_url):
    # describe reads the partition row's counters; they follow appends of
    # every kind, retention and compaction exactly.
    with tidelog.open(pg_url) as log:
        producer = log.producer()
        producer.send("m", b"abc", partition=0, key="k", headers={"h": b"1"})
        producer.send_batch("m", ["t\u00e9xt", {"j": 1}, b"", "nul\x00here"], partition=0)
        log.write([producer.prepare("m", [b"12345"], partition=0)], txn="counted-once")
        log.write([producer.prepare("m", [b"12345"], partition=0)], txn="counted-once")
        log.store.delete_offsets("m", 0, [3])
        log.store.delete_prefix("m", 0, 1, 10)
        with raw(pg_url) as conn:
            held = conn.execute(
                "SELECT count(*), sum(coalesce(octet_length(value), 0) + coalesce(octet_length(text), 0) "
                "+ coalesce(octet_length(meta), 0)) FROM tidelog_records"
            ).fetchone()
        (part,) = log.describe("m").partitions
        assert (part.records, part.bytes) == held
        assert part.records == 4 and part.bytes > 0


# wake-ups ----------------------------------------------------------------------

SEND_ONE = textwrap.dedent(
    """
    import sys, tidelog
    with tidelog.open(sys.argv[1]) as log:
        print(log.producer().send(sys.argv[2], b"from afar", partition=0).offset, flush=True)
    """
)


def send_from_another_process(url: str, topic: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", SEND_ONE, url, topic], capture_output=True, text=True, timeout=60, check=True
    )
    return int(out.stdout)


def test_append_in_another_process_wakes_a_listener(pg_url):
    with postgres_schema() as elsewhere, tidelog.open(pg_url) as log:
        log.create_topic("w", partitions=1)
        heard: list[tuple] = []
        woken = threading.Event()

        def listener(*args: object) -> None:
            heard.append(args)
            if args == (None, None, None):
                woken.set()

        stop = log.listen(listener)
        try:
            # Our own appends reach the listener directly, not again through
            # NOTIFY; appends to a log in another schema do not reach it.
            for _ in range(3):
                log.producer().send("w", b"near", partition=0)
            send_from_another_process(elsewhere, "w")
            assert send_from_another_process(pg_url, "w") == 4
            assert log.wait_for_records("w", 0, 3, timeout=60) is True
            assert woken.wait(60)
        finally:
            stop()
    # Notifications arrive in commit order, so the others were seen first.
    assert heard == [("w", 0, 1), ("w", 0, 2), ("w", 0, 3), (None, None, None)]
