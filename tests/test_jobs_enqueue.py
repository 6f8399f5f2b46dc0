"""Jobs.enqueue's queue options: priority (and dedup ids)."""

from __future__ import annotations

import pytest

import tidelog


@pytest.fixture
def jobs(tmp_path):
    log = tidelog.open(str(tmp_path / "jobs.db"))
    yield tidelog.Jobs(log, queue="jobs")
    log.close()


def test_enqueue_with_priority_runs_first(jobs):
    jobs.enqueue("later", {"n": 1})
    jobs.enqueue("first", {"n": 2}, priority=5)
    got = jobs.queue.receive(max_messages=10)
    assert [d.data["job"] for d in got] == ["first", "later"]


def test_enqueue_with_a_bad_priority_writes_nothing(jobs):
    with pytest.raises(tidelog.InvalidRequest, match="priority"):
        jobs.enqueue("x", priority=11)
    assert jobs.queue.receive() == []


def test_enqueue_with_a_dedup_id_enqueues_once(jobs):
    first = jobs.enqueue("charge", {"order": 42}, dedup_id="charge-42")
    again = jobs.enqueue("charge", {"order": 42}, dedup_id="charge-42")
    assert again.offset == first.offset
    assert len(jobs.queue.receive(max_messages=10)) == 1
