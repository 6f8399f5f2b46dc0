"""The topic catalog: what the core remembers of each topic's shape.

Producers, groups, queues and the Redis streams front all need a topic's
partition count and record size limit on every call; asking the store each
time would cost a query a send. `TopicCatalog` keeps them in memory, one per
`Log`, and is the only place that decides when a missing topic is created.

Partitions only grow, so a cached count can only be too small: a caller that
finds a partition missing looks again with `refresh=True`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .config import TopicConfig, check_name
from .errors import UnknownTopic
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
    """The shape of each topic a `Log` has seen, and the auto-create policy.

    `create` makes a missing topic with default settings; it is called only
    when `auto_create` is on and a writer asks for it.
    """

    def __init__(self, store: Store, create: Callable[[str], TopicInfo], *, auto_create: bool = True):
        self.store = store
        self.auto_create = bool(auto_create)
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

    def shape(self, name: str, *, create: bool = False, refresh: bool = False) -> TopicShape:
        """A topic's shape; `create` makes a missing one if auto_create is on.

        Raises UnknownTopic when the topic does not exist and is not made.
        """
        shape = None if refresh else self._shapes.get(name)
        if shape is not None:
            return shape
        info = self.store.topic(name)
        if info is None:
            if not (create and self.auto_create):
                raise UnknownTopic(
                    f"topic {name!r} does not exist"
                    + ("" if not create else " (auto_create is off; create it first)")
                )
            info = self._create(name)
        return self.remember(info)


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
