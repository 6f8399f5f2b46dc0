"""The `store` fixture: every conformance test runs on every store, through both APIs.

A store kind is a factory that yields a URL a test can open as often as it
likes (a second `tidelog.open(url)` on the same URL sees the same log, as a
restarted process would).

Every test that opens a log runs twice, `sync` and `async` in its id: the
async variant opens `tidelog.aio` logs behind a blocking proxy (see
`aio_bridge`), so the same assertions hold for the asyncio API. A test
marked `sync_api_only(reason)` runs on the sync API alone; one marked
`async_api_only` (an asyncio-native test, see test_aio.py) on the async one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import tidelog
import tidelog.aio
from conftest import need_service  # tests/conftest.py (pytest puts tests/ on sys.path)
from pgschema import tidelog_schema
from tidelog.store.base import (
    Cleanable,
    CleansRemotely,
    GroupStore,
    NamedConsumers,
    QueueStore,
    Transactional,
)

from .aio_bridge import LoopThread


class FollowClock:
    """The http kind's server clock: the wall clock until a test opens a log
    with a clock of its own; from then on that clock, so leases, delays,
    sessions and retention expire on the server when the test says."""

    def __init__(self) -> None:
        self.target: Callable[[], int] | None = None

    def __call__(self) -> int:
        return self.target() if self.target is not None else time.time_ns() // 1_000_000


@dataclass
class StoreKind:
    name: str
    url: str
    server_clock: FollowClock | None = None
    api: str = "sync"
    loop: LoopThread | None = None

    def aio_open(self, **kwargs: Any) -> tidelog.aio.Opening:
        """`tidelog.aio.open` of this store (for tests written in asyncio)."""
        if self.server_clock is not None and kwargs.get("clock") is not None:
            self.server_clock.target = kwargs["clock"]
        return tidelog.aio.open(self.url, **kwargs)

    def open(self, **kwargs: Any) -> Any:
        """A `tidelog.Log`, or on the async API a blocking view of a `tidelog.aio.AsyncLog`."""
        if self.server_clock is not None and kwargs.get("clock") is not None:
            self.server_clock.target = kwargs["clock"]
        if self.api == "async":
            if self.loop is None:
                self.loop = LoopThread()
            return self.loop.open(self.url, **kwargs)
        return tidelog.open(self.url, **kwargs)


def _sqlite(tmp_path: Any) -> Iterator[str]:
    yield str(tmp_path / "log.db")


def _postgres(tmp_path: Any) -> Iterator[str]:
    with tidelog_schema() as url:
        yield url


def _http(tmp_path: Any) -> Iterator[str]:
    # A real server (granian, on a free loopback port, in a thread) over a
    # fresh SQLite file: the whole contract runs through http:// too.
    try:
        from tidelog.server.http.thread import ServerThread
    except ImportError as e:
        need_service("the tidelog server", f"{e}; pip install 'tidelog[server,client]'")
    clock = FollowClock()
    # auto_create off on the server: the client's Log holds the topic policy
    # under test (it creates a missing topic itself, through POST /v1/topics).
    server = ServerThread(
        str(tmp_path / "served.db"), clock=clock, clean_interval=0, auto_create=False
    ).start()
    try:
        yield server.url, clock
    finally:
        server.stop()


# kind name -> factory(tmp_path) yielding a URL (or a URL and the server's
# FollowClock); other stores add themselves.
STORE_KINDS: dict[str, Callable[[Any], Iterator[str]]] = {
    "sqlite": _sqlite,
    "postgres": _postgres,
    "http": _http,
}


# A feature and what carries it: a capability protocol of tidelog.store.base, or a
# store method ("method:param" when a parameter carries it). A test marked
# `store_feature(name)` is skipped, visibly, on a store that lacks it yet.
FEATURES: dict[str, Any] = {
    "queues": QueueStore,
    "groups": GroupStore,
    "retention": (Cleanable, CleansRemotely),  # CleansRemotely: a store whose server cleans
    "txn": "append_many:txn",
    "streams": NamedConsumers,
    "outbox": Transactional,
}


def store_has(store_class: type, feature: str) -> bool:
    import inspect

    need = FEATURES[feature]
    if isinstance(need, str):
        method, _, param = need.partition(":")
        return param in inspect.signature(getattr(store_class, method)).parameters
    return any(
        issubclass(store_class, protocol) for protocol in (need if isinstance(need, tuple) else (need,))
    )


def _store_class(kind: str) -> type:
    if kind == "http":
        from tidelog.store.http import HTTPStore

        return HTTPStore
    if kind == "postgres":
        from tidelog.store.postgres import PostgresStore

        return PostgresStore
    from tidelog.store.sqlite import SQLiteStore

    return SQLiteStore


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Parametrized here rather than with fixture params so that a test marked
    # sync_api_only gets no async variant at all (not a skipped one).
    if "api" in metafunc.fixturenames:
        apis = ["sync", "async"]
        if metafunc.definition.get_closest_marker("sync_api_only"):
            apis = ["sync"]
        elif metafunc.definition.get_closest_marker("async_api_only"):
            apis = ["async"]
        metafunc.parametrize("api", apis, indirect=True)


@pytest.fixture
def api(request: pytest.FixtureRequest) -> str:
    """Which Python API the test drives: "sync" (tidelog) or "async" (tidelog.aio)."""
    return str(request.param)


@pytest.fixture(params=sorted(STORE_KINDS))
def store(request: pytest.FixtureRequest, tmp_path: Any, api: str) -> Iterator[StoreKind]:
    for marker in request.node.iter_markers("store_feature"):
        for feature in marker.args:
            if not store_has(_store_class(request.param), feature):
                pytest.skip(f"the {request.param} store does not have {feature} yet")
    factory = STORE_KINDS[request.param]
    gen = factory(tmp_path)
    got = next(gen)
    url, server_clock = got if isinstance(got, tuple) else (got, None)
    kind = StoreKind(request.param, url, server_clock, api)
    yield kind
    if kind.loop is not None:
        kind.loop.stop()
    gen.close()


@pytest.fixture
def log(store: StoreKind) -> Iterator[tidelog.Log]:
    opened = store.open()
    yield opened
    opened.close()


class Clock:
    """A controllable clock (ms) so lease expiry, delays and retention need no sleeping."""

    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1000)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def clocked_log(store: StoreKind, clock: Clock) -> Iterator[tidelog.Log]:
    """A log of the test's store on the test's `clock`."""
    log = store.open(clock=clock)
    yield log
    log.close()


def snapshot(log: tidelog.Log) -> Any:
    """Everything a bad request must leave unchanged."""
    topics = {t.name: (t.partitions, t.config) for t in log.topics()}
    parts = {name: log.describe(name).partitions for name in topics}
    groups = {g: [(o.topic, o.partition, o.committed) for o in log.group_offsets(g)] for g in log.groups()}
    return topics, parts, groups
