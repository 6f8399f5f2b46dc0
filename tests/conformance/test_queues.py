"""Queue groups: leases, acks, nacks, delays, dead letters, stats."""

from __future__ import annotations

import threading

import pytest

import tidelog

from .conftest import snapshot

pytestmark = pytest.mark.store_feature("queues")


def offsets(deliveries):
    return [d.offset for d in deliveries]


def test_records_sent_before_anyone_received_are_delivered(clocked_log):
    q = clocked_log.queue("jobs")
    q.send({"n": 1})
    q.send({"n": 2})
    got = q.receive(max_messages=10)
    assert [d.data for d in got] == [{"n": 1}, {"n": 2}]
    assert [d.delivery_count for d in got] == [1, 1]
    assert len({d.receipt for d in got}) == 2
    assert q.receive() == []  # both leased


def test_defaults_receive_one_without_waiting(clocked_log):
    q = clocked_log.queue("jobs")
    assert q.receive() == []
    q.send_batch([b"a", b"b"])
    assert len(q.receive()) == 1


def test_start_latest_skips_what_was_there(clocked_log):
    clocked_log.producer().send("events", b"old")
    q = clocked_log.queue("events", group="fresh", start="latest")
    assert q.receive() == []
    q.send(b"new")
    assert [d.value for d in q.receive()] == [b"new"]


def test_ack_is_final_and_twice_is_a_noop(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=5)
    q.send(b"x")
    (d,) = q.receive()
    q.ack(d)
    q.ack(d)
    clock.advance(60)
    assert q.receive() == []
    with pytest.raises(tidelog.LeaseLost, match="already done"):
        q.extend(d, 10)
    with pytest.raises(tidelog.LeaseLost):
        q.nack(d)


def test_expired_lease_is_redelivered_with_count_plus_one(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=10)
    q.send(b"x")
    (first,) = q.receive()
    clock.advance(9)
    assert q.receive() == []
    clock.advance(2)
    (second,) = q.receive()
    assert second.offset == first.offset
    assert second.delivery_count == 2
    assert second.receipt != first.receipt
    before = snapshot(clocked_log)
    # The first receipt lost its lease: nothing it does changes anything.
    for act in (lambda: q.ack(first), lambda: q.extend(first, 5), lambda: q.nack(first)):
        with pytest.raises(tidelog.LeaseLost, match="delivered again"):
            act()
    assert snapshot(clocked_log) == before
    q.ack(second)
    clock.advance(60)
    assert q.receive() == []


def test_extend_pushes_the_deadline(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=10)
    q.send(b"x")
    (d,) = q.receive()
    d2 = q.extend(d, 30)
    assert d2.lease_deadline == clock.now + 30_000
    clock.advance(20)
    assert q.receive() == []
    clock.advance(11)
    assert [x.delivery_count for x in q.receive()] == [2]


def test_visibility_timeout_per_receive(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=100)
    q.send(b"x")
    (d,) = q.receive(visibility_timeout=1)
    assert d.lease_deadline == clock.now + 1000
    clock.advance(2)
    assert len(q.receive()) == 1


def test_nack_front_back_and_delay_order(clocked_log, clock):
    q = clocked_log.queue("jobs")
    q.send_batch([b"1", b"2", b"3", b"4"])
    d1, d2 = q.receive(max_messages=2)
    clock.advance(1)
    q.nack(d1, back=True)  # behind 3 and 4, which wait now
    q.nack(d2)  # ahead of everything waiting
    assert [d.value for d in q.receive(max_messages=10)] == [b"2", b"3", b"4", b"1"]


def test_nack_with_delay(clocked_log, clock):
    q = clocked_log.queue("jobs")
    q.send(b"x")
    (d,) = q.receive()
    q.nack(d, delay=5)
    assert q.receive() == []
    assert q.stats().delayed == 1
    clock.advance(5)
    (again,) = q.receive()
    assert again.delivery_count == 2


def test_send_with_delay(clocked_log, clock):
    q = clocked_log.queue("jobs")
    q.send(b"later", delay=10)
    q.send(b"now")
    assert [d.value for d in q.receive(max_messages=10)] == [b"now"]
    assert q.stats().delayed == 1
    clock.advance(10)
    assert [d.value for d in q.receive(max_messages=10)] == [b"later"]
    # Stream groups see delayed records at once.
    assert [m.value for m in clocked_log.read("jobs", 0)] == [b"later", b"now"]


def test_dead_letter_after_max_deliveries(clocked_log, clock):
    q = clocked_log.queue("orders", group="mailer", visibility_timeout=1, max_deliveries=2)
    q.send({"id": 7}, key="k", headers={"trace": "t1"})
    for attempt in (1, 2):
        (d,) = q.receive()
        assert d.delivery_count == attempt
        clock.advance(2)
    assert q.receive() == []  # third delivery would exceed: dead-lettered instead
    (dead,) = clocked_log.read("orders.dlq", 0)
    assert dead.data == {"id": 7}
    assert dead.key == b"k"
    headers = dict(dead.headers)
    assert headers["trace"] == b"t1"
    assert headers["tidelog-origin-topic"] == b"orders"
    assert headers["tidelog-origin-partition"] == b"0"
    assert headers["tidelog-origin-offset"] == b"1"
    assert headers["tidelog-delivery-count"] == b"2"
    assert b"max deliveries" in headers["tidelog-reason"]
    assert q.stats().dead_lettered == 1
    clock.advance(60)
    assert q.receive() == []


def test_reject_goes_straight_to_dead_letter_topic(clocked_log):
    q = clocked_log.queue("orders", dead_letter="orders.bad")
    q.send(b"garbage")
    (d,) = q.receive()
    offset = q.reject(d, reason="bad payload")
    (dead,) = clocked_log.read("orders.bad", 0)
    assert dead.offset == offset
    assert dict(dead.headers)["tidelog-reason"] == b"bad payload"
    with pytest.raises(tidelog.LeaseLost):
        q.reject(d)


def test_group_settings_are_stored_on_first_use(clocked_log):
    clocked_log.queue("orders", group="g", max_deliveries=3, dead_letter="orders.x")
    later = clocked_log.queue("orders", group="g")
    assert (later.max_deliveries, later.dead_letter) == (3, "orders.x")


def test_queue_groups_and_stream_groups_fan_out(clocked_log):
    a, b = clocked_log.queue("t", group="a"), clocked_log.queue("t", group="b")
    a.send(b"x")
    (da,) = a.receive()
    (db,) = b.receive()
    a.ack(da)
    assert db.offset == da.offset
    consumer = clocked_log.consumer("stream")
    assert [m.value for m in consumer.fetch("t", 0)] == [b"x"]


def test_partitions_are_all_served(clocked_log):
    clocked_log.create_topic("multi", partitions=3)
    producer = clocked_log.producer()
    for p in range(3):
        producer.send("multi", f"p{p}", partition=p)
    q = clocked_log.queue("multi")
    got = q.receive(max_messages=10)
    assert sorted(d.partition for d in got) == [0, 1, 2]
    clocked_log.add_partitions("multi", 4)
    producer.send("multi", "p3", partition=3)
    assert [d.partition for d in clocked_log.queue("multi").receive(max_messages=10)] == [3]


def test_stats(clocked_log, clock):
    q = clocked_log.queue("jobs")
    q.send_batch([b"1", b"2", b"3"])
    q.send(b"4", delay=30)
    clock.advance(5)
    (d,) = q.receive()
    s = q.stats()
    assert (s.available, s.in_flight, s.dead_lettered) == (2, 1, 0)
    assert s.oldest_available_age_ms == 5000
    q.ack(d)
    assert q.stats().in_flight == 0


@pytest.mark.parametrize(
    "options",
    [
        {"visibility_timeout": -1},
        {"visibility_timeout": 12 * 3600 + 1},
        {"visibility_timeout": 0},
        {"visibility_timeout": "30"},
        {"max_deliveries": 0},
        {"max_deliveries": 1.5},
        {"dead_letter": "bad name"},
        {"dead_letter": "jobs"},
        {"start": "middle"},
    ],
)
def test_bad_options_are_refused_when_the_handle_is_made(clocked_log, options):
    clocked_log.create_topic("jobs", partitions=1)
    before = snapshot(clocked_log)
    with pytest.raises(tidelog.InvalidRequest):
        clocked_log.queue("jobs", **options)
    assert snapshot(clocked_log) == before


def test_bad_arguments_change_nothing(clocked_log):
    q = clocked_log.queue("jobs")
    q.send(b"x")
    (d,) = q.receive()
    other = clocked_log.queue("jobs", group="other")
    before = snapshot(clocked_log)
    with pytest.raises(tidelog.InvalidRequest):
        q.send(b"y", delay=-1)
    with pytest.raises(tidelog.InvalidRequest):
        q.nack(d, delay=-5)
    with pytest.raises(tidelog.InvalidRequest):
        q.extend(d, -1)
    with pytest.raises(tidelog.InvalidRequest):
        q.receive(max_messages=0)
    with pytest.raises(tidelog.InvalidRequest):
        q.receive(wait=-1)
    with pytest.raises(tidelog.InvalidRequest):
        q.receive(visibility_timeout=13 * 3600)
    forged = d._replace(receipt="0" * 24)
    with pytest.raises(tidelog.LeaseLost):
        q.ack(forged)
    with pytest.raises(tidelog.LeaseLost):
        other.ack(d)  # another group's receipt
    assert snapshot(clocked_log) == before
    q.ack(d)


def test_receive_waits_for_a_send(store):
    log = store.open()
    try:
        q = log.queue("jobs")
        threading.Timer(0.2, lambda: q.send(b"hello")).start()
        got = q.receive(wait=10)
        assert [d.value for d in got] == [b"hello"]
    finally:
        log.close()


def test_concurrent_receivers_never_share_a_lease(store):
    log = store.open()
    try:
        q = log.queue("work", visibility_timeout=600)
        for start in range(0, 400, 100):
            q.send_batch([f"job-{i}" for i in range(start, start + 100)])
        seen: list[int] = []
        lock = threading.Lock()

        def worker() -> None:
            mine = log.queue("work", visibility_timeout=600)
            while True:
                got = mine.receive(max_messages=7)
                if not got:
                    return
                with lock:
                    seen.extend(offsets(got))
                for d in got:
                    mine.ack(d)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(seen) == list(range(1, 401))
    finally:
        log.close()


def test_stats_age_after_a_nack_to_the_front(clocked_log, clock):
    q = clocked_log.queue("jobs")
    q.send(b"x")
    (d,) = q.receive()
    q.nack(d)  # to the front
    clock.advance(3)
    stats = q.stats()
    assert (stats.available, stats.in_flight) == (1, 0)
    assert stats.oldest_available_age_ms < 60_000
