"""`tidelog clean [TOPIC]`."""

from __future__ import annotations

import click

from .context import Session, common_options, pass_session
from .output import emit


@click.command("clean")
@click.argument("topic", required=False)
@click.option(
    "--chunk",
    type=click.IntRange(min=1, max=100_000),
    default=2000,
    show_default=True,
    help="Records removed per transaction.",
)
@common_options
@pass_session
def clean(session: Session, topic: str | None, chunk: int) -> None:
    """Apply retention and compaction now, to TOPIC or every topic."""
    reports = session.log().clean(topic, chunk=chunk)
    if session.json:
        for report in reports:
            emit(report.to_dict())
        return
    for r in reports:
        notes = f" ({'; '.join(r.notes)})" if r.notes else ""
        click.echo(
            f"{r.topic}: removed {r.removed} records ({r.bytes_removed} bytes, {r.compacted} by compaction) "
            f"in {r.duration_ms:.0f} ms{notes}"
        )
