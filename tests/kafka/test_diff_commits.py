"""A commit's metadata, side by side with Apache Kafka 4: any string Kafka keeps comes back as
it went, on every store, read from another broker of the cluster; Kafka's bound on its length."""

from __future__ import annotations

import pytest

from kafka_diff import seen
from kafka_reference import unique

pytest.importorskip("confluent_kafka")

from test_diff_edges import make_topic  # noqa: E402  (after the skip: it imports confluent_kafka)

# Kafka bounds metadata by Java's length of it (offset.metadata.max.bytes, 4096 UTF-16 code
# units): 4096 of "é" pass though their UTF-8 takes 8192 bytes; an emoji counts two.
METADATA = [
    "confluent\x00",  # librdkafka's clients end theirs with a NUL
    "\x00",
    "a\x00b\x00",
    "é😀\u2028\ufeff",
    "é" * 4096,
    "😀" * 2048,
    "😀" * 2049,
    "m" * 4097,
    "",
]


def committed_and_read_back(target, topic, group):
    """A tool's commit of each metadata on a partition of its own; OffsetFetch of them all."""
    with target.wire() as wire:
        committed = wire.call(
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
                            {"partition_index": p, "committed_offset": 0, "committed_metadata": m}
                            for p, m in enumerate(METADATA)
                        ],
                    }
                ],
            },
        )
    with target.wire(-1) as wire:
        fetched = wire.call(
            9,
            7,
            {
                "group_id": group,
                "topics": [{"name": topic, "partition_indexes": list(range(len(METADATA)))}],
                "require_stable": False,
            },
        )
    answer = seen(committed)
    answer["topics"][0]["partitions"].sort(key=lambda p: p["partition_index"])
    return answer, seen(fetched)


def test_commit_metadata_round_trips(kafka, tidelog):
    topic, group = unique("metadata"), unique("metadata-group")
    for target in (kafka, tidelog):
        make_topic(target, topic, len(METADATA))
    ours = committed_and_read_back(tidelog, topic, group)
    assert ours == committed_and_read_back(kafka, topic, group)
    assert ours[1]["topics"][0]["partitions"][0]["metadata"] == "confluent\x00"
