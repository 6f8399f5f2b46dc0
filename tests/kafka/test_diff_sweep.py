"""Every API and version tidelog's ApiVersions advertises, one small valid request each,
side by side with Apache Kafka 4: the error codes, the shape of the answer (which fields
are there, null or not, how many entries each list has) and whether the connection stays
open; then the edge requests clients send: null arrays where the schema allows them,
bytes after a request's body, and a topic deleted while a group and a consumer still
name it.

The other scenarios of tests/kafka compare values; this one makes sure no API and
version is left out of the comparison, so its answers are compared by shape.
"""

from __future__ import annotations

import struct

from dumps import dump
from kafka_diff import assert_same, differs, make_topic, seen, until, versions, without_internal
from kafka_records import Record, batch, produce_request
from kafka_reference import unique
from kafka_wire import encode_request

API_VERSIONS = 18
MEMBER_ID_REQUIRED = 79
HELLO = {"client_software_name": "tidelog-tests", "client_software_version": "1"}


def shape(value, key=""):
    """`value` (from `seen`) as its shape: error codes as they are, lists entry by entry,
    any other value as its type (or None)."""
    if isinstance(value, dict):
        return {k: shape(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    if key.endswith("error_code") or value is None or value == "*":
        return value
    return type(value).__name__


def advertised(target) -> dict[int, tuple[int, int]]:
    with target.wire() as wire:
        answer = wire.call(API_VERSIONS, 3, HELLO)
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


class Names:
    """The topics and groups one sweep uses, the same on both clusters."""

    def __init__(self) -> None:
        base = unique("sweep")
        self.topic = base  # 2 partitions, 3 records in partition 0
        self.altered = base + "-altered"  # its settings are changed
        self.grown = base + "-grown"  # CreatePartitions grows it, version by version
        self.group = base + "-group"  # a commit, no members

    def made(self, version):
        return f"{self.topic}-made-v{version}"

    def deleted(self, version):
        return f"{self.topic}-deleted-v{version}"

    def gone_group(self, api, version):
        return f"{self.group}-{api}-v{version}"


def commit_values(group, topic, offset=0):
    return {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "retention_time": -1,
        "topics": [
            {
                "name": topic,
                "partitions": [{"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}],
            }
        ],
    }


def request(api, version, n: Names):
    """The values of a small valid request of `api` at `version` (a superset of its fields:
    the ones a version lacks are left out)."""
    t, g = n.topic, n.group
    topic_resource = {"resource_type": 2, "resource_name": t, "configuration_keys": ["retention.ms"]}
    return {
        0: lambda: produce_request(t, 0, batch([Record(b"swept")])),
        1: lambda: {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": t,
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": -1,
                            "fetch_offset": 0,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
        2: lambda: {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": t,
                    "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}],
                }
            ],
        },
        3: lambda: {"topics": [{"name": t, "topic_id": None}], "allow_auto_topic_creation": False},
        8: lambda: commit_values(g, t),
        9: lambda: {
            "group_id": g,
            "topics": [{"name": t, "partition_indexes": [0, 1]}],
            "require_stable": False,
        },
        10: lambda: {"key": g, "key_type": 0, "coordinator_keys": [g]},
        11: lambda: {
            "group_id": n.gone_group(11, version),
            "session_timeout": 10_000,
            "rebalance_timeout": 10_000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
            "reason": None,
        },
        12: lambda: {"group_id": g, "generation_id": 1, "member_id": "test-x", "group_instance_id": None},
        13: lambda: {
            "group_id": g,
            "member_id": "test-x",
            "members": [{"member_id": "test-x", "group_instance_id": None, "reason": None}],
        },
        14: lambda: {
            "group_id": g,
            "generation_id": 1,
            "member_id": "test-x",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [],
        },
        15: lambda: {"groups": [g], "include_authorized_operations": False},
        16: lambda: {"states_filter": []},
        17: lambda: {"mechanism": "PLAIN"},
        18: lambda: HELLO,
        19: lambda: {
            "topics": [{"name": n.made(version), "num_partitions": 1, "replication_factor": 1}],
            "timeout": 30_000,
            "validate_only": False,
        },
        20: lambda: {"topic_names": [n.deleted(version)], "timeout": 30_000},
        21: lambda: {
            "topics": [{"name": t, "partitions": [{"partition_index": 1, "offset": 0}]}],
            "timeout": 30_000,
        },
        22: lambda: {
            "transactional_id": None,
            "transaction_timeout": 60_000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
        32: lambda: {
            "resources": [topic_resource],
            "include_synonyms": False,
            "include_documentation": False,
        },
        33: lambda: {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": n.altered,
                    "configs": [{"name": "retention.ms", "value": "60000"}],
                }
            ],
            "validate_only": False,
        },
        36: lambda: {"auth_bytes": b"\0user\0password"},
        37: lambda: {
            "topics": [{"name": n.grown, "count": version + 2, "assignments": None}],
            "timeout": 30_000,
            "validate_only": False,
        },
        42: lambda: {"groups_names": [n.gone_group(42, version)]},
        44: lambda: {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": n.altered,
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": "120000"}],
                }
            ],
            "validate_only": False,
        },
        47: lambda: {
            "group_id": n.gone_group(47, version),
            "topics": [{"name": t, "partitions": [{"partition_index": 0}]}],
        },
        60: lambda: {"include_cluster_authorized_operations": False, "endpoint_type": 1},
    }[api]()


def focus(api, answer, n: Names):
    """An answer but what depends on the rest of the cluster: the other groups a shared
    broker holds (ListGroups), the APIs and features only Kafka has (ApiVersions), its
    other brokers and internal topics (Metadata, DescribeCluster)."""
    if api == 16:
        answer["groups"] = [g for g in answer["groups"] if g["group_id"].startswith(n.group)]
    elif api == API_VERSIONS:
        differs("newest-versions")
        answer.pop("api_keys")
        differs("features")
        for name in ("supported_features", "finalized_features"):
            answer.pop(name, None)
    elif api == 19:
        differs("config-details")  # the settings a topic is made with: tidelog's six, Kafka's many
        for topic in answer["topics"]:
            topic["configs"] = (topic.get("configs") or [])[:1]
    elif api in (3, 60):
        differs("broker-per-serve")
        answer["brokers"] = answer["brokers"][:1]
        if api == 3:
            answer["topics"] = without_internal(answer["topics"])
    return answer


def prepare(target, n: Names, served):
    """What the sweep's requests find on a cluster: topics with records, a group with a
    commit, groups for DeleteGroups and OffsetDelete, topics for DeleteTopics."""
    make_topic(target, n.topic, 2)
    make_topic(target, n.altered)
    make_topic(target, n.grown)
    with target.wire() as wire:
        data = batch([Record(b"a"), Record(b"b"), Record(b"c")])
        assert (
            wire.call(0, 9, produce_request(n.topic, 0, data)).responses[0].partition_responses[0].error_code
            == 0
        )
        assert wire.call(8, 8, commit_values(n.group, n.topic, 1)).topics[0].partitions[0].error_code == 0
        for api in (42, 47):
            for version in range(served[api][0], served[api][1] + 1):
                values = commit_values(n.gone_group(api, version), n.topic)
                assert wire.call(8, 8, values).topics[0].partitions[0].error_code == 0
    for version in range(served[20][0], served[20][1] + 1):
        make_topic(target, n.deleted(version))


def error_codes(value) -> list[int]:
    """Every error code in an answer (from `seen`)."""
    if isinstance(value, dict):
        return [c for k, v in value.items() for c in ([v] if k.endswith("error_code") else error_codes(v))]
    if isinstance(value, list):
        return [c for v in value for c in error_codes(v)]
    return []


def sweep(target, n: Names, served):
    """Each request's answer, by shape, and whether the connection goes on. On tidelog,
    a request refused in every part (no error code 0) is checked to write nothing."""
    out = {}
    for api, (lowest, highest) in sorted(served.items()):
        for version in range(lowest, highest + 1):
            before = None if target.is_kafka else dump(target.store)
            with target.wire() as wire:
                values = request(api, version, n)
                if api == 0 and version < versions(0).start:
                    # Produce v0-v2 are advertised, as Kafka 4 advertises them, and close the
                    # connection (kio has no schema for them: acks, timeout, no topics).
                    frame = struct.pack(">hhih", 0, version, 7, 4) + b"test" + struct.pack(">hii", 1, 1000, 0)
                    wire.send(struct.pack(">i", len(frame)) + frame)
                    out[api, version] = ("closed", wire.closed())
                    continue
                if api == 22:  # Kafka makes its producer-id state on the first ask (a client retries)
                    answer = until(
                        lambda w=wire, v=version, x=values: (
                            (a := w.call(22, v, x)).error_code.value != 14 and a
                        ),
                        "a producer id",
                    )
                else:
                    answer = wire.call(api, version, values)
                out[api, version] = (shape(focus(api, seen(answer), n)), answered(wire))
            # MEMBER_ID_REQUIRED is a step of joining, not a refusal: Kafka's group is made by it too.
            codes = [c for c in error_codes(seen(answer)) if c != MEMBER_ID_REQUIRED]
            if before is not None and codes and 0 not in codes:
                assert dump(target.store) == before, f"API {api} v{version}, refused, wrote"
    return out


def answered(wire) -> str:
    """Whether the connection is still served: an ApiVersions after the request is answered."""
    try:
        return "open" if wire.call(API_VERSIONS, 3, HELLO).error_code.value == 0 else "answered with an error"
    except ConnectionError:
        return "closed"


def test_every_advertised_api_and_version(kafka, tidelog):
    served = advertised(tidelog)
    theirs = advertised(kafka)
    assert all(api in theirs for api in served)
    n = Names()
    for target in (kafka, tidelog):
        prepare(target, n, served)
    ours, kafkas = sweep(tidelog, n, served), sweep(kafka, n, served)
    assert set(ours) == {(api, v) for api, (lo, hi) in served.items() for v in range(lo, hi + 1)}
    assert_same(ours, kafkas)


# Edge requests ------------------------------------------------------------------------


def null_arrays(target, topic, group):
    """Null where the schema allows it: Metadata's topics (every topic), OffsetFetch's
    topics (every commit of the group), DescribeConfigs' keys (every setting)."""
    out = {}
    with target.wire() as wire:
        for version in versions(3):
            if version == 0:
                continue  # v0 asks for every topic with an empty list (the metadata scenario)
            answer = seen(wire.call(3, version, {"topics": None, "allow_auto_topic_creation": False}))
            names = [t["name"] for t in answer["topics"]]
            out["metadata", version] = (
                topic in names,
                [t["error_code"] for t in answer["topics"] if t["name"] == topic],
            )
        for version in versions(9):
            if version < 2:
                continue  # null from v2
            out["offset fetch", version] = seen(wire.call(9, version, {"group_id": group, "topics": None}))
        for version in versions(32):
            resource = {"resource_type": 2, "resource_name": topic, "configuration_keys": None}
            answer = seen(wire.call(32, version, {"resources": [resource], "include_synonyms": False}))
            differs("config-details")  # which settings are listed: only that retention.ms is, and no error
            configs = answer["results"][0]["configs"]
            out["describe configs", version] = (
                answer["results"][0]["error_code"],
                any(c["name"] == "retention.ms" for c in configs),
            )
    return out


def test_null_arrays(kafka, tidelog):
    topic, group = unique("nulls"), unique("nulls-group")
    for target in (kafka, tidelog):
        make_topic(target, topic)
        with target.wire() as wire:
            wire.call(0, 9, produce_request(topic, 0, batch([Record(b"n"), Record(b"m")])))
            assert wire.call(8, 8, commit_values(group, topic, 2)).topics[0].partitions[0].error_code == 0
    assert null_arrays(tidelog, topic, group) == null_arrays(kafka, topic, group)


READ_ONLY = (1, 2, 3, 9, 10, 15, 16, 18, 32, 60)


def trailing_bytes(target, n: Names, served):
    """The read-only requests, at every version, with three bytes after the body (as
    librdkafka's all-topics Metadata carries): answered as without them."""
    out = {}
    for api in READ_ONLY:
        lowest, highest = served[api]
        for version in range(lowest, highest + 1):
            with target.wire() as wire:
                frame = encode_request(api, version, request(api, version, n), 7) + b"\0\0\0"
                wire.send(struct.pack(">i", len(frame) - 4) + frame[4:])
                head = wire.recv_frame()
                out[api, version] = (struct.unpack_from(">i", head)[0], answered(wire))
    return out


def test_bytes_after_the_body(kafka, tidelog):
    served = advertised(tidelog)
    n = Names()
    for target in (kafka, tidelog):
        prepare(target, n, served)
    assert trailing_bytes(tidelog, n, served) == trailing_bytes(kafka, n, served)


def after_deletion(target, topic, group):
    """A topic with records, a group's commit on it; the topic deleted; then what
    Metadata, Fetch, ListOffsets, OffsetCommit, OffsetFetch and DescribeConfigs say of it."""
    n = Names()
    n.topic, n.group = topic, group
    with target.wire() as wire:
        wire.call(0, 9, produce_request(topic, 0, batch([Record(b"x"), Record(b"y")])))
        assert wire.call(8, 8, commit_values(group, topic, 1)).topics[0].partitions[0].error_code == 0
        assert wire.call(20, 5, {"topic_names": [topic], "timeout": 30_000}).responses[0].error_code == 0
    out = {}
    for which in (0, -1):  # Kafka's broker learns of a deletion a moment after it answers
        with target.wire(which) as wire:
            until(
                lambda wire=wire: wire.call(3, 12, request(3, 12, n)).topics[0].error_code == 3,
                f"{target} to forget {topic}",
            )
    free_text = frozenset({"error_message"})  # Kafka leaves it empty for a missing topic; tidelog says which
    with target.wire(-1) as wire:
        for api in (3, 1, 2, 32):
            newest = versions(api).stop - 1
            out[api] = seen(wire.call(api, newest, request(api, newest, n)), drop=free_text)
        out["commit"] = seen(wire.call(8, 8, commit_values(group, topic, 1)))
        # Kafka's coordinator forgets the commits on a deleted topic a moment after the
        # deletion reaches it; tidelog's go with the topic.
        out["offsets"] = until(
            lambda: (
                (a := seen(wire.call(9, 7, request(9, 7, n))))["topics"][0]["partitions"][0][
                    "committed_offset"
                ]
                == -1
                and a
            ),
            f"{target} to forget the commits on {topic}",
        )
        out["produce"] = seen(wire.call(0, 9, produce_request(topic, 0, batch([Record(b"z")]))))
    return out


def test_a_deleted_topic(kafka, tidelog):
    topic, group = unique("deleted"), unique("deleted-group")
    for target in (kafka, tidelog):
        make_topic(target, topic, 2)
    ours, theirs = after_deletion(tidelog, topic, group), after_deletion(kafka, topic, group)
    differs("produce-creates")  # a write makes it again on tidelog; Kafka answers UNKNOWN_TOPIC_OR_PARTITION
    assert theirs.pop("produce")["responses"][0]["partition_responses"][0]["error_code"] == 3
    assert ours.pop("produce")["responses"][0]["partition_responses"][0]["error_code"] == 0
    assert_same(ours, theirs)
