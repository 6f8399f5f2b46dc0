"""`tidelog dlq`: what a dead-letter topic holds (list) and moving it back (redrive).

A queue group writes a record it gave up on to its dead-letter topic
(default `<topic>.dlq`) with the origin topic, partition and offset, the
delivery count and the reason; `redrive` appends it to its origin again,
headers kept, and removes it from the dead-letter topic.
"""

from __future__ import annotations

import click

from tidelog.deadletters import dead_letters, redrive

from .context import Session, common_options, pass_session
from .output import bytes_field, emit, table, when


@click.group()
def dlq() -> None:
    """Inspect and redrive dead-letter topics."""


@dlq.command("list")
@click.argument("dead_letter_topic")
@click.option("--after", type=click.IntRange(min=0), default=0, show_default=True, help="Offsets after this.")
@click.option("--limit", "-n", type=click.IntRange(1, 10_000), default=100, show_default=True)
@common_options
@pass_session
def list_dead_letters(session: Session, dead_letter_topic: str, after: int, limit: int) -> None:
    """The dead letters of DEAD_LETTER_TOPIC with where each came from and why."""
    held = dead_letters(session.log(), dead_letter_topic, after, limit)
    if session.json:
        for d in held:
            emit(
                {
                    "offset": d.offset,
                    "timestamp": d.message.timestamp,
                    "key": bytes_field(d.message.key),
                    "origin_topic": d.origin_topic,
                    "origin_partition": d.origin_partition,
                    "origin_offset": d.origin_offset,
                    "delivery_count": d.delivery_count,
                    "reason": d.reason,
                }
            )
        return
    table(
        ["OFFSET", "DEAD SINCE", "ORIGIN", "DELIVERIES", "REASON"],
        (
            [
                d.offset,
                when(d.message.timestamp),
                "-" if d.origin_topic is None else f"{d.origin_topic}/{d.origin_partition}@{d.origin_offset}",
                "-" if d.delivery_count is None else d.delivery_count,
                d.reason or "-",
            ]
            for d in held
        ),
        right=(0, 3),
    )


@dlq.command("redrive")
@click.argument("dead_letter_topic")
@click.option(
    "--offset",
    "offsets",
    type=click.IntRange(min=1),
    multiple=True,
    help="Only the dead letter at this offset (repeat for several; default: all).",
)
@click.option("--origin", help="Only dead letters that came from this topic.")
@common_options
@pass_session
def redrive_dead_letters(
    session: Session, dead_letter_topic: str, offsets: tuple[int, ...], origin: str | None
) -> None:
    """Move dead letters of DEAD_LETTER_TOPIC back to their origin topics."""
    result = redrive(session.log(), dead_letter_topic, list(offsets) or None, origin=origin)
    if session.json:
        emit(
            {
                "dead_letter": result.dead_letter,
                "moved": [m._asdict() for m in result.moved],
                "skipped": result.skipped,
            }
        )
        return
    for m in result.moved:
        click.echo(f"{dead_letter_topic}@{m.dead_letter_offset} -> {m.topic}/{m.partition}@{m.offset}")
    note = f", {len(result.skipped)} left (no origin stamp, or another origin)" if result.skipped else ""
    click.echo(f"redrove {len(result.moved)} dead letter(s){note}", err=True)
