"""What every command shares: the session (store URL, output mode) and its options.

Every command takes `--db URL` and `--json`, before or after its name
(`tidelog --db x topics list` or `tidelog topics list --db x`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

import tidelog

DEFAULT_URL = "tidelog.db"

F = TypeVar("F", bound=Callable[..., Any])


class Session:
    """What a command needs from the command line: where the log is, how to print.

    The log is opened on first use, so `serve` and `--help` never open it.
    """

    def __init__(self, url: str, json: bool = False):
        self.url = url
        self.json = json
        self._log: tidelog.Log | None = None

    def log(self) -> tidelog.Log:
        if self._log is None:
            # A typo in a topic name must not create a topic from the shell.
            self._log = tidelog.open(self.url, auto_create=False)
        return self._log

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _set_url(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.ensure_object(Session).url = value


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(Session).json = True


def common_options(f: F) -> F:
    """`--db` and `--json` on a command, overriding the ones given before it."""
    f = click.option(
        "--db",
        metavar="URL",
        expose_value=False,
        callback=_set_url,
        help="Store URL: a file path, sqlite:///path or http://host:port (default: $TIDELOG_URL, else tidelog.db).",
    )(f)
    f = click.option(
        "--json", is_flag=True, expose_value=False, callback=_set_json, help="Machine output (JSON)."
    )(f)
    return f


pass_session = click.make_pass_decorator(Session)


def check_partition(info: tidelog.TopicInfo, partition: int | None) -> None:
    """Refuse a partition the topic does not have, before anything is written."""
    if partition is not None and partition >= info.partitions:
        raise tidelog.UnknownPartition(
            f"topic {info.name!r} has partitions 0..{info.partitions - 1}; partition {partition} does not exist"
        )
