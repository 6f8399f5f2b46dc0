"""Queue groups: leases, acks, nacks, delays, dead letters, stats."""

from __future__ import annotations

import threading

import pytest

import tidelog

from .conftest import snapshot

pytestmark = pytest.mark.store_feature("queues")


class Clock:
    """A controllable clock (ms) so lease expiry needs no sleeping."""

    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1000)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def qlog(store, clock):
    log = store.open(clock=clock)
    yield log
    log.close()


def offsets(deliveries):
    return [d.offset for d in deliveries]


def test_records_sent_before_anyone_received_are_delivered(qlog):
    q = qlog.queue("jobs")
    q.send({"n": 1})
    q.send({"n": 2})
    got = q.receive(max_messages=10)
    assert [d.data for d in got] == [{"n": 1}, {"n": 2}]
    assert [d.delivery_count for d in got] == [1, 1]
    assert len({d.receipt for d in got}) == 2
    assert q.receive() == []  # both leased


def test_defaults_receive_one_without_waiting(qlog):
    q = qlog.queue("jobs")
    assert q.receive() == []
    q.send_batch([b"a", b"b"])
    assert len(q.receive()) == 1


def test_start_latest_skips_what_was_there(qlog):
    qlog.producer().send("events", b"old")
    q = qlog.queue("events", group="fresh", start="latest")
    assert q.receive() == []
    q.send(b"new")
    assert [d.value for d in q.receive()] == [b"new"]


def test_ack_is_final_and_twice_is_a_noop(qlog, clock):
    q = qlog.queue("jobs", visibility_timeout=5)
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


def test_expired_lease_is_redelivered_with_count_plus_one(qlog, clock):
    q = qlog.queue("jobs", visibility_timeout=10)
    q.send(b"x")
    (first,) = q.receive()
    clock.advance(9)
    assert q.receive() == []
    clock.advance(2)
    (second,) = q.receive()
    assert second.offset == first.offset
    assert second.delivery_count == 2
    assert second.receipt != first.receipt
    before = snapshot(qlog)
    # The first receipt lost its lease: nothing it does changes anything.
    for act in (lambda: q.ack(first), lambda: q.extend(first, 5), lambda: q.nack(first)):
        with pytest.raises(tidelog.LeaseLost, match="delivered again"):
            act()
    assert snapshot(qlog) == before
    q.ack(second)
    clock.advance(60)
    assert q.receive() == []


def test_extend_pushes_the_deadline(qlog, clock):
    q = qlog.queue("jobs", visibility_timeout=10)
    q.send(b"x")
    (d,) = q.receive()
    d2 = q.extend(d, 30)
    assert d2.lease_deadline == clock.now + 30_000
    clock.advance(20)
    assert q.receive() == []
    clock.advance(11)
    assert [x.delivery_count for x in q.receive()] == [2]


def test_visibility_timeout_per_receive(qlog, clock):
    q = qlog.queue("jobs", visibility_timeout=100)
    q.send(b"x")
    (d,) = q.receive(visibility_timeout=1)
    assert d.lease_deadline == clock.now + 1000
    clock.advance(2)
    assert len(q.receive()) == 1


def test_nack_front_back_and_delay_order(qlog, clock):
    q = qlog.queue("jobs")
    q.send_batch([b"1", b"2", b"3", b"4"])
    d1, d2 = q.receive(max_messages=2)
    clock.advance(1)
    q.nack(d1, back=True)  # behind 3 and 4, which wait now
    q.nack(d2)  # ahead of everything waiting
    assert [d.value for d in q.receive(max_messages=10)] == [b"2", b"3", b"4", b"1"]


def test_nack_with_delay(qlog, clock):
    q = qlog.queue("jobs")
    q.send(b"x")
    (d,) = q.receive()
    q.nack(d, delay=5)
    assert q.receive() == []
    assert q.stats().delayed == 1
    clock.advance(5)
    (again,) = q.receive()
    assert again.delivery_count == 2


def test_send_with_delay(qlog, clock):
    q = qlog.queue("jobs")
    q.send(b"later", delay=10)
    q.send(b"now")
    assert [d.value for d in q.receive(max_messages=10)] == [b"now"]
    assert q.stats().delayed == 1
    clock.advance(10)
    assert [d.value for d in q.receive(max_messages=10)] == [b"later"]
    # Stream groups see delayed records at once.
    assert [m.value for m in qlog.read("jobs", 0)] == [b"later", b"now"]


def test_dead_letter_after_max_deliveries(qlog, clock):
    q = qlog.queue("orders", group="mailer", visibility_timeout=1, max_deliveries=2)
    q.send({"id": 7}, key="k", headers={"trace": "t1"})
    for attempt in (1, 2):
        (d,) = q.receive()
        assert d.delivery_count == attempt
        clock.advance(2)
    assert q.receive() == []  # third delivery would exceed: dead-lettered instead
    (dead,) = qlog.read("orders.dlq", 0)
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


def test_reject_goes_straight_to_dead_letter_topic(qlog):
    q = qlog.queue("orders", dead_letter="orders.bad")
    q.send(b"garbage")
    (d,) = q.receive()
    offset = q.reject(d, reason="bad payload")
    (dead,) = qlog.read("orders.bad", 0)
    assert dead.offset == offset
    assert dict(dead.headers)["tidelog-reason"] == b"bad payload"
    with pytest.raises(tidelog.LeaseLost):
        q.reject(d)


def test_group_settings_are_stored_on_first_use(qlog):
    qlog.queue("orders", group="g", max_deliveries=3, dead_letter="orders.x")
    later = qlog.queue("orders", group="g")
    assert (later.max_deliveries, later.dead_letter) == (3, "orders.x")


def test_queue_groups_and_stream_groups_fan_out(qlog):
    a, b = qlog.queue("t", group="a"), qlog.queue("t", group="b")
    a.send(b"x")
    (da,) = a.receive()
    (db,) = b.receive()
    a.ack(da)
    assert db.offset == da.offset
    consumer = qlog.consumer("stream")
    assert [m.value for m in consumer.fetch("t", 0)] == [b"x"]


def test_partitions_are_all_served(qlog):
    qlog.create_topic("multi", partitions=3)
    producer = qlog.producer()
    for p in range(3):
        producer.send("multi", f"p{p}", partition=p)
    q = qlog.queue("multi")
    got = q.receive(max_messages=10)
    assert sorted(d.partition for d in got) == [0, 1, 2]
    qlog.add_partitions("multi", 4)
    producer.send("multi", "p3", partition=3)
    assert [d.partition for d in qlog.queue("multi").receive(max_messages=10)] == [3]


def test_stats(qlog, clock):
    q = qlog.queue("jobs")
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
def test_bad_options_are_refused_when_the_handle_is_made(qlog, options):
    qlog.create_topic("jobs", partitions=1)
    before = snapshot(qlog)
    with pytest.raises(tidelog.InvalidRequest):
        qlog.queue("jobs", **options)
    assert snapshot(qlog) == before


def test_bad_arguments_change_nothing(qlog):
    q = qlog.queue("jobs")
    q.send(b"x")
    (d,) = q.receive()
    other = qlog.queue("jobs", group="other")
    before = snapshot(qlog)
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
    assert snapshot(qlog) == before
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


def test_stats_age_after_a_nack_to_the_front(qlog, clock):
    q = qlog.queue("jobs")
    q.send(b"x")
    (d,) = q.receive()
    q.nack(d)  # to the front
    clock.advance(3)
    stats = q.stats()
    assert (stats.available, stats.in_flight) == (1, 0)
    assert stats.oldest_available_age_ms < 60_000
