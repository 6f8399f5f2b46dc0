"""`tidelog clean [TOPIC]` and `tidelog jobs run module:jobs`."""

from __future__ import annotations

import importlib
import logging
import sys

import click

import tidelog

from .context import Session, SummaryGroup, common_options, pass_session
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


@click.group("jobs", cls=SummaryGroup)
def jobs() -> None:
    """The job runner."""


@jobs.command("run")
@click.argument("target", metavar="MODULE:ATTRIBUTE")
@common_options
@pass_session
def run_jobs(session: Session, target: str) -> None:
    """Run the tidelog.Jobs object at MODULE:ATTRIBUTE until SIGINT/SIGTERM.

    Its handlers and settings run on the log the object was made with, or
    on --db (or $TIDELOG_URL) when given: one module, run against a file in
    development and a server or PostgreSQL in production.
    """
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise click.BadParameter("expected MODULE:ATTRIBUTE, e.g. myapp.tasks:jobs", param_hint="TARGET")
    sys.path.insert(0, "")  # the current directory, as `python -m` would
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise click.ClickException(f"cannot import {module_name!r}: {e}") from None
    runner = getattr(module, attribute, None)
    if not isinstance(runner, tidelog.Jobs):
        raise click.ClickException(f"{target} is not a tidelog.Jobs object")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if session.url_given:
        runner = runner.on(session.log(writes=True))
        logging.getLogger("tidelog.jobs").info("running the jobs of %s on %s", target, session.url)
    runner.run()
