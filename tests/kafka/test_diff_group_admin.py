"""A consumer group's life as Kafka's admin clients see it, side by side with Apache Kafka 4:
listed (ListGroups, every version, with its filters), described, its offsets deleted, deleted."""

from __future__ import annotations

import pytest

from kafka_diff import differs, seen
from kafka_reference import unique

pytest.importorskip("confluent_kafka")

from test_diff_edges import make_topic  # noqa: E402  (after the skip: it imports confluent_kafka)


def commit(wire, group, topic, partitions):
    """An OffsetCommit from outside the group (a tool's, generation -1) of (partition, offset)."""
    answer = wire.call(
        8,
        8,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "committed_offset": o, "committed_metadata": ""}
                        for p, o in partitions
                    ],
                }
            ],
        },
    )
    return seen(answer)


def listed(wire, group, version=5, **filters):
    """ListGroups' entry for `group` (the broker is shared: other tests' groups are left out)."""
    answer = seen(wire.call(16, version, filters))
    return answer["error_code"], [g for g in answer["groups"] if g["group_id"] == group]


# Kafka 4 compares states without regard to case or surrounding blanks, types without
# regard to case; a type or state it does not know finds nothing.
STATES = [["Empty"], ["empty"], ["EMPTY"], [" empty\t"], ["Stable"], ["Empty", "Stable"], ["bogus"]]
TYPES = [["classic"], ["Classic"], [" classic"], ["consumer"], ["share"], ["bogus"], ["consumer", "CLASSIC"]]


def filtered(target, topic, group):
    """A group made by a tool's commit, listed at every version and through each filter."""
    with target.wire() as wire:
        commit(wire, group, topic, [(0, 0)])
        answers = {f"v{v}": listed(wire, group, v) for v in range(6)}
        for states in STATES:
            answers[f"v4 states {states}"] = listed(wire, group, 4, states_filter=states)
            answers[f"v5 states {states}"] = listed(wire, group, 5, states_filter=states)
        for types in TYPES:
            answers[f"v5 types {types}"] = listed(wire, group, 5, types_filter=types)
        answers["v5 both"] = listed(wire, group, 5, states_filter=["empty"], types_filter=["classic"])
    return answers


def test_list_groups_at_every_version_and_filter(kafka, tidelog):
    topic, group = unique("listed"), unique("listed-group")
    for target in (kafka, tidelog):
        make_topic(target, topic)
    assert filtered(tidelog, topic, group) == filtered(kafka, topic, group)


def described(wire, group):
    return seen(wire.call(15, 5, {"groups": [group], "include_authorized_operations": False}))["groups"]


def offsets_deleted(wire, group, topic, partitions):
    return seen(
        wire.call(
            47,
            0,
            {
                "group_id": group,
                "topics": [{"name": topic, "partitions": [{"partition_index": p} for p in partitions]}],
            },
        )
    )


def groups_deleted(wire, group):
    return seen(wire.call(42, 2, {"groups_names": [group]}))


def seen_whole(wire, group):
    """What an admin client reads of a group: listed, described, its offsets."""
    fetched = seen(wire.call(9, 7, {"group_id": group, "topics": None}))
    return listed(wire, group), described(wire, group), fetched


def outlived(target, topic, group):
    """A tool's commits make a group (its only state is offsets; one is negative, as
    kafkajs's resetOffsets commits); OffsetDelete takes them all: the group stays,
    member-less, until DeleteGroups, after which it is gone."""
    steps = {}
    with target.wire() as wire:
        steps["committed"] = commit(wire, group, topic, [(0, 0), (1, -1)])
        steps["seen"] = seen_whole(wire, group)
        steps["offsets deleted"] = offsets_deleted(wire, group, topic, [0, 1])
        steps["seen after offsets"] = seen_whole(wire, group)
        steps["offsets deleted again"] = offsets_deleted(wire, group, topic, [0])
        steps["deleted"] = groups_deleted(wire, group)
        steps["seen after deleted"] = seen_whole(wire, group)
        steps["offsets deleted after"] = offsets_deleted(wire, group, topic, [0])
        steps["deleted again"] = groups_deleted(wire, group)
    with target.wire(-1) as wire:  # another broker of the cluster agrees
        steps["seen elsewhere"] = seen_whole(wire, group)
    return steps


def test_a_group_outlives_its_last_offset_until_deleted(kafka, tidelog):
    topic, group = unique("outlived"), unique("outliving")
    for target in (kafka, tidelog):
        make_topic(target, topic, 2)
    assert outlived(tidelog, topic, group) == outlived(kafka, topic, group)


def member_id_required(target, group):
    """A JoinGroup of a new member at v4+ is handed its member id (MEMBER_ID_REQUIRED) and
    joins no further: Kafka keeps the group it made for it, empty, and deletes it. (Whether
    Kafka lists or describes it meanwhile depends on when its coordinator's next write
    lands: they read what is committed to its log, DeleteGroups what is in memory.)"""
    with target.wire() as wire:
        joined = wire.call(
            11,
            9,
            {
                "group_id": group,
                "session_timeout": 10_000,
                "rebalance_timeout": 10_000,
                "member_id": "",
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
                "reason": None,
            },
        )
        return joined.error_code.value, groups_deleted(wire, group), listed(wire, group)


def test_a_group_made_by_a_join_that_asked_for_a_member_id(kafka, tidelog):
    group = unique("joined-once")
    assert member_id_required(tidelog, group) == member_id_required(kafka, group)


def nothing_committed(target, topic, group):
    """OffsetCommits from outside a group that commit nothing: each partition refused, or
    none named. Kafka makes no group it lists for them; a refused request writes nothing."""
    refused = {  # each commit's group, and what it commits
        "-unknown-topic": (topic + "-missing", [(0, 0)]),
        "-unknown-partition": (topic, [(7, 0)]),
        "-no-partition": (topic, []),
    }
    answers = {}
    with target.wire() as wire:
        for case, (name, partitions) in refused.items():
            answers[case] = (
                commit(wire, group + case, name, partitions),
                listed(wire, group + case),
                described(wire, group + case),
                groups_deleted(wire, group + case),
            )
        too_long = wire.call(
            8,
            8,
            {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": 0, "committed_offset": 0, "committed_metadata": "m" * 4097}
                        ],
                    }
                ],
            },
        )
        # (Not listed: whether Kafka lists the group it keeps in memory depends on when
        # its coordinator's next write lands, as for a JoinGroup's.)
        answers["metadata too long"] = seen(too_long), groups_deleted(wire, group)
    return answers


def test_commits_that_commit_nothing_make_no_group(kafka, tidelog):
    topic, group = unique("uncommitted"), unique("uncommitted")
    for target in (kafka, tidelog):
        make_topic(target, topic)
    ours, theirs = nothing_committed(tidelog, topic, group), nothing_committed(kafka, topic, group)
    differs("refused-commit-group")
    for answers, code in ((theirs, 0), (ours, 69)):  # GROUP_ID_NOT_FOUND
        *answer, deleted = answers["metadata too long"]
        assert deleted["results"][0]["error_code"] == code
        answers["metadata too long"] = answer
    assert ours == theirs


def test_commits_that_commit_nothing_write_nothing(tidelog):
    from dumps import dump

    topic, group = unique("uncommitted"), unique("uncommitted")
    make_topic(tidelog, topic)
    before = dump(tidelog.store)
    with tidelog.wire() as wire:
        for name, partitions in (
            (topic + "-missing", [(0, 0)]),
            (topic, [(7, 0)]),
            (topic, [(0, 5)]),
            (topic, []),
        ):
            commit(wire, group, name, partitions)
        differs("commit-past-the-end")  # (0, 5) above: OFFSET_OUT_OF_RANGE
        too_long = {"partition_index": 0, "committed_offset": 0, "committed_metadata": "m" * 4097}
        answer = wire.call(
            8,
            8,
            {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "topics": [{"name": topic, "partitions": [too_long]}],
            },
        )
        assert answer.topics[0].partitions[0].error_code.value == 12  # OFFSET_METADATA_TOO_LARGE
    assert dump(tidelog.store) == before
