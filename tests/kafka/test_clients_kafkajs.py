"""kafkajs with its defaults against Apache Kafka and tidelog: keyed records produced, a
group that reads them and a restart that resumes, and its admin client call by call,
`resetOffsets` (which commits -1 and -2 and once hung, refused), `deleteGroups`,
`alterConfigs` and `fetchOffsets` among them (tests/tools/kafkajs/clients.js, kafkajs
from its package-lock.json, installed by kafka_clients.kafkajs)."""

from __future__ import annotations

import pytest

from kafka_clients import call, jsonable, kafkajs, make_topic, reference, run_name

RECORDS, MORE = 300, 30


@pytest.fixture(scope="module")
def node() -> list[str]:
    return kafkajs()


def group_then_restart(node: list[str], target, topic: str) -> dict:
    group = topic
    make_topic(target, topic, 3)
    produced = call(node, target.bootstrap, "produce", topic=topic, count=RECORDS)["batches"]
    first = call(node, target.bootstrap, "consume", topic=topic, group=group, count=RECORDS)["records"]
    call(node, target.bootstrap, "produce", topic=topic, count=MORE, **{"from": RECORDS})
    again = call(node, target.bootstrap, "consume", topic=topic, group=group, count=MORE)["records"]
    as_tuples = [(p, o, k, v, tuple(map(tuple, h))) for p, o, k, v, h in first]
    return {
        "produced": sorted(map(tuple, produced)),
        "consumed": sorted(as_tuples),
        "duplicates": len(as_tuples) - len(set(as_tuples)),
        "restart": sorted((p, o, k) for p, o, k, *_ in again),
    }


def test_a_group_reads_everything_once_and_a_restart_resumes(node, kafka, tidelog):
    topic = run_name("js-restart")
    got = jsonable(group_then_restart(node, tidelog, topic))
    assert len(got["consumed"]) == RECORDS and len(got["restart"]) == MORE
    assert got == reference(topic, lambda: group_then_restart(node, kafka, topic))


def test_the_admin_client_call_by_call(node, kafka, tidelog):
    name = run_name("js-admin")
    got = call(node, tidelog.bootstrap, "admin", topic=name, group=name)
    assert got == reference(name, lambda: call(node, kafka.bootstrap, "admin", topic=name, group=name))
