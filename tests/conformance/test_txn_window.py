"""Idempotent-write ids are remembered for a window, then a cleaning of the
whole log forgets them (they would otherwise grow forever).

An id is stamped with the store's own clock when its write commits, so the
test ages ids in the store's table rather than moving a clock; the http://
kind's table lives behind its server, and its cleaning is the server's
(the same core and stores)."""

from __future__ import annotations

import pytest

import tidelog

pytestmark = pytest.mark.store_feature("txn", "retention")

DAY_MS = 86_400_000


def write(log: tidelog.Log, txn: str) -> int:
    (sent,) = log.write([log.producer().prepare("t", [txn.encode()], partition=0)], txn=txn)
    return sent.first_offset


def age(store, log: tidelog.Log, txn: str, ms: int) -> None:
    """Make `txn` look `ms` older, in the store's own table."""
    if store.name == "sqlite":
        log.store._db.execute("UPDATE txns SET created = created - ? WHERE id = ?", (ms, txn))
    else:
        with log.store._conn() as conn:
            conn.execute("UPDATE tidelog_txns SET created = created - %s WHERE id = %s", (ms, txn))


@pytest.fixture
def tlog(store):
    if store.name == "http":
        pytest.skip("the ids live behind the server: its cleaner prunes them with the same code")
    log = store.open()
    log.create_topic("t")
    yield log
    log.close()


def test_ids_older_than_seven_days_are_forgotten_by_a_cleaning(store, tlog):
    assert write(tlog, "old") == 1
    assert write(tlog, "recent") == 2
    age(store, tlog, "old", 8 * DAY_MS)
    age(store, tlog, "recent", 6 * DAY_MS)
    tlog.clean("t")  # one topic's cleaning leaves the ids alone
    assert write(tlog, "old") == 1  # still remembered: nothing appended
    tlog.clean()
    assert write(tlog, "recent") == 2  # within the window: remembered
    assert write(tlog, "old") == 3  # forgotten: this is a new write


def test_the_window_is_a_setting(store, tlog):
    write(tlog, "a")
    age(store, tlog, "a", 2 * 3_600_000)
    tlog.clean(txn_window=None)  # keep every id
    assert write(tlog, "a") == 1
    tlog.clean(txn_window="1h")
    assert write(tlog, "a") == 2
    with pytest.raises(tidelog.InvalidRequest, match="txn_window"):
        tlog.clean(txn_window="soon")


def test_the_cleaner_prunes_in_chunks(store, tlog):
    from tidelog.retention import prune_txns

    for i in range(7):
        write(tlog, f"id-{i}")
        age(store, tlog, f"id-{i}", 8 * DAY_MS)
    write(tlog, "kept")
    assert prune_txns(tlog, 7 * DAY_MS, chunk=3) == 7
    assert write(tlog, "kept") == 8 and write(tlog, "id-0") == 9
