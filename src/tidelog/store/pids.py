"""The partition-id cache both SQL stores keep.

Records are keyed by a partition's id, not its (topic, number): every call
turns (topic, partition) into an id first. Partitions only grow and an id is
never reused, so a cached id stays valid until its topic is deleted; a
partition number past the cached count looks again (another process may
have grown the topic).
"""

from __future__ import annotations

from ..errors import UnknownPartition, UnknownTopic

# topic name -> (topic id, partition ids in partition order)
Entry = tuple[int, tuple[int, ...]]


class PartitionIds:
    """Mixed into each SQL store's base, which reads the ids (`_fetch_pids`)."""

    _pids: dict[str, Entry]

    def _fetch_pids(self, topic: str) -> Entry | None:
        """Read a topic's ids from the store and cache them; None: no such topic."""
        raise NotImplementedError

    def _pid(self, topic: str, partition: int, refresh: bool = False) -> int:
        """The id of a partition; UnknownTopic / UnknownPartition when it does not exist."""
        entry = None if refresh else self._pids.get(topic)
        if entry is None or partition >= len(entry[1]):
            entry = self._fetch_pids(topic)
            if entry is None:
                raise UnknownTopic(f"topic {topic!r} does not exist")
        pids = entry[1]
        if partition < 0 or partition >= len(pids):
            raise UnknownPartition(
                f"topic {topic!r} has partitions 0..{len(pids) - 1}; partition {partition} does not exist"
            )
        return pids[partition]
