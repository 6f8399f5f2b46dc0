"""A consumer group's life as Kafka's admin clients see it, side by side with Apache Kafka 4:
listed (ListGroups, every version, with its filters), described, its offsets deleted, deleted."""

from __future__ import annotations

import pytest

from kafka_diff import seen
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
