"""Kafka's own command-line tools, from the reference broker's jars (kafka_reference.run_tool),
against Apache Kafka and tidelog: what each prints, once the names of the cluster (topic
ids, leaders, consumer ids, hosts) are set aside, is what it prints against Kafka."""

from __future__ import annotations

import datetime
import json
import re
import time
from pathlib import Path

from kafka_clients import jsonable, reference, run_name
from kafka_diff import differs, until
from kafka_reference import run_tool

PARTITIONS = 3


def tool(target, name: str, *args: str, input: str | None = None) -> str:
    """A tool's stdout; a tool that fails fails the test with its stderr."""
    done = run_tool(name, "--bootstrap-server", target.bootstrap, *args, input=input)
    assert done.returncode == 0, f"{name} {' '.join(args)} on {target}: {done.stdout}{done.stderr}"
    return done.stdout


def table(text: str, drop: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """A tool's whitespace-aligned table (kafka-consumer-groups) as rows, sorted, less the
    columns in `drop` (the names of the cluster: hosts, consumer and client ids)."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    header_at = next(i for i, cells in enumerate(lines) if cells and cells[0] in ("GROUP", "TOPIC"))
    header = lines[header_at]
    rows = [
        dict(zip(header, cells, strict=False))
        for cells in lines[header_at + 1 :]
        if len(cells) == len(header)
    ]
    rows = [{k: v for k, v in row.items() if k not in drop} for row in rows]
    return sorted(rows, key=lambda r: (r.get("TOPIC", ""), int(r.get("PARTITION", 0))))


def described_topic(text: str) -> list[str]:
    """kafka-topics --describe, less what names the cluster (topic id, leader, replicas, isr)
    and the replication tidelog does not have (min.insync.replicas, eligible leader replicas)."""
    differs("replicas")
    text = re.sub(r"TopicId: \S+", "TopicId: *", text)
    text = re.sub(r"(Leader|Replicas|Isr|Elr|LastKnownElr): (N/A|[\d,]*)", r"\1: *", text)
    text = re.sub(r"\bmin\.insync\.replicas=1,?", "", text)
    return [line.strip() for line in text.splitlines() if line.strip()]


def described_configs(text: str) -> list[str]:
    """kafka-configs --describe: its lines, stripped and sorted (a map's order)."""
    return sorted(line.strip() for line in text.splitlines() if line.strip())


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def topics_tool(target, topic: str) -> dict:
    steps = {}
    steps["create"] = tool(
        target, "kafka-topics", "--create", "--topic", topic, "--partitions", str(PARTITIONS)
    )
    until(lambda: topic in tool(target, "kafka-topics", "--list").split(), f"{target} to list {topic}")
    steps["describe"] = described_topic(tool(target, "kafka-topics", "--describe", "--topic", topic))
    steps["alter"] = tool(
        target, "kafka-topics", "--alter", "--topic", topic, "--partitions", str(PARTITIONS + 1)
    )

    def grown() -> list[str] | None:
        described = described_topic(tool(target, "kafka-topics", "--describe", "--topic", topic))
        return described if f"PartitionCount: {PARTITIONS + 1}" in described[0] else None

    steps["after_alter"] = until(grown, f"{target} to grow {topic}")
    return steps


def console_and_groups(target, topic: str, group: str) -> dict:
    """The console producer and consumer, then kafka-consumer-groups' describe and resets,
    kafka-get-offsets and kafka-delete-records on what they wrote."""
    steps = {}
    tool(target, "kafka-topics", "--create", "--topic", topic, "--partitions", str(PARTITIONS))
    until(lambda: topic in tool(target, "kafka-topics", "--list").split(), f"{target} to list {topic}")
    keyed = ["--topic", topic, "--reader-property", "parse.key=true", "--reader-property", "key.separator=:"]
    first = "".join(f"k{n}:v{n}\n" for n in range(6))
    steps["produce"] = tool(target, "kafka-console-producer", *keyed, input=first)
    between = now_ms()
    until(lambda: now_ms() > between + 1, "the clock to move on")
    tool(target, "kafka-console-producer", *keyed, input="".join(f"k{n}:v{n}\n" for n in range(6, 12)))
    consumed = tool(
        target,
        "kafka-console-consumer",
        *("--topic", topic, "--group", group, "--from-beginning", "--max-messages", "12"),
        *("--formatter-property", "print.key=true", "--formatter-property", "print.partition=true"),
        *("--formatter-property", "print.offset=true"),
        *("--timeout-ms", "30000"),
    )
    steps["consume"] = sorted(consumed.splitlines())
    members = ("CONSUMER-ID", "HOST", "CLIENT-ID")
    steps["describe_group"] = table(
        tool(target, "kafka-consumer-groups", "--describe", "--group", group), members
    )
    resets = {
        "to_earliest": ["--to-earliest"],
        "to_datetime": [
            "--to-datetime",
            datetime.datetime.fromtimestamp(between / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[
                :-3
            ]
            + "Z",
        ],
        "shift_by": ["--shift-by", "1"],
    }
    for name, how in resets.items():
        reset = tool(
            target,
            "kafka-consumer-groups",
            "--reset-offsets",
            "--group",
            group,
            "--topic",
            topic,
            *how,
            "--execute",
        )
        steps[f"reset_{name}"] = table(reset)
    steps["describe_after_resets"] = table(
        tool(target, "kafka-consumer-groups", "--describe", "--group", group), members
    )
    steps["get_offsets_latest"] = sorted(tool(target, "kafka-get-offsets", "--topic", topic).split())
    steps["get_offsets_earliest"] = sorted(
        tool(target, "kafka-get-offsets", "--topic", topic, "--time", "-2").split()
    )
    steps["get_offsets_by_time"] = sorted(
        tool(target, "kafka-get-offsets", "--topic", topic, "--time", str(between)).split()
    )
    return steps


def deleted_records_and_configs(target, topic: str, tmp_path) -> dict:
    steps = {}
    tool(target, "kafka-topics", "--create", "--topic", topic, "--partitions", "1")
    until(lambda: topic in tool(target, "kafka-topics", "--list").split(), f"{target} to list {topic}")
    tool(target, "kafka-console-producer", "--topic", topic, input="".join(f"v{n}\n" for n in range(5)))
    offsets = Path(tmp_path) / f"{target}-offsets.json"
    offsets.write_text(
        json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 3}], "version": 1})
    )
    steps["delete_records"] = tool(target, "kafka-delete-records", "--offset-json-file", str(offsets))
    steps["earliest_after_delete"] = tool(
        target, "kafka-get-offsets", "--topic", topic, "--time", "-2"
    ).split()
    entity = ["--entity-type", "topics", "--entity-name", topic]
    steps["describe_configs"] = described_configs(tool(target, "kafka-configs", *entity, "--describe"))
    steps["add_config"] = tool(
        target, "kafka-configs", *entity, "--alter", "--add-config", "retention.ms=3600000"
    )
    steps["after_add_config"] = described_configs(tool(target, "kafka-configs", *entity, "--describe"))
    steps["delete_config"] = tool(
        target, "kafka-configs", *entity, "--alter", "--delete-config", "retention.ms"
    )
    steps["after_delete_config"] = described_configs(tool(target, "kafka-configs", *entity, "--describe"))
    return steps


def test_kafka_topics_creates_lists_describes_and_grows(kafka, tidelog):
    topic = run_name("tools-topics")
    assert jsonable(topics_tool(tidelog, topic)) == reference(topic, lambda: topics_tool(kafka, topic))


def test_console_producer_consumer_groups_resets_and_offsets(kafka, tidelog):
    name = run_name("tools-console")
    got = jsonable(console_and_groups(tidelog, name, name))
    assert got == reference(name, lambda: console_and_groups(kafka, name, name))


def test_delete_records_and_configs(kafka, tidelog, tmp_path):
    topic = run_name("tools-configs")
    got = jsonable(deleted_records_and_configs(tidelog, topic, tmp_path))
    assert got == reference(topic, lambda: deleted_records_and_configs(kafka, topic, tmp_path))
