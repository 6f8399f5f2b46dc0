"""`tidelog dlq`: what a dead-letter topic holds (list), moving it back
(redrive) and removing it (purge).

A queue group writes a record it gave up on to its dead-letter topic
(default `<topic>.dlq`) with the origin topic, partition and offset, the
delivery count and the reason; `redrive` appends it to its origin again,
headers kept, and removes it from the dead-letter topic; `purge` removes it.
Both show what they will do and ask first (SQS's redrive preview):
`--dry-run` only shows, `--yes` does not ask.
"""

from __future__ import annotations

from typing import Any

import click

from tidelog.deadletters import Redriven, dead_letters, purge, redrive

from .context import Session, SummaryGroup, common_options, confirm, pass_session
from .output import bytes_field, emit, table, when

OFFSETS_HELP = "Only the dead letter at this offset (repeat for several; default: all)."
ORIGIN_HELP = "Only dead letters that came from this topic."
DRY_RUN_HELP = "Show what would happen; change nothing."
YES_HELP = "Do not ask for a confirmation."


@click.group(cls=SummaryGroup)
def dlq() -> None:
    """Inspect, redrive and purge dead-letter topics."""


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


def _redriven_json(result: Redriven) -> dict[str, Any]:
    return {
        "dead_letter": result.dead_letter,
        "moved": [m._asdict() for m in result.moved],
        "skipped": result.skipped,
        "dry_run": result.dry_run,
    }


def _left(skipped: list[int]) -> str:
    return f", {len(skipped)} left (no origin stamp, or another origin)" if skipped else ""


@dlq.command("redrive")
@click.argument("dead_letter_topic")
@click.option("--offset", "offsets", type=click.IntRange(min=1), multiple=True, help=OFFSETS_HELP)
@click.option("--origin", help=ORIGIN_HELP)
@click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP)
@click.option("--yes", "-y", is_flag=True, help=YES_HELP)
@common_options
@pass_session
def redrive_dead_letters(
    session: Session,
    dead_letter_topic: str,
    offsets: tuple[int, ...],
    origin: str | None,
    dry_run: bool,
    yes: bool,
) -> None:
    """Move dead letters of DEAD_LETTER_TOPIC back to their origin topics.

    Shows where each goes and asks first; then moves exactly those shown.
    """
    log = session.log()
    plan = redrive(log, dead_letter_topic, list(offsets) or None, origin=origin, dry_run=True)
    if dry_run or not plan.moved:
        if session.json:
            emit(_redriven_json(plan))
            return
        for m in plan.moved:
            click.echo(f"{dead_letter_topic}@{m.dead_letter_offset} -> {m.topic}/{m.partition}")
        verb = "would redrive" if plan.moved else "nothing to redrive:"
        click.echo(f"{verb} {len(plan.moved)} dead letter(s){_left(plan.skipped)}", err=True)
        return
    targets = sorted({m.topic for m in plan.moved})
    confirm(
        f"Redrive {len(plan.moved)} dead letter(s) of {dead_letter_topic} to {', '.join(targets)}?",
        yes,
        "nothing was redriven",
    )
    result = redrive(log, dead_letter_topic, [m.dead_letter_offset for m in plan.moved], origin=origin)
    result = result._replace(skipped=plan.skipped)
    if session.json:
        emit(_redriven_json(result))
        return
    for m in result.moved:
        click.echo(f"{dead_letter_topic}@{m.dead_letter_offset} -> {m.topic}/{m.partition}@{m.offset}")
    click.echo(f"redrove {len(result.moved)} dead letter(s){_left(result.skipped)}", err=True)


@dlq.command("purge")
@click.argument("dead_letter_topic")
@click.option("--offset", "offsets", type=click.IntRange(min=1), multiple=True, help=OFFSETS_HELP)
@click.option("--origin", help=ORIGIN_HELP)
@click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP)
@click.option("--yes", "-y", is_flag=True, help=YES_HELP)
@common_options
@pass_session
def purge_dead_letters(
    session: Session,
    dead_letter_topic: str,
    offsets: tuple[int, ...],
    origin: str | None,
    dry_run: bool,
    yes: bool,
) -> None:
    """Remove dead letters from DEAD_LETTER_TOPIC for good (records without an origin stamp stay).

    Shows how many and asks first; then removes exactly those counted.
    """
    log = session.log()
    plan = purge(log, dead_letter_topic, list(offsets) or None, origin=origin, dry_run=True)
    if not (dry_run or not plan.removed):
        confirm(
            f"Remove {len(plan.removed)} dead letter(s) from {dead_letter_topic} for good?",
            yes,
            "nothing was purged",
        )
        plan = purge(log, dead_letter_topic, plan.removed, origin=origin)._replace(skipped=plan.skipped)
    if session.json:
        emit(plan._asdict())
        return
    verb = "would remove" if plan.dry_run else "removed"
    click.echo(
        f"{verb} {len(plan.removed)} dead letter(s) from {dead_letter_topic}{_left(plan.skipped)}", err=True
    )
