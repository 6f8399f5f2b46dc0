"""What the console's pages show, read from the log through the core API.

Blocking: the routes run these on the server's read threads. Each page's
figures come from one function here, used both to render the page and to
answer its live refresh, so the two never disagree. Nothing here writes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ....deadletters import DeadLetter, dead_letters
from ....errors import UnknownGroup, UnknownTopic
from ....log import GroupLag, Log
from ....queues import Queue, queue_stats
from ....store.base import GroupMember, NamedConsumers, PartitionInfo, QueueStats
from .history import History

RATE_WINDOW_MS = 60_000  # "append rate" is over the last minute


@dataclass
class TopicFigures:
    name: str
    partitions: int
    records: int
    bytes: int
    end: int  # the sum of the partitions' last offsets: rises by one per append
    config: dict[str, Any]
    created: int
    rate: float | None = None  # records/s over the last minute, None before two samples
    dead_letters_of: list[tuple[str, str]] = field(default_factory=list)  # queue groups writing here


@dataclass
class StreamGroupFigures:
    name: str
    topics: list[str]
    members: list[GroupMember]
    lag: int
    rows: list[GroupLag]
    generation: int | None
    growing: bool = False


@dataclass
class QueueGroupFigures:
    topic: str
    group: str
    stats: QueueStats
    consumers: int
    dead_letter: str
    dead_letter_records: int
    growing: bool = False

    @property
    def depth(self) -> int:
        return self.stats.available + self.stats.in_flight + self.stats.delayed


@dataclass
class Overview:
    topics: list[TopicFigures]
    stream_groups: list[StreamGroupFigures]
    queue_groups: list[QueueGroupFigures]
    banners: list[dict[str, str]]


def _topic_figures(log: Log) -> tuple[dict[str, TopicFigures], dict[str, list[PartitionInfo]]]:
    out, parts_of = {}, {}
    for info in log.topics():
        try:
            parts = log.store.partitions(info.name)
        except UnknownTopic:  # deleted meanwhile
            continue
        parts_of[info.name] = parts
        out[info.name] = TopicFigures(
            info.name,
            len(parts),
            sum(p.records for p in parts),
            sum(p.bytes for p in parts),
            sum(p.last_offset for p in parts),
            info.config,
            info.created,
        )
    return out, parts_of


def _lag_rows(
    log: Log, name: str, subscribed: set[str], parts_of: dict[str, list[PartitionInfo]]
) -> list[GroupLag]:
    """`Log.describe_group`'s rows from partitions already read for this sample
    (reading a partition's figures is the costly part of a sample: once each)."""
    committed = {(o.topic, o.partition): o.committed for o in log.store.group_offsets(name)}
    rows = []
    for topic in sorted({t for t, _ in committed} | subscribed):
        for p in parts_of.get(topic, ()):
            done = committed.get((topic, p.partition), 0)
            rows.append(GroupLag(name, topic, p.partition, done, p.last_offset, max(0, p.last_offset - done)))
    return rows


def stream_group(
    log: Log,
    name: str,
    history: History | None = None,
    parts_of: dict[str, list[PartitionInfo]] | None = None,
) -> StreamGroupFigures:
    """A stream group's members, generation, assignment and lag per partition."""
    members = log.group(name).members()
    subscribed = {t for m in members for t in m.topics}
    if parts_of is None:
        rows = log.describe_group(name, sorted(subscribed))
    else:
        rows = _lag_rows(log, name, subscribed, parts_of)
    return StreamGroupFigures(
        name,
        sorted({r.topic for r in rows} | subscribed),
        members,
        sum(r.lag for r in rows),
        rows,
        members[0].generation if members else None,
        history.rising(f"group:{name}:lag") if history else False,
    )


def queue_group(
    log: Log,
    topic: str,
    group: str,
    history: History | None = None,
    parts_of: dict[str, list[PartitionInfo]] | None = None,
) -> QueueGroupFigures:
    """A queue group's counts by state, consumers and dead-letter topic."""
    store = log.store
    info = store.queue_info(group, topic) if isinstance(store, NamedConsumers) else None
    if info is None:
        raise UnknownGroup(f"queue group {group!r} does not exist on topic {topic!r}")
    dead_letter = str(info.get("dead_letter") or f"{topic}.dlq")
    if parts_of is not None:
        held = sum(p.records for p in parts_of.get(dead_letter, ()))
    else:
        try:
            held = sum(p.records for p in store.partitions(dead_letter))
        except UnknownTopic:  # no dead letter yet: the topic is made with the first
            held = 0
    consumers = len(store.queue_consumers(group, topic)) if isinstance(store, NamedConsumers) else 0
    return QueueGroupFigures(
        topic,
        group,
        queue_stats(log, topic, group),
        consumers,
        dead_letter,
        held,
        history.rising(f"queue:{topic}:{group}:depth") if history else False,
    )


def queue_handle(log: Log, topic: str, group: str) -> Queue:
    """A handle on an existing queue group (a form never makes one)."""
    if not isinstance(log.store, NamedConsumers) or log.store.queue_info(group, topic) is None:
        raise UnknownGroup(f"queue group {group!r} does not exist on topic {topic!r}")
    return log.queue(topic, group)


def queue_group_names(log: Log) -> list[tuple[str, str]]:
    return log.queue_groups() if isinstance(log.store, NamedConsumers) else []


def overview(log: Log, history: History) -> Overview:
    """Every topic, stream group and queue group, and what needs a look."""
    topics, parts_of = _topic_figures(log)
    queues = []
    for topic, group in queue_group_names(log):
        try:
            q = queue_group(log, topic, group, history, parts_of)
        except (UnknownTopic, UnknownGroup):
            continue
        queues.append(q)
        if q.dead_letter in topics:
            topics[q.dead_letter].dead_letters_of.append((topic, group))
    in_queues = {q.group for q in queues}
    streams = [stream_group(log, g, history, parts_of) for g in log.groups() if g not in in_queues]
    for t in topics.values():
        t.rate = history.rate(f"topic:{t.name}:end", RATE_WINDOW_MS)
    banners = []
    for s in streams:
        if s.growing:
            banners.append(
                {
                    "text": f"The lag of stream group {s.name} is growing ({s.lag} records behind).",
                    "href": f"/console/groups/{s.name}",
                }
            )
    for q in queues:
        if q.growing:
            banners.append(
                {
                    "text": f"The backlog of queue group {q.group} on {q.topic} is growing ({q.depth} waiting).",
                    "href": f"/console/queues/{q.topic}/{q.group}",
                }
            )
    banners += dead_letter_banners(log, queues)
    return Overview(sorted(topics.values(), key=lambda t: t.name), streams, queues, banners)


SHARED_DEAD_LETTERS_READ = 1000  # dead letters read to tell apart the groups sharing a dead-letter topic


def dead_letter_banners(log: Log, queues: list[QueueGroupFigures]) -> list[dict[str, str]]:
    """One banner a queue group with dead letters waiting. A dead-letter topic
    written by one group is that group's; one several groups share (every
    group of a topic writes to `<topic>.dlq` by default) is read, and each
    dead letter counted for the group its stamp names."""
    writers: dict[str, list[QueueGroupFigures]] = {}
    for q in queues:
        if q.dead_letter_records:
            writers.setdefault(q.dead_letter, []).append(q)
    banners = []
    for dead_letter, groups in writers.items():
        counts: Counter[tuple[str, str | None]]
        if len(groups) == 1:
            counts = Counter({(groups[0].topic, groups[0].group): groups[0].dead_letter_records})
        else:
            read = dead_letters_page(log, dead_letter, SHARED_DEAD_LETTERS_READ)
            counts = Counter((d.origin_topic or "?", d.origin_group) for d in read)
        for (topic, group), n in sorted(counts.items(), key=lambda c: (c[0][0], c[0][1] or "")):
            if group is None:  # dead-lettered before groups were stamped
                text, href = f"of {topic} (group not recorded)", f"/console/topics/{dead_letter}"
            else:
                text, href = (
                    f"of queue group {group} on {topic}",
                    f"/console/queues/{topic}/{group}#dead-letters",
                )
            banners.append(
                {"text": f"Dead-letter topic {dead_letter} holds {n} record(s) {text}.", "href": href}
            )
    return banners


def sample_values(ov: Overview) -> dict[str, float]:
    """The series one sample adds to the history."""
    values: dict[str, float] = {}
    for t in ov.topics:
        values[f"topic:{t.name}:end"] = t.end
    for s in ov.stream_groups:
        values[f"group:{s.name}:lag"] = s.lag
    for q in ov.queue_groups:
        values[f"queue:{q.topic}:{q.group}:depth"] = q.depth
        values[f"queue:{q.topic}:{q.group}:dead"] = q.stats.dead_lettered
    return values


def finished_per_second(history: History, topic: str, group: str) -> list[tuple[int, float]]:
    """A queue group's acks (and dead letters) per second between samples: what
    was appended to its topic minus how much its backlog grew."""
    ends = dict(history.points(f"topic:{topic}:end"))
    depth = history.points(f"queue:{topic}:{group}:depth")
    out = []
    for (t0, d0), (t1, d1) in zip(depth, depth[1:]):
        if t0 in ends and t1 in ends and t1 > t0:
            out.append((t1, max(0.0, ((ends[t1] - ends[t0]) - (d1 - d0)) * 1000 / (t1 - t0))))
    return out


def groups_of_topic(log: Log, topic: str) -> tuple[list[GroupLag], list[str]]:
    """The stream groups that read a topic (committed on it, or a live member
    subscribes to it) with their lag rows on it, and the topic's queue groups."""
    rows = []
    queue_names = [g for t, g in queue_group_names(log) if t == topic]
    for g in log.groups():
        if g in queue_names:
            continue
        subscribed = any(topic in m.topics for m in log.group(g).members())
        rows += [r for r in log.describe_group(g, [topic] if subscribed else None) if r.topic == topic]
    return rows, queue_names


def dead_letters_page(log: Log, dead_letter: str, limit: int = 100) -> list[DeadLetter]:
    try:
        return dead_letters(log, dead_letter, 0, limit)
    except UnknownTopic:
        return []
