"""The runtime directory of a `serve` with several workers: one a supervisor.

It holds what the processes of one server share on this machine: the
members' home socket (`members.sock`, see http/home.py) and the
per-process counter files of prometheus_client's multiprocess mode
(`metrics/`). Its name carries the supervisor's pid
(`tidelog-serve-<pid>-<random>` in the temp directory), so that what the
supervisor cannot do when it is SIGKILLed is still done:

- its workers hear of the death from the kernel (PR_SET_PDEATHSIG, see
  workers.py), stop, and the last of them removes the directory;
- a server starting later removes every such directory whose supervisor
  is gone (all of them SIGKILLed at once, by the OOM killer or `kill -9`
  of the process group, leaves nobody to remove it).

A directory in the temp directory rather than one that vanishes with the
process (an abstract Unix socket would) because prometheus_client's
multiprocess mode needs real files, and a path keeps the home socket
behind the directory's 0700 mode.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

PREFIX = "tidelog-serve-"
SOCKET = "members.sock"  # the members' home (http/home.py)
MAX_SOCKET_PATH = 107  # sun_path's 108 bytes on Linux, its final NUL aside
_OWNED = re.compile(re.escape(PREFIX) + r"(\d+)-")


def make() -> str:
    """A new runtime directory owned by this process (0700), after sweeping dead ones."""
    where = tempfile.gettempdir()
    if len(os.path.join(where, f"{PREFIX}{os.getpid()}-12345678", SOCKET)) > MAX_SOCKET_PATH:
        where = "/tmp"  # a Unix socket's path has room for 107 bytes: a long TMPDIR leaves none
    sweep(where)
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=where)
    os.mkdir(os.path.join(path, "metrics"))
    return path


def owner(path: str) -> int | None:
    """The pid in a runtime directory's name (None: not one of ours)."""
    found = _OWNED.match(os.path.basename(path))
    return int(found.group(1)) if found else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def sweep(where: str | None = None) -> list[str]:
    """Remove this user's runtime directories whose supervisor is dead; returns them."""
    where = where or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(where)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(where, name)
        pid = owner(path)
        if pid is None or alive(pid):
            continue
        try:
            if os.lstat(path).st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def remove(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
