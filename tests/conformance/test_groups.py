"""Stream groups that coordinate themselves: join, leave, expiry, fencing, assignors."""

from __future__ import annotations

import pytest

import tidelog
from tidelog.assignors import range_assignor, roundrobin_assignor, sticky_assignor

pytestmark = pytest.mark.store_feature("groups")


@pytest.fixture
def glog(store, clock):
    log = store.open(clock=clock)
    log.create_topic("orders", partitions=4)
    yield log
    log.close()


def member(log, name, topics=("orders",), **kw):
    # Heartbeats by hand, so the test decides when each member speaks.
    return log.consumer("g", topics=list(topics), heartbeat_interval=0, member_id=name, **kw)


def owners(*members):
    held = {}
    for m in members:
        for tp in m.assignment():
            assert tp not in held, f"{tp} held by {held.get(tp)} and {m.member_id}"
            held[tp] = m.member_id
    return held


def test_single_member_gets_everything(glog):
    a = member(glog, "a")
    assert a.assignment() == [("orders", p) for p in range(4)]
    assert a.generation == 1


def test_join_rebalances_only_after_release(glog):
    revoked = []
    a = member(glog, "a", on_revoke=revoked.append)
    b = member(glog, "b")
    # b joined, but a has not released yet: no partition is held twice.
    assert b.assignment() == []
    assert len(owners(a, b)) == 4
    a.heartbeat()  # a learns it must give up 2 and 3
    a.poll(timeout=0)  # ... and releases them in poll, after on_revoke
    assert revoked == [[("orders", 2), ("orders", 3)]]
    assert a.assignment() == [("orders", 0), ("orders", 1)]
    b.heartbeat()
    assert b.assignment() == [("orders", 2), ("orders", 3)]
    assert len(owners(a, b)) == 4


def test_leave_hands_partitions_over(glog):
    a, b = member(glog, "a"), member(glog, "b")
    a.heartbeat()
    a.poll(timeout=0)
    b.heartbeat()
    b.close()
    a.heartbeat()
    assert a.assignment() == [("orders", p) for p in range(4)]


def test_silent_member_expires_after_session_timeout(glog, clock):
    a = member(glog, "a", session_timeout=10)
    b = member(glog, "b", session_timeout=10)
    a.heartbeat()
    a.poll(timeout=0)
    b.heartbeat()
    assert b.assignment() == [("orders", 2), ("orders", 3)]
    clock.advance(9)
    a.heartbeat()
    assert a.assignment() == [("orders", 0), ("orders", 1)]  # b still within its session
    clock.advance(2)
    a.heartbeat()  # b has been silent for 11 s: expired, its partitions move at once
    assert a.assignment() == [("orders", p) for p in range(4)]
    with pytest.raises(tidelog.StaleGeneration):
        b.heartbeat()


def test_commits_are_fenced(glog, clock):
    glog.producer().send_batch("orders", [b"x"] * 5, partition=2)
    a = member(glog, "a", session_timeout=10)
    msgs = a.poll(timeout=0)
    assert {m.partition for m in msgs} == {2}
    b = member(glog, "b", session_timeout=10)
    a.heartbeat()
    a.poll(timeout=0)  # releases 2 and 3 without committing
    b.heartbeat()
    before = glog.consumer("g").committed("orders", 2)
    with pytest.raises(tidelog.NotAssigned):
        a.commit(msgs[-1])  # a no longer owns partition 2
    assert glog.consumer("g").committed("orders", 2) == before == 0
    # b resumes after the committed offset (at least once).
    assert [m.offset for m in b.poll(timeout=0)] == [1, 2, 3, 4, 5]
    b.commit()
    assert glog.consumer("g").committed("orders", 2) == 5
    # A member whose session expired is refused too.
    clock.advance(11)
    a.heartbeat()
    with pytest.raises(tidelog.StaleGeneration):
        b.commit(msgs[0])


def test_commit_from_an_older_generation_is_refused(glog):
    glog.producer().send("orders", b"x", partition=0)
    a = member(glog, "a")
    stale = a.generation
    msgs = a.poll(timeout=0)
    b = member(glog, "b")
    a.heartbeat()
    a.poll(timeout=0)
    b.close()  # partitions 2, 3 come back to a in a newer generation
    a.heartbeat()
    a.generation = stale - 1  # as a zombie holding an old view would
    with pytest.raises(tidelog.StaleGeneration):
        a.commit(msgs[0])
    a.heartbeat()
    a.commit(msgs[0])
    assert glog.consumer("g").committed("orders", 0) == 1


def test_several_topics_and_new_partitions(glog):
    glog.create_topic("refunds", partitions=2)
    a = member(glog, "a", topics=("orders", "refunds"))
    assert sorted(a.assignment()) == [("orders", p) for p in range(4)] + [("refunds", 0), ("refunds", 1)]
    glog.add_partitions("refunds", 3)
    glog.producer().send("refunds", b"new", partition=2)
    a.heartbeat()
    assert ("refunds", 2) in a.assignment()
    assert [m.value for m in a.poll(timeout=0)] == [b"new"]


def test_start_latest_begins_at_the_end(glog):
    glog.producer().send("orders", b"old", partition=0)
    a = member(glog, "a", start="latest")
    assert a.poll(timeout=0) == []
    glog.producer().send("orders", b"new", partition=0)
    assert [m.value for m in a.poll(timeout=0)] == [b"new"]


def test_describe_shows_members_assignment_and_lag(glog):
    glog.producer().send_batch("orders", [b"x"] * 3, partition=1)
    a = member(glog, "a")
    desc = glog.group("g").describe()
    assert [m["member"] for m in desc["members"]] == ["a"]
    assert desc["generation"] == a.generation
    p1 = next(p for p in desc["partitions"] if p["partition"] == 1)
    assert (p1["owner"], p1["committed"], p1["last_offset"], p1["lag"]) == ("a", 0, 3, 3)


def test_bad_options(glog):
    with pytest.raises(tidelog.InvalidRequest):
        glog.consumer("g", topics=["orders"], assignor="fastest")
    with pytest.raises(tidelog.InvalidRequest):
        glog.consumer("g", topics=[])
    with pytest.raises(tidelog.InvalidRequest):
        glog.consumer("g", topics=["orders"], session_timeout=-1)
    with pytest.raises(tidelog.InvalidName):
        glog.consumer("g", topics=["bad topic"])
    with pytest.raises(tidelog.InvalidRequest):
        glog.consumer("g", session_timeout=5)  # options without topics
    assert glog.group("g").members() == []


MEMBERS = {"a": ["t"], "b": ["t"], "c": ["t"]}


def test_range_and_roundrobin_behave_as_in_kafka():
    r = range_assignor(MEMBERS, {"t": 7}, {})
    assert [r[("t", p)] for p in range(7)] == ["a", "a", "a", "b", "b", "c", "c"]
    rr = roundrobin_assignor(MEMBERS, {"t": 7}, {})
    assert [rr[("t", p)] for p in range(7)] == ["a", "b", "c", "a", "b", "c", "a"]


def test_sticky_moves_only_what_balance_needs():
    current = sticky_assignor({"a": ["t"], "b": ["t"]}, {"t": 6}, {})
    after = sticky_assignor(MEMBERS, {"t": 6}, dict(current))
    moved = [tp for tp in current if current[tp] != after[tp]]
    assert len(moved) == 2  # c takes exactly its share
    assert sorted(list(after.values()).count(m) for m in MEMBERS) == [2, 2, 2]
    gone = sticky_assignor({"a": ["t"], "c": ["t"]}, {"t": 6}, dict(after))
    assert all(gone[tp] == after[tp] for tp in after if after[tp] != "b")


def test_partitions_released_and_handed_straight_back_are_read(glog):
    glog.producer().send_batch("orders", [b"x"] * 3, partition=3)
    assigned, revoked = [], []
    a = member(glog, "a", on_assign=assigned.extend, on_revoke=revoked.extend)
    b = member(glog, "b")
    a.heartbeat()  # a learns it must give up 2 and 3 ...
    b.close()  # ... but b leaves before a releases them
    msgs = a.poll(timeout=0)  # a releases 2 and 3 and gets them straight back
    assert a.assignment() == [("orders", p) for p in range(4)]
    assert revoked == [("orders", 2), ("orders", 3)]
    assert assigned == [("orders", p) for p in range(4)] + [("orders", 2), ("orders", 3)]
    # ... and reads them again from the committed offset.
    assert [m.offset for m in msgs if m.partition == 3] == [1, 2, 3]


def test_a_topic_made_again_is_assigned_again(glog):
    a = member(glog, "a")
    assert len(a.assignment()) == 4
    glog.delete_topic("orders")
    glog.create_topic("orders", partitions=4)
    glog.producer().send("orders", b"new", partition=1)
    a.heartbeat()
    assert len(a.assignment()) == 4
    assert [m.value for m in a.poll(timeout=0)] == [b"new"]
