"""The root `tidelog` group: the store URL, output mode and the error edge.

The URL defaults to `TIDELOG_URL`, else `tidelog.db` in the current
directory, and the topic policy to `TIDELOG_AUTO_CREATE` and
`TIDELOG_DEFAULT_PARTITIONS`; the environment is read here, at the entry
point, and nowhere else.
"""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

import tidelog
from tidelog.config import MAX_PARTITIONS

from .consume import consume, read
from .context import AUTO_CREATE_HELP, DEFAULT_PARTITIONS_HELP, DEFAULT_URL, URL_HELP, Session, SummaryGroup
from .dlq import dlq
from .groups import groups, offsets
from .jobs import jobs
from .maintenance import clean
from .produce import produce
from .queues import queues
from .serve import serve
from .topics import topics
from .worker import worker


def _one_line(message: str) -> str:
    return " ".join(message.split())


class TidelogGroup(SummaryGroup):
    """The error edge: a TidelogError becomes exit 1 with a one-line message."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except tidelog.TidelogError as e:
            raise click.ClickException(_one_line(str(e))) from None


@click.group(cls=TidelogGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    "url",
    metavar="URL",
    envvar="TIDELOG_URL",
    default=DEFAULT_URL,
    show_default=True,
    show_envvar=True,
    help=URL_HELP,
)
@click.option(
    "--create", is_flag=True, help="Start a new SQLite log when --db names no file (commands that write do)."
)
@click.option("--json", "json_output", is_flag=True, help="Machine output (JSON) for every command.")
@click.option(
    "--auto-create/--no-auto-create",
    default=True,
    envvar="TIDELOG_AUTO_CREATE",
    show_default=True,
    show_envvar=True,
    help=AUTO_CREATE_HELP,
)
@click.option(
    "--default-partitions",
    type=click.IntRange(1, MAX_PARTITIONS),
    default=1,
    metavar="N",
    envvar="TIDELOG_DEFAULT_PARTITIONS",
    show_default=True,
    show_envvar=True,
    help=DEFAULT_PARTITIONS_HELP,
)
@click.version_option(tidelog.__version__, prog_name="tidelog")
@click.pass_context
def cli(
    ctx: click.Context,
    url: str,
    create: bool,
    json_output: bool,
    auto_create: bool,
    default_partitions: int,
) -> None:
    """tidelog: a durable, partitioned message log.

    Records go to stdout as NDJSON, one record a line; other views are
    aligned tables, or JSON with --json. Exit status: 0 on success, 1 on an
    error (one line on stderr), 2 on a usage error.
    """
    session = ctx.obj = Session(url, json_output, create, auto_create, default_partitions)
    session.url_given = ctx.get_parameter_source("url") in (
        ParameterSource.COMMANDLINE,
        ParameterSource.ENVIRONMENT,
    )
    ctx.call_on_close(session.close)


for command in (topics, produce, consume, read, groups, offsets, queues, dlq, serve, clean, jobs, worker):
    cli.add_command(command)
