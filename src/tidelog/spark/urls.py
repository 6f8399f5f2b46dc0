"""Which store URLs a Spark cluster's executors can open.

On `local[N]` the Python workers run on the driver's machine, in the
driver's working directory: any URL the driver opens, they open. On a
cluster each executor opens the option `url` itself, on its own machine and
in its own working directory (`work/app-.../N/` under a standalone worker),
so a relative SQLite path names a different, empty file there, and SQLite
would quietly create it. The driver refuses such a URL when the query is
planned (`load()`, `save()`, `start()`); an executor that finds no file at
an absolute path says so instead of creating one.
"""

from __future__ import annotations

import os
import socket

import tidelog

from ..errors import ConfigurationError
from ..log import Log

STORES = "postgresql://... or http://host:port (a tidelog server)"


def sqlite_path(url: str) -> str | None:
    """The file a SQLite URL names, or None for another store's URL."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("", "sqlite"):
        return None
    if scheme == "sqlite":
        rest = url[len("sqlite://") :]
        return rest[1:] if rest.startswith("/") else rest
    return url


def on_cluster(master: str | None) -> bool:
    """Whether executors may run elsewhere than the driver (None: not known)."""
    return bool(master) and not str(master).startswith("local")


def check(url: str, master: str | None) -> None:
    """Refuse, on the driver, a URL the cluster's executors would open wrongly."""
    if not on_cluster(master):
        return
    path = sqlite_path(url)
    if path is not None and not os.path.isabs(path):
        raise ConfigurationError(
            f"option url {url!r} is a relative SQLite path, and master {master} runs executors in "
            "their own working directories (on other machines, too), where it names another file: "
            f"give an absolute path on a filesystem every executor shares, or use {STORES}"
        )


def open_log(url: str, cluster: bool) -> Log:
    """Open the log in a task; on a cluster, a SQLite file must already exist here."""
    path = sqlite_path(url)
    if cluster and path is not None and not os.path.exists(path):
        raise ConfigurationError(
            f"option url {url!r}: no SQLite file at {path} on executor host {socket.gethostname()}; "
            "the driver's file is not on this machine. Put it on a filesystem every executor shares "
            f"(same path), or use {STORES}"
        )
    return tidelog.open(url)
