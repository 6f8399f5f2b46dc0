"""Apache Kafka's Java client (kafka-clients, the reference broker's version) with its
defaults against Apache Kafka and tidelog: keyed records produced, a group that reads them
and a restart that resumes, and every Admin call the Kafka guide claims, commit metadata
included (tests/tools/java-clients, built by kafka_clients.java_clients)."""

from __future__ import annotations

import pytest

from kafka_clients import call, java_clients, jsonable, make_topic, reference, run_name

RECORDS, MORE = 300, 30


@pytest.fixture(scope="module")
def java() -> list[str]:
    return java_clients()


def group_then_restart(java: list[str], target, topic: str) -> dict:
    group = topic
    make_topic(target, topic, 3)
    produced = call(java, target.bootstrap, "produce", topic=topic, count=RECORDS)["records"]
    first = call(java, target.bootstrap, "consume", topic=topic, group=group, count=RECORDS)["records"]
    call(java, target.bootstrap, "produce", topic=topic, count=MORE, **{"from": RECORDS})
    again = call(java, target.bootstrap, "consume", topic=topic, group=group, count=MORE)["records"]
    as_tuples = [(p, o, k, v, tuple(map(tuple, h))) for p, o, k, v, h in first]
    return {
        "produced": sorted(map(tuple, produced)),
        "consumed": sorted(as_tuples),
        "duplicates": len(as_tuples) - len(set(as_tuples)),
        "restart": sorted((p, o, k) for p, o, k, *_ in again),
    }


def test_a_group_reads_everything_once_and_a_restart_resumes(java, kafka, tidelog):
    topic = run_name("java-restart")
    got = jsonable(group_then_restart(java, tidelog, topic))
    assert len(got["consumed"]) == RECORDS and len(got["restart"]) == MORE
    assert got == reference(topic, lambda: group_then_restart(java, kafka, topic))


def test_every_admin_call_the_guide_claims(java, kafka, tidelog):
    name = run_name("java-admin")
    got = call(java, tidelog.bootstrap, "admin", topic=name, group=name)
    assert got["list_consumer_group_offsets"] == [[0, 5, "java"]]  # commit metadata kept
    assert got == reference(name, lambda: call(java, kafka.bootstrap, "admin", topic=name, group=name))
