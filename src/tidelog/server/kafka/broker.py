"""What the Kafka listener's handlers share: the broker, and each client's session.

Every listener is the leader of every partition and the coordinator of
every group, under one broker id taken from its advertised address: with
several `serve` processes over one PostgreSQL each is a broker of the same
cluster, and the store keeps them in step (Tansu's shape).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import Any

from ...errors import ConfigurationError
from ...log import Log
from ...store.base import KeepsWireBatches
from ..limits import Limits
from ..runtime.hub import AppendHub
from ..runtime.threads import LoopThreads
from ..runtime.writer import GroupCommitWriter
from ..throttle import AuthThrottle

CLUSTER_ID = "tidelog"
# Kafka's "no authorized operations asked for" in Metadata and DescribeGroups.
NO_OPERATIONS = -(1 << 31)


class Broker:
    """The state one Kafka listener shares among its connections."""

    def __init__(
        self,
        log: Log,
        token: str | None = None,
        hub: AppendHub | None = None,
        writer: GroupCommitWriter | None = None,
        limits: Limits | None = None,
        advertised_host: str | None = None,
        throttle: AuthThrottle | None = None,
    ):
        try:
            import kio  # noqa: F401
        except ImportError:  # pragma: no cover - the extra is installed by make test
            raise ConfigurationError("the Kafka listener needs kio: pip install 'tidelog[kafka]'") from None
        self.log = log
        self.token = token or None
        self.limits = limits or Limits()
        self.advertised_host = advertised_host
        self.throttle = (
            throttle if throttle is not None else AuthThrottle.of(self.limits)
        )  # shared with the other fronts by `serve`
        self.producer = log.producer()
        # Whether the store keeps the batches producers send (fetch.py answers with them).
        self.keeps_wire = isinstance(log.store, KeepsWireBatches)
        self.threads = LoopThreads(8, "tidelog-kafka")
        self.hub = hub if hub is not None else AppendHub(log)
        self.own_hub = hub is None
        self.writer = writer if writer is not None else GroupCommitWriter(log)
        self.own_writer = writer is None
        self.host = "127.0.0.1"
        self.port = 0
        self.node_id = 0
        # Wakes the JoinGroup and SyncGroup requests of this process waiting
        # on a group when another request changed it (other processes' are
        # seen on the next look, a tick later).
        self.group_changed: dict[str, asyncio.Event] = {}

    def bind(self, host: str, port: int) -> None:
        """Take the address the listener got; the broker id follows from it."""
        self.port = port
        self.host = self.advertised_host or (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1")
        # The same for every worker on the port, different for another `serve`.
        self.node_id = zlib.crc32(f"{self.host}:{self.port}".encode()) & 0x7FFFFFFF

    @property
    def broker_entry(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "host": self.host, "port": self.port, "rack": None}

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a blocking core call on a thread."""
        return await self.threads.run(fn, *args)

    def changed(self, group: str) -> None:
        """Wake this process's requests waiting on `group`."""
        event = self.group_changed.pop(group, None)
        if event is not None:
            event.set()

    def change_event(self, group: str) -> asyncio.Event:
        event = self.group_changed.get(group)
        if event is None:
            event = self.group_changed[group] = asyncio.Event()
        return event


class Session:
    """One client connection's state: who it is and where its SASL exchange stands."""

    def __init__(self, broker: Broker, peer: str, host: str = ""):
        self.broker = broker
        self.peer = peer
        self.host = host  # the client's address alone: what the login throttle counts
        self.authenticated = broker.token is None
        self.sasl_mechanism: str | None = None  # set by a handshake
        self.sasl_raw = False  # handshake v0: the next frame is a bare PLAIN token
        self.principal: str | None = None
        self.close_after = False  # close once this request is answered (a SASL failure)
        # The next fetch's reads, started as the last one was answered (fetch.py):
        # (topic, partition, position, partition max bytes, zstd readable) -> (monotonic start, its future).
        self.ahead: dict[tuple[str, int, int, int, bool], tuple[float, asyncio.Future[Any]]] = {}
