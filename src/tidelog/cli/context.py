"""What every command shares: the session (store URL, output mode) and its options.

Every command takes `--db URL` and `--json`, before or after its name
(`tidelog --db x topics list` or `tidelog topics list --db x`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

import tidelog
from tidelog.config import MAX_PARTITIONS

DEFAULT_URL = "tidelog.db"
URL_HELP = (
    "Where the log is: a file path or sqlite:///path (SQLite), postgresql://user@host/db, "
    "or http://host:port (a running `tidelog serve`; a bare host:port means the same)."
)
# host:port with no scheme: what a person types for a server, never a file name.
_HOST_PORT = re.compile(r"^[A-Za-z0-9.-]+:[0-9]{1,5}$")

F = TypeVar("F", bound=Callable[..., Any])


class Session:
    """What a command needs from the command line: where the log is, how to print.

    The log is opened on first use, so `serve` and `--help` never open it.
    """

    def __init__(
        self,
        url: str,
        json: bool = False,
        create: bool = False,
        auto_create: bool = True,
        default_partitions: int = 1,
    ):
        self.url = url
        self.json = json
        self.create = create
        self.auto_create = auto_create
        self.default_partitions = default_partitions
        self.url_given = False  # --db or $TIDELOG_URL, not the default
        self._log: tidelog.Log | None = None

    def log(self, *, writes: bool = False) -> tidelog.Log:
        """The log at --db; `writes` (a command that writes) may create its file,
        and its topics when --auto-create is on. A command that only reads
        never creates a topic, whatever the setting."""
        if self._log is None:
            url = store_url(self.url)
            path = sqlite_path(url)
            if path is not None and not (writes or self.create) and not os.path.exists(path):
                # A mistyped --db would otherwise leave an empty log behind and
                # print an empty answer, as if the log were there.
                where = path if os.path.isabs(path) else f"{path} ({os.path.abspath(path)})"
                raise tidelog.ConfigurationError(
                    f"no log at {where}: check --db, or pass --create to start a new one there"
                )
            self._log = tidelog.open(
                url, auto_create=self.auto_create and writes, default_partitions=self.default_partitions
            )
        return self._log

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def store_url(url: str) -> str:
    """--db as a store URL: a bare host:port is a server."""
    return f"http://{url}" if _HOST_PORT.match(url) else url


def sqlite_path(url: str) -> str | None:
    """The file a SQLite URL names (None for other stores and :memory:)."""
    if url.startswith("sqlite://"):
        path = url[len("sqlite://") :].removeprefix("/")
    elif "://" in url:
        return None
    else:
        path = url
    return None if path in ("", ":memory:") else path


def _set_url(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        session = ctx.ensure_object(Session)
        session.url = value
        session.url_given = True


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(Session).json = True


AUTO_CREATE_HELP = (
    "Whether producing to a missing topic creates it (with --default-partitions partitions); "
    "reads never create a topic."
)
DEFAULT_PARTITIONS_HELP = "Partitions of a topic that producing creates."


def _set_auto_create(ctx: click.Context, _param: click.Parameter, value: bool | None) -> None:
    if value is not None:
        ctx.ensure_object(Session).auto_create = value


def _set_default_partitions(ctx: click.Context, _param: click.Parameter, value: int | None) -> None:
    if value is not None:
        ctx.ensure_object(Session).default_partitions = value


def topic_policy_options(f: F) -> F:
    """`--auto-create/--no-auto-create` and `--default-partitions` on a command
    that writes, overriding the ones given before its name."""
    f = click.option(
        "--auto-create/--no-auto-create",
        default=None,
        expose_value=False,
        callback=_set_auto_create,
        help=AUTO_CREATE_HELP + " Default: $TIDELOG_AUTO_CREATE, else on.",
    )(f)
    f = click.option(
        "--default-partitions",
        type=click.IntRange(1, MAX_PARTITIONS),
        metavar="N",
        expose_value=False,
        callback=_set_default_partitions,
        help=DEFAULT_PARTITIONS_HELP + " Default: $TIDELOG_DEFAULT_PARTITIONS, else 1.",
    )(f)
    return f


def common_options(f: F) -> F:
    """`--db` and `--json` on a command, overriding the ones given before it."""
    f = click.option(
        "--db",
        metavar="URL",
        expose_value=False,
        callback=_set_url,
        help=URL_HELP + " Default: $TIDELOG_URL, else tidelog.db.",
    )(f)
    f = click.option(
        "--json", is_flag=True, expose_value=False, callback=_set_json, help="Machine output (JSON)."
    )(f)
    return f


pass_session = click.make_pass_decorator(Session)


class SummaryGroup(click.Group):
    """A command group whose list of commands shows each one's first
    sentence whole (wrapped), where click would cut it with "..." at the
    terminal's width."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=1_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def confirm(question: str, yes: bool, refused: str) -> None:
    """Ask `question` on stderr unless --yes; anything but yes (an empty or
    closed stdin too) stops the command with exit 1 and `refused`."""
    if yes:
        return
    try:
        agreed = click.confirm(question, default=False, err=True)
    except click.Abort:  # stdin closed: end the prompt's line
        click.echo(err=True)
        agreed = False
    if not agreed:
        raise click.ClickException(f"{refused}: not confirmed (pass --yes to skip the question)")


def check_partition(info: tidelog.TopicInfo, partition: int | None) -> None:
    """Refuse a partition the topic does not have, before anything is written."""
    if partition is not None and partition >= info.partitions:
        raise tidelog.UnknownPartition(
            f"topic {info.name!r} has partitions 0..{info.partitions - 1}; partition {partition} does not exist"
        )
