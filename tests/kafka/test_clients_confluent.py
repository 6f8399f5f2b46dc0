"""confluent-kafka (librdkafka) with its defaults against Apache Kafka and tidelog: the
all-topics metadata it asks for with `list_topics()` (its request once closed tidelog's
connection), a regex subscription (which read nothing for the same reason), a group
that is restarted, and every AdminClient call the Kafka guide claims."""

from __future__ import annotations

import time

import pytest

from kafka_clients import jsonable, make_topic, reference, run_name
from kafka_diff import until

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

WAIT_S = 30
RECORDS, MORE = 300, 30


def consume(target, group: str, topics: list[str], count: int) -> list[tuple]:
    """A group member (defaults but the start of a partition with no commit) reads until
    `count` records came or WAIT_S passed, then closes (its commit on closing)."""
    consumer = ck.Consumer(
        {"bootstrap.servers": target.bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(topics)
    got: list[tuple] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            headers = tuple(msg.headers() or ())
            got.append((msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), headers))
    finally:
        consumer.close()
    return got


def produce(target, topic: str, start: int, count: int) -> list[tuple]:
    """Keyed records with a header (librdkafka's partitioner); where each landed."""
    producer = ck.Producer({"bootstrap.servers": target.bootstrap})
    landed: list[tuple] = []

    def delivered(err, msg):
        assert err is None, err
        landed.append((msg.partition(), msg.offset(), msg.key()))

    for n in range(start, start + count):
        producer.produce(
            topic, key=f"k{n}", value=f"v{n}", headers=[("n", str(n).encode())], on_delivery=delivered
        )
    assert producer.flush(WAIT_S) == 0
    return sorted(landed)


def group_then_restart(target, topic: str) -> dict:
    group = topic
    make_topic(target, topic, 3)
    produced = produce(target, topic, 0, RECORDS)
    first = consume(target, group, [topic], RECORDS)
    produce(target, topic, RECORDS, MORE)
    again = consume(target, group, [topic], MORE)
    return {
        "produced": produced,
        "consumed": sorted(first),
        "duplicates": len(first) - len(set(first)),
        "restart": sorted(again),
    }


def test_a_group_reads_everything_once_and_a_restart_resumes(kafka, tidelog):
    topic = run_name("ck-restart")
    got = jsonable(group_then_restart(tidelog, topic))
    assert got == reference(topic, lambda: group_then_restart(kafka, topic))


def listed(target, topics: list[str]) -> dict:
    """`AdminClient.list_topics()` with no topic named: all topics' metadata."""
    meta = AdminClient({"bootstrap.servers": target.bootstrap}).list_topics(timeout=WAIT_S)
    return {name: len(meta.topics[name].partitions) for name in topics if name in meta.topics}


def made_and_listed(target, topics: list[str]) -> dict:
    for topic in topics:
        make_topic(target, topic, 2)
    return listed(target, topics)


def test_list_topics_with_no_topic_named_lists_them_all(kafka, tidelog):
    topics = [run_name("ck-all-a"), run_name("ck-all-b")]
    got = made_and_listed(tidelog, topics)
    assert got == dict.fromkeys(topics, 2)
    assert got == reference(topics[0], lambda: made_and_listed(kafka, topics))


def regex_subscription(target, prefix: str) -> list[tuple]:
    group = prefix
    for suffix in ("a", "b"):
        make_topic(target, f"{prefix}.{suffix}", 1)
        produce(target, f"{prefix}.{suffix}", 0, 5)
    make_topic(target, f"other-{prefix}", 1)
    produce(target, f"other-{prefix}", 0, 5)
    return sorted(consume(target, group, [f"^{prefix}\\..*"], 10))


def test_a_regex_subscription_reads_every_matching_topic(kafka, tidelog):
    prefix = run_name("ck-regex")
    got = jsonable(regex_subscription(tidelog, prefix))
    assert {t for t, *_ in got} == {f"{prefix}.a", f"{prefix}.b"}
    assert got == reference(prefix, lambda: regex_subscription(kafka, prefix))


def admin_calls(target, topic: str, group: str) -> dict:
    """Every AdminClient call the Kafka guide claims, in order, each answer as values."""
    admin = AdminClient({"bootstrap.servers": target.bootstrap})

    def result(futures):
        """One future's result or, when it failed, its error's name."""
        (future,) = futures.values() if isinstance(futures, dict) else (futures,)
        try:
            return future.result(timeout=WAIT_S)
        except ck.KafkaException as e:
            return e.args[0].name()

    def partitions() -> int:
        return len(admin.list_topics(topic, timeout=WAIT_S).topics[topic].partitions)

    def configs() -> dict:
        described = result(admin.describe_configs([ConfigResource("topic", topic)]))
        return {
            k: (v.value, ConfigSource(v.source).name)
            for k, v in described.items()
            if k in ("retention.ms", "cleanup.policy")
        }

    def offsets() -> list:
        out = []
        for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
            answer = result(admin.list_offsets({ck.TopicPartition(topic, 0): spec}))
            out.append(answer if isinstance(answer, str) else answer.offset)
        return out

    def committed() -> list:
        answer = result(admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group)]))
        if isinstance(answer, str):
            return [answer]
        return sorted((tp.partition, tp.offset, tp.metadata) for tp in answer.topic_partitions)

    steps: dict = {}
    steps["create_topics"] = result(admin.create_topics([NewTopic(topic, 2, 1)]))
    steps["partitions"] = until(lambda: partitions() == 2 and 2, f"{target} to know {topic}")
    steps["describe_topics"] = len(result(admin.describe_topics(ck.TopicCollection([topic]))).partitions)
    steps["create_partitions"] = result(admin.create_partitions([NewPartitions(topic, 3)]))
    steps["after_create_partitions"] = until(lambda: partitions() == 3 and 3, f"{target} to grow {topic}")
    steps["describe_configs"] = configs()
    with pytest.deprecated_call():  # confluent-kafka's word for it; Kafka 4 still serves AlterConfigs
        legacy = admin.alter_configs(
            [ConfigResource("topic", topic, set_config={"retention.ms": "86400000"})]
        )
    steps["alter_configs"] = result(legacy).__class__.__name__
    steps["after_alter_configs"] = configs()
    change = ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    steps["incremental_alter_configs"] = result(
        admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=[change])])
    ).__class__.__name__
    steps["after_incremental_alter_configs"] = configs()
    producer = ck.Producer({"bootstrap.servers": target.bootstrap})
    for n in range(10):
        producer.produce(topic, value=f"v{n}", partition=0)
    assert producer.flush(WAIT_S) == 0
    steps["list_offsets"] = offsets()
    deleted = result(admin.delete_records([ck.TopicPartition(topic, 0, 3)]))
    steps["delete_records"] = deleted if isinstance(deleted, str) else deleted.low_watermark
    steps["after_delete_records"] = offsets()
    altered = result(
        admin.alter_consumer_group_offsets(
            [ck.ConsumerGroupTopicPartitions(group, [ck.TopicPartition(topic, 0, 5, metadata="confluent")])]
        )
    )
    steps["alter_consumer_group_offsets"] = altered if isinstance(altered, str) else altered.group_id == group
    steps["list_consumer_group_offsets"] = committed()
    groups = result(admin.list_consumer_groups())
    steps["list_consumer_groups"] = [
        (g.is_simple_consumer_group, g.state.name) for g in groups.valid if g.group_id == group
    ]
    described = result(admin.describe_consumer_groups([group]))
    steps["describe_consumer_groups"] = (
        described
        if isinstance(described, str)
        else (described.state.name, described.is_simple_consumer_group, described.members)
    )
    steps["delete_consumer_groups"] = result(admin.delete_consumer_groups([group]))
    groups = result(admin.list_consumer_groups())
    steps["after_delete_consumer_groups"] = [g.group_id for g in groups.valid if g.group_id == group]
    cluster = result(admin.describe_cluster())
    steps["describe_cluster"] = (len(cluster.nodes), cluster.controller.id == cluster.nodes[0].id)
    steps["delete_topics"] = result(admin.delete_topics([topic]))
    steps["after_delete_topics"] = until(
        lambda: topic not in admin.list_topics(timeout=WAIT_S).topics, f"{target} to forget {topic}"
    )
    return steps


def test_every_admin_call_the_guide_claims(kafka, tidelog):
    name = run_name("ck-admin")
    got = jsonable(admin_calls(tidelog, name, name))
    assert got == reference(name, lambda: admin_calls(kafka, name, name))
