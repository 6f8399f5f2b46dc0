"""franz-go and sarama, Go's two Kafka clients, with their defaults, against Apache Kafka
and tidelog: a group of two consumes 10,000 records while it rebalances, then a restart
resumes where it committed; and each one's admin client, call by call
(tests/tools/go, built by kafka_clients.go_program)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_clients import call, go_program, jsonable, make_topic, reference, run_name

PROGRAMS = ("franz", "sarama")
RECORDS = 10_000  # the measure: sarama's group of two re-read 8,856 of these
SECOND_FROM = 2_000  # the second member joins once the first consumed this many
MORE = 100


@pytest.fixture(scope="module", params=PROGRAMS)
def program(request) -> list[str]:
    return [str(go_program(request.param))]


def group_of_two_then_restart(program: list[str], target, topic: str, group: str) -> dict:
    """Produce RECORDS keyed records to a 3-partition topic; a group of two consumes them,
    the second member joining in the middle; MORE records; one member of the group,
    restarted, consumes: what each step saw, as counts and the records' places."""
    make_topic(target, topic, 3)
    produced = call(program, target.bootstrap, "produce", topic=topic, count=RECORDS)
    first = call(
        program,
        target.bootstrap,
        "consume",
        topic=topic,
        group=group,
        count=RECORDS,
        members=2,
        second_from=SECOND_FROM,
    )
    call(program, target.bootstrap, "produce", topic=topic, count=MORE, **{"from": RECORDS})
    restarted = call(program, target.bootstrap, "consume", topic=topic, group=group, count=MORE, timeout_s=30)
    seen = [(p, o, k, v) for _, p, o, k, v in first["records"]]
    by_member = {m for m, *_ in first["records"]}
    return {
        "produced": sorted(map(tuple, produced["records"])),
        "produce errors": produced["errors"],
        "complete": first["complete"],
        "distinct": sorted(set(seen)),
        "duplicates": len(seen) - len(set(seen)),
        "members that consumed": len(by_member),
        "consume errors": first["errors"],
        "restart complete": restarted["complete"],
        "restart re-read": sorted(k for *_, k, _ in restarted["records"] if int(k[1:]) < RECORDS),
        "restart read": len(restarted["records"]),
    }


def test_a_group_of_two_then_a_restart_loses_and_repeats_nothing_kafka_would_not(program, kafka, tidelog):
    name = run_name(f"go-group-{Path(program[0]).name}")
    expected = reference(name, lambda: group_of_two_then_restart(program, kafka, name, name))
    assert expected["complete"] and expected["duplicates"] == 0, expected  # the oracle itself
    # Keyed records land in the partitions the client's partitioner picks, at the same offsets.
    assert jsonable(group_of_two_then_restart(program, tidelog, name, name)) == expected


def admin(program: list[str], target, name: str) -> dict:
    return call(program, target.bootstrap, "admin", topic=name, group=name)


def test_the_admin_client_call_by_call(program, kafka, tidelog):
    """kadm's and sarama's ClusterAdmin's calls, in order (sarama's ListTopics once left its
    connection broken for the calls after it): each answers what Kafka's answers."""
    name = run_name(f"go-admin-{Path(program[0]).name}")
    assert admin(program, tidelog, name) == reference(name, lambda: admin(program, kafka, name))
