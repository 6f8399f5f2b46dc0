"""A server on a background thread: for tests, notebooks and embedding.

    with ServerThread("tidelog.db") as server:
        log = tidelog.open(server.url)

Runs the same app on the same granian server as `serve()`, in its own
event loop, on a free loopback port unless told otherwise.

The thread binds its port itself, as `serve()` does (server/listeners.py),
without SO_REUSEPORT: left to granian, which sets it, two servers that
chose the same free port (two test processes, say) would both listen on
it and the kernel would split the connections between them, each answering
from its own store.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

from ...errors import ConfigurationError
from ..listeners import Port, bind_tcp
from .app import create_app
from .run import build_server, stop_server

START_TIMEOUT_S = 10.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerThread:
    def __init__(
        self,
        log_or_url: Any,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        token: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        server_options: dict[str, Any] | None = None,
        **app_options: Any,
    ):
        self.target = log_or_url
        self.host = host
        self.port = port
        self.token = token
        self.tls = (tls_cert, tls_key)
        self.server_options = {"log_enabled": False, **(server_options or {})}
        self.app_options = app_options
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._app: Any = None
        self._error: BaseException | None = None
        self._sock: socket.socket | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.tls[0] else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def start(self) -> ServerThread:
        # Port 0: the kernel picks a free port as it binds, so no other
        # program can take it between the choice and the bind.
        sock = bind_tcp(self.host, Port("HTTP", self.port or 0))
        self.port = port = sock.getsockname()[1]
        if self._start_on(sock, port):
            self._sock = sock
            return self
        sock.close()
        raise ConfigurationError(f"the server did not start: {self._error!r}")

    def _start_on(self, sock: socket.socket, port: int) -> bool:
        self._error = None
        ready = threading.Event()
        app = self._app = create_app(self.target, self.token, **self.app_options)
        server = build_server(app, self.host, port, *self.tls, sock=sock, **self.server_options)

        def run() -> None:
            async def main() -> None:
                self._loop = asyncio.get_running_loop()
                self._server = server
                ready.set()
                await server.serve()

            try:
                asyncio.run(main())
            except BaseException as e:
                self._error = e
            finally:
                ready.set()

        self._thread = threading.Thread(target=run, name=f"tidelog-server-{port}", daemon=True)
        self._thread.start()
        ready.wait(START_TIMEOUT_S)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self._thread.is_alive():
            try:
                with socket.create_connection((self.host, port), timeout=0.5):
                    return True
            except OSError:
                time.sleep(0.005)
        self._thread.join(1)
        return False

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._server is not None and self._thread.is_alive():
            try:
                self._loop.call_soon_threadsafe(stop_server, self._app, self._server)
            except RuntimeError:
                pass
        self._thread.join(START_TIMEOUT_S)
        self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
