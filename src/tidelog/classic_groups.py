"""Kafka's classic group protocol, written once for every store, beside `coordinator.py`.

In tidelog's own stream groups the store computes the assignment
(`coordinator.rebalance`); in Kafka's classic protocol the members do: they
all join, the coordinator picks one assignor they all support and a leader,
the leader computes the assignment and hands it back in its SyncGroup, and
each member gets its share. This module holds that protocol's policy; a
store runs each step as one transaction holding the group's lock over the
primitives of `store.base.ClassicGroupTx`, so a group survives a restart and
is coordinated across `serve` processes over PostgreSQL.

Phases (Kafka's states): empty (no members), preparing (a rebalance waits
for the members to join again), completing (everyone joined: the leader
owes the assignment), stable. The generation moves on when a rebalance
completes; heartbeats, commits and syncs from another generation are
refused. A member whose session runs out without a sign of life leaves, and
so does one that has not joined again by the rebalance's deadline (the
longest rebalance timeout of the members).

A step returns an outcome; `PENDING` tells the caller (the Kafka listener)
to look again later with the matching `*_poll` step, as a JoinGroup or
SyncGroup request waits for the other members. Errors are Kafka's own
words (`UNKNOWN_MEMBER_ID`, ...): the protocol is Kafka's.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from .errors import TidelogError
from .store.base import ClassicGroupStore, ClassicGroupTx, ClassicMember

T = TypeVar("T")

EMPTY, PREPARING, COMPLETING, STABLE = "empty", "preparing", "completing", "stable"

# Error words, as Kafka names them (the listener maps them to its codes).
UNKNOWN_MEMBER_ID = "unknown_member_id"
ILLEGAL_GENERATION = "illegal_generation"
REBALANCE_IN_PROGRESS = "rebalance_in_progress"
INCONSISTENT_GROUP_PROTOCOL = "inconsistent_group_protocol"
MEMBER_ID_REQUIRED = "member_id_required"
GROUP_ID_NOT_FOUND = "group_id_not_found"
NON_EMPTY_GROUP = "non_empty_group"
GROUP_SUBSCRIBED_TO_TOPIC = "group_subscribed_to_topic"


class Pending:
    """The step cannot answer yet: look again (`join_poll`, `sync_poll`)."""

    def __repr__(self) -> str:
        return "PENDING"


PENDING = Pending()


class Unchanged(Exception):
    """A step's answer that changes nothing (a refusal): raised inside the store's
    transaction so that it rolls back, taking with it the rows the lock made for a
    group never used, and `run` hands the answer on. A refused request writes
    nothing, as Kafka's coordinator keeps no group it did not make."""

    def __init__(self, answer: Any):
        super().__init__()
        self.answer = answer


def run(store: ClassicGroupStore, group: str, now: int, step: Callable[[ClassicGroupTx], T]) -> T:
    """Run a step in `group`'s transaction (`ClassicGroupStore.classic_run`); its answer."""
    try:
        return store.classic_run(group, now, step)
    except Unchanged as e:
        answer: T = e.answer
        return answer


class JoinRequest(NamedTuple):
    member: str  # "" for a new member
    instance: str | None
    client_id: str
    host: str
    session_ms: int
    rebalance_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (assignor, subscription metadata), preferred first
    require_member_id: bool  # JoinGroup v4+: a new member is first handed its id


class Joined(NamedTuple):
    """A JoinGroup's answer: the new generation, and for the leader every member's metadata."""

    error: str | None
    generation: int
    protocol_type: str
    protocol: str
    leader: str
    member: str
    members: list[tuple[str, str | None, bytes]]  # (member, instance, metadata) for the leader


class Synced(NamedTuple):
    error: str | None
    protocol_type: str
    protocol: str
    assignment: bytes


class Committed(NamedTuple):
    """An OffsetCommit's answer: a group-level error, or each partition's (None: written)."""

    error: str | None
    partitions: list[TidelogError | None]


# the members' protocols, packed for the store ---------------------------------------------

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


def encode_protocols(protocols: Sequence[tuple[str, bytes]]) -> bytes:
    """(assignor, metadata) pairs as one blob: u16 count, then u16 name length,
    name, u32 metadata length, metadata."""
    out = bytearray(_U16.pack(len(protocols)))
    for name, metadata in protocols:
        raw = name.encode()
        out += _U16.pack(len(raw)) + raw + _U32.pack(len(metadata)) + metadata
    return bytes(out)


def decode_protocols(blob: bytes) -> list[tuple[str, bytes]]:
    (count,) = _U16.unpack_from(blob, 0)
    at = 2
    out = []
    for _ in range(count):
        (n,) = _U16.unpack_from(blob, at)
        name = blob[at + 2 : at + 2 + n].decode()
        at += 2 + n
        (m,) = _U32.unpack_from(blob, at)
        out.append((name, bytes(blob[at + 4 : at + 4 + m])))
        at += 4 + m
    return out


# the policy ---------------------------------------------------------------------------------


def assigned_partitions(assignment: bytes) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of a consumer's assignment as the leader
    wrote it (Kafka's ConsumerProtocolAssignment: a version, then topics with
    their partitions, then user data), for a person to read; [] for anything
    else (another protocol type, an empty or short blob)."""
    out: list[tuple[str, int]] = []
    try:
        pos = 2  # the version
        (topics,) = struct.unpack_from(">i", assignment, pos)
        pos += 4
        for _ in range(max(0, topics)):
            (size,) = struct.unpack_from(">h", assignment, pos)
            topic = assignment[pos + 2 : pos + 2 + size].decode()
            pos += 2 + size
            (count,) = struct.unpack_from(">i", assignment, pos)
            pos += 4
            for p in struct.unpack_from(f">{max(0, count)}i", assignment, pos):
                out.append((topic, p))
            pos += 4 * max(0, count)
    except (struct.error, UnicodeDecodeError):
        return []
    return sorted(out)


class _Group:
    """A step's view of the group: its state and members, changed in place and written back."""

    def __init__(self, tx: ClassicGroupTx, now: int):
        self.tx = tx
        self.now = now
        self.state = tx.state()
        self.members = {m.member: m for m in tx.members()}
        self.changed = False  # whether this step wrote anything (an expiry, say)

    def put(self, member: ClassicMember) -> None:
        self.members[member.member] = member
        self.tx.put_member(member)
        self.changed = True

    def remove(self, names: list[str]) -> None:
        for name in names:
            self.members.pop(name, None)
        self.tx.remove_members(names)
        self.changed = self.changed or bool(names)

    def set_state(self, **changes: Any) -> None:
        self.state = self.state._replace(**changes)
        self.tx.set_state(self.state)
        self.changed = True

    def refuse(self, answer: T) -> T:
        """A refusal's answer: the transaction rolls back (`Unchanged`) unless the
        step wrote something that stands on its own (members whose session ran out)."""
        if not self.changed:
            raise Unchanged(answer)
        return answer

    def alive(self, member: str) -> ClassicMember | None:
        """A member, with its heartbeat made now (any request from it is a sign of life)."""
        m = self.members.get(member)
        if m is not None:
            m = m._replace(heartbeat=self.now)
            self.put(m)
        return m

    def expire(self) -> None:
        """Members whose session ran out leave; a stable group then rebalances."""
        gone = [m.member for m in self.members.values() if m.heartbeat + m.session_ms < self.now]
        if gone:
            self.remove(gone)
            self.rebalance()

    def rebalance(self, joining: str | None = None) -> None:
        """Start a rebalance (or end one with nobody left): every member but
        `joining` (who just did) must join again."""
        if not self.members:
            if self.state.phase != EMPTY:
                self.set_state(
                    generation=self.state.generation + 1, phase=EMPTY, protocol="", leader="", deadline=0
                )
            return
        if self.state.phase != PREPARING:
            for m in list(self.members.values()):
                if m.joined and m.member != joining:
                    self.put(m._replace(joined=False))
            deadline = self.now + max(m.rebalance_ms for m in self.members.values())
            self.set_state(phase=PREPARING, deadline=deadline)
        self.complete(joining)

    def complete(self, last: str | None = None) -> None:
        """End a rebalance once every member joined again (`last` the member
        whose JoinGroup did it), or its deadline passed."""
        if self.state.phase != PREPARING:
            return
        joined = [m for m in self.members.values() if m.joined]
        if len(joined) < len(self.members) and self.now < self.state.deadline:
            return
        self.remove([m.member for m in self.members.values() if not m.joined])
        if not joined:
            self.set_state(
                generation=self.state.generation + 1, phase=EMPTY, protocol="", leader="", deadline=0
            )
            return
        generation = self.state.generation + 1
        # The member whose JoinGroup completes the round leads: it is the one
        # answered inside its own request, while the others' answers arrive
        # whenever the round ends. A client that drops an answer which came
        # between two of its polls (kafka-python 3.0: `join_group_async`
        # replaces a finished join task) joins again; Kafka's coordinator
        # answers a follower's such rejoin with the current generation, but a
        # leader's with a new rebalance, and a leader that keeps its role
        # while it waits for the others drops every generation's answer (the
        # group never settles). Otherwise the leader stays, as in Kafka.
        if last is not None and last in self.members:
            leader = last
        elif self.state.leader in self.members:
            leader = self.state.leader
        else:
            leader = joined[0].member
        protocol = _choose(joined)
        # Each keeps its last assignment until the leader's SyncGroup hands out
        # the new ones (Kafka's DescribeGroups shows it meanwhile).
        for m in joined:
            self.put(m._replace(joined=False, generation=generation))
        self.set_state(generation=generation, phase=COMPLETING, protocol=protocol, leader=leader, deadline=0)

    def joined(self, member: str) -> Joined | Pending:
        m = self.members.get(member)
        if m is None:
            return self.refuse(_join_error(UNKNOWN_MEMBER_ID, member))
        s = self.state
        if s.phase == PREPARING or m.generation != s.generation:
            return PENDING
        members = []
        if member == s.leader:
            members = [
                (o.member, o.instance, dict(decode_protocols(o.protocols)).get(s.protocol, b""))
                for o in self.members.values()
                if o.generation == s.generation
            ]
        return Joined(None, s.generation, s.protocol_type, s.protocol, s.leader, member, members)


def _choose(members: list[ClassicMember]) -> str:
    """The assignor every member supports, by the members' votes (each votes
    for its most preferred of those), ties to the first member's order."""
    supported = [dict(decode_protocols(m.protocols)) for m in members]
    common = set(supported[0]).intersection(*supported[1:])
    first_order = [name for name, _ in decode_protocols(members[0].protocols) if name in common]
    votes = Counter(
        next(name for name, _ in decode_protocols(m.protocols) if name in common) for m in members
    )
    return max(first_order, key=lambda name: (votes[name], -first_order.index(name)))


def _join_error(error: str, member: str) -> Joined:
    return Joined(error, -1, "", "", "", member, [])


def join(
    request: JoinRequest, now: int, new_member_id: Callable[[], str]
) -> Callable[[ClassicGroupTx], Joined | Pending]:
    """A JoinGroup: the member joins (or rejoins) and the group rebalances;
    PENDING until the rebalance completes (then `join_poll`)."""

    def step(tx: ClassicGroupTx) -> Joined | Pending:
        g = _Group(tx, now)
        g.expire()
        member = request.member
        names = {name for name, _ in request.protocols}
        others = [m for m in g.members.values() if m.member != member]
        if not names or (
            others
            and (
                request.protocol_type != g.state.protocol_type
                or not names.intersection(*(dict(decode_protocols(m.protocols)) for m in others))
            )
        ):
            # Checked before a new member is handed an id, as Kafka does: the
            # answer names the member as the request did ("" for a new one).
            return _join_error(INCONSISTENT_GROUP_PROTOCOL, member)
        if not member:
            member = new_member_id()
            if request.require_member_id:
                # Handed its id before it counts (Kafka's KIP-394): a client
                # that times out and retries does not leave a ghost behind.
                return _join_error(MEMBER_ID_REQUIRED, member)
        protocols = encode_protocols(request.protocols)
        existing = g.members.get(member)
        s = g.state
        if (
            existing is not None
            and existing.protocols == protocols
            and existing.generation == s.generation
            and (s.phase == COMPLETING or (s.phase == STABLE and member != s.leader))
        ):
            # A rejoin that changes nothing: the current generation's answer
            # (the leader's rejoin in a stable group asks for a rebalance).
            g.alive(member)
            return g.joined(member)
        g.put(
            ClassicMember(
                member,
                request.instance,
                request.client_id,
                request.host,
                request.session_ms,
                request.rebalance_ms,
                now,
                protocols,
                True,
                existing.generation if existing else 0,
                existing.assignment if existing else b"",
            )
        )
        if not others:
            g.set_state(protocol_type=request.protocol_type)
        g.rebalance(joining=member)
        return g.joined(member)

    return step


def join_poll(member: str, now: int) -> Callable[[ClassicGroupTx], Joined | Pending]:
    """A waiting JoinGroup's next look (it keeps the member alive meanwhile)."""

    def step(tx: ClassicGroupTx) -> Joined | Pending:
        g = _Group(tx, now)
        g.expire()
        if g.alive(member) is None:
            return _join_error(UNKNOWN_MEMBER_ID, member)
        g.complete()
        return g.joined(member)

    return step


def sync(
    member: str,
    generation: int,
    assignments: dict[str, bytes] | None,
    now: int,
    protocol_type: str | None = None,
    protocol: str | None = None,
) -> Callable[[ClassicGroupTx], Synced | Pending]:
    """A SyncGroup: the leader's carries the assignment (`assignments`), every
    member's waits for it; PENDING until the leader's arrived (then `sync_poll`).
    A `protocol_type` or `protocol` named (SyncGroup v5) must be the group's."""

    def step(tx: ClassicGroupTx) -> Synced | Pending:
        g = _Group(tx, now)
        g.expire()
        s = g.state
        if member not in g.members:
            return g.refuse(Synced(UNKNOWN_MEMBER_ID, "", "", b""))
        if generation != s.generation:
            return g.refuse(Synced(ILLEGAL_GENERATION, "", "", b""))
        if (protocol_type is not None and protocol_type != s.protocol_type) or (
            protocol is not None and protocol != s.protocol
        ):
            return g.refuse(Synced(INCONSISTENT_GROUP_PROTOCOL, "", "", b""))
        if s.phase == PREPARING:
            return g.refuse(Synced(REBALANCE_IN_PROGRESS, "", "", b""))
        g.alive(member)
        if s.phase == COMPLETING and member == s.leader and assignments is not None:
            for m in list(g.members.values()):
                g.put(m._replace(assignment=assignments.get(m.member, b"")))
            g.set_state(phase=STABLE)
        if g.state.phase == STABLE:
            return Synced(None, s.protocol_type, s.protocol, g.members[member].assignment)
        return PENDING

    return step


def sync_poll(member: str, generation: int, now: int) -> Callable[[ClassicGroupTx], Synced | Pending]:
    """A waiting SyncGroup's next look."""
    return sync(member, generation, None, now)


def heartbeat(member: str, generation: int, now: int) -> Callable[[ClassicGroupTx], str | None]:
    """A Heartbeat: None, or the error that sends the member back to JoinGroup."""

    def step(tx: ClassicGroupTx) -> str | None:
        g = _Group(tx, now)
        g.expire()
        if member not in g.members:
            return g.refuse(UNKNOWN_MEMBER_ID)
        if generation != g.state.generation:
            return g.refuse(ILLEGAL_GENERATION)  # no sign of life either, as in Kafka
        g.alive(member)
        if g.state.phase == PREPARING:
            return REBALANCE_IN_PROGRESS
        return None

    return step


def leave(members: list[str], now: int) -> Callable[[ClassicGroupTx], list[str | None]]:
    """A LeaveGroup: each member's error (None: it left); the rest rebalance."""

    def step(tx: ClassicGroupTx) -> list[str | None]:
        g = _Group(tx, now)
        errors: list[str | None] = [None if m in g.members else UNKNOWN_MEMBER_ID for m in members]
        gone = [m for m in members if m in g.members]
        if not gone:
            return g.refuse(errors)
        if gone:
            g.remove(gone)
            g.rebalance()
        g.expire()
        return errors

    return step


def commit(
    member: str, generation: int, offsets: list[tuple[str, int, int, str]], now: int
) -> Callable[[ClassicGroupTx], Committed]:
    """An OffsetCommit of (topic, partition, offset, metadata): fenced by the
    member and its generation; generation -1 with no member is a commit from
    outside the group (a tool resetting offsets, a client assigning partitions
    itself), allowed while the group has no members. Each offset is the group's
    committed offset (Kafka sets it, backwards too), in the transaction that
    checked the fence; a negative one (kafkajs's -1 and -2) is kept as Kafka
    keeps it, and leaves the group nothing committed on the partition. A
    commit from outside that commits nothing (every partition refused, or
    none named) does not make the group, as Kafka's does not."""

    def step(tx: ClassicGroupTx) -> Committed:
        g = _Group(tx, now)
        g.expire()
        if generation < 0 and not member:
            if g.members:
                return g.refuse(Committed(UNKNOWN_MEMBER_ID, []))
        else:  # a refused commit changes nothing, not even the member's heartbeat
            if g.state.generation == 0 and not g.members and not tx.has_commits():
                # A group never used: Kafka's coordinator has no generation to hold it to.
                return g.refuse(Committed(ILLEGAL_GENERATION, []))
            if member not in g.members:
                return g.refuse(Committed(UNKNOWN_MEMBER_ID, []))
            if generation != g.state.generation:
                return g.refuse(Committed(ILLEGAL_GENERATION, []))
            if g.state.phase == COMPLETING:
                return g.refuse(Committed(REBALANCE_IN_PROGRESS, []))
            g.alive(member)
        results: list[TidelogError | None] = []
        for topic, partition, offset, metadata in offsets:
            try:
                tx.commit(topic, partition, offset, metadata)
                results.append(None)
            except TidelogError as e:
                results.append(e)
        if tx.made() and all(r is not None for r in results):
            return g.refuse(Committed(None, results))
        return Committed(None, results)

    return step


def _unknown(g: _Group) -> bool:
    """Whether Kafka would not know the group: no step kept it, and it has no
    commits (tidelog's own API may have committed for a stream group of the name).
    A group once known stays so, member-less and with nothing committed (after
    OffsetDelete took its last offset, or its members left), until DeleteGroups,
    as Kafka's does until its periodic cleanup."""
    return g.tx.made() and not g.tx.has_commits()


def delete(now: int) -> Callable[[ClassicGroupTx], str | None]:
    """A DeleteGroups of one group: refused while it has members
    (NON_EMPTY_GROUP); GROUP_ID_NOT_FOUND for a group Kafka would not know;
    else the group and its commits are gone."""

    def step(tx: ClassicGroupTx) -> str | None:
        g = _Group(tx, now)
        g.expire()
        if g.members:
            return NON_EMPTY_GROUP
        if _unknown(g):
            return g.refuse(GROUP_ID_NOT_FOUND)
        tx.delete_group()
        return None

    return step


def delete_offsets(
    partitions: list[tuple[str, int]], now: int
) -> Callable[[ClassicGroupTx], tuple[str | None, list[str | TidelogError | None]]]:
    """An OffsetDelete: (the group's error, each partition's). A partition of
    a topic the group's members are assigned is kept (GROUP_SUBSCRIBED_TO_TOPIC);
    GROUP_ID_NOT_FOUND for a group Kafka would not know. The group outlives its
    last offset."""

    def step(tx: ClassicGroupTx) -> tuple[str | None, list[str | TidelogError | None]]:
        g = _Group(tx, now)
        g.expire()
        if _unknown(g):
            return g.refuse((GROUP_ID_NOT_FOUND, []))
        used = {t for m in g.members.values() for t, _ in assigned_partitions(m.assignment)}
        results: list[str | TidelogError | None] = []
        for topic, partition in partitions:
            if topic in used:
                results.append(GROUP_SUBSCRIBED_TO_TOPIC)
                continue
            try:
                tx.delete_offsets(topic, partition)
                results.append(None)
            except TidelogError as e:
                results.append(e)
        return None, results

    return step


class KafkaCommitted(NamedTuple):
    """A partition's commit as a Kafka client reads it back (OffsetFetch)."""

    topic: str
    partition: int
    offset: int  # -1: nothing committed
    metadata: str


def kafka_committed(rows: list[tuple[str, int, int | None, int | None, str]]) -> list[KafkaCommitted]:
    """The store's commits of a group (`ClassicGroupStore.classic_commits`) as
    Kafka's client reads them: the Kafka commit as sent while it is the last
    word on its partition (the committed offset is still its offset, or a
    negative one left nothing committed), else the committed offset with no
    metadata (tidelog's own API committed since)."""
    out = []
    for topic, partition, committed, position, metadata in rows:
        if position is not None and (committed == position or (committed is None and position < 0)):
            out.append(KafkaCommitted(topic, partition, position, metadata))
        elif committed is not None:
            out.append(KafkaCommitted(topic, partition, committed, ""))
    return out
