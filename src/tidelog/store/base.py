"""The Store protocol: the narrow interface between the core and storage.

A store holds SQL and no policy. It names partitions by (topic, partition
number), raises UnknownTopic / UnknownPartition from the error tree when
they do not exist, and makes every write atomic: a call either happens whole
or changes nothing. Rows it returns from `read` are `Row`s in Message layout:

    (offset, timestamp, stored value, meta)

where the stored value is bytes (sent as bytes) or str (text or JSON, told
apart by the meta blob's format marker), exactly as `tidelog.records`
encodes them.

The contract is split by role (`LogStore`, `GroupStore`, `QueueStore`,
composed into `Store`); what only some stores offer is a runtime-checkable
capability (`NamedConsumers`, `QueueUpkeep`, `Cleanable`, `CleansRemotely`,
`RedrivesRemotely`, `JobStore`, `JobsRemotely`, `Watchable`, `Reclaimable`, `StreamingAppend`), tested with
`isinstance`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeVar, runtime_checkable

from ..errors import LeaseLost

# A record as a store returns it: (offset, timestamp, stored value, meta).
Row = tuple[int, int, bytes | str, bytes | None]
RowT = TypeVar("RowT")
# A record as a cleaner scans it: (offset, timestamp, bytes, meta or None, value is JSON null).
ScanRow = tuple[int, int, int, bytes | None, bool]


class Usage(NamedTuple):
    """What a partition's groups finished, for retention "consumed"."""

    stream: list[int]  # each stream group's committed offset
    queues: list[int]  # each queue group's finished prefix (offset before its lowest unfinished)
    in_flight: int | None  # the lowest offset any queue group holds in progress


class WireBatch(NamedTuple):
    """The bytes a client sent records in (a Kafka record batch), to keep
    beside them: `records` records, the last of them the last of the batch
    it rides on (a client's batch may be written as several batches of
    one timestamp each, all in one transaction). `size`: what the batch
    counts for against a read's byte limit (its records uncompressed)."""

    records: int
    data: bytes
    size: int


class AppendBatch(NamedTuple):
    """Records for one partition, encoded as `tidelog.records` does; a store
    that keeps wire batches (`KeepsWireBatches`) keeps `wire` beside them,
    the others ignore it."""

    topic: str
    partition: int
    timestamp: int
    values: Sequence[bytes | str]
    metas: Sequence[bytes | None] | None = None
    wire: WireBatch | None = None


class Leased(NamedTuple):
    """A record a queue group handed out, with its lease."""

    partition: int
    offset: int
    timestamp: int
    value: bytes | str
    meta: bytes | None
    delivery_count: int
    receipt: str
    deadline: int  # ms since epoch


# What `queue_settle` does to a lease.
ACK = "ack"
EXTEND = "extend"
RELEASE = "release"
# A lease that never reached a member (a front leased it ahead and the
# client left or answered so that another record must come first): back to
# the front, and its delivery does not count toward max deliveries.
RETURN = "return"


class Settle(NamedTuple):
    """One lease to settle in `QueueStore.queue_settle`."""

    action: str  # ACK, EXTEND, RELEASE or RETURN
    partition: int
    offset: int
    receipt: str
    time: int = 0  # EXTEND: the new deadline; RELEASE: when the record is due again (ms since epoch)
    behind: bool = False  # RELEASE: behind every record of the group due at `time` or before


class QueueStats(NamedTuple):
    available: int
    in_flight: int
    delayed: int
    dead_lettered: int
    oldest_available_age_ms: int


# Leasing: what a store offers `tidelog.leasing` inside a receive's
# transaction (the model is `Rebalancing` for `tidelog.coordinator`). The
# store reads and writes rows; the core chooses which records to lease.


class StateRow(NamedTuple):
    """A record in a queue group's state (released, expired, delayed, passed over or leased)."""

    partition: int
    offset: int
    due: int  # ms since epoch it is (or was) due; 0: nacked to the front
    seq: int  # the tie-breaker of a nack to the back among records due at once (0: none)
    deliveries: int  # deliveries so far
    priority: int


class NewRow(NamedTuple):
    """A record past a partition's cursor, not yet in the group's state (a `Row`)."""

    offset: int
    timestamp: int
    value: bytes | str
    meta: bytes | None


class NewRecords(NamedTuple):
    """A partition's records past the group's cursor, in offset order, a
    column a field (a receive reads its whole window again at every receive
    until the cursor passes it: no object a record)."""

    offsets: Sequence[int]
    timestamps: Sequence[int]
    values: Sequence[bytes | str]
    metas: Sequence[bytes | None]

    def row(self, i: int) -> NewRow:
        """The i-th record."""
        return NewRow(self.offsets[i], self.timestamps[i], self.values[i], self.metas[i])

    @classmethod
    def of(cls, rows: Sequence[Sequence[Any]]) -> NewRecords:
        """From (offset, timestamp, value, meta) rows."""
        if not rows:
            return cls((), (), (), ())
        offsets, timestamps, values, metas = zip(*rows)
        return cls(offsets, timestamps, values, metas)


class Candidates(NamedTuple):
    """What a receive may lease (`LeaseTx.candidates`)."""

    due: list[StateRow]  # state rows due now
    new: dict[int, NewRecords]  # by partition: records past its cursor


class Take(NamedTuple):
    """A record a `LeasePlan` leases: a state row again (`new` None) or a new record."""

    partition: int
    offset: int
    receipt: str
    deliveries: int  # deliveries before this one
    priority: int  # a new record's, kept in its state row
    key: bytes | None  # a new record's ordering key, kept in its state row
    new: NewRow | None


class Park(NamedTuple):
    """A new record that enters the group's state without a lease (delayed or passed over)."""

    partition: int
    offset: int
    due: int
    priority: int
    key: bytes | None


class LeasePlan(NamedTuple):
    """What a receive writes, in one step (`LeaseTx.apply`)."""

    takes: list[Take]  # in the order they are handed out
    parks: list[Park]
    deadline: int  # the leases' deadline (ms since epoch)
    now: int
    limit: int  # fewer leases than this: tell the next due time too


@runtime_checkable
class LeaseTx(Protocol):
    """A queue group's leasing primitives, inside one receive's transaction.

    `tidelog.leasing` chooses over them (priority, due time, key order, the
    window); each is a statement or two in the store's dialect. Partitions
    are numbered as the topic's. Keys are the records' ordering keys, as the
    core read them from meta and kept in the state rows (`Take.key`,
    `Park.key`).
    """

    @property
    def partitions(self) -> int:
        """How many partitions the topic has."""

    def lease_next(self, now: int, deadline: int, receipts: Sequence[str], window: int) -> list[Leased]:
        """The common receive in one statement a record: on a one-partition
        topic, lease the next new record (with `receipts[i]`, the i-th) while
        nothing in the group's state is due and no record within `window` -
        i of the cursor carries a meta blob (so none has a delay, a priority
        or a key: the record the general path would choose first). Stops at
        the first that does not hold; [] from a store without such a
        statement. A single lease may commit on its own; more join the
        receive's transaction."""

    def candidates(self, now: int, limit: int, window: int, ordered: bool) -> Candidates:
        """Per partition, up to `limit` state rows due at `now` (highest
        priority, then due, seq, offset; `ordered`: only the earliest of
        each key in the state) and the first `window` records past the
        cursor. UnknownGroup when the group does not exist on the topic."""

    def held(self, pairs: list[tuple[int, bytes]]) -> set[tuple[int, bytes]]:
        """Of (partition, key) pairs, those with a record in the group's
        state (waiting, delayed or in flight)."""

    def apply(self, plan: LeasePlan) -> tuple[list[Leased], int | None]:
        """Lease `plan.takes` until `plan.deadline` (a state row whose record
        retention removed meanwhile is dropped, not leased), park
        `plan.parks` (the cursor moves past every new record taken or
        parked). Returns the leases in plan order and, when fewer than
        `plan.limit`, the next due time after `plan.now` in the group's
        state (None when nothing waits)."""


@runtime_checkable
class LeasePolicy(Protocol):
    """How a queue group leases (`tidelog.leasing.ReceivePolicy`): data a
    store may forward over a wire, and the choosing a SQL store runs inside
    its transaction over a `LeaseTx`."""

    @property
    def lease_ms(self) -> int:
        """The visibility timeout: how long a lease lasts."""

    @property
    def window(self) -> int:
        """How many new records past each cursor a receive looks at (at least its limit)."""

    @property
    def ordered(self) -> bool:
        """One record a key in flight, in offset order (ordering "key")."""

    @property
    def priority(self) -> bool:
        """Higher priority first (else every record counts as 0)."""

    def lease(self, tx: LeaseTx, now: int, limit: int) -> tuple[list[Leased], int | None]:
        """Lease up to `limit` records; returns them and the next due time
        of what still waits when fewer came (None otherwise)."""

    def due(self, timestamp: int, meta: bytes | None) -> int:
        """When a new record becomes available (its deliver-at, else its append)."""

    def available_since(self, rows: Iterable[tuple[int, bytes | None]]) -> int | None:
        """The earliest time one of these waiting records became available
        ((timestamp, meta), oldest append first), or None (queue stats' age)."""

    def peek(
        self,
        waiting: list[StateRow],
        cursors: list[int],
        read: Callable[[int, int, int], list[Row]],
        now: int,
        limit: int,
    ) -> list[Waiting]:
        """`QueueUpkeep.queue_peek`'s answer from the state rows not in
        flight and each partition's cursor; `read(partition, after, limit)`
        is the store's read of the topic."""


class GroupSync(NamedTuple):
    """A stream group member's view after a join, heartbeat or release."""

    generation: int
    owned: list[tuple[str, int]]  # (topic, partition) the member holds now
    revoke: list[tuple[str, int]]  # held, but assigned elsewhere: release after committing


# assign(members: {member: [topics]}, layout: {topic: partition count},
#        current: {(topic, partition): owner or target}) -> {(topic, partition): member}
Assign = Callable[
    [dict[str, list[str]], dict[str, int], dict[tuple[str, int], str | None]], dict[tuple[str, int], str]
]


class Rebalancing(Protocol):
    """What a store offers the rebalance (`tidelog.coordinator`) inside one
    transaction that holds a stream group's lock: each is a statement or two."""

    def members(self) -> list[tuple[str, list[str], int, int]]:
        """(member, topics, session_ms, last heartbeat ms) of every member."""

    def expire(self, members: list[str]) -> None:
        """Remove these members and free the partitions they held."""

    def partition_ids(self, topics: list[str]) -> dict[str, list[int]]:
        """Each existing topic's partition ids, in partition order."""

    def state(self) -> tuple[int, str, str]:
        """(generation, members fingerprint, layout fingerprint) as stored."""

    def owners(self) -> dict[tuple[str, int], str | None]:
        """Each assigned partition's owner, else its target."""

    def set_targets(self, rows: list[tuple[int, str, int, str | None]]) -> None:
        """Store (partition id, topic, partition, target) rows, sorted by id,
        and forget the group's rows for any other partition id."""

    def set_state(self, generation: int, members: str, layout: str) -> None: ...

    def hand_over(self, generation: int) -> None:
        """Give every partition nobody holds to its target, at `generation`."""

    def held(self, member: str) -> list[tuple[str, int, str | None]]:
        """(topic, partition, target) of what `member` holds, by topic and partition."""


# The core's rebalance with the group's assignor bound: rebalance(tx, member, now).
Rebalance = Callable[[Rebalancing, str | None, int], GroupSync]


class GroupMember(NamedTuple):
    member: str
    topics: list[str]
    session_ms: int
    heartbeat: int  # ms since epoch
    partitions: list[tuple[str, int]]
    generation: int


class Replayed(NamedTuple):
    """What `append_many` returns for a txn id it recorded before.

    Nothing new was written; this is that earlier write's result, so a
    retried write gets the same answer as the one that succeeded.
    """

    timestamp: int
    batches: list[tuple[str, int, int, int]]  # (topic, partition, first offset, count)


class Pending(NamedTuple):
    """A leased record held by a named consumer (Redis's pending entry)."""

    partition: int
    offset: int
    consumer: str | None
    delivered: int  # ms since epoch of the last delivery or claim
    delivery_count: int
    deadline: int = 0  # ms since epoch when the lease runs out (the record is due again)


class PendingSummary(NamedTuple):
    """A queue group's leases on a partition, as Redis's XPENDING summary."""

    leases: int
    first: int | None  # lowest leased offset
    last: int | None  # highest leased offset
    consumers: list[tuple[str | None, int]]  # (consumer, leases held), by name


class Waiting(NamedTuple):
    """A record a queue group holds for a receive, as `QueueUpkeep.queue_peek` lists it."""

    partition: int
    offset: int
    timestamp: int
    value: bytes | str  # as a Row holds it
    meta: bytes | None
    delivery_count: int  # deliveries so far (0: never handed out)
    due: int  # ms since epoch it is (or was) due; 0: nacked to the front
    priority: int
    delayed: bool  # not due yet


class ConsumerInfo(NamedTuple):
    name: str
    pending: int
    seen: int  # ms of its last attempted read or claim
    active: int | None  # ms of its last successful one; None when none yet


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    config: dict[str, Any] = field(default_factory=dict)
    created: int = 0  # ms since epoch


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    first_offset: int  # offset of the oldest record held; last + 1 when empty
    last_offset: int  # offset of the newest record ever appended; 0 when none
    records: int  # how many records the partition holds now
    bytes: int = 0  # value and meta bytes held now


class PartitionOffsets(NamedTuple):
    """A partition's offsets without its figures: what a planner needs."""

    partition: int
    first_offset: int  # as PartitionInfo's
    last_offset: int


@dataclass(frozen=True)
class GroupOffset:
    group: str
    topic: str
    partition: int
    committed: int


@runtime_checkable
class LogStore(Protocol):
    """Topics, records and stream groups' committed offsets."""

    # topics
    def create_topic(self, name: str, partitions: int, config: dict[str, Any]) -> tuple[TopicInfo, bool]:
        """Create a topic, or return the existing one. The bool says 'created'."""

    def topic(self, name: str) -> TopicInfo | None: ...

    def topics(self) -> list[TopicInfo]: ...

    def add_partitions(self, name: str, partitions: int) -> TopicInfo:
        """Grow a topic to `partitions` (never shrinks; the core checks)."""

    def delete_topic(self, name: str) -> bool: ...

    def partitions(self, topic: str) -> list[PartitionInfo]: ...

    def offsets(self, topic: str) -> list[PartitionOffsets]:
        """Each partition's first and last offset, without counting what it
        holds: O(partitions) on every store. A store whose `partitions`
        counts rows (SQLite's) answers this without them."""
        return [PartitionOffsets(p.partition, p.first_offset, p.last_offset) for p in self.partitions(topic)]

    # records
    def append_one(
        self, topic: str, partition: int, timestamp: int, value: bytes | str, meta: bytes | None = None
    ) -> int:
        """Append one record; return its offset. Returns only after commit."""

    def append(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        values: Sequence[bytes | str],
        metas: Sequence[bytes | None] | None = None,
    ) -> int:
        """Append records atomically with consecutive offsets; return the first.

        `metas` None means no record has a meta blob. Returns only after commit.
        A store that subclasses the protocol inherits this: one batch of
        `append_many`, its one write path.
        """
        return self.append_many([AppendBatch(topic, partition, timestamp, values, metas)])[0]

    def append_many(
        self, batches: Sequence[AppendBatch], txn: str | None = None, txn_since: int = 0
    ) -> list[int] | Replayed:
        """Append several batches in one transaction (group commit).

        All or nothing: returns the first offset of each batch, or raises and
        writes none of them.

        With a `txn` id the write is idempotent: the id and the result are
        recorded in the same transaction as the records, and a call whose id
        is already recorded writes nothing and returns `Replayed` (the
        earlier result). Without one, no lookup is made. An id recorded by a
        write stamped before `txn_since` (ms; its first batch's timestamp)
        counts as not recorded: this write goes ahead and takes the id over
        (a dedup id's window).
        """

    def read(self, topic: str, partition: int, after: int, limit: int) -> list[Row]:
        """Records with offset > after, oldest first, at most `limit`."""

    # stream group offsets
    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Move the committed offset forward to `offset` (a lower one is ignored).

        Raises OffsetOutOfRange when `offset` is past the partition's last
        offset.
        """

    def committed(self, group: str, topic: str, partition: int) -> int: ...

    def seek(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Set the committed offset, backwards or forwards (bounds checked)."""

    def ensure_group(self, group: str, mode: str) -> None:
        """Register a group name (idempotent)."""

    def group_offsets(self, group: str) -> list[GroupOffset]: ...

    def groups(self) -> list[str]: ...

    def set_topic_config(self, name: str, config: dict[str, Any]) -> None:
        """Replace a topic's settings (the core validated them)."""

    def last_clean(self, topic: str) -> dict[str, Any] | None:
        """The figures of the topic's last cleaning, if any."""

    def close(self) -> None: ...


@runtime_checkable
class GroupStore(Protocol):
    """Stream group membership: the mechanics; the rebalance is `tidelog.coordinator`."""

    def group_join(
        self,
        group: str,
        member: str,
        topics: list[str],
        session_ms: int,
        assignor: str,
        now: int,
        rebalance: Rebalance,
    ) -> GroupSync:
        """Add or refresh a member, then run `rebalance` in the same
        transaction (holding the group's lock); return its view."""

    def group_heartbeat(self, group: str, member: str, now: int, rebalance: Rebalance) -> GroupSync:
        """Keep a member alive (StaleGeneration when it is gone), expire
        silent members, rebalance when needed, hand over released partitions."""

    def group_release(
        self, group: str, member: str, partitions: list[tuple[str, int]], now: int, rebalance: Rebalance
    ) -> GroupSync: ...

    def group_leave(self, group: str, member: str, now: int, rebalance: Rebalance) -> None: ...

    def group_commit(
        self, group: str, member: str, generation: int, topic: str, partition: int, offset: int
    ) -> None:
        """A fenced commit: NotAssigned unless `member` owns the partition,
        StaleGeneration when the member is gone or its generation is older
        than its ownership."""

    def group_members(self, group: str) -> list[GroupMember]: ...


class ClassicState(NamedTuple):
    """A Kafka classic-protocol group as stored (`tidelog.classic_groups` decides)."""

    generation: int
    phase: str  # "empty", "preparing", "completing" or "stable"
    protocol_type: str  # "consumer" for Kafka consumers
    protocol: str  # the assignor the members agreed on ("range", "cooperative-sticky", ...)
    leader: str  # the member that computes the assignment
    deadline: int  # preparing: ms when the join completes without the members still out


class ClassicMember(NamedTuple):
    """One member of a classic-protocol group."""

    member: str
    instance: str | None  # group.instance.id (static membership), kept and shown
    client_id: str
    host: str
    session_ms: int
    rebalance_ms: int
    heartbeat: int  # ms since epoch of its last sign of life
    protocols: bytes  # its (assignor, metadata) list, as `classic_groups.encode_protocols` packs it
    joined: bool  # rejoined in the rebalance under way
    generation: int  # the generation it was admitted to (0: none yet)
    assignment: bytes  # what the leader gave it in that generation


class ClassicGroupTx(Protocol):
    """What a store offers `tidelog.classic_groups` inside one transaction that
    holds a classic group's lock (the group exists in it, empty at first)."""

    def state(self) -> ClassicState: ...

    def made(self) -> bool:
        """Whether this step's lock made the group: no step had kept it before
        (a refused step's rolls back), so Kafka would not know it."""

    def set_state(self, state: ClassicState) -> None: ...

    def members(self) -> list[ClassicMember]:
        """Every member, by member id."""

    def put_member(self, member: ClassicMember) -> None:
        """Add or replace a member."""

    def remove_members(self, members: list[str]) -> None: ...

    def commit(self, topic: str, partition: int, offset: int, metadata: str = "") -> None:
        """Set the group's committed offset on a partition (Kafka's commit sets
        it, backwards too) and keep the commit as sent (`metadata`; a negative
        `offset`, which Kafka keeps, leaves the group nothing committed there);
        OffsetOutOfRange / UnknownTopic / UnknownPartition change nothing."""

    def delete_offsets(self, topic: str, partition: int) -> bool:
        """Forget the group's commit on a partition (OffsetDelete); whether it had one.
        UnknownTopic / UnknownPartition."""

    def delete_group(self) -> None:
        """Remove the group and everything it holds (DeleteGroups)."""

    def has_commits(self) -> bool:
        """Whether the group has committed anything (a Kafka commit, negative ones too)."""


T = TypeVar("T")


@runtime_checkable
class ClassicGroupStore(Protocol):
    """Kafka's classic group protocol's state: the mechanics; the policy is
    `tidelog.classic_groups`. A classic group is a stream group (its name
    is registered as one, its commits are the group's committed offsets)."""

    def classic_run(self, group: str, now: int, step: Callable[[ClassicGroupTx], T]) -> T:
        """Run `step` in one write transaction that holds `group`'s lock
        (made empty on first use, `ClassicGroupTx.made`), so steps of one group
        take turns across connections and processes; an error from `step`
        rolls it back."""

    def classic_describe(self, group: str) -> tuple[ClassicState, list[ClassicMember]] | None:
        """A group's state and members (None when it was never used)."""

    def classic_list(self) -> list[tuple[str, ClassicState]]:
        """Every classic group and its state, by name."""

    def classic_commits(self, group: str) -> list[tuple[str, int, int | None, int | None, str]]:
        """A group's commits: (topic, partition, committed offset or None, the last
        Kafka commit's offset or None, its metadata), by topic and partition."""


@runtime_checkable
class QueueStore(Protocol):
    """Queue groups: leases and their settling; the policy lives in `tidelog.queues`."""

    def queue_open(
        self, group: str, topic: str, config: dict[str, Any], start: str, now: int
    ) -> dict[str, Any]:
        """Register a queue group on a topic (first use stores `config` and
        starts at the first record, or the end when start == "latest");
        returns the stored config."""

    def queue_receive(
        self, group: str, topic: str, policy: LeasePolicy, now: int, limit: int
    ) -> tuple[list[Leased], int | None]:
        """Lease up to `limit` records as `policy` chooses (a SQL store runs
        `policy.lease` over its `LeaseTx`, in one transaction): highest
        priority first, then oldest due, then the tie-breaker of a nack to
        the back, then partition and offset, among the group's state rows
        due now and the next `policy.window` new records of each partition;
        with `policy.ordered`, one record a key in flight, in offset order.
        Returns the leases and the next due time of anything still waiting
        (None when nothing waits, or when `limit` came)."""

    def queue_ack(self, group: str, topic: str, partition: int, offset: int, receipt: str) -> None:
        """Finish a record. A receipt that is neither the current lease nor
        the one that finished the record raises LeaseLost; the one that
        finished it is a no-op (a record finished at its first delivery
        takes any receipt again: it had no other). A record finished after
        more than one delivery keeps that receipt (ack and dead letter
        alike) until its record is removed."""

    def queue_extend(
        self, group: str, topic: str, partition: int, offset: int, receipt: str, deadline: int
    ) -> None: ...

    def queue_release(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        receipt: str,
        due: int,
        behind: bool = False,
    ) -> None:
        """End a lease without finishing: the record is due again at `due`.

        Records due at the same time go by partition and offset, except that
        `behind` puts this one after every record of the group due at `due`
        or before, also those appended in the same millisecond (a nack to
        the back must not depend on the clock's resolution).
        """

    def queue_settle(self, group: str, topic: str, settles: Sequence[Settle]) -> list[LeaseLost | None]:
        """Settle many leases in one transaction, each as the single call would.

        Each succeeds (None; an ACK of a record already done with that
        receipt too, as `queue_ack`) or fails on its own (the LeaseLost the
        single call would raise, in its place); one failing does not stop
        the others. UnknownTopic / UnknownPartition refuse the whole batch
        before anything is written.
        """

    def queue_dead_letter(
        self, group: str, topic: str, partition: int, offset: int, receipt: str, dead_letter: AppendBatch
    ) -> int:
        """Atomically finish a leased record and append `dead_letter` (one
        record) to its topic; returns the dead-letter offset."""

    def queue_stats(self, group: str, topic: str, policy: LeasePolicy, now: int) -> QueueStats:
        """Counts, and the age of the oldest available record; a new
        record's delay is `policy.due` (a store reads meta only through it).
        A record whose job was cancelled (a "cancelled" job state) is
        finished: it counts as neither available nor delayed, though it
        waits in the group until a runner acks it unrun."""


@runtime_checkable
class Store(LogStore, GroupStore, QueueStore, Protocol):
    """What every store offers the core: the log, stream groups, queue groups.

    What only some stores offer is a capability below, checked with
    `isinstance(store, Capability)`.
    """


@runtime_checkable
class NamedConsumers(Protocol):
    """What Redis streams need (the policy lives in `tidelog.streams`): reading
    backwards and trimming (XREVRANGE, XTRIM), and named consumers on queue
    groups, the mechanics of Redis consumer groups. Every call but queue_create /
    queue_info / queue_list / queue_delete raises UnknownGroup when the group
    does not exist on the topic."""

    def read_before(self, topic: str, partition: int, before: int, limit: int) -> list[Row]:
        """Records with offset < before, newest first, at most `limit`."""

    def trim(self, topic: str, partition: int, before: int) -> int:
        """Remove the records with offset < before, and queue-group state on
        them; returns how many records were removed. Offsets are never reused."""

    def queue_create(
        self, group: str, topic: str, config: dict[str, Any], cursors: Sequence[int], now: int
    ) -> bool:
        """Create a queue group with its cursor (last offset taken) per
        partition; False, changing nothing, when it exists on the topic."""

    def queue_info(self, group: str, topic: str) -> dict[str, Any] | None:
        """The group's stored config, None when it does not exist on the topic."""

    def queue_list(self, topic: str) -> list[str]:
        """Queue groups on a topic, oldest first."""

    def queue_delete(self, group: str, topic: str) -> bool:
        """Delete a group's cursor, leases and consumers on a topic."""

    def queue_cursor(self, group: str, topic: str, partition: int) -> int: ...

    def queue_set_cursor(self, group: str, topic: str, partition: int, scanned: int) -> None:
        """Move the cursor, backwards too: records past it are taken again."""

    def queue_take(
        self,
        group: str,
        topic: str,
        partition: int,
        consumer: str,
        limit: int,
        now: int,
        deadline: int | None,
    ) -> list[Row]:
        """Take up to `limit` records past the cursor (rows as `read`) and
        move the cursor past them. With a `deadline` each becomes a lease of
        `consumer` (delivery count 1, delivered `now`); None takes them
        without leases. Records the consumer as seen (and active if any)."""

    def queue_pending(
        self,
        group: str,
        topic: str,
        partition: int,
        *,
        first: int = 0,
        last: int = ...,
        consumer: str | None = None,
        delivered_before: int | None = None,
        limit: int = 100,
    ) -> list[Pending]:
        """Leases with first <= offset <= last, by offset; optionally only one
        consumer's, or only those delivered at or before `delivered_before`."""

    def queue_pending_summary(self, group: str, topic: str, partition: int) -> PendingSummary: ...

    def queue_claim(
        self,
        group: str,
        topic: str,
        partition: int,
        offsets: Sequence[int],
        consumer: str,
        now: int,
        *,
        delivered_before: int,
        delivered: int,
        deadline: int,
        deliveries: int | None = None,
        count_delivery: bool = True,
        force: bool = False,
    ) -> list[int]:
        """Move leases idle since `delivered_before` (or earlier) to `consumer`.

        `deliveries` sets the delivery count, else `count_delivery` adds one.
        `force` creates a lease for an offset that has none, if its record
        exists. Returns the offsets claimed, in the order asked.
        """

    def queue_ack_offsets(self, group: str, topic: str, partition: int, offsets: Sequence[int]) -> int:
        """Finish leased records by offset, whoever holds them; returns how many."""

    def queue_ack_stamped(
        self, group: str, topic: str, partition: int, records: Sequence[tuple[int, int]], unless: bytes
    ) -> tuple[int, list[tuple[int, int]]]:
        """Finish the leases on `records` (offset, timestamp) whose record
        has that timestamp and whose meta holds no `unless` bytes, reading
        the records inside the ack's own transaction. Returns how many
        leases were finished, and the pairs whose record did not match (or
        is gone), for the caller to look at itself."""

    def queue_consumers(self, group: str, topic: str) -> list[ConsumerInfo]: ...

    def queue_add_consumer(self, group: str, topic: str, name: str, now: int) -> bool:
        """Register a consumer; False when it exists."""

    def queue_delete_consumer(self, group: str, topic: str, name: str) -> int:
        """Forget a consumer and drop its leases; returns how many it held."""


@runtime_checkable
class QueueUpkeep(Protocol):
    """Looking into a queue group and emptying it, as an operator does from the
    shell or the console (pgmq's `read` without a lease and `purge_queue`).
    Every call raises UnknownGroup when the group does not exist on the topic
    and then changes nothing: none registers a group."""

    def queue_list(self, topic: str) -> list[str]:
        """Queue groups on a topic, oldest first."""

    def queue_peek(self, group: str, topic: str, policy: LeasePolicy, now: int, limit: int) -> list[Waiting]:
        """Up to `limit` records not leased now, leasing nothing: those due
        first, in the order a receive takes them, then the delayed ones by
        due time (`policy.peek` orders them). A group ordered by key hands a
        key's records out one at a time: the list shows them all."""

    def queue_in_flight(self, group: str, topic: str, now: int, limit: int) -> list[Pending]:
        """Up to `limit` records leased now (deadline after `now`), by partition and offset."""

    def queue_purge(self, group: str, topic: str, now: int) -> int:
        """In one transaction, finish every record the group holds: waiting,
        delayed and leased (a later ack of a purged lease is a no-op, as for a
        record done); records appended after it are delivered as usual.
        Returns how many records it finished."""


@runtime_checkable
class Transactional(Protocol):
    """A store that appends inside the application's own transaction, on the
    application's own connection to the same database (the outbox pattern):
    the records exist if and only if that transaction commits."""

    def transaction(self, conn: Any) -> AbstractContextManager[None]:
        """A transaction on `conn`: begun here (or joined when one is open
        already: its owner commits), committed on a clean exit, rolled back
        on an exception. InvalidRequest, nothing done, when `conn` is not a
        connection of this store's driver to this store's database."""

    def append_in(self, conn: Any, batches: Sequence[AppendBatch]) -> list[int]:
        """Append inside the transaction open on `conn` (`transaction`);
        first offsets as `append_many`. Offsets stay dense: the partition is
        held until the transaction ends, and a rollback takes them back."""


@runtime_checkable
class Cleanable(Protocol):
    """What retention and compaction (`tidelog.retention`) need to clean here."""

    def scan(
        self, topic: str, partition: int, after: int, limit: int, with_meta: bool = False
    ) -> list[ScanRow]:
        """(offset, timestamp, bytes, meta or None, value is JSON null) rows
        after `after` for a cleaner, oldest first."""

    def partition_bytes(self, topic: str, partition: int) -> int:
        """Bytes the partition's records hold now."""

    def consumption(self, topic: str, partition: int) -> Usage:
        """What the partition's groups finished, for retention="consumed":
        committed offsets of stream groups, done-prefixes of queue groups, and
        the lowest offset a queue group still has in progress."""

    def delete_prefix(self, topic: str, partition: int, through: int, limit: int) -> tuple[int, int]:
        """Remove up to `limit` of the oldest records with offset <= through;
        (records removed, bytes removed). When nothing at or below `through`
        remains, the partition's start moves past it."""

    def delete_offsets(self, topic: str, partition: int, offsets: list[int]) -> int:
        """Remove single records (compaction); returns bytes removed."""

    def record_clean(self, topic: str, report: dict[str, Any]) -> None: ...

    def prune_txns(self, older_than: int, limit: int) -> int:
        """Forget up to `limit` idempotent-write ids recorded more than
        `older_than` ms ago, by the clock that stamped them (the store's
        own); returns how many went."""


class JobRow(NamedTuple):
    """What a job's runner or a cancel recorded about one job (`JobStore`)."""

    state: str  # running, failed, done, dead-lettered, cancelled
    attempts: int  # runs started so far
    body: str | None  # JSON: {"result": ...} or {"error": ...}; None when none
    updated: int  # ms since epoch
    expires: int  # ms since epoch: cleaning removes the row after this


class JobHeld(NamedTuple):
    """A job's record as its queue group holds it now (waiting, delayed or leased)."""

    due: int  # ms since epoch: when it is due, or when its lease runs out
    deliveries: int
    leased: bool  # a receipt is out and its lease has not run out


class JobLook(NamedTuple):
    """One job as the store sees it: its row, its queue state, the group's cursor."""

    row: JobRow | None
    held: JobHeld | None  # None: the group has not taken the record yet, or finished it
    scanned: int  # the group's cursor on the record's partition (0: none yet)
    last_offset: int  # the partition's last offset, to tell an unknown job from a future one


@runtime_checkable
class JobStore(Protocol):
    """A store that keeps what became of each job (`tidelog.results`): rows by
    (queue group, partition, offset), each written by one guarded upsert."""

    def job_look(self, group: str, topic: str, partition: int, offset: int, now: int) -> JobLook:
        """The job's row, the group's state of its record and the partition's
        cursor and end, in one read. UnknownTopic/UnknownPartition as `read`."""

    def job_put(
        self, group: str, topic: str, partition: int, offset: int, row: JobRow, replace: Sequence[str]
    ) -> JobRow:
        """Write `row` when the job has no row yet or its row's state is one of
        `replace`, in one statement; returns the row there afterwards (this
        one, or the one that was there and stayed)."""

    def job_state(self, group: str, topic: str, partition: int, offset: int) -> str | None:
        """The state of the job's row (None: no row), in one read: what a
        runner checks once it leased a job (a cancel may have come first)."""

    def job_done(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        row: JobRow,
        replace: Sequence[str],
        receipt: str,
    ) -> None:
        """`job_put` and `queue_ack` of the lease `receipt` in one transaction:
        a run's end and its ack, both or neither (LeaseLost as queue_ack)."""

    def job_cancel(self, group: str, topic: str, partition: int, offset: int, row: JobRow) -> JobRow | None:
        """Write the cancel `row` (over no row, or a failed run's) unless the
        group has the record leased now (by `row.updated`), in one write
        transaction that a receive's lease cannot interleave with: None when
        leased, else the row there afterwards."""

    def job_prune(self, now: int, limit: int) -> int:
        """Remove up to `limit` rows that expired at or before `now`; returns how many went."""


@runtime_checkable
class JobsRemotely(Protocol):
    """A store whose server keeps the jobs' states (http://): the core asks it
    instead, by job id, and gets the server core's answers as JSON objects."""

    def job_status(self, topic: str, group: str, job_id: str) -> dict[str, Any]:
        """`tidelog.results.status` there."""

    def job_cancel(self, topic: str, group: str, job_id: str) -> dict[str, Any]:
        """`tidelog.results.cancel` there."""

    def job_start(self, topic: str, group: str, job_id: str, attempts: int, ttl_ms: int) -> dict[str, Any]:
        """`tidelog.results.start` there."""

    def job_finish(
        self, topic: str, group: str, job_id: str, state: str, body: Any, attempts: int, ttl_ms: int
    ) -> dict[str, Any]:
        """`tidelog.results.finish` there."""


@runtime_checkable
class CleansRemotely(Protocol):
    """A store whose server cleans (http://): the core asks it instead."""

    def clean(self, topic: str | None, chunk: int) -> list[dict[str, Any]]:
        """Clean there; each topic's report as `CleanReport.to_dict()` gives it."""


@runtime_checkable
class RedrivesRemotely(Protocol):
    """A store whose server redrives and purges dead letters (http://): the core asks it instead."""

    def redrive(
        self, dead_letter: str, offsets: list[int] | None, origin: str | None, dry_run: bool = False
    ) -> tuple[list[tuple[int, str, int, int]], list[int]]:
        """Redrive there: ((dead-letter offset, topic, partition, offset) moved, offsets skipped);
        a dry run moves nothing and says offset 0 for each it would move."""

    def purge_dead_letters(
        self, dead_letter: str, offsets: list[int] | None, origin: str | None, dry_run: bool = False
    ) -> tuple[list[int], list[int]]:
        """Purge there: (dead-letter offsets removed, or that a dry run would remove; offsets skipped)."""


@runtime_checkable
class Watchable(Protocol):
    """A store that can tell when another process appended."""

    def watch(self, callback: Callable[[], None]) -> None:
        """Call `callback()` (from any thread) after appends by others."""


@runtime_checkable
class SettlesAndReceives(Protocol):
    """A queue store that settles leases and leases more in one transaction
    (a front that answers many subscribers a round: one commit, not two)."""

    def queue_settle_receive(
        self, group: str, topic: str, settles: Sequence[Settle], policy: LeasePolicy, now: int, limit: int
    ) -> tuple[list[LeaseLost | None], list[Leased], int | None]:
        """`queue_settle(settles)` then `queue_receive(...)` (with `limit`
        0: none) in one transaction: what the settles free or put in front
        is seen by the receive. Returns (lost, leased, next due)."""
        ...


@runtime_checkable
class ReadsInPlace(Protocol):
    """A store that can say whether its reads wait for nothing: no lock a
    writer holds, no network (SQLite on a file in WAL: each thread reads on
    its own connection, from the memory map). A server may then run a small
    read on its event loop rather than hand it to a thread."""

    def reads_wait_for_nothing(self) -> bool:
        """True when no read waits for a writer or a peer."""


@runtime_checkable
class ReadsInto(Protocol):
    """A store that builds the caller's record objects as it reads (the core's
    Message class): each row becomes `make(row)` as it leaves the driver, and
    no list of plain rows is made and dropped on the way. SQLite, where a
    fetch is bound by work per record in Python."""

    def read_into(
        self, make: Callable[[Row], RowT], topic: str, partition: int, after: int, limit: int
    ) -> list[RowT]:
        """`read`, each row passed through `make`."""


@runtime_checkable
class KeepsWireBatches(Protocol):
    """A store that keeps the wire batches appends carry (`AppendBatch.wire`)
    and hands back those whose records are all still there. SQLite."""

    def wire_batches(
        self, topic: str, partition: int, after: int, high: int, max_bytes: int
    ) -> list[tuple[int, int, bytes, int]]:
        """(first offset, last offset, bytes, size) of the wire batches from
        the one holding offset `after` + 1 on, while each starts where the one
        before it ended, ends at `high` at most, and their sizes fit
        `max_bytes` (the first whatever its size); only batches whose every
        record is still in the partition. [] when no batch holds `after` + 1."""


@runtime_checkable
class StreamingAppend(Protocol):
    """A store that appends batches of one topic as they arrive, inside one transaction."""

    def append_stream(self, batches: Iterable[AppendBatch], txn: str) -> list[int] | Replayed:
        """`append_many(list(batches), txn)`, but each batch is appended as the
        iterator yields it, so whoever produces the next batch (a Spark task
        receiving rows) works while this one is written. The transaction
        commits after the last batch: all or nothing, idempotent by `txn`.
        It begins before the first batch, or, where the store has one
        writer (a SQLite file) and another holds it, once that one is done:
        until then the batches are staged aside and are drawn all the same.
        A `txn` recorded before the call returns `Replayed` without drawing
        a batch; one recorded meanwhile by the same write run elsewhere
        returns `Replayed` too, and what was drawn is dropped. Every batch
        is of one topic (InvalidRequest otherwise, and nothing is written):
        a store may lock all of the topic's partitions at the first batch,
        so that two streams naming partitions in different orders never
        wait for each other in a cycle. The iterator runs inside the
        transaction, so it must not write to this store itself."""


@runtime_checkable
class Reclaimable(Protocol):
    """A store that gives the space of removed records back to the file system."""

    def reclaim(self, pages: int = 2000) -> int:
        """Give up to `pages` free pages back; returns how many were free."""
