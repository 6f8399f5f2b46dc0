"""The reference itself: Apache Kafka 4 starts from Maven's jars, answers on the wire, and
its command-line tools run against it (what the rest of the suite builds on)."""

from __future__ import annotations

from kafka_diff import seen
from kafka_reference import KAFKA_VERSION, run_tool, unique


def test_the_reference_answers_metadata_and_api_versions(kafka):
    with kafka.wire() as wire:
        meta = wire.call(3, 12, {"topics": None, "allow_auto_topic_creation": False})
        versions = wire.call(18, 3, {"client_software_name": "tidelog-tests", "client_software_version": "1"})
    host, port = kafka.bootstrap.rsplit(":", 1)
    assert [(b.host, b.port) for b in meta.brokers] == [(host, int(port))]
    assert meta.controller_id == meta.brokers[0].node_id
    served = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    # Kafka 4's floors (KIP-896): OffsetCommit from v2, Fetch from v4, ListOffsets from v1.
    assert (served[8][0], served[1][0], served[2][0]) == (2, 4, 1)
    assert seen(versions)["error_code"] == 0


def test_kafka_tools_run_against_the_reference(kafka):
    topic = unique("tool-topic")
    made = run_tool(
        "kafka-topics",
        *("--bootstrap-server", kafka.bootstrap, "--create", "--topic", topic, "--partitions", "2"),
    )
    assert made.returncode == 0, made.stderr
    listed = run_tool("kafka-topics", "--bootstrap-server", kafka.bootstrap, "--list")
    assert topic in listed.stdout.split()
    version = run_tool("kafka-topics", "--version")
    assert KAFKA_VERSION in version.stdout
