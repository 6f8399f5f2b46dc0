"""Start a Redis-protocol listener: the server (server.py) running
tidelog's commands (commands.py).

The one place that puts the two together: the commands take the server's
Connection, so server.py is given its table rather than importing it.
"""

from __future__ import annotations

import asyncio
import socket

from ...log import Log
from ..limits import Limits
from ..runtime.hub import AppendHub
from ..throttle import AuthThrottle
from .commands import COMMANDS
from .server import DEFAULT_PORT, RespServer


async def start_resp_server(
    log: Log,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
    hub: AppendHub | None = None,
    reuse_port: bool = False,
    limits: Limits | None = None,
    sock: socket.socket | None = None,
    subscribe_frames: str = "miniqueue",
    throttle: AuthThrottle | None = None,
) -> asyncio.Server:
    """Listen for the Redis protocol on host:port (0 picks a free port; the
    bound one is `server.sockets[0].getsockname()[1]`). With a token, clients
    must AUTH with it (any user name but `default` is refused). `hub`: a
    running wake-up hub on the same log to share (the HTTP front's).
    `reuse_port`: listen beside other processes on the same port
    (SO_REUSEPORT). `limits`: the bounds of server/limits.py (defaults when
    None). `sock`: a listening socket to accept on instead of binding
    host:port. `subscribe_frames`: SUBSCRIBE's frames on RESP2, "miniqueue"
    (the value as a bulk string) or "redis" (Redis's pub/sub frames; a RESP3
    connection always gets those). `throttle`: failed AUTHs counted with the
    other fronts' (an own one when None)."""
    return await RespServer(log, COMMANDS, token, hub, limits, subscribe_frames, throttle).start(
        host, port, reuse_port, sock
    )
