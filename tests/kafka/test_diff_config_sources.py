"""DescribeConfigs' sources side by side: a setting at its default is described as Kafka
describes one the topic does not set, an override as an override that is its own synonym
(what kafka-configs --describe, sarama's ListTopics and kadm read to tell them apart)."""

from __future__ import annotations

from kafka_clients import jsonable, make_topic, reference, run_name
from kafka_diff import differs

SETTINGS = ["cleanup.policy", "retention.ms"]


def sources(target, topic: str) -> list:
    """Each setting's (value, source, synonyms) before and after retention.ms is set."""
    make_topic(target, topic, 1)
    out = []
    with target.wire() as wire:
        for change in (None, "3600000"):
            if change is not None:
                altered = wire.call(
                    44,
                    1,
                    {
                        "resources": [
                            {
                                "resource_type": 2,
                                "resource_name": topic,
                                "configs": [{"name": "retention.ms", "config_operation": 0, "value": change}],
                            }
                        ],
                        "validate_only": False,
                    },
                )
                assert altered.responses[0].error_code == 0, altered
            described = wire.call(
                32,
                4,
                {
                    "resources": [
                        {"resource_type": 2, "resource_name": topic, "configuration_keys": SETTINGS}
                    ],
                    "include_synonyms": True,
                    "include_documentation": False,
                },
            )
            out.append(
                sorted(
                    (c.name, c.value, int(c.config_source), synonyms(c)) for c in described.results[0].configs
                )
            )
    return out


def synonyms(config) -> list:
    """A setting's synonyms but the broker-level ones Kafka lists for its defaults
    (log.cleanup.policy): tidelog has no broker-level topic settings."""
    differs("config-details")
    return [(s.name, s.value, int(s.source)) for s in config.synonyms if s.name == config.name]


def test_defaults_and_overrides_are_described_as_kafka_describes_them(kafka, tidelog):
    topic = run_name("diff-config-sources")
    got = jsonable(sources(tidelog, topic))
    assert got == reference(topic, lambda: sources(kafka, topic))
