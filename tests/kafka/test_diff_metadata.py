"""Metadata and the topic admin APIs, side by side: what Apache Kafka answers, tidelog answers."""

from __future__ import annotations

from kafka_diff import differs, seen, until
from kafka_reference import unique


def metadata(target, names, which=0, version=12):
    """Metadata of `names` (all topics when None), its topics sorted by name (Kafka's order is a hash map's)."""
    with target.wire(which) as wire:
        topics = None if names is None else [{"name": n, "topic_id": None} for n in names]
        answer = seen(wire.call(3, version, {"topics": topics, "allow_auto_topic_creation": False}))
    answer["topics"].sort(key=lambda t: t["name"] or "")
    return answer


def known(target, topic, which=0):
    """Metadata of `topic` once the broker knows it: Kafka's brokers learn of a topic from
    the controller a moment after CreateTopics answers, and clients look again meanwhile."""
    return until(
        lambda: (m := metadata(target, [topic], which))["topics"][0]["error_code"] == 0 and m,
        f"{target} to know {topic}",
    )


def made_and_described(target, topic):
    """CreateTopics of a 3-partition topic, then Metadata of it and of a missing one."""
    with target.wire() as wire:
        made = wire.call(
            19,
            7,
            {
                "topics": [
                    {
                        "name": topic,
                        "num_partitions": 3,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout": 30_000,
                "validate_only": False,
            },
        )
    differs("broker-per-serve")  # each answers as the leader of all: node ids are not compared
    known(target, topic, -1)  # another broker of the cluster, where there is one
    meta = metadata(target, [topic, topic + "-missing"], -1)
    made = seen(made, drop=frozenset({"configs"}))  # the settings a topic is made with: another test
    return made, meta["topics"]


def test_a_topic_made_and_described(kafka, tidelog):
    topic = unique("meta")
    assert made_and_described(tidelog, topic) == made_and_described(kafka, topic)
