"""Kafka's classic group protocol in the core (`tidelog.classic_groups`), on
SQLite and PostgreSQL: generations, the leader's assignment, fencing, and a
group that outlives the process that coordinated it."""

from __future__ import annotations

import pytest

import tidelog
from dumps import dump
from pgschema import postgres_schema
from tidelog import classic_groups as cg
from tidelog.errors import OffsetOutOfRange


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path):
    if request.param == "sqlite":
        yield str(tmp_path / "classic.db")
    else:
        with postgres_schema() as pg:
            yield pg


def join(member, now, rebalance_ms=10_000, protocols=(("range", b"r"), ("roundrobin", b"rr"))):
    request = cg.JoinRequest(
        member, None, "client", "127.0.0.1", 6000, rebalance_ms, "consumer", list(protocols), False
    )
    return cg.join(request, now, lambda: "new-member")


def run(log, step, now=0, group="g"):
    return cg.run(log.store, group, now, step)


def test_refused_steps_of_a_member_no_group_knows_write_nothing(url):
    # Issue 40: Heartbeat, OffsetCommit and LeaveGroup refused with UNKNOWN_MEMBER_ID
    # created their group: /v1/groups listed ghost-hb, ghost-oc, ghost-lg afterwards.
    with tidelog.open(url) as log:
        log.create_topic("t", 1)
        log.producer().send("t", b"x", partition=0)
        before = dump(url)
        assert run(log, cg.heartbeat("m", 1, 1000), 1000, "ghost-hb") == cg.UNKNOWN_MEMBER_ID
        # A member's commit to a group never used is ILLEGAL_GENERATION, as Kafka answers it.
        assert (
            run(log, cg.commit("m", 1, [("t", 0, 1, "")], 1000), 1000, "ghost-oc").error
            == cg.ILLEGAL_GENERATION
        )
        assert run(log, cg.leave(["m"], 1000), 1000, "ghost-lg") == [cg.UNKNOWN_MEMBER_ID]
        assert run(log, cg.sync("m", 1, {}, 1000), 1000, "ghost-sg").error == cg.UNKNOWN_MEMBER_ID
        assert dump(url) == before
        assert not {"ghost-hb", "ghost-oc", "ghost-lg", "ghost-sg"} & set(log.groups())


def test_a_group_outlives_its_last_offset_and_a_group_never_kept_is_not_found(url):
    # A tool's commits were a group's only state: OffsetDelete of its last offset left the
    # group (Kafka's stays, Empty), but DeleteGroups then answered GROUP_ID_NOT_FOUND.
    with tidelog.open(url) as log:
        log.create_topic("t", 1)
        log.producer().send("t", b"x", partition=0)
        before = dump(url)
        assert run(log, cg.delete(1000), 1000, "never") == cg.GROUP_ID_NOT_FOUND
        assert run(log, cg.delete_offsets([("t", 0)], 1000), 1000, "never") == (cg.GROUP_ID_NOT_FOUND, [])
        nothing = run(log, cg.commit("", -1, [("t", 0, 5, "")], 1000), 1000, "never")
        assert isinstance(nothing.partitions[0], OffsetOutOfRange)
        assert dump(url) == before
        assert run(log, cg.commit("", -1, [("t", 0, 1, "tool")], 1000), 1000, "tool").partitions == [None]
        assert run(log, cg.delete_offsets([("t", 0)], 1000), 1000, "tool") == (None, [None])
        assert log.store.classic_commits("tool") == []
        assert [name for name, _ in log.store.classic_list()] == ["tool"]
        assert run(log, cg.delete_offsets([("t", 0)], 1000), 1000, "tool") == (None, [None])
        assert run(log, cg.delete(1000), 1000, "tool") is None
        assert log.store.classic_list() == []
        assert run(log, cg.delete(1000), 1000, "tool") == cg.GROUP_ID_NOT_FOUND


def test_two_members_join_sync_and_a_third_rebalances(url):
    with tidelog.open(url) as log:
        log.create_topic("t", 2)
        log.producer().send("t", b"x", partition=0)
        assert run(log, join("a", 1000), 1000) is cg.PENDING or True  # alone: completes at once
        first = run(log, cg.join_poll("a", 1000))
        assert (first.error, first.generation, first.leader, first.protocol) == (None, 1, "a", "range")
        assert run(log, cg.sync("a", 1, {"a": b"all"}, 1001)).assignment == b"all"
        # b joins: a learns from its heartbeat, joins again, and the rebalance completes.
        assert run(log, join("b", 2000, protocols=(("roundrobin", b"x"), ("range", b"y")))) is cg.PENDING
        assert run(log, cg.heartbeat("a", 1, 2100)) == cg.REBALANCE_IN_PROGRESS
        joined = run(log, join("a", 2200))
        assert (joined.generation, joined.leader) == (2, "a")
        assert sorted(m for m, _, _ in joined.members) == ["a", "b"]
        assert joined.protocol in ("range", "roundrobin")
        follower = run(log, cg.join_poll("b", 2300))
        assert (follower.generation, follower.members) == (2, [])
        assert run(log, cg.sync("b", 2, {}, 2400)) is cg.PENDING  # the leader has not synced yet
        assert run(log, cg.sync("a", 2, {"a": b"p0", "b": b"p1"}, 2500)).assignment == b"p0"
        assert run(log, cg.sync_poll("b", 2, 2600)).assignment == b"p1"
        # Commits: fenced by generation; Kafka's commit sets the offset.
        assert run(log, cg.commit("b", 2, [("t", 0, 1, "")], 2700)) == cg.Committed(None, [None])
        before = dump(url)
        assert run(log, cg.commit("b", 1, [("t", 0, 0, "")], 2800)).error == cg.ILLEGAL_GENERATION
        assert run(log, cg.commit("zed", 2, [("t", 0, 0, "")], 2800)).error == cg.UNKNOWN_MEMBER_ID
        assert dump(url) == before  # refused: nothing written, not even a heartbeat
        out = run(log, cg.commit("b", 2, [("t", 0, 5, "")], 2900)).partitions[0]
        assert isinstance(out, OffsetOutOfRange)
        assert run(log, cg.commit("a", 2, [("t", 0, 0, "")], 2950)) == cg.Committed(
            None, [None]
        )  # backwards: set
        assert [(o.topic, o.partition, o.committed) for o in log.group_offsets("g")] == [("t", 0, 0)]
        assert "g" in log.groups()


def test_the_member_that_completes_a_round_leads_and_a_dropped_answer_settles(url):
    """kafka-python 3.0 drops a JoinGroup/SyncGroup answer that came between two
    of its polls and joins again with the same metadata. As a follower it gets
    the current generation; the leader's rejoin starts a new rebalance, so the
    member waiting in a round must not be the one left to lead it."""
    with tidelog.open(url) as log:
        run(log, join("a", 0))
        run(log, cg.sync("a", 1, {"a": b"all"}, 0))
        assert run(log, join("b", 100)) is cg.PENDING
        assert run(log, join("a", 200)).leader == "a"  # a completes the round
        assert run(log, cg.join_poll("b", 200)).leader == "a"
        run(log, cg.sync("a", 2, {"a": b"p0", "b": b"p1"}, 300))
        assert run(log, cg.sync("b", 2, {}, 300)).assignment == b"p1"
        # a, the leader, joins again (its answer was dropped, or its metadata
        # changed): a rebalance it waits in; b completes it and leads.
        assert run(log, join("a", 400)) is cg.PENDING
        assert run(log, cg.heartbeat("b", 2, 500)) == cg.REBALANCE_IN_PROGRESS
        led = run(log, join("b", 600))
        assert (led.generation, led.leader, sorted(m for m, _, _ in led.members)) == (3, "b", ["a", "b"])
        assert (run(log, cg.join_poll("a", 600)).leader, run(log, cg.sync("a", 3, {}, 700))) == (
            "b",
            cg.PENDING,
        )
        assert run(log, cg.sync("b", 3, {"a": b"p0", "b": b"p1"}, 800)).assignment == b"p1"
        # a drops that answer too and joins again: as a follower, the same generation.
        again = run(log, join("a", 900))
        assert (again.error, again.generation, again.leader) == (None, 3, "b")
        assert run(log, cg.sync("a", 3, {}, 1000)).assignment == b"p0"
        assert run(log, cg.heartbeat("b", 3, 1100)) is None  # no rebalance: settled
        state, _ = log.store.classic_describe("g")
        assert (state.phase, state.generation, state.leader) == (cg.STABLE, 3, "b")


def test_a_group_outlives_its_store_handle_and_silent_members_expire(url):
    with tidelog.open(url) as log:
        run(log, join("a", 1000))
        run(log, cg.sync("a", 1, {"a": b"mine"}, 1000))
    with tidelog.open(url) as log:  # a restart: the group is in the store
        state, members = log.store.classic_describe("g")
        assert (state.phase, state.generation, state.leader) == (cg.STABLE, 1, "a")
        assert [(m.member, m.assignment) for m in members] == [("a", b"mine")]
        assert [name for name, _ in log.store.classic_list()] == ["g"]
        # 6 s of silence: the session ran out, the group is empty, the generation moved on.
        assert run(log, cg.heartbeat("a", 1, 8000)) == cg.UNKNOWN_MEMBER_ID
        state, members = log.store.classic_describe("g")
        assert (state.phase, state.generation, members) == (cg.EMPTY, 2, [])
        # With no members, a commit from outside the group (generation -1) is allowed.
        assert run(log, cg.commit("", -1, [], 9000)) == cg.Committed(None, [])


def test_a_member_that_does_not_rejoin_is_dropped_at_the_deadline(url):
    with tidelog.open(url) as log:
        run(log, join("a", 0, rebalance_ms=1000))
        run(log, cg.sync("a", 1, {"a": b""}, 0))
        assert run(log, join("b", 100, rebalance_ms=1000)) is cg.PENDING
        assert run(log, cg.join_poll("b", 500)) is cg.PENDING  # a has until 1100 to join again
        joined = run(log, cg.join_poll("b", 1200))
        assert (joined.generation, joined.leader, [m for m, _, _ in joined.members]) == (2, "b", ["b"])
        assert run(log, cg.heartbeat("a", 1, 1300)) == cg.UNKNOWN_MEMBER_ID


def test_join_refuses_a_protocol_the_group_cannot_share(url):
    with tidelog.open(url) as log:
        run(log, join("a", 0))
        refused = run(log, join("b", 10, protocols=(("sticky-only", b""),)))
        assert refused.error == cg.INCONSISTENT_GROUP_PROTOCOL
        request = cg.JoinRequest("", None, "c", "h", 6000, 1000, "consumer", [("range", b"")], True)
        first = run(log, cg.join(request, 20, lambda: "handed-out"))
        assert (first.error, first.member) == (cg.MEMBER_ID_REQUIRED, "handed-out")
        assert [m.member for m in log.store.classic_describe("g")[1]] == ["a"]  # nothing kept for it
