"""The Redis protocol front: redis-cli, redis-py and other Redis clients speak to tidelog.

    server = await start_resp_server(log, host="127.0.0.1", port=7379, token=None)
    python -m tidelog.server.resp --db tidelog.db --port 7379

server.py holds the connections and the writer task, commands.py the
commands, codec.py the replies; listener.py starts a server with the commands.
"""

from __future__ import annotations

from .listener import start_resp_server
from .server import RespServer, resp_state, stop_resp_server

__all__ = ["RespServer", "resp_state", "start_resp_server", "stop_resp_server"]
