"""`tidelog groups` (list, describe) and `tidelog offsets` (show or set)."""

from __future__ import annotations

import click

import tidelog
from tidelog.config import check_name

from .context import Session, check_partition, common_options, pass_session
from .output import emit, table


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


@click.group()
def groups() -> None:
    """Inspect consumer groups."""


@groups.command("list")
@common_options
@pass_session
def list_groups(session: Session) -> None:
    """Every group with the topics it committed on and its total lag."""
    log = session.log()
    rows = []
    for name in log.groups():
        lags = log.describe_group(name)
        rows.append((name, sorted({r.topic for r in lags}), sum(r.lag for r in lags)))
    if session.json:
        for name, topics, lag in rows:
            emit({"group": name, "topics": topics, "lag": lag})
        return
    table(["GROUP", "TOPICS", "LAG"], ([n, ",".join(t) or "-", lag] for n, t, lag in rows), right=(2,))


@groups.command("describe")
@click.argument("group")
@click.option(
    "--topic", "-t", "topics", multiple=True, help="Also show this topic's partitions it never committed on."
)
@common_options
@pass_session
def describe_group(session: Session, group: str, topics: tuple[str, ...]) -> None:
    """Committed offset, last offset and lag per partition of GROUP."""
    log = session.log()
    _known_group(log, group)
    for name in topics:
        log.topic(name)  # an unknown topic is an error, not an empty row
    rows = log.describe_group(group, topics)
    if not rows:
        # A queue group has no offsets to show; say where its state is.
        for topic, _ in (q for q in log.queue_groups() if q[1] == group):
            click.echo(f"{group} is a queue group: tidelog queues stats {topic} --group {group}", err=True)
    if session.json:
        for row in rows:
            emit(lag_json(row))
        return
    _lag_table(rows)


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
