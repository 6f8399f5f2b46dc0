"""Stream groups that coordinate themselves through the store.

    with log.consumer("order-processors", topics=["orders"]) as c:
        for msg in c.poll(timeout=1.0):
            process(msg)
        c.commit()

Members find each other in the store; joining, leaving and a member going
silent for `session_timeout` each start a rebalance. A partition moves only
after its owner released it (in `poll` or `close`, after `on_revoke` ran and
could commit) or the owner's session expired, so no partition is held by
two live members. Commits are fenced: a member that no longer owns a
partition, or whose generation is older than its ownership, is refused.
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from .assignors import ASSIGNORS
from .bounds import MAX_OFFSET
from .config import check_int, check_name
from .coordinator import rebalance
from .core import Core
from .errors import (
    GroupError,
    InvalidRequest,
    NotAssigned,
    OffsetOutOfRange,
    StaleGeneration,
    UnknownTopic,
)
from .notify import long_poll
from .positions import check_auto_reset, reset_position
from .records import Message, make_messages
from .store.base import GroupMember, GroupSync

TopicPartition = tuple[str, int]
Callback = Callable[[list[TopicPartition]], Any]


def _member_id() -> str:
    host = "".join(c if c.isalnum() or c in "._-" else "-" for c in socket.gethostname())[:60]
    return f"{host}-{os.getpid()}-{secrets.token_hex(4)}"


class GroupConsumer:
    """A member of a stream group with automatic partition assignment."""

    def __init__(
        self,
        log: Core,
        group: str,
        topics: Iterable[str],
        *,
        session_timeout: float = 10.0,
        heartbeat_interval: float | None = None,
        assignor: str = "range",
        on_assign: Callback | None = None,
        on_revoke: Callback | None = None,
        start: str = "earliest",
        auto_reset: str = "earliest",
        member_id: str | None = None,
    ):
        self.log = log
        self.group = check_name("group", group)
        self.topics = sorted(
            {check_name("topic", t) for t in ([topics] if isinstance(topics, str) else topics)}
        )
        if not self.topics:
            raise InvalidRequest("a group consumer needs at least one topic")
        if assignor not in ASSIGNORS:
            raise InvalidRequest(f"assignor must be one of {', '.join(ASSIGNORS)}, got {assignor!r}")
        if start not in ("earliest", "latest"):
            raise InvalidRequest(f"start must be 'earliest' or 'latest', got {start!r}")
        if (
            isinstance(session_timeout, bool)
            or not isinstance(session_timeout, (int, float))
            or not (0.1 <= session_timeout <= 3600)
        ):
            raise InvalidRequest(f"session_timeout must be 0.1 to 3600 seconds, got {session_timeout!r}")
        self.auto_reset = check_auto_reset(auto_reset)
        self.member_id = check_name("member", member_id) if member_id else _member_id()
        self.session_ms = int(session_timeout * 1000)
        self.assignor = assignor
        self._rebalance = functools.partial(rebalance, assign=ASSIGNORS[assignor])
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.start = start
        self.generation = 0
        self._owned: list[TopicPartition] = []
        self._revoke: list[TopicPartition] = []
        self._position: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._rotate = 0
        self._lock = threading.RLock()
        # Held across a membership call and the applying of its view (with
        # the callbacks): views are applied in the order the store gave them,
        # and a revoke never overtakes the on_assign of the same partition.
        self._membership = threading.RLock()
        self._closed = False
        self._stop = threading.Event()
        for topic in self.topics:
            log.catalog.shape(topic, create=True)
        sync = log.store.group_join(
            self.group, self.member_id, self.topics, self.session_ms, assignor, log.clock(), self._rebalance
        )
        self._apply(sync)
        interval = session_timeout / 3 if heartbeat_interval is None else heartbeat_interval
        self._heartbeat_thread = None
        if interval:
            self._heartbeat_thread = threading.Thread(
                target=self._heartbeat_loop,
                args=(interval,),
                name=f"tidelog-heartbeat-{self.group}",
                daemon=True,
            )
            self._heartbeat_thread.start()

    # membership --------------------------------------------------------------

    def _apply(self, sync: GroupSync) -> None:
        """Take a new view: new partitions start at committed + 1."""
        with self._lock:
            self.generation = sync.generation
            added = [tp for tp in sync.owned if tp not in self._owned]
            gone = [tp for tp in self._owned if tp not in sync.owned]
            for tp in gone:  # lost without a release: our session had expired
                self._position.pop(tp, None)
            for tp in added:
                committed = self.log.store.committed(self.group, *tp)
                if committed == 0 and self.start == "latest":
                    committed = self.log.store.partitions(tp[0])[tp[1]].last_offset
                self._position[tp] = committed
                self._committed[tp] = committed
            self._owned = list(sync.owned)
            self._revoke = list(sync.revoke)
        if added and self.on_assign:
            self.on_assign(added)

    def heartbeat(self) -> None:
        """Tell the group this member is alive and pick up assignment changes.

        Runs in the background every `heartbeat_interval`; call it yourself
        when that is 0.
        """
        with self._membership:
            if self._closed:
                return
            sync = self.log.store.group_heartbeat(
                self.group, self.member_id, self.log.clock(), self._rebalance
            )
            self._apply(sync)

    def _heartbeat_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.heartbeat()
            except StaleGeneration:
                # Our session expired (a long pause): join again as new.
                try:
                    with self._membership:
                        sync = self.log.store.group_join(
                            self.group,
                            self.member_id,
                            self.topics,
                            self.session_ms,
                            self.assignor,
                            self.log.clock(),
                            self._rebalance,
                        )
                        self._apply(sync)
                except GroupError:
                    pass
            except Exception:  # keep heartbeating through passing store errors
                pass

    def _release_revoked(self) -> None:
        with self._lock:
            if not any(tp in self._owned for tp in self._revoke):
                return  # the common case: no need to wait for a heartbeat in flight
        with self._membership:
            with self._lock:
                revoke = [tp for tp in self._revoke if tp in self._owned]
            if not revoke:
                return
            if self.on_revoke:
                self.on_revoke(revoke)  # the application may commit here
            self.release(revoke)

    def revoking(self) -> list[TopicPartition]:
        """Partitions held now but assigned elsewhere: commit them, then release."""
        with self._lock:
            return [tp for tp in self._revoke if tp in self._owned]

    def release(self, partitions: Iterable[TopicPartition]) -> None:
        """Give up held partitions now (poll does this for the revoked ones,
        after `on_revoke`); a remote member's front calls it when told to."""
        with self._membership:
            with self._lock:
                held = [tp for tp in partitions if tp in self._owned]
                for tp in held:
                    self._position.pop(tp, None)
                    self._committed.pop(tp, None)
                # Released means no longer ours: one handed straight back (the
                # member set changed again meanwhile) is newly assigned, with a
                # position from the committed offset and its on_assign.
                self._owned = [tp for tp in self._owned if tp not in held]
            sync = self.log.store.group_release(
                self.group, self.member_id, held, self.log.clock(), self._rebalance
            )
            self._apply(sync)

    def set_position(self, topic: str, partition: int, offset: int) -> None:
        """Move where this member's next poll of a held partition starts
        (after `offset`), without touching the committed offset."""
        with self._lock:
            if (topic, partition) not in self._position:
                raise NotAssigned(f"{topic!r}/{partition} is not held by member {self.member_id!r}")
            self._position[(topic, partition)] = offset

    def assignment(self) -> list[TopicPartition]:
        """The (topic, partition) pairs this member holds now."""
        with self._lock:
            return list(self._owned)

    # consuming ---------------------------------------------------------------

    def poll(self, timeout: float = 1.0, max_messages: int = 500) -> list[Message]:
        """Records from the member's partitions; waits up to `timeout` for one."""
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
            raise InvalidRequest(f"max_messages must be a positive integer, got {max_messages!r}")
        if self._closed:
            raise GroupError("this consumer is closed")
        notifier = self.log.notifier

        def read() -> list[Message]:
            self._release_revoked()
            return self._fetch(max_messages)

        # Half a second at most between reads: revoked partitions are released from here.
        return long_poll(read, max(0.0, timeout), notifier.version, notifier.wait, due_in=lambda _: 0.5)

    def _fetch(self, max_messages: int) -> list[Message]:
        with self._lock:
            owned = list(self._owned)
        if not owned:
            return []
        # Start each poll one partition further, so none starves under a limit.
        first = self._rotate % len(owned)
        self._rotate = first + 1
        out: list[Message] = []
        for tp in owned[first:] + owned[:first]:
            left = max_messages - len(out)
            if left <= 0:
                break
            with self._lock:
                after = self._position.get(tp)
            if after is None:
                continue
            try:
                rows = self.log.store.read(tp[0], tp[1], after, left)
            except OffsetOutOfRange as e:
                after = reset_position(self.log.store, tp[0], tp[1], e, self.auto_reset)
                rows = self.log.store.read(tp[0], tp[1], after, left)
                with self._lock:
                    if tp in self._position and not rows:
                        self._position[tp] = after
            if rows:
                with self._lock:
                    if tp in self._position:
                        self._position[tp] = rows[-1][0]
                out.extend(make_messages(tp[0], tp[1], rows))
        return out

    def commit(self, msg: Message | None = None) -> None:
        """Commit the position of everything poll returned, or up to `msg`.

        Raises NotAssigned / StaleGeneration when this member no longer owns
        a partition; nothing is committed for that partition then.
        """
        if msg is not None:
            self._commit_one((msg.topic, msg.partition), msg[0])
            return
        with self._lock:
            pending = [(tp, pos) for tp, pos in self._position.items() if pos > self._committed.get(tp, 0)]
        for tp, pos in pending:
            self._commit_one(tp, pos)

    def _commit_one(self, tp: TopicPartition, offset: int) -> None:
        self.log.store.group_commit(self.group, self.member_id, self.generation, tp[0], tp[1], offset)
        with self._lock:
            if offset > self._committed.get(tp, 0):
                self._committed[tp] = offset

    def close(self) -> None:
        """Leave the group: `on_revoke` runs for everything held, then the
        partitions go to the remaining members."""
        if self._closed:
            return
        self._stop.set()
        if self._heartbeat_thread is not None:
            self._heartbeat_thread.join(timeout=5)
        with self._lock:
            held = list(self._owned)
        try:
            if held and self.on_revoke:
                self.on_revoke(held)
        finally:
            self._closed = True
            self.log.store.group_leave(self.group, self.member_id, self.log.clock(), self._rebalance)
            with self._lock:
                self._owned, self._position = [], {}

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class GroupLag(NamedTuple):
    """A stream group's progress on one partition: committed offset, end offset, lag."""

    group: str
    topic: str
    partition: int
    committed: int
    last_offset: int
    lag: int


def describe_group(log: Core, group: str, topics: Iterable[str] | None = None) -> list[GroupLag]:
    """`Log.describe_group`: committed offset, end offset and lag per
    partition of the topics `group` committed on, plus `topics`."""
    check_name("group", group)
    committed = {(o.topic, o.partition): o.committed for o in log.store.group_offsets(group)}
    names = sorted({t for t, _ in committed} | set(topics or ()))
    out = []
    for name in names:
        check_name("topic", name)
        try:
            parts = log.store.partitions(name)
        except UnknownTopic:
            continue
        for p in parts:
            done = committed.get((name, p.partition), 0)
            out.append(GroupLag(group, name, p.partition, done, p.last_offset, max(0, p.last_offset - done)))
    return out


class Group:
    """A view of a stream group: members, generation, assignment, lag."""

    def __init__(self, log: Core, name: str):
        self.log = log
        self.name = check_name("group", name)

    def members(self) -> list[GroupMember]:
        """The group's live members and the partitions each holds."""
        return self.log.store.group_members(self.name)

    def commit(self, member: str, generation: int, topic: str, partition: int, offset: int) -> None:
        """A fenced commit on behalf of `member` at `generation` (a remote
        member's): NotAssigned / StaleGeneration as for `GroupConsumer.commit`."""
        check_name("member", member)
        check_name("topic", topic)
        check_int("generation", generation, 0, MAX_OFFSET)
        check_int("partition", partition, 0)
        check_int("offset", offset, 0, MAX_OFFSET)
        self.log.store.group_commit(self.name, member, generation, topic, partition, offset)

    def describe(self) -> dict[str, Any]:
        """The group's generation, members and assignment."""
        members = self.members()
        topics = sorted({t for m in members for t in m.topics})
        owners = {tp: m.member for m in members for tp in m.partitions}
        return {
            "group": self.name,
            "generation": members[0].generation if members else None,
            "members": [
                {"member": m.member, "topics": m.topics, "partitions": [list(tp) for tp in m.partitions]}
                for m in members
            ],
            "partitions": [
                {
                    "topic": lag.topic,
                    "partition": lag.partition,
                    "owner": owners.get((lag.topic, lag.partition)),
                    "committed": lag.committed,
                    "last_offset": lag.last_offset,
                    "lag": lag.lag,
                }
                for lag in describe_group(self.log, self.name, topics)
            ],
        }


__all__ = ["Group", "GroupConsumer", "GroupLag", "NotAssigned", "StaleGeneration", "describe_group"]
