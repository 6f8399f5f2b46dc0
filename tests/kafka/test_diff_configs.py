"""IncrementalAlterConfigs' APPEND and SUBTRACT side by side with Apache Kafka 4, at every
version served, on the topic settings tidelog has: `cleanup.policy` is the one list among
them; the others refuse both as Kafka does. Each step's error code, then the settings as
DescribeConfigs reads them back."""

from __future__ import annotations

import pytest

from kafka_diff import assert_same, differs, make_topic, settled, versions
from kafka_reference import unique

INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CONFIGS = 44, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
STEPS = [
    ("cleanup.policy", APPEND, "compact"),  # delete,compact
    ("cleanup.policy", APPEND, "compact"),  # already there: no change
    ("cleanup.policy", SUBTRACT, "delete"),  # compact
    ("cleanup.policy", SUBTRACT, "absent"),  # not there: no change
    ("cleanup.policy", APPEND, "delete,compact"),  # delete appended
    ("cleanup.policy", SUBTRACT, "compact"),  # delete
    ("cleanup.policy", APPEND, "bogus"),  # INVALID_CONFIG
    ("cleanup.policy", APPEND, None),  # INVALID_REQUEST
    ("retention.ms", APPEND, "5"),  # not a list: INVALID_CONFIG
    ("retention.ms", SUBTRACT, "5"),
    ("max.message.bytes", APPEND, "5"),
    ("retention.ms", SUBTRACT, None),  # INVALID_REQUEST before the type
    ("cleanup.policy", 4, "compact"),  # no such operation: Kafka fails inside (UNKNOWN_SERVER_ERROR)
    ("cleanup.policy", SET, "compact"),
    ("cleanup.policy", DELETE, None),  # back to delete
]


def described(target, wire, topic):
    settled(target)  # Kafka's broker applies a change a moment after it answers
    answer = wire.call(
        DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": topic,
                    "configuration_keys": ["cleanup.policy", "retention.ms"],
                }
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    differs("cleanup-policy-order")  # the policies as a set: Kafka keeps the order they were named in
    return {
        c.name: set(c.value.split(",")) if c.name == "cleanup.policy" else c.value
        for c in answer.results[0].configs
    }


def altered(target, topic, version, steps=STEPS):
    out = []
    with target.wire() as wire:
        for name, op, value in steps:
            answer = wire.call(
                INCREMENTAL_ALTER_CONFIGS,
                version,
                {
                    "resources": [
                        {
                            "resource_type": 2,
                            "resource_name": topic,
                            "configs": [{"name": name, "config_operation": op, "value": value}],
                        }
                    ],
                    "validate_only": False,
                },
            )
            out.append(
                ((name, op, value), answer.responses[0].error_code.value, described(target, wire, topic))
            )
    return out


@pytest.mark.parametrize("version", versions(INCREMENTAL_ALTER_CONFIGS))
def test_append_and_subtract(kafka, tidelog, version):
    topic = unique("lists")
    for target in (kafka, tidelog):
        make_topic(target, topic)
    assert_same(altered(tidelog, topic, version), altered(kafka, topic, version))


def test_subtracting_every_cleanup_policy(kafka, tidelog):
    """Kafka 4 keeps an empty cleanup.policy (nothing deleted, nothing compacted); a
    tidelog topic deletes, compacts or both, so the SUBTRACT that would leave none is refused."""
    topic = unique("no-policy")
    steps = [("cleanup.policy", SUBTRACT, "delete")]
    found = {}
    for target in (kafka, tidelog):
        make_topic(target, topic)
        found[target.name] = altered(target, topic, 1, steps)[0][1:]
    assert found["kafka"] == (0, {"cleanup.policy": {""}, "retention.ms": "604800000"})
    differs("empty-cleanup-policy")
    assert found[tidelog.name] == (40, {"cleanup.policy": {"delete"}, "retention.ms": "604800000"})


def test_refused_list_changes_write_nothing(tidelog):
    from dumps import dump

    topic = unique("refused-lists")
    make_topic(tidelog, topic)
    before = dump(tidelog.store)
    refused = [step for step in STEPS if step[2] in ("bogus", "5", None) and step[1] in (APPEND, SUBTRACT)]
    refused += [("cleanup.policy", 4, "compact"), ("cleanup.policy", SUBTRACT, "delete")]
    assert all(code != 0 for _, code, _ in altered(tidelog, topic, 1, refused))
    assert dump(tidelog.store) == before
