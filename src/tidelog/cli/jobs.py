"""`tidelog jobs`: run a job runner, ask what became of a job, cancel one."""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

import click

import tidelog
from tidelog import results, schedules
from tidelog.logs import LOG_LEVELS

from .context import Session, SummaryGroup, common_options, pass_session
from .output import dumps, emit, table, when


@click.group("jobs", cls=SummaryGroup)
def jobs() -> None:
    """The job runner: run it, ask what became of a job, cancel one."""


def load_runner(target: str) -> tidelog.Jobs:
    """The tidelog.Jobs object at MODULE:ATTRIBUTE."""
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
    return runner


@jobs.command("run")
@click.argument("target", metavar="MODULE:ATTRIBUTE")
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS),
    default="info",
    show_default=True,
    help="Logs on stderr from this level: info says what an operator wants to know (the "
    "runner started, a failure, a retry); debug adds routine work (each tick enqueued, "
    "each request to an http:// store).",
)
@common_options
@pass_session
def run_jobs(session: Session, target: str, log_level: str) -> None:
    """Run the tidelog.Jobs object at MODULE:ATTRIBUTE until SIGINT/SIGTERM.

    Its handlers, schedules and settings run on the log the object was made
    with, or on --db (or $TIDELOG_URL) when given: one module, run against a
    file in development and a server or PostgreSQL in production.
    """
    runner = load_runner(target)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if log_level != "debug":
        # httpx, the http:// store's client, logs every request at INFO: routine
        # work here (a runner polls), which would drown what INFO is for.
        logging.getLogger("httpx").setLevel(logging.WARNING)
    if session.url_given:
        runner = runner.on(session.log(writes=True))
        logging.getLogger("tidelog.jobs").info("running the jobs of %s on %s", target, session.url)
    runner.run()


def queue_options(f: Any) -> Any:
    f = click.option("--group", default=None, help="The runner's queue group (default: the queue's name).")(f)
    return click.option("--queue", default="jobs", show_default=True, help="The job runner's queue.")(f)


def _show(session: Session, job: results.JobInfo) -> None:
    if session.json:
        emit(job.to_json())
        return
    click.echo(f"{job.id}: {job.status} (attempts {job.attempts}, updated {when(job.updated or 0)})")
    if job.status == results.DONE:
        click.echo(f"result: {dumps(job.result)}")
    if job.error:
        click.echo(f"error: {job.error}")


@jobs.command("status")
@click.argument("job_id", metavar="ID")
@queue_options
@common_options
@pass_session
def job_status(session: Session, job_id: str, queue: str, group: str | None) -> None:
    """What became of job ID: waiting, delayed, running, done (with its
    result), failed (with its error; a retry follows), dead-lettered or cancelled."""
    _show(session, results.info(session.log(), queue, group or queue, job_id))


@jobs.command("result")
@click.argument("job_id", metavar="ID")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0, max=results.MAX_RESULT_TTL_S),
    default=0,
    show_default=True,
    help="Seconds to wait for the job to finish.",
)
@queue_options
@common_options
@pass_session
def job_result(session: Session, job_id: str, wait_s: float, queue: str, group: str | None) -> None:
    """Print job ID's result (its handler's return value, as JSON) once it is
    done, waiting up to --wait seconds; exit 1 when it failed for good, was
    cancelled, or has not finished in time."""
    log = session.log()
    value = results.wait(lambda: results.info(log, queue, group or queue, job_id), job_id, wait_s)
    emit(value)


@jobs.command("cancel")
@click.argument("job_id", metavar="ID")
@queue_options
@common_options
@pass_session
def job_cancel(session: Session, job_id: str, queue: str, group: str | None) -> None:
    """Cancel job ID if it has not started (waiting, delayed, or waiting for a
    retry): no runner will run it. Exit 1 when it runs or has finished."""
    log = session.log(writes=True)
    ttl = int(results.DEFAULT_RESULT_TTL_S * 1000)
    _show(session, results.cancel(log, queue, group or queue, job_id, ttl))


@jobs.command("schedules")
@click.argument("target", metavar="[MODULE:ATTRIBUTE]", required=False)
@queue_options
@common_options
@pass_session
def job_schedules(session: Session, target: str | None, queue: str, group: str | None) -> None:
    """The queue's periodic jobs with their last and next tick. The last tick
    is read from the log (the latest one any runner enqueued); with
    MODULE:ATTRIBUTE, its schedules that never ticked are listed too."""
    registered: dict[str, schedules.Schedule] = {}
    if target is not None:
        runner = load_runner(target)
        registered = runner.registered_schedules
        queue = runner.queue.topic if queue == "jobs" else queue  # the runner's, unless --queue says
    found = schedules.describe(session.log(), queue, registered)
    if session.json:
        for s in found:
            emit(s._asdict())
        return
    rows = [(s.name, s.cron, s.tz, s.missed, when(s.last_tick or 0), when(s.next_tick or 0)) for s in found]
    table(["SCHEDULE", "CRON", "TZ", "MISSED", "LAST TICK", "NEXT TICK"], rows)
