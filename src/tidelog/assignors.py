"""Partition assignors for stream groups: range, roundrobin, sticky.

Each takes the live members with their subscriptions, the partition count of
every subscribed topic and the current owner of each partition, and returns
the member each (topic, partition) should go to. Pure functions: the store
calls them inside the transaction that rebalances.
"""

from __future__ import annotations

from collections.abc import Callable

Members = dict[str, list[str]]
Layout = dict[str, int]
Current = dict[tuple[str, int], str | None]
Targets = dict[tuple[str, int], str]


def range_assignor(members: Members, layout: Layout, current: Current) -> Targets:
    """Kafka's range: per topic, contiguous ranges; earlier members get one extra."""
    out: Targets = {}
    for topic, count in sorted(layout.items()):
        subscribed = sorted(m for m, topics in members.items() if topic in topics)
        if not subscribed:
            continue
        base, extra = divmod(count, len(subscribed))
        start = 0
        for i, member in enumerate(subscribed):
            size = base + (1 if i < extra else 0)
            for partition in range(start, start + size):
                out[(topic, partition)] = member
            start += size
    return out


def roundrobin_assignor(members: Members, layout: Layout, current: Current) -> Targets:
    """Kafka's round robin: all partitions in order, dealt to members in turn
    (skipping members not subscribed to a partition's topic)."""
    out: Targets = {}
    ring = sorted(members)
    if not ring:
        return out
    i = 0
    for topic, count in sorted(layout.items()):
        subscribed = {m for m in ring if topic in members[m]}
        if not subscribed:
            continue
        for partition in range(count):
            while ring[i % len(ring)] not in subscribed:
                i += 1
            out[(topic, partition)] = ring[i % len(ring)]
            i += 1
    return out


def sticky_assignor(members: Members, layout: Layout, current: Current) -> Targets:
    """Keep partitions where they are; move only what balance requires.

    Each member may keep up to its fair share (rounded up) of what it is
    subscribed to; partitions beyond that, and those of departed members,
    go to the subscribed member holding the fewest.
    """
    out: Targets = {}
    partitions = [(t, p) for t, count in sorted(layout.items()) for p in range(count)]
    if not members:
        return out
    load = {m: 0 for m in members}
    total = len(partitions)
    quota = -(-total // len(members))  # ceil
    loose = []
    for tp in partitions:
        owner = current.get(tp)
        if owner in members and tp[0] in members[owner] and load[owner] < quota:
            out[tp] = owner
            load[owner] += 1
        else:
            loose.append(tp)
    for tp in loose:
        subscribed = [m for m in members if tp[0] in members[m]]
        if not subscribed:
            continue
        member = min(subscribed, key=lambda m: (load[m], m))
        out[tp] = member
        load[member] += 1
    # A member below the floor takes from the most loaded (only those that
    # share a topic with it), so a newcomer gets work even when every
    # existing member sat at the ceiling.
    floor = total // len(members)
    for member in sorted(members):
        while load[member] < floor:
            donors = [
                tp for tp, m in out.items() if tp[0] in members[member] and load[m] > floor and m != member
            ]
            if not donors:
                break
            tp = max(donors, key=lambda x: (load[out[x]], x))
            load[out[tp]] -= 1
            out[tp] = member
            load[member] += 1
    return out


ASSIGNORS: dict[str, Callable[[Members, Layout, Current], Targets]] = {
    "range": range_assignor,
    "roundrobin": roundrobin_assignor,
    "sticky": sticky_assignor,
}
