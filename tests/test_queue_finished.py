"""The receipts kept for the stale-ack rule stay as small as the log (SQLite
and PostgreSQL): a record finished at its first delivery keeps none, one
finished after a redelivery keeps one row, and that row goes with its record
(retention, trim), its group and its topic."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tidelog
from dumps import dump
from pgschema import postgres_schema


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "finished.db")
    else:
        with postgres_schema() as pg:
            yield pg


def finished(url: str) -> int:
    tables = dump(url)
    return len(tables.get("queue_finished", tables.get("tidelog_queue_finished", [])))


def redelivered_and_acked(q, clock: Clock) -> int:
    """Every record of the queue delivered twice, then acked; how many."""
    q.receive(max_messages=100)
    clock.now += 11_000  # the leases expire
    again = q.receive(max_messages=100)
    assert {d.delivery_count for d in again} == {2}
    assert q.ack_many(again) == [None] * len(again)
    return len(again)


def test_only_records_delivered_again_keep_their_receipt_and_it_goes_with_them(url):
    clock = Clock()
    with tidelog.open(url, clock=clock) as log:
        log.create_topic("jobs", retention_ms="1h")
        q = log.queue("jobs", visibility_timeout=10)
        q.send(b"once")
        q.ack(q.receive()[0])
        assert finished(url) == 0
        q.send_batch([b"x"] * 3)
        assert redelivered_and_acked(q, clock) == 3
        assert finished(url) == 3
        clock.now += 2 * 3600_000  # past the topic's retention
        log.clean("jobs")
        assert log.describe("jobs").records == 0
        assert finished(url) == 0


def test_a_deleted_group_or_topic_takes_its_receipts(url):
    clock = Clock()
    with tidelog.open(url, clock=clock) as log:
        q = log.queue("jobs", visibility_timeout=10)
        other = log.queue("jobs", "other", visibility_timeout=10)
        q.send_batch([b"a", b"b"])
        assert redelivered_and_acked(q, clock) == redelivered_and_acked(other, clock) == 2
        assert finished(url) == 4
        assert log.store.queue_delete("other", "jobs")
        assert finished(url) == 2
        log.delete_topic("jobs")
        assert finished(url) == 0
