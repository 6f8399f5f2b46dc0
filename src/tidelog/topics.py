"""The topic catalog: what the core remembers of each topic's shape.

Producers, groups, queues and the Redis streams front all need a topic's
partition count and record size limit on every call; asking the store each
time would cost a query a send. `TopicCatalog` keeps them in memory, one per
`Core` (a Log is one), and is the only place that decides when a missing topic is created.

The policy every front shares (README, "Topics made on first write"): a
write to a missing topic creates it with the default settings when
`auto_create` is on (the default), with `default_partitions` partitions; a
read never creates one. A write is checked in full against the shape the
topic would get (`planned`) before the topic is made (`ensure`), so a
refused write creates nothing.

Partitions only grow, so a cached count can only be too small: a caller that
finds a partition missing looks again with `refresh=True`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .config import MAX_PARTITIONS, TopicConfig, check_int, check_name
from .errors import UnknownPartition, UnknownTopic
from .store.base import PartitionInfo, Store, TopicInfo


class TopicShape(NamedTuple):
    """What a send needs to know of a topic."""

    partitions: int
    max_message_bytes: int
    dedup_window_ms: int = TopicConfig.dedup_window_ms


@dataclass(frozen=True)
class TopicDescription:
    """A topic with its partitions' offsets and figures."""

    name: str
    partitions: list[PartitionInfo]
    config: dict[str, Any] = field(default_factory=dict)
    created: int = 0

    @property
    def records(self) -> int:
        """Records kept in all partitions."""
        return sum(p.records for p in self.partitions)


class TopicCatalog:
    """The shape of each topic a `Core` has seen, and the auto-create policy.

    `create(name, partitions)` makes a missing topic with default settings;
    it is called only when `auto_create` is on and a writer asks for it.
    """

    def __init__(
        self,
        store: Store,
        create: Callable[[str, int], TopicInfo],
        *,
        auto_create: bool = True,
        default_partitions: int = 1,
    ):
        self.store = store
        self.auto_create = bool(auto_create)
        self.default_partitions = check_int("default_partitions", default_partitions, 1, MAX_PARTITIONS)
        self._create = create
        self._shapes: dict[str, TopicShape] = {}

    def get(self, name: str) -> TopicShape | None:
        """The cached shape, without asking the store (the send fast path)."""
        return self._shapes.get(name)

    def remember(self, info: TopicInfo) -> TopicShape:
        """Cache what a store call just returned about a topic."""
        shape = TopicShape(
            info.partitions,
            info.config.get("max_message_bytes", TopicConfig.max_message_bytes),
            info.config.get("dedup_window_ms", TopicConfig.dedup_window_ms),
        )
        self._shapes[info.name] = shape
        return shape

    def forget(self, name: str) -> None:
        """Drop a topic from the cache (it was deleted)."""
        self._shapes.pop(name, None)

    def shape(
        self, name: str, *, create: bool = False, refresh: bool = False, partitions: int | None = None
    ) -> TopicShape:
        """A topic's shape; `create` makes a missing one if auto_create is on
        (with `partitions`, else the default count).

        Raises UnknownTopic when the topic does not exist and is not made.
        """
        shape = None if refresh else self._shapes.get(name)
        if shape is not None:
            return shape
        info = self.store.topic(name)
        if info is None:
            if not create:
                raise UnknownTopic(f"topic {name!r} does not exist")
            self._refuse_missing(name)
            info = self._create(name, partitions or self.default_partitions)
        return self.remember(info)

    def planned(self, name: str, *, refresh: bool = False, partitions: int | None = None) -> TopicShape:
        """The shape a write to `name` will find, creating nothing.

        A missing topic has, when auto_create is on, the shape an implicit
        create would give it (`partitions`, else the default count); the
        writer calls `ensure` once its input passed every check.
        """
        shape = None if refresh else self._shapes.get(name)
        if shape is not None:
            return shape
        info = self.store.topic(name)
        if info is not None:
            return self.remember(info)
        self._refuse_missing(name)
        return TopicShape(partitions or self.default_partitions, TopicConfig.max_message_bytes)

    def ensure(self, name: str, partitions: int | None = None) -> None:
        """Create `name` if it is missing (auto_create on), just before a write to it."""
        if name not in self._shapes:
            self.shape(name, create=True, partitions=partitions)

    def _refuse_missing(self, name: str) -> None:
        if not self.auto_create:
            raise UnknownTopic(f"topic {name!r} does not exist (auto_create is off; create it first)")


def check_partition(topic: str, partition: int, partitions: int) -> None:
    """UnknownPartition unless `partition` is one of the topic's `partitions`."""
    if partition >= partitions:
        raise UnknownPartition(
            f"topic {topic!r} has partitions 0..{partitions - 1}; partition {partition} does not exist"
        )


# Names that passed check_name; a dict lookup is cheaper than the pattern on
# every send. Bounded, as a server may see any number of names.
_checked_names: dict[str, bool] = {}


def check_topic_name(topic: Any) -> str:
    """`check_name("topic", topic)`, remembered for names seen before."""
    if type(topic) is str and topic in _checked_names:
        return topic
    name = check_name("topic", topic)
    if len(_checked_names) > 10_000:
        _checked_names.clear()
    _checked_names[name] = True
    return name
