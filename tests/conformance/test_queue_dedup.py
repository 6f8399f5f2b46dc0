"""Deduplication ids: `q.send(value, dedup_id=...)` within the topic's dedup
window (5 minutes by default) appends once; a repeat returns the first
send's offset and appends nothing, also from another process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import tidelog

from .conftest import snapshot

pytestmark = pytest.mark.store_feature("queues")


def last_offset(log, topic="jobs"):
    return log.describe(topic).partitions[0].last_offset


def test_a_repeated_dedup_id_appends_once(clocked_log, clock):
    q = clocked_log.queue("jobs")
    first = q.send(b"pay order 42", dedup_id="order-42")
    clock.advance(10)
    again = q.send(b"pay order 42 (retried)", dedup_id="order-42")
    assert (again.partition, again.offset, again.timestamp) == (
        first.partition,
        first.offset,
        first.timestamp,
    )
    other = q.send(b"pay order 43", dedup_id="order-43")
    assert other.offset == first.offset + 1
    assert last_offset(clocked_log) == 2
    assert [d.value for d in q.receive(max_messages=10)] == [b"pay order 42", b"pay order 43"]


def test_the_window_ends_and_the_id_appends_again(clocked_log, clock):
    q = clocked_log.queue("jobs")
    first = q.send(b"x", dedup_id="job-1")
    clock.advance(299)
    assert q.send(b"x", dedup_id="job-1").offset == first.offset
    clock.advance(2)  # 301 s after the first send: outside the 5-minute window
    later = q.send(b"x", dedup_id="job-1")
    assert later.offset == first.offset + 1
    clock.advance(10)
    assert q.send(b"x", dedup_id="job-1").offset == later.offset  # the new send holds the id now
    assert last_offset(clocked_log) == 2


def test_the_window_is_a_topic_setting(clocked_log, clock):
    clocked_log.create_topic("jobs", dedup_window_ms="2s")
    q = clocked_log.queue("jobs")
    first = q.send(b"x", dedup_id="a")
    clock.advance(1)
    assert q.send(b"x", dedup_id="a").offset == first.offset
    clock.advance(2)
    assert q.send(b"x", dedup_id="a").offset == first.offset + 1


def test_dedup_ids_are_per_topic_and_take_any_text(clocked_log):
    q, other = clocked_log.queue("jobs"), clocked_log.queue("other")
    odd = "ünïcode / spaces & symbols: 🎉"
    assert q.send(b"1", dedup_id=odd).offset == 1
    assert other.send(b"1", dedup_id=odd).offset == 1
    assert q.send(b"2", dedup_id=odd).offset == 1
    assert last_offset(clocked_log, "jobs") == last_offset(clocked_log, "other") == 1


def test_send_batch_with_a_dedup_id(clocked_log):
    q = clocked_log.queue("jobs")
    first = q.send_batch([b"a", b"b", b"c"], dedup_id="batch-7")
    again = q.send_batch([b"a", b"b", b"c"], dedup_id="batch-7")
    assert (again.first_offset, again.count) == (first.first_offset, 3)
    assert last_offset(clocked_log) == 3


def test_a_second_process_sees_the_id(store):
    log = store.open()
    try:
        q = log.queue("jobs")
        first = q.send(b"x", dedup_id="cross-process")
        script = textwrap.dedent(
            f"""
            import tidelog
            with tidelog.open({store.url!r}) as log:
                q = log.queue("jobs")
                print(q.send(b"y", dedup_id="cross-process").offset, q.send(b"z", dedup_id="new").offset)
            """
        )
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [str(first.offset), str(first.offset + 1)]
        assert last_offset(log) == 2
    finally:
        log.close()


@pytest.mark.parametrize("dedup_id", ["", "x" * 129, "é" * 65, b"bytes", 42, True])
def test_bad_dedup_ids_write_nothing(clocked_log, dedup_id):
    q = clocked_log.queue("jobs")
    before = snapshot(clocked_log)
    with pytest.raises(tidelog.InvalidRequest, match="dedup_id"):
        q.send(b"x", dedup_id=dedup_id)
    with pytest.raises(tidelog.InvalidRequest, match="dedup_id"):
        q.send_batch([b"x"], dedup_id=dedup_id)
    assert snapshot(clocked_log) == before


def test_a_bad_window_setting_is_refused(clocked_log):
    before = snapshot(clocked_log)
    with pytest.raises(tidelog.InvalidRequest, match="dedup_window_ms"):
        clocked_log.create_topic("jobs", dedup_window_ms=-5)
    assert snapshot(clocked_log) == before
