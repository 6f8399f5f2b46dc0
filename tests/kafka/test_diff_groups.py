"""Kafka's classic group protocol side by side with Apache Kafka 4: FindCoordinator,
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit by a member, DescribeGroups
and ListGroups, with one member and two, through the answers a consumer acts on
(generations, member ids, the leader, the protocol chosen, assignments, and the
REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION and
INCONSISTENT_GROUP_PROTOCOL that send a member back to JoinGroup).

Each scenario runs at the n-th version of every API, for n from 0 to JoinGroup's
newest (an API with fewer versions stays at its newest), so that every version the
listener serves of each is met. Member ids are the only values normalised beyond
`seen`'s: Kafka makes one of the client id and a random UUID, tidelog of the client
id and 16 random hex digits; each id becomes the client id and the order in which
the scenario first met it (`test-#1`), so the answers still say which member is which.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

from kafka_diff import assert_same, clip, differs, make_topic, seen, until, versions
from kafka_reference import unique

FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE, LIST = 10, 11, 12, 13, 14, 15, 16
OFFSET_COMMIT = 8
CLIENT = "test"  # kafka_wire's client id: member ids start with it
REBALANCE_IN_PROGRESS = 27
WAIT_S = 30


class Members:
    """Member ids as the scenario met them: `test-#1`, `test-#2`, ..."""

    def __init__(self) -> None:
        self.labels: dict[str, str] = {}

    def __call__(self, member: str) -> str:
        if not member:
            return member
        if member not in self.labels:
            assert member.startswith(CLIENT + "-"), member  # the client id, then the random part
            self.labels[member] = f"{CLIENT}-#{len(self.labels) + 1}"
        return self.labels[member]

    def normal(self, value):
        """`value` (from `seen`) with its member ids as labels, and lists of members in label order
        (Kafka lists a group's members in its hash map's order)."""
        if isinstance(value, dict):
            out = {
                k: self(v) if k in ("member_id", "leader") and isinstance(v, str) else self.normal(v)
                for k, v in value.items()
            }
            if isinstance(out.get("members"), list):
                out["members"].sort(key=lambda m: m.get("member_id") or "")
            return out
        if isinstance(value, list):
            return [self.normal(v) for v in value]
        return value


class Scenario:
    """One group on one cluster, at the n-th version of each API; `log` holds what was seen."""

    def __init__(self, target, group, topic, n):
        self.target, self.group, self.topic = target, group, topic
        self.v = {
            api: clip(api, n) for api in (FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE, LIST)
        }
        self.v[OFFSET_COMMIT] = clip(OFFSET_COMMIT, n)
        self.members = Members()
        self.log: list[tuple[str, object]] = []

    def note(self, label, answer):
        self.log.append((label, self.members.normal(seen(answer))))
        return answer

    def join(self, wire, member, protocols, label=None):
        """A JoinGroup; a new member's first at v4+ is answered MEMBER_ID_REQUIRED, and it joins again
        with the id handed out. Noted under `label` unless None (an answer another thread waits for)."""

        def ask(member_id):
            values = {
                "group_id": self.group,
                "session_timeout": 10_000,
                "rebalance_timeout": 10_000,
                "member_id": member_id,
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": [{"name": name, "metadata": data} for name, data in protocols],
                "reason": None,
            }
            return wire.call(JOIN, self.v[JOIN], values)

        answers = [ask(member)]
        if answers[0].error_code.value == 79:  # MEMBER_ID_REQUIRED
            answers.append(ask(answers[0].member_id))
        if label is not None:
            for i, answer in enumerate(answers):
                self.note(label + (" again" if i else ""), answer)
        return answers

    def sync(self, wire, generation, member, assignments, protocol="roundrobin"):
        values = {
            "group_id": self.group,
            "generation_id": generation,
            "member_id": member,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol_name": protocol,
            "assignments": [{"member_id": m, "assignment": a} for m, a in assignments],
        }
        return wire.call(SYNC, self.v[SYNC], values)

    def heartbeat(self, wire, generation, member, group=None):
        values = {
            "group_id": group or self.group,
            "generation_id": generation,
            "member_id": member,
            "group_instance_id": None,
        }
        return wire.call(HEARTBEAT, self.v[HEARTBEAT], values)

    def leave(self, wire, *members):
        values = {
            "group_id": self.group,
            "member_id": members[0],
            "members": [{"member_id": m, "group_instance_id": None, "reason": None} for m in members],
        }
        return wire.call(LEAVE, self.v[LEAVE], values)

    def commit(self, wire, generation, member, offset):
        values = {
            "group_id": self.group,
            "generation_id_or_member_epoch": generation,
            "member_id": member,
            "group_instance_id": None,
            "retention_time": -1,
            "topics": [
                {
                    "name": self.topic,
                    "partitions": [
                        {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}
                    ],
                }
            ],
        }
        return wire.call(OFFSET_COMMIT, self.v[OFFSET_COMMIT], values)

    def describe(self, wire, label, group=None):
        values = {"groups": [group or self.group], "include_authorized_operations": False}
        self.note(label, wire.call(DESCRIBE, self.v[DESCRIBE], values))

    def rebalancing(self, wire, generation, member):
        """Heartbeat until the member is told to join again (Kafka's coordinator starts a
        rebalance as a new member's JoinGroup arrives; tidelog's as it is stored)."""
        until(
            lambda: self.heartbeat(wire, generation, member).error_code.value == REBALANCE_IN_PROGRESS,
            "a rebalance",
        )

    def in_thread(self, fn, *args) -> Future:
        """Run `fn(*args)` beside the scenario: a request that waits for another member's."""
        future: Future = Future()

        def run():
            try:
                future.set_result(fn(*args))
            except BaseException as e:
                future.set_exception(e)

        threading.Thread(target=run, daemon=True).start()
        return future


def one_and_two_members(target, group, topic, n):
    s = Scenario(target, group, topic, n)
    one, two, three = target.wire(), target.wire(-1), target.wire()
    try:
        s.note(
            "find the coordinator",
            one.call(
                FIND_COORDINATOR,
                s.v[FIND_COORDINATOR],
                {"key": group, "key_type": 0, "coordinator_keys": [group]},
            ),
        )
        # One member: it leads, and picks the protocol it prefers.
        first = s.join(one, "", [("range", b"m1-range"), ("roundrobin", b"m1-rr")], "first joins")[-1]
        m1, g1 = first.member_id, first.generation_id
        s.describe(one, "described before its SyncGroup")
        s.note("a commit before its SyncGroup", s.commit(one, g1, m1, 0))
        s.note("a SyncGroup naming another protocol", s.sync(one, g1, m1, [(m1, b"a1")], "roundrobin"))
        s.note("the leader's SyncGroup", s.sync(one, g1, m1, [(m1, b"a1")], "range"))
        s.note("a heartbeat", s.heartbeat(one, g1, m1))
        s.note("a heartbeat of another generation", s.heartbeat(one, g1 + 5, m1))
        s.note("a heartbeat of an unknown member", s.heartbeat(one, g1, CLIENT + "-nobody"))
        s.note("a SyncGroup of another generation", s.sync(one, g1 + 5, m1, [], "range"))
        s.note("a member's commit", s.commit(one, g1, m1, 0))
        s.note("a commit of another generation", s.commit(one, g1 + 5, m1, 0))
        s.note("a commit of an unknown member", s.commit(one, g1, CLIENT + "-nobody", 0))
        s.note("a commit from outside the group", s.commit(one, -1, "", 0))
        s.describe(one, "described stable")

        # A second member joins: its JoinGroup waits until the first joined again.
        joined = s.in_thread(s.join, two, "", [("roundrobin", b"m2-rr")])
        s.rebalancing(one, g1, m1)
        s.describe(one, "described rebalancing")
        s.note("a commit while rebalancing", s.commit(one, g1, m1, 0))
        again = s.join(one, m1, [("range", b"m1-range"), ("roundrobin", b"m1-rr")], "first joins again")[-1]
        answers = joined.result(WAIT_S)
        for i, answer in enumerate(answers):
            s.note("second joins" + (" again" if i else ""), answer)
        m2 = answers[-1].member_id
        g2 = again.generation_id
        leader, follower = (one, m1), (two, m2)
        if again.leader != m1:
            leader, follower = follower, leader
        s.describe(one, "described before the SyncGroups")
        synced = s.in_thread(s.sync, follower[0], g2, follower[1], [])
        time.sleep(0.2)  # the follower's SyncGroup waits for the leader's
        s.note("the leader's SyncGroup", s.sync(leader[0], g2, leader[1], [(m1, b"a-m1"), (m2, b"a-m2")]))
        s.note("the follower's SyncGroup", synced.result(WAIT_S))
        s.describe(one, "described with two")
        s.note("a heartbeat of the last generation", s.heartbeat(two, g1, m2))

        # A member with no protocol in common with the group's.
        values = {
            "group_id": group,
            "session_timeout": 10_000,
            "rebalance_timeout": 10_000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "sticky", "metadata": b""}],
            "reason": None,
        }
        s.note("a member with another protocol", three.call(JOIN, s.v[JOIN], values))

        # The leader joins again first (say, to subscribe to more): who leads the next generation.
        joined = s.in_thread(s.join, one, m1, [("range", b"m1-range2"), ("roundrobin", b"m1-rr2")])
        s.rebalancing(two, g2, m2)
        last = s.join(two, m2, [("roundrobin", b"m2-rr")])[-1]
        first = joined.result(WAIT_S)[-1]
        g3 = last.generation_id
        s.log.append(("the next generation", (first.generation_id == g3, first.protocol_name, g3 - g2)))
        differs("rebalance-leader")  # Kafka's leader stays; tidelog's is the member that joined last
        expected = m1 if target.is_kafka else m2
        s.log.append(("its leader", "as each chooses" if last.leader == expected else s.members(last.leader)))
        # Each member's SyncGroup, whichever leads: the assignment each gets is compared.
        leader, follower = ((one, m1), (two, m2)) if first.leader == m1 else ((two, m2), (one, m1))
        synced = s.in_thread(s.sync, follower[0], g3, follower[1], [])
        time.sleep(0.2)
        answers = {leader[1]: s.sync(leader[0], g3, leader[1], [(m1, b"b-m1"), (m2, b"b-m2")])}
        answers[follower[1]] = synced.result(WAIT_S)
        s.note("the first's SyncGroup of the next", answers[m1])
        s.note("the second's SyncGroup of the next", answers[m2])

        # The second leaves; the first joins again alone.
        s.note("the second leaves", s.leave(two, m2))
        s.note("a heartbeat after it left", s.heartbeat(one, g3, m1))
        alone = s.join(one, m1, [("range", b"m1-range")], "first joins alone")[-1]
        s.note("its SyncGroup", s.sync(one, alone.generation_id, m1, [(m1, b"alone")], "range"))
        s.note("the first and an unknown member leave", s.leave(one, m1, CLIENT + "-nobody"))
        s.note("the first leaves again", s.leave(one, m1))
        s.describe(one, "described empty")
        s.describe(one, "an unknown group described", group + "-never")
        s.note("a heartbeat to an unknown group", s.heartbeat(one, 1, m1, group + "-never"))
        for states in ([], ["Empty"], ["Stable"]):
            listed = seen(one.call(LIST, s.v[LIST], {"states_filter": states}))
            s.log.append((f"listed ({states})", [g for g in listed["groups"] if g["group_id"] == group]))
        return s.log
    finally:
        for wire in (one, two, three):
            wire.close()


@pytest.mark.parametrize("n", versions(JOIN))
def test_a_group_of_one_and_two_members(kafka, tidelog, n):
    group, topic = unique("group"), unique("group-topic")
    for target in (kafka, tidelog):
        make_topic(target, topic)
    theirs = one_and_two_members(kafka, group, topic, n)
    ours = one_and_two_members(tidelog, group, topic, n)
    assert [label for label, _ in ours] == [label for label, _ in theirs]
    assert_same(dict(ours), dict(theirs))


def a_stranger_joins(target, group, topic):
    """A stable group of one, then a JoinGroup naming a member id the group never
    had: whether it is answered at once or the group starts a rebalance (the stranger
    became a member), and its answer once the first member left."""
    s = Scenario(target, group, topic, clip(JOIN, 9))
    with target.wire() as one, target.wire() as other:
        first = s.join(one, "", [("range", b"")])[-1]
        assert s.sync(one, first.generation_id, first.member_id, [], "range").error_code.value == 0
        stranger = s.in_thread(s.join, other, CLIENT + "-stranger", [("range", b"")])

        def settled():
            if stranger.done():
                return "answered at once"
            told = s.heartbeat(one, first.generation_id, first.member_id).error_code.value
            return told == REBALANCE_IN_PROGRESS and "the group rebalances"

        what = until(settled, "the stranger's answer or a rebalance")
        s.leave(one, first.member_id)
        return what, stranger.result(WAIT_S)[-1].error_code.value


def test_a_join_naming_an_unknown_member(kafka, tidelog):
    group, topic = unique("stranger"), unique("stranger-topic")
    assert a_stranger_joins(kafka, group, topic) == ("answered at once", 25)  # UNKNOWN_MEMBER_ID
    differs("unknown-member-join")
    assert a_stranger_joins(tidelog, group, topic) == ("the group rebalances", 0)


def never_used(target, group, topic):
    """Heartbeat, SyncGroup, LeaveGroup and OffsetCommit of a member to a group never
    used: their answers, then how DescribeGroups and ListGroups see the group."""
    s = Scenario(target, group, topic, clip(JOIN, 9))
    with target.wire() as wire:
        s.note("a heartbeat", s.heartbeat(wire, 1, CLIENT + "-x"))
        s.note("a SyncGroup", s.sync(wire, 1, CLIENT + "-x", [], "range"))
        s.note("a LeaveGroup", s.leave(wire, CLIENT + "-x"))
        s.note("a member's commit", s.commit(wire, 3, CLIENT + "-x", 0))
        s.describe(wire, "described")
        listed = seen(wire.call(LIST, s.v[LIST], {"states_filter": []}))
        s.log.append(("listed", [g for g in listed["groups"] if g["group_id"] == group]))
    return s.log


def test_requests_to_a_group_never_used(kafka, tidelog):
    from dumps import dump

    group, topic = unique("never"), unique("never-topic")
    for target in (kafka, tidelog):
        make_topic(target, topic)
    before = dump(tidelog.store)
    ours = never_used(tidelog, group, topic)
    assert dump(tidelog.store) == before  # refused: the group is not made
    assert_same(ours, never_used(kafka, group, topic))


TIMEOUTS = [(5999, 10_000), (6000, 10_000), (1_800_001, 10_000), (10_000, 2**31 - 1), (10_000, 0)]


def timeouts(target, prefix):
    """A JoinGroup of a new member at every version with session and rebalance timeouts
    at and past Kafka's bounds (group.min/max.session.timeout.ms; any rebalance timeout,
    Kafka Streams asks for 2^31 - 1 ms): its error code; a member that joined leaves."""
    out = {}
    with target.wire() as wire:
        for version in versions(JOIN):
            for session_ms, rebalance_ms in TIMEOUTS:
                s = Scenario(target, f"{prefix}-{version}-{session_ms}-{rebalance_ms}", "", version)
                values = {
                    "group_id": s.group,
                    "session_timeout": session_ms,
                    "rebalance_timeout": rebalance_ms,
                    "member_id": "",
                    "group_instance_id": None,
                    "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": b""}],
                    "reason": None,
                }
                answer = wire.call(JOIN, version, values)
                if answer.error_code.value == 79:  # MEMBER_ID_REQUIRED
                    answer = wire.call(JOIN, version, {**values, "member_id": answer.member_id})
                out[version, session_ms, rebalance_ms] = answer.error_code.value
                if answer.error_code.value == 0:
                    s.leave(wire, answer.member_id)
    return out


def test_session_and_rebalance_timeouts(kafka, tidelog):
    prefix = unique("timeouts")
    assert_same(timeouts(tidelog, prefix), timeouts(kafka, prefix))
