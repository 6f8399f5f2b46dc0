"""What the PostgreSQL store adds to the conformance suite.

Opening (URL forms, a missing driver, schema versions, concurrent first
opens), many processes appending to one log, group commits that cross
partitions in every order, deletes racing appends, and LISTEN/NOTIFY
wake-ups across processes and schemas.
"""

from __future__ import annotations

import os
import random
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
from pgschema import postgres_schema
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
    monkeypatch.delitem(sys.modules, "tidelog.store.postgres", raising=False)
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


def test_search_path_without_a_schema_is_a_configuration_error(pg_url):
    url = pg_url.replace("search_path%3Dtl_", "search_path%3Dmissing_")
    assert url != pg_url
    with pytest.raises(tidelog.ConfigurationError, match="no schema"):
        tidelog.open(url)


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
        versions = [v for v, _ in schema.migrations("postgres")]
        assert conn.execute("SELECT version FROM tidelog_version ORDER BY version").fetchall() == [
            (v,) for v in versions
        ]
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


# reads -------------------------------------------------------------------------


def plan_rows(plan: dict) -> list[int]:
    return [plan["Actual Rows"]] + [n for child in plan.get("Plans", []) for n in plan_rows(child)]


def test_reads_touch_at_most_limit_rows_without_statistics(pg_url):
    from tidelog.store.postgres import _READ_BYTES

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
    # Retention will remove the oldest records; a read from before them
    # starts at the first one still held.
    with tidelog.open(pg_url) as log:
        log.producer().send_batch("r", [str(i) for i in range(1, 301)], partition=0)
        with raw(pg_url) as conn:
            conn.execute('DELETE FROM tidelog_records WHERE "offset" <= 200')
        assert [m.offset for m in log.read("r", 0, after=0, limit=5)] == [201, 202, 203, 204, 205]
        (part,) = log.describe("r").partitions
        assert (part.first_offset, part.last_offset, part.records) == (201, 300, 100)


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
