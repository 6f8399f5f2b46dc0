"""The topic admin APIs' edges side by side with Apache Kafka 4: CreateTopics at every
version served (a topic that exists, a bad name, partition counts and replication factors
out of bounds, validate-only, settings tidelog refuses, manual replica assignments, a
request past Kafka's size bound), CreatePartitions (fewer, the same, more, with and
without assignments), DeleteTopics of a missing topic, and DeleteRecords (past the high
watermark, at it, below zero, a missing partition and topic)."""

from __future__ import annotations

from kafka_diff import assert_same, differs, make_topic, seen, settled, versions
from kafka_records import Record, batch, produce_request
from kafka_reference import unique

CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, CREATE_PARTITIONS = 19, 20, 21, 37
FREE_TEXT = frozenset({"error_message", "configs"})  # messages; the settings made with: test_diff_metadata


def node_id(wire) -> int:
    """The broker a manual assignment names: the one answering (each serve is one, `broker-per-serve`)."""
    return wire.call(3, 12, {"topics": []}).brokers[0].node_id


def administered(target, base):
    out = {}
    existing = base + "-exists"
    make_topic(target, existing, 2)
    with target.wire() as wire:
        node = node_id(wire)
        differs("broker-per-serve")  # which id a replica names: each cluster's own broker
        data = batch([Record(b"a"), Record(b"b"), Record(b"c")])
        assert (
            wire.call(0, 9, produce_request(existing, 0, data)).responses[0].partition_responses[0].error_code
            == 0
        )

        def create(name, count=1, replicas=1, configs=(), validate_only=False, assignments=(), version=7):
            topic = {
                "name": name,
                "num_partitions": count,
                "replication_factor": replicas,
                "assignments": [{"partition_index": i, "broker_ids": ids} for i, ids in assignments],
                "configs": [{"name": k, "value": v} for k, v in configs],
            }
            values = {"topics": [topic], "timeout": 30_000, "validate_only": validate_only}
            return seen(wire.call(CREATE_TOPICS, version, values), drop=FREE_TEXT)["topics"][0]

        for v in versions(CREATE_TOPICS):
            made = f"{base}-v{v}"
            out[v, "exists"] = create(existing, version=v)
            out[v, "a bad name"] = create("a bad name!", version=v)
            out[v, "no partitions"] = create(made + "-none", 0, version=v)
            out[v, "the defaults"] = create(made + "-defaults", -1, -1, version=v)
            out[v, "replication factor 0"] = create(made + "-rf0", 1, 0, version=v)
            out[v, "validate only"] = create(made + "-validate", 3, validate_only=True, version=v)
            out[v, "a bad value"] = create(made + "-value", configs=[("retention.ms", "abc")], version=v)
            out[v, "a setting tidelog has not"] = create(
                made + "-setting", configs=[("no.such", "1")], version=v
            )
            out[v, "an assignment"] = create(made + "-assigned", -1, -1, assignments=[(0, [node])], version=v)
            out[v, "two, out of order"] = create(
                made + "-two", -1, -1, assignments=[(1, [node]), (0, [node])], version=v
            )
            out[v, "another broker"] = create(
                made + "-other", -1, -1, assignments=[(0, [node + 1])], version=v
            )
            out[v, "a broker twice"] = create(
                made + "-twice", -1, -1, assignments=[(0, [node, node])], version=v
            )
            out[v, "no replicas"] = create(made + "-empty", -1, -1, assignments=[(0, [])], version=v)
            out[v, "an assignment and a count"] = create(
                made + "-both", 2, -1, assignments=[(0, [node])], version=v
            )
            out[v, "a gap"] = create(made + "-gap", -1, -1, assignments=[(1, [node])], version=v)
            out[v, "a partition twice"] = create(
                made + "-dup", -1, -1, assignments=[(0, [node]), (0, [node])], version=v
            )
            out[v, "10000 partitions"] = create(made + "-large", 10_000, version=v)
            out[v, "10001 partitions"] = create(made + "-larger", 10_001, version=v)
        settled(target)

        def grow(count, assignments=None, name=existing, validate_only=False, version=3):
            topic = {
                "name": name,
                "count": count,
                "assignments": None if assignments is None else [{"broker_ids": ids} for ids in assignments],
            }
            values = {"topics": [topic], "timeout": 30_000, "validate_only": validate_only}
            return seen(wire.call(CREATE_PARTITIONS, version, values), drop=FREE_TEXT)["results"][0]

        for v in versions(CREATE_PARTITIONS):
            out[v, "grow to fewer"] = grow(1, version=v)
            out[v, "grow to as many"] = grow(2, version=v)
            out[v, "grow, validate only"] = grow(3, validate_only=True, version=v)
            out[v, "grow with assignments"] = grow(4, [[node], [node]], validate_only=True, version=v)
            out[v, "grow with too few"] = grow(4, [[node]], validate_only=True, version=v)
            out[v, "grow with another broker"] = grow(3, [[node + 1]], validate_only=True, version=v)
            out[v, "grow hugely"] = grow(100_000, validate_only=True, version=v)
            out[v, "grow a missing topic"] = grow(3, name=base + "-missing", validate_only=True, version=v)
        out["grown"] = grow(3)
        settled(target)

        for v in versions(DELETE_TOPICS):
            values = {"topic_names": [base + "-missing"], "timeout": 30_000}
            out[v, "delete a missing topic"] = seen(wire.call(DELETE_TOPICS, v, values), drop=FREE_TEXT)

        def delete_records(offset, partition=0, topic=existing, version=2):
            values = {
                "topics": [{"name": topic, "partitions": [{"partition_index": partition, "offset": offset}]}],
                "timeout": 30_000,
            }
            return seen(wire.call(DELETE_RECORDS, version, values))

        for v in versions(DELETE_RECORDS):
            out[v, "delete records past the end"] = delete_records(9, version=v)
            out[v, "delete records below zero"] = delete_records(-2, version=v)
            out[v, "delete records of a missing partition"] = delete_records(0, 7, version=v)
            out[v, "delete records of a missing topic"] = delete_records(
                0, topic=base + "-missing", version=v
            )
            out[v, "delete records up to 1"] = delete_records(1, version=v)
        out["delete records up to the high watermark"] = delete_records(-1)
    return out


def test_topic_admin_edges(kafka, tidelog):
    base = unique("admin")
    assert_same(administered(tidelog, base), administered(kafka, base))


def test_any_replication_factor(kafka, tidelog):
    """A one-node Kafka refuses a replication factor above 1; tidelog takes any, as its
    store keeps one durable copy whatever a client asks (tools often ask for 3)."""
    topic = unique("replicated")
    made = {}
    for target in (kafka, tidelog):
        with target.wire() as wire:
            values = {
                "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 3}],
                "timeout": 30_000,
                "validate_only": False,
            }
            made[target.name] = wire.call(CREATE_TOPICS, 7, values).topics[0].error_code.value
    differs("replication-factor")
    assert (made["kafka"], made[tidelog.name]) == (38, 0)  # INVALID_REPLICATION_FACTOR


def test_refused_admin_requests_write_nothing(tidelog):
    from dumps import dump

    existing = unique("refused-admin")
    make_topic(tidelog, existing, 2)
    before = dump(tidelog.store)
    with tidelog.wire() as wire:
        node = node_id(wire)
        refused = [
            {"name": "a bad name!", "num_partitions": 1, "replication_factor": 1},
            {"name": existing + "-x", "num_partitions": 0, "replication_factor": 1},
            {"name": existing + "-x", "num_partitions": 1, "replication_factor": 0},
            {
                "name": existing + "-x",
                "num_partitions": 1,
                "replication_factor": 1,
                "configs": [{"name": "no.such", "value": "1"}],
            },
            {
                "name": existing + "-x",
                "num_partitions": -1,
                "replication_factor": -1,
                "assignments": [{"partition_index": 1, "broker_ids": [node]}],
            },
            {"name": existing + "-x", "num_partitions": 10_001, "replication_factor": 1},
        ]
        for topic in refused:
            answer = wire.call(
                CREATE_TOPICS, 7, {"topics": [topic], "timeout": 30_000, "validate_only": False}
            )
            assert answer.topics[0].error_code.value != 0, topic
        for count, assignments in [
            (1, None),
            (4, [{"broker_ids": [node]}]),
            (3, [{"broker_ids": [node + 1]}]),
        ]:
            topic = {"name": existing, "count": count, "assignments": assignments}
            answer = wire.call(
                CREATE_PARTITIONS, 3, {"topics": [topic], "timeout": 30_000, "validate_only": False}
            )
            assert answer.results[0].error_code.value != 0, topic
        for offset, partition in [(9, 0), (-2, 0), (0, 7)]:
            values = {
                "topics": [
                    {"name": existing, "partitions": [{"partition_index": partition, "offset": offset}]}
                ],
                "timeout": 30_000,
            }
            assert wire.call(DELETE_RECORDS, 2, values).topics[0].partitions[0].error_code.value != 0
    assert dump(tidelog.store) == before
