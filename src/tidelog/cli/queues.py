"""`tidelog queues`: what queue groups hold (list, stats, peek).

A queue group's progress is per record, not an offset, so `tidelog groups`
cannot show it: these views show how many records wait, are leased, are
delayed or went to the dead-letter topic, and which records are leased now.
They never create a group.
"""

from __future__ import annotations

import click

import tidelog
from tidelog.config import check_name
from tidelog.queues import queue_stats as read_stats

from .context import Session, common_options, pass_session
from .output import emit, table, when

STATS = ("available", "in_flight", "delayed", "dead_lettered", "oldest_available_age_ms")


def _existing(log: tidelog.Log, topic: str, group: str | None) -> tidelog.Queue:
    name = check_name("group", group if group is not None else topic)
    if (topic, name) not in log.queue_groups(topic):
        raise tidelog.UnknownGroup(f"queue group {name!r} does not exist on topic {topic!r}")
    return log.queue(topic, name)


@click.group()
def queues() -> None:
    """Inspect queue groups."""


@queues.command("list")
@click.argument("topic", required=False)
@common_options
@pass_session
def list_queues(session: Session, topic: str | None) -> None:
    """Every queue group (of TOPIC, or of all topics) with its counts."""
    log = session.log()
    rows = []
    for t, g in log.queue_groups(topic):
        rows.append((t, g, read_stats(log, t, g)))
    if session.json:
        for t, g, s in rows:
            emit({"topic": t, "group": g, **s._asdict()})
        return
    table(
        ["TOPIC", "GROUP", "AVAILABLE", "IN FLIGHT", "DELAYED", "DEAD", "OLDEST AGE S"],
        ([t, g, *s[:4], f"{s.oldest_available_age_ms / 1000:.1f}"] for t, g, s in rows),
        right=(2, 3, 4, 5, 6),
    )


@queues.command("stats")
@click.argument("topic")
@click.option("--group", "-g", help="The queue group (default: the topic's name).")
@common_options
@pass_session
def queue_stats(session: Session, topic: str, group: str | None) -> None:
    """Available, in flight, delayed and dead-lettered records, and the oldest waiting's age."""
    q = _existing(session.log(), topic, group)
    s = read_stats(q.log, q.topic, q.group)
    if session.json:
        emit({"topic": topic, "group": q.group, **s._asdict()})
        return
    table(["STAT", "VALUE"], zip(STATS, s, strict=True), right=(1,))


@queues.command("peek")
@click.argument("topic")
@click.option("--group", "-g", help="The queue group (default: the topic's name).")
@click.option("--limit", "-n", type=click.IntRange(1, 10_000), default=100, show_default=True)
@common_options
@pass_session
def peek(session: Session, topic: str, group: str | None, limit: int) -> None:
    """The records leased now, with their delivery counts; changes nothing."""
    q = _existing(session.log(), topic, group)
    leased = q.in_flight(limit)
    if session.json:
        for p in leased:
            emit({"topic": topic, "group": q.group, **p._asdict()})
        return
    table(
        ["PARTITION", "OFFSET", "DELIVERIES", "CONSUMER", "DELIVERED"],
        ([p.partition, p.offset, p.delivery_count, p.consumer or "-", when(p.delivered)] for p in leased),
        right=(0, 1, 2),
    )
