"""A real HTTP endpoint for the push worker's tests: Starlette on granian.

It runs on its own thread and event loop, on a free loopback port, and
answers each POST as its script says: "ok" (200), "slow" (200 after
`slow_s`, within the worker's timeout), a status code such as 500, "hang"
(no answer until long past the worker's timeout) or "drop" (a 200 status
line, then the connection is cut before the body ends). The script maps
the request's number (1, 2, ...) to an action; requests it does not name
get "ok"; a callable script is asked `script(number, body, received)`. With `db` and `group`, every request also records the group's
committed offset for its partition at the moment it arrived, which is how
the tests see when commits happen.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from granian.constants import HTTPModes, Interfaces
from granian.server.embed import Server
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import tidelog

# What the worker sees as a success: only these actions end in a whole 2xx answer.
ACCEPTED = ("ok", "slow")


@dataclass
class Received:
    number: int
    action: str
    body: dict[str, Any]
    raw: bytes
    headers: dict[str, str]
    committed: int | None  # the group's committed offset on arrival, when watched

    @property
    def accepted(self) -> bool:
        return self.action in ACCEPTED

    @property
    def partition(self) -> int:
        return self.body["partition"]

    @property
    def offsets(self) -> list[int]:
        return [m["offset"] for m in self.body["messages"]]


@dataclass
class Endpoint:
    script: Any = field(default_factory=dict)  # {number: action} or callable
    slow_s: float = 1.0
    hang_s: float = 5.0
    db: str | None = None
    group: str | None = None
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.port = 0
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        self._log = tidelog.open(self.db) if self.db else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/in"

    # the app -----------------------------------------------------------------

    async def _post(self, request: Request) -> Response:
        raw = await request.body()
        body = json.loads(raw)
        committed = None
        if self._log is not None and self.group is not None:
            committed = self._log.consumer(self.group).committed(body["topic"], body["partition"])
        with self.lock:
            number = len(self.received) + 1
            if callable(self.script):
                action = str(self.script(number, body, list(self.received)))
            else:
                action = str(self.script.get(number, "ok"))
            self.received.append(Received(number, action, body, raw, dict(request.headers), committed))
            self.arrived.notify_all()
        if action == "slow":
            await asyncio.sleep(self.slow_s)
        elif action == "hang":
            await asyncio.sleep(self.hang_s)
        elif action == "drop":
            send = request._send  # the raw ASGI channel: start a response, then break it
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"64")]}
            )
            await send({"type": "http.response.body", "body": b"{", "more_body": True})
            raise ConnectionAbortedError("dropped on purpose")
        elif action.isdigit():
            return Response(f"answered {action}", status_code=int(action))
        return Response("accepted")

    # lifecycle ---------------------------------------------------------------

    def start(self) -> Endpoint:
        app = Starlette(routes=[Route("/in", self._post, methods=["POST"])])
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._server = Server(
            app,
            address="127.0.0.1",
            port=self.port,
            interface=Interfaces.ASGI,
            http=HTTPModes.http1,
            websockets=False,
            log_enabled=False,
        )
        ready = threading.Event()

        def run() -> None:
            async def main() -> None:
                self._loop = asyncio.get_running_loop()
                ready.set()
                await self._server.serve()

            asyncio.run(main())

        self._thread = threading.Thread(target=run, name=f"endpoint-{self.port}", daemon=True)
        self._thread.start()
        ready.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.01)
        raise RuntimeError("the test endpoint did not start")

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._server.stop)
            self._thread.join(15)
        if self._log is not None:
            self._log.close()

    def __enter__(self) -> Endpoint:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # what arrived ------------------------------------------------------------

    def snapshot(self) -> list[Received]:
        with self.lock:
            return list(self.received)

    def wait_for(self, predicate: Any, timeout: float = 60) -> list[Received]:
        """Block until predicate(received) holds; the received list then."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while not predicate(self.received):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"the endpoint waited {timeout}s; it got {len(self.received)} requests"
                    )
                self.arrived.wait(min(left, 0.5))
            return list(self.received)

    def accepted_offsets(self) -> dict[int, list[int]]:
        """Offsets of accepted batches per partition, in arrival order."""
        out: dict[int, list[int]] = {}
        for r in self.snapshot():
            if r.accepted:
                out.setdefault(r.partition, []).extend(r.offsets)
        return out


def check_deliveries(received: list[Received], expected: dict[int, int]) -> None:
    """The delivery contract over what an endpoint received.

    `expected` maps partition -> last offset. Per partition: each POST
    holds consecutive offsets starting right after the group's committed
    offset at its arrival (nothing skipped, nothing committed early); a
    failed POST is followed by the very same batch; the accepted batches
    cover every offset, in order.
    """
    by_partition: dict[int, list[Received]] = {}
    for r in received:
        by_partition.setdefault(r.partition, []).append(r)
    assert sorted(by_partition) == sorted(expected), (sorted(by_partition), sorted(expected))
    for partition, posts in by_partition.items():
        for r in posts:
            assert r.offsets == list(range(r.offsets[0], r.offsets[-1] + 1)), (partition, r.offsets)
            if r.committed is not None:
                assert r.offsets[0] == r.committed + 1, (partition, r.number, r.offsets[0], r.committed)
        for before, after in zip(posts, posts[1:]):
            if not before.accepted:
                assert after.raw == before.raw, (
                    f"partition {partition}: request {after.number} is not a retry"
                )
        accepted = [o for r in posts if r.accepted for o in r.offsets]
        seen: set[int] = set()
        in_order = [o for o in accepted if not (o in seen or seen.add(o))]
        assert in_order == list(range(1, expected[partition] + 1)), partition
