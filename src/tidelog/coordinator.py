"""The stream-group rebalance, written once for every store.

A store runs each membership change (join, heartbeat, release, leave) as one
transaction that holds the group's lock, and inside it calls the `Rebalance`
the core handed it: `rebalance` below, with the group's assignor bound. The
store offers the handful of primitives it needs (`store.base.Rebalancing`),
each a statement or two in its dialect; the policy is here:

1. members whose session ran out (heartbeat + session timeout < now) leave,
   and the partitions they held are free;
2. the group's layout is fingerprinted: its members with their topics, and
   the partition ids of those topics (ids, not counts: a topic deleted and
   made again under its name is new partitions);
3. when the fingerprint changed, the generation moves on and the assignor
   computes new targets from the current owners (so sticky can keep them);
4. a partition changes hands only once nobody holds it: free partitions go
   to their target, stamped with the generation that handed them over;
5. the caller learns what it holds and what it must give back (held, but
   targeted elsewhere): it commits, then releases them.
"""

from __future__ import annotations

import json

from .store.base import Assign, GroupSync, Rebalancing


def rebalance(tx: Rebalancing, member: str | None, now: int, *, assign: Assign) -> GroupSync:
    """Expire, re-assign when the layout changed, hand over; `member`'s view.

    `member` is None when the caller is leaving (nothing to report back).
    """
    members: dict[str, list[str]] = {}
    expired = []
    for name, topics, session_ms, heartbeat in tx.members():
        if heartbeat + session_ms < now and name != member:
            expired.append(name)
        else:
            members[name] = topics
    if expired:
        tx.expire(expired)
    layout = tx.partition_ids(sorted({t for ts in members.values() for t in ts}))
    generation, members_key, layout_key = tx.state()
    new_members = json.dumps(sorted(members.items()))
    new_layout = json.dumps(sorted(layout.items()))
    if new_members != members_key or new_layout != layout_key:
        generation += 1
        targets = assign(members, {t: len(pids) for t, pids in layout.items()}, tx.owners())
        rows = sorted(
            (pid, topic, partition, targets.get((topic, partition)))
            for topic, pids in layout.items()
            for partition, pid in enumerate(pids)
        )  # by partition id: concurrent writers of these rows lock them in one order
        tx.set_targets(rows)
        tx.set_state(generation, new_members, new_layout)
    tx.hand_over(generation)
    if member is None:
        return GroupSync(generation, [], [])
    owned, revoke = [], []
    for topic, partition, target in tx.held(member):
        owned.append((topic, partition))
        if target != member:
            revoke.append((topic, partition))
    return GroupSync(generation, owned, revoke)
