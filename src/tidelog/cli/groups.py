"""`tidelog groups` (list, describe) and `tidelog offsets` (show or set).

A group is one of three kinds, each shown in its own terms: a stream group
(tidelog's members: who owns which partition, committed offset and lag, as
`kafka-consumer-groups --describe`), a Kafka group (Kafka clients on the
Kafka listener, with their client id and host), or a queue group (progress
per record: available, in flight, delayed, the oldest waiting's age).
"""

from __future__ import annotations

from typing import Any

import click

import tidelog
from tidelog.classic_groups import assigned_partitions
from tidelog.config import check_name
from tidelog.queues import queue_stats
from tidelog.store.base import ClassicGroupStore, GroupMember

from .context import Session, SummaryGroup, check_partition, common_options, pass_session
from .output import emit, table, when

STREAM, KAFKA, QUEUE = "stream", "kafka", "queue"


def lag_json(row: tidelog.GroupLag) -> dict[str, object]:
    return row._asdict()


def _known_group(log: tidelog.Log, group: str) -> None:
    check_name("group", group)
    if group not in log.groups():
        raise tidelog.UnknownGroup(f"group {group!r} does not exist")


def _lag_table(rows: list[tidelog.GroupLag]) -> None:
    table(
        ["TOPIC", "PARTITION", "COMMITTED", "LAST", "LAG"],
        ([r.topic, r.partition, r.committed, r.last_offset, r.lag] for r in rows),
        right=(1, 2, 3, 4),
    )


def client_of(member_id: str) -> str:
    """The host and process a member id names (`host-pid-random`, as
    `tidelog.groups` makes them); "-" for an id chosen by its user."""
    host, _, rest = member_id.rpartition("-")
    host, _, pid = host.rpartition("-")
    return f"{host}:{pid}" if host and pid.isdigit() and len(rest) == 8 else "-"


class Member:
    """A member as `describe` shows it, of a stream group or a Kafka group."""

    def __init__(
        self, member: str, client: str, host: str, partitions: list[tuple[str, int]], heartbeat: int
    ):
        self.member = member
        self.client = client
        self.host = host
        self.partitions = partitions
        self.heartbeat = heartbeat

    def to_json(self) -> dict[str, Any]:
        return {
            "member": self.member,
            "client": self.client,
            "host": self.host,
            "partitions": [list(tp) for tp in self.partitions],
            "heartbeat": self.heartbeat,
        }


def _kafka_groups(log: tidelog.Log) -> dict[str, Any]:
    store = log.store
    return dict(store.classic_list()) if isinstance(store, ClassicGroupStore) else {}


def _members(log: tidelog.Log, group: str, kafka: bool) -> tuple[list[Member], int | None]:
    """The group's live members and its generation (None without members)."""
    store = log.store
    if kafka and isinstance(store, ClassicGroupStore):
        found = store.classic_describe(group)
        if found is None:
            return [], None
        state, members = found
        return (
            [
                Member(m.member, m.client_id, m.host, assigned_partitions(m.assignment), m.heartbeat)
                for m in members
            ],
            state.generation if members else None,
        )
    stream: list[GroupMember] = log.group(group).members()
    return (
        [Member(m.member, client_of(m.member), "-", sorted(m.partitions), m.heartbeat) for m in stream],
        stream[0].generation if stream else None,
    )


@click.group(cls=SummaryGroup)
def groups() -> None:
    """Inspect consumer groups."""


@groups.command("list")
@common_options
@pass_session
def list_groups(session: Session) -> None:
    """Every group: its kind, topics, and where it stands.

    A stream or Kafka group shows its total lag; a queue group its records
    available, in flight and the oldest waiting's age (summed over its topics).
    A stream group and a queue group of the same name are two rows.
    """
    log = session.log()
    queues: dict[str, list[str]] = {}
    for topic, group in log.queue_groups():
        queues.setdefault(group, []).append(topic)
    kafka = _kafka_groups(log)
    rows: list[dict[str, Any]] = []
    for name in log.groups():
        if name in queues:
            stats = [queue_stats(log, t, name) for t in queues[name]]
            rows.append(
                {
                    "group": name,
                    "kind": QUEUE,
                    "topics": sorted(queues[name]),
                    "available": sum(s.available for s in stats),
                    "in_flight": sum(s.in_flight for s in stats),
                    "oldest_available_age_ms": max((s.oldest_available_age_ms for s in stats), default=0),
                }
            )
        if name not in queues or _reads_by_offset(log, name, name in kafka):
            lags = log.describe_group(name)
            rows.append(
                {
                    "group": name,
                    "kind": KAFKA if name in kafka else STREAM,
                    "topics": sorted({r.topic for r in lags}),
                    "lag": sum(r.lag for r in lags),
                }
            )
    if session.json:
        for row in rows:
            emit(row)
        return

    table(
        ["GROUP", "KIND", "TOPICS", "LAG", "AVAILABLE", "IN FLIGHT", "OLDEST AGE S"],
        (
            [
                r["group"],
                r["kind"],
                ",".join(r["topics"]) or "-",
                r.get("lag", "-"),
                r.get("available", "-"),
                r.get("in_flight", "-"),
                f"{r['oldest_available_age_ms'] / 1000:.1f}" if r["kind"] == QUEUE else "-",
            ]
            for r in rows
        ),
        right=(3, 4, 5, 6),
    )


def _reads_by_offset(log: tidelog.Log, group: str, kafka: bool) -> bool:
    """Whether a queue group's name is a stream (or Kafka) group's too: one
    name is one row of the group catalog, whichever kind came first, so the
    stream side is told by what it left: committed offsets or live members."""
    return kafka or bool(log.group_offsets(group)) or bool(_members(log, group, kafka)[0])


def _describe_queue(session: Session, log: tidelog.Log, group: str, topics: list[str]) -> None:
    rows = [(t, queue_stats(log, t, group)) for t in topics]
    if session.json:
        for t, s in rows:
            emit({"group": group, "kind": QUEUE, "topic": t, **s._asdict()})
        return
    click.echo(f"{group}: a queue group (progress per record, not an offset)")
    table(
        ["TOPIC", "AVAILABLE", "IN FLIGHT", "DELAYED", "DEAD", "OLDEST AGE S"],
        ([t, *s[:4], f"{s.oldest_available_age_ms / 1000:.1f}"] for t, s in rows),
        right=(1, 2, 3, 4, 5),
    )


@groups.command("describe")
@click.argument("group")
@click.option(
    "--topic", "-t", "topics", multiple=True, help="Also show this topic's partitions it never committed on."
)
@click.option(
    "--members", is_flag=True, help="One line a member: its client, its partitions, its last heartbeat."
)
@common_options
@pass_session
def describe_group(session: Session, group: str, topics: tuple[str, ...], members: bool) -> None:
    """Who owns which partition of GROUP, its committed offset and lag.

    One line a partition (as `kafka-consumer-groups --describe`): committed
    offset, last offset, lag, and the member that owns it with its client
    (host:pid for a tidelog member, the client id and host for a Kafka
    client); "-" where no live member owns it. A queue group shows its
    counts per topic instead; a stream group and a queue group of the same
    name show both, the queue group first.
    """
    log = session.log()
    _known_group(log, group)
    for name in topics:
        log.topic(name)  # an unknown topic is an error, not an empty row
    queue_topics = sorted(t for t, g in log.queue_groups() if g == group)
    kafka = group in _kafka_groups(log)
    if queue_topics:
        _describe_queue(session, log, group, queue_topics)
        if not _reads_by_offset(log, group, kafka):
            return
        if not session.json:
            click.echo()
    _describe_stream(session, log, group, topics, members, kafka)


def _describe_stream(
    session: Session, log: tidelog.Log, group: str, topics: tuple[str, ...], members: bool, kafka: bool
) -> None:
    live, generation = _members(log, group, kafka)
    if members:
        if session.json:
            for m in live:
                emit(
                    {
                        "group": group,
                        "kind": KAFKA if kafka else STREAM,
                        "generation": generation,
                        **m.to_json(),
                    }
                )
            return
        table(
            ["MEMBER", "CLIENT", "HOST", "PARTITIONS", "HEARTBEAT"],
            (
                [
                    m.member,
                    m.client,
                    m.host,
                    ",".join(f"{t}/{p}" for t, p in m.partitions) or "-",
                    when(m.heartbeat),
                ]
                for m in live
            ),
        )
        return
    owner = {tp: m for m in live for tp in m.partitions}
    subscribed = {t for m in live for t, _ in m.partitions}
    rows = log.describe_group(group, sorted(set(topics) | subscribed))
    if session.json:
        for row in rows:
            held = owner.get((row.topic, row.partition))
            emit(
                {
                    **lag_json(row),
                    "kind": KAFKA if kafka else STREAM,
                    "generation": generation,
                    "member": held.member if held else None,
                    "client": held.client if held else None,
                    "host": held.host if held else None,
                }
            )
        return
    kind = "a Kafka group" if kafka else "a stream group"
    state = f"generation {generation}, {len(live)} member(s)" if live else "no live member"
    # On stdout with its table, as `topics describe` prints its title: piped, the two stay together.
    click.echo(f"{group}: {kind}, {state}")

    def who(row: tidelog.GroupLag) -> list[str]:
        m = owner.get((row.topic, row.partition))
        if m is None:
            return ["-", "-"]
        return [m.member, m.client if m.host in ("", "-") else f"{m.client}@{m.host}"]

    table(
        ["TOPIC", "PARTITION", "COMMITTED", "LAST", "LAG", "MEMBER", "CLIENT"],
        ([r.topic, r.partition, r.committed, r.last_offset, r.lag, *who(r)] for r in rows),
        right=(1, 2, 3, 4),
    )


@click.command()
@click.argument("group")
@click.argument("topic")
@click.option(
    "--partition", "-p", type=click.IntRange(min=0), help="One partition (default: all; required with --set)."
)
@click.option(
    "--set",
    "offset",
    type=click.IntRange(min=0),
    help="Set the committed offset, backwards too: the group's next record is N + 1 (0 = from the start).",
)
@common_options
@pass_session
def offsets(session: Session, group: str, topic: str, partition: int | None, offset: int | None) -> None:
    """Show GROUP's committed offsets on TOPIC, or set one with --set N."""
    if offset is not None and partition is None:
        raise click.UsageError("--set needs --partition")
    log = session.log()
    check_partition(log.topic(topic), partition)
    if offset is not None and partition is not None:
        # Checked here too so that a refused --set does not register a new group.
        last = log.describe(topic).partitions[partition].last_offset
        if offset > last:
            raise tidelog.OffsetOutOfRange(
                f"offset {offset} is past the end of {topic!r}/{partition} (last offset {last})", last=last
            )
        log.consumer(group).seek(topic, partition, offset)  # creates the group if it is new
    else:
        _known_group(log, group)
    rows = [
        r for r in log.describe_group(group, [topic]) if r.topic == topic and partition in (None, r.partition)
    ]
    if session.json:
        for row in rows:
            emit(lag_json(row))
        return
    _lag_table(rows)
