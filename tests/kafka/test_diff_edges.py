"""The requests Kafka's users' clients send that tidelog got wrong (issue 39), side by side
with Apache Kafka 4: each test here failed on main before the fix."""

from __future__ import annotations

import struct

import pytest

from kafka_diff import DIFFERENCES, differs, make_topic, seen, settled, until, without_internal
from kafka_reference import unique

ck = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")

# librdkafka's all-topics Metadata v12, as confluent-kafka 2.16's AdminClient.list_topics()
# sends it (captured from the wire): three bytes follow the body, which Kafka ignores.
LIBRDKAFKA_ALL_TOPICS = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")


def produce(target, topic, partition, count):
    producer = ck.Producer({"bootstrap.servers": target.bootstrap})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=partition)
    assert producer.flush(30) == 0


def all_topics_as_librdkafka_asks(target, topic):
    with target.wire() as wire:
        wire.send(struct.pack(">i", len(LIBRDKAFKA_ALL_TOPICS)) + LIBRDKAFKA_ALL_TOPICS)
        frame = wire.recv_frame()
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    answer = seen(entity_reader(load_response_schema(3, 12))(frame, 5)[0])
    listed = AdminListing(target)
    return topic in [t["name"] for t in without_internal(answer["topics"])], topic in listed


def AdminListing(target):
    """confluent-kafka's AdminClient.list_topics(), no topic named: the topics' names."""
    client = admin.AdminClient({"bootstrap.servers": target.bootstrap})
    return set(client.list_topics(timeout=15).topics)


def test_all_topics_metadata_as_librdkafka_sends_it(kafka, tidelog):
    topic = unique("listed")
    for target in (kafka, tidelog):
        make_topic(target, topic)
    assert all_topics_as_librdkafka_asks(tidelog, topic) == all_topics_as_librdkafka_asks(kafka, topic)
    assert all_topics_as_librdkafka_asks(kafka, topic) == (True, True)


def commits_read_back(target, topic, group, version=(8, 7)):
    """Commits of 5, -2 (earliest) and -1 (latest), with metadata, by a tool outside the
    group; then OffsetFetch of them, as kafkajs's resetOffsets and a tool's state do."""
    commit_v, fetch_v = version
    with target.wire() as wire:
        committed = wire.call(
            8,
            commit_v,
            {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "retention_time": -1,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": 0, "committed_offset": 5, "committed_metadata": "tool-state"},
                            {"partition_index": 1, "committed_offset": -2, "committed_metadata": "earliest"},
                            {"partition_index": 2, "committed_offset": -1, "committed_metadata": None},
                        ],
                    }
                ],
            },
        )
    with target.wire(-1) as wire:  # another broker of the cluster reads them back
        fetched = wire.call(
            9,
            fetch_v,
            {
                "group_id": group,
                "topics": [{"name": topic, "partition_indexes": [0, 1, 2]}],
                "require_stable": False,
            },
        )
    answer = seen(committed)
    for t in answer["topics"]:
        t["partitions"].sort(key=lambda p: p["partition_index"])
    return answer, seen(fetched)


@pytest.mark.parametrize("version", [(8, 7), (2, 1)], ids=["v8", "lowest"])
def test_negative_commits_and_commit_metadata_read_back(kafka, tidelog, version):
    topic, group = unique("commits"), unique("resetter")
    for target in (kafka, tidelog):
        make_topic(target, topic, 3)
        produce(target, topic, 0, 6)
    assert commits_read_back(tidelog, topic, group, version) == commits_read_back(
        kafka, topic, group, version
    )


def test_a_commit_past_the_end(kafka, tidelog):
    topic, group = unique("past-end"), unique("g")
    answers = {}
    for target in (kafka, tidelog):
        make_topic(target, topic)
        answers[target.name] = commits_read_back(target, topic, group)[0]["topics"][0]["partitions"][0]
    assert answers["kafka"]["error_code"] == 0
    differs("commit-past-the-end")
    assert answers[tidelog.name]["error_code"] == 1  # OFFSET_OUT_OF_RANGE


def deleted(target, topic, group):
    """OffsetDelete of one partition, DeleteGroups of the group and of one never seen,
    OffsetFetch after each."""
    with target.wire() as wire:
        wire.call(
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
                            {"partition_index": 0, "committed_offset": 1, "committed_metadata": "a"},
                            {"partition_index": 1, "committed_offset": 0, "committed_metadata": "b"},
                        ],
                    }
                ],
            },
        )
        offsets_gone = wire.call(
            47,
            0,
            {
                "group_id": group,
                "topics": [
                    {"name": topic, "partitions": [{"partition_index": 0}]},
                    {"name": topic + "-missing", "partitions": [{"partition_index": 0}]},
                ],
            },
        )
        missing_group = wire.call(
            47, 0, {"group_id": group + "-never", "topics": [{"name": topic, "partitions": []}]}
        )

        def fetch():
            return seen(
                wire.call(9, 7, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1]}]})
            )

        after_offset_delete = fetch()
        groups_gone = wire.call(42, 2, {"groups_names": [group, group + "-never"]})
        again = wire.call(42, 2, {"groups_names": [group]})
        after_group_delete = fetch()
    answer = seen(offsets_gone)
    answer["topics"].sort(key=lambda t: t["name"])  # Kafka's order is a hash map's
    groups = seen(groups_gone)
    groups["results"].sort(key=lambda g: g["group_id"])
    return (
        answer,
        seen(missing_group),
        after_offset_delete,
        groups,
        seen(again),
        after_group_delete,
    )


def test_offset_delete_and_delete_groups(kafka, tidelog):
    topic, group = unique("deleting"), unique("gone")
    for target in (kafka, tidelog):
        make_topic(target, topic, 2)
        produce(target, topic, 0, 2)
    assert deleted(tidelog, topic, group) == deleted(kafka, topic, group)


def test_delete_groups_refuses_a_group_with_members(kafka, tidelog):
    def scenario(target, topic, group):
        consumer = ck.Consumer(
            {"bootstrap.servers": target.bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
        )
        consumer.subscribe([topic])
        until(lambda: consumer.poll(0.2) is not None or consumer.assignment(), "an assignment")
        try:
            with target.wire() as wire:
                return seen(wire.call(42, 2, {"groups_names": [group]}))
        finally:
            consumer.close()

    topic, group = unique("busy"), unique("busy-group")
    for target in (kafka, tidelog):
        make_topic(target, topic)
    assert scenario(tidelog, topic, group) == scenario(kafka, topic, group)


def default_size(name, value):
    """Each one's default max.message.bytes as one word (`differs("max-message-bytes")`)."""
    if name == "max.message.bytes" and value in ("1048576", "1048588"):
        differs("max-message-bytes")
        return "default"
    return value


def configs_altered(target, topic):
    """IncrementalAlterConfigs SET and DELETE, AlterConfigs, bad names and a missing
    topic; DescribeConfigs of the settings after each (names and values)."""

    def describe(wire):
        settled(target)  # Kafka's broker applies a change a moment after it answers
        answer = wire.call(
            32,
            4,
            {
                "resources": [
                    {
                        "resource_type": 2,
                        "resource_name": topic,
                        "configuration_keys": ["retention.ms", "max.message.bytes", "cleanup.policy"],
                    }
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
        return sorted((c.name, default_size(c.name, c.value)) for c in answer.results[0].configs)

    def incremental(wire, name, op, value, resource=topic):
        answer = wire.call(
            44,
            1,
            {
                "resources": [
                    {
                        "resource_type": 2,
                        "resource_name": resource,
                        "configs": [{"name": name, "config_operation": op, "value": value}],
                    }
                ],
                "validate_only": False,
            },
        )
        return answer.responses[0].error_code.value

    out = []
    with target.wire() as wire:
        out.append(describe(wire))
        out.append(incremental(wire, "retention.ms", 0, "1000"))
        out.append(incremental(wire, "cleanup.policy", 0, "compact"))
        out.append(describe(wire))
        out.append(incremental(wire, "retention.ms", 1, None))
        out.append(describe(wire))
        out.append(incremental(wire, "no.such.setting", 0, "1"))
        out.append(incremental(wire, "retention.ms", 0, "1000", resource=topic + "-missing"))
        legacy = wire.call(
            33,
            2,
            {
                "resources": [
                    {
                        "resource_type": 2,
                        "resource_name": topic,
                        "configs": [{"name": "max.message.bytes", "value": "5000"}],
                    }
                ],
                "validate_only": False,
            },
        )
        out.append(legacy.responses[0].error_code.value)
        out.append(describe(wire))  # AlterConfigs set the whole config: cleanup.policy back to delete
    return out


def test_topic_settings_altered(kafka, tidelog):
    topic = unique("configs")
    for target in (kafka, tidelog):
        make_topic(target, topic)
    differs("config-details")  # only the names and values of the settings tidelog has are compared
    assert configs_altered(tidelog, topic) == configs_altered(kafka, topic)


def test_describe_cluster(kafka, tidelog):
    def scenario(target):
        with target.wire() as wire:
            return [seen(wire.call(60, v, {"include_cluster_authorized_operations": False})) for v in (0, 1)]

    assert scenario(tidelog) == scenario(kafka)


def below_the_floor(target):
    """OffsetCommit v1 and DescribeConfigs v0 (sarama's defaults), Produce v2: below
    Kafka 4's floor. Whether the connection is closed, and whether a new one is served."""

    def legacy_string(text):
        return struct.pack(">h", len(text)) + text.encode()

    header = struct.pack(">hhi", 8, 1, 11) + legacy_string("sarama")
    commit_v1 = header + legacy_string("g") + struct.pack(">i", -1) + legacy_string("") + struct.pack(">i", 0)
    header = struct.pack(">hhi", 32, 0, 12) + legacy_string("sarama")
    configs_v0 = header + struct.pack(">ib", 1, 2) + legacy_string("t") + struct.pack(">i", -1)
    produce_v2 = struct.pack(">hhi", 0, 2, 13) + legacy_string("sarama") + struct.pack(">hii", 1, 1000, 0)
    out = []
    for frame in (commit_v1, configs_v0, produce_v2):
        with target.wire() as wire:
            wire.send(struct.pack(">i", len(frame)) + frame)
            out.append(wire.closed())
    with target.wire() as wire:
        out.append(
            wire.call(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code.value
        )
    return out


def test_requests_below_kafka_4s_floor(kafka, tidelog):
    # Kafka 4 closes the connection on them (KIP-896): so does tidelog, which is why sarama
    # with its default settings fails against both; a client must send Kafka 4's versions.
    assert below_the_floor(tidelog) == below_the_floor(kafka) == [True, True, True, 0]


def test_api_versions_floors_are_kafka_4s(kafka, tidelog):
    def table(target):
        with target.wire() as wire:
            answer = wire.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}

    ours, theirs = table(tidelog), table(kafka)
    assert set(ours) <= set(theirs)
    assert {k: v[0] for k, v in ours.items()} == {k: theirs[k][0] for k in ours}
    differs("newest-versions")
    assert all(ours[k][1] <= theirs[k][1] for k in ours)
    assert "newest-versions" in DIFFERENCES


def test_refused_admin_requests_write_nothing(tidelog):
    from dumps import dump

    topic = unique("refusals")
    make_topic(tidelog, topic)
    before = dump(tidelog.store)
    with tidelog.wire() as wire:
        assert wire.call(42, 2, {"groups_names": [unique("never")]}).results[0].error_code.value == 69
        assert wire.call(47, 0, {"group_id": unique("never"), "topics": []}).error_code.value == 69
        bad = {"name": "no.such.setting", "config_operation": 0, "value": "1"}
        answer = wire.call(
            44,
            1,
            {
                "resources": [{"resource_type": 2, "resource_name": topic, "configs": [bad]}],
                "validate_only": False,
            },
        )
        assert answer.responses[0].error_code.value == 40  # INVALID_CONFIG
        answer = wire.call(
            33,
            2,
            {
                "resources": [{"resource_type": 2, "resource_name": topic + "-missing", "configs": []}],
                "validate_only": False,
            },
        )
        assert answer.responses[0].error_code.value == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert dump(tidelog.store) == before
