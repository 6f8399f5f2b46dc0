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


def test_jobs_of_one_key_never_overlap_when_ordered_by_key(tmp_path):
    with tidelog.open(str(tmp_path / "ordered.db")) as log:
        jobs = tidelog.Jobs(log, queue="work", ordering="key")
        for n in range(3):
            jobs.enqueue("sync", {"n": n}, key="account-1")
        jobs.enqueue("sync", {"n": 9}, key="account-2")
        got = jobs.queue.receive(max_messages=10)
        assert [(d.key, d.data["payload"]["n"]) for d in got] == [(b"account-1", 0), (b"account-2", 9)]
        jobs.queue.ack(got[0])
        assert [d.data["payload"]["n"] for d in jobs.queue.receive(max_messages=10)] == [1]
