"""Dead letters: what a queue group's dead-letter topic holds, and redrive.

A queue group moves a record it gave up on to its dead-letter topic
(partition 0), stamped with where it came from (`tidelog-origin-topic`,
`-partition`, `-offset`, and the group: `-group`), its delivery count and
the reason. Redrive moves
dead letters back: each is appended to its origin topic and partition, with
its key, format and headers (the origin headers too) as the dead-letter
topic holds them, and then removed from the dead-letter topic.

The append and the removal are two steps: the append is an idempotent write
named after the dead letters it carries, so a redrive that stopped between
them and is run again appends nothing twice and finishes the removal.
Re-appended records are new records of the origin topic: every group of
that topic reads them, not only the queue group that dead-lettered them.

Purge removes dead letters without moving them (SQS's purge of a
dead-letter queue). Both take a dry run, which checks and picks as the real
call does and changes nothing. Both refuse a topic that holds records but
no dead letter (none carries the origin stamp): it is not a dead-letter
topic, and redriving or purging it would move or remove records nobody
dead-lettered.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

from .bounds import MAX_OFFSET
from .config import check_int, check_name
from .core import Core
from .errors import ConfigurationError, InvalidRequest, UnknownPartition, UnknownTopic
from .records import Message
from .store.base import AppendBatch, Cleanable, RedrivesRemotely, Replayed

ORIGIN_TOPIC = "tidelog-origin-topic"
ORIGIN_PARTITION = "tidelog-origin-partition"
ORIGIN_OFFSET = "tidelog-origin-offset"
ORIGIN_GROUP = "tidelog-origin-group"  # several groups of a topic may share one dead-letter topic
DELIVERY_COUNT = "tidelog-delivery-count"
REASON = "tidelog-reason"
DEAD_LETTER_PARTITION = 0  # a queue group writes its dead letters here
MAX_REDRIVE = 10_000


class DeadLetter(NamedTuple):
    """A record of a dead-letter topic and where it came from (None: not stamped)."""

    message: Message
    origin_topic: str | None
    origin_partition: int | None
    origin_offset: int | None
    delivery_count: int | None
    reason: str | None
    origin_group: str | None = None  # stamped since groups could share a dead-letter topic

    @property
    def offset(self) -> int:
        """The record's offset in the dead-letter topic."""
        return self.message.offset


class Moved(NamedTuple):
    """One redriven record: its dead-letter offset and where it went."""

    dead_letter_offset: int
    topic: str
    partition: int
    offset: int


class Redriven(NamedTuple):
    """What a redrive did: the records moved, and the offsets it left
    (dead letters with no origin stamp, or of another origin topic). In a
    dry run nothing moved: `moved` says where each would go, with offset 0."""

    dead_letter: str
    moved: list[Moved]
    skipped: list[int]
    dry_run: bool = False


class Purged(NamedTuple):
    """What a purge of dead letters did: the dead-letter offsets removed (or,
    in a dry run, that it would remove), and those it left."""

    dead_letter: str
    removed: list[int]
    skipped: list[int]
    dry_run: bool = False


def dead_letter_of(message: Message) -> DeadLetter:
    """A dead-letter topic's record with its origin stamp read from the headers."""
    stamp: dict[str, str] = {}
    for name, value in message.headers:
        if name in (ORIGIN_TOPIC, ORIGIN_PARTITION, ORIGIN_OFFSET, ORIGIN_GROUP, DELIVERY_COUNT, REASON):
            try:
                stamp[name] = value.decode()  # the last one wins, as a redriven record may carry two
            except UnicodeDecodeError:
                continue

    def number(name: str) -> int | None:
        text = stamp.get(name, "")
        return int(text) if text.isdigit() else None

    return DeadLetter(
        message,
        stamp.get(ORIGIN_TOPIC),
        number(ORIGIN_PARTITION),
        number(ORIGIN_OFFSET),
        number(DELIVERY_COUNT),
        stamp.get(REASON),
        stamp.get(ORIGIN_GROUP),
    )


def dead_letters(log: Core, dead_letter: str, after: int = 0, limit: int = 100) -> list[DeadLetter]:
    """The dead-letter topic's records after an offset, with their origin."""
    check_name("topic", dead_letter)
    return [dead_letter_of(m) for m in log.read(dead_letter, DEAD_LETTER_PARTITION, after, limit)]


def _check_offsets(offsets: Sequence[int]) -> list[int]:
    if isinstance(offsets, (str, bytes)) or not isinstance(offsets, Sequence):
        raise InvalidRequest("offsets must be a list of dead-letter offsets")
    if not offsets:
        raise InvalidRequest("offsets must name at least one dead letter (or leave it out: all)")
    if len(offsets) > MAX_REDRIVE:
        raise InvalidRequest(f"a redrive moves at most {MAX_REDRIVE} records, got {len(offsets)}")
    for o in offsets:
        check_int("offset", o, 1, MAX_OFFSET)
    if len(set(offsets)) != len(offsets):
        raise InvalidRequest("offsets name a dead letter twice")
    return sorted(offsets)


def _selected(log: Core, dead_letter: str, offsets: list[int]) -> list[DeadLetter]:
    out = []
    for o in offsets:
        found = log.read(dead_letter, DEAD_LETTER_PARTITION, o - 1, 1)
        if not found or found[0].offset != o:
            raise InvalidRequest(
                f"{dead_letter!r} holds no record at offset {o} (redriven already, or never written)"
            )
        out.append(dead_letter_of(found[0]))
    return out


def _every(log: Core, dead_letter: str) -> list[DeadLetter]:
    out: list[DeadLetter] = []
    after = 0
    while len(out) < MAX_REDRIVE:
        chunk = dead_letters(log, dead_letter, after, min(1000, MAX_REDRIVE - len(out)))
        if not chunk:
            break
        out += chunk
        after = chunk[-1].offset
    return out


def _pick(
    log: Core, dead_letter: str, picked: list[int] | None, origin: str | None
) -> tuple[list[DeadLetter], list[int]]:
    """The dead letters a redrive or purge takes, and the offsets it leaves.

    Named offsets must all be there, stamped, and of `origin` when given;
    without them every stamped dead letter (of `origin`) is taken, up to
    MAX_REDRIVE. A topic whose records carry no stamp at all is refused.
    """
    log.topic(dead_letter)  # UnknownTopic
    letters = _every(log, dead_letter) if picked is None else _selected(log, dead_letter, picked)
    chosen, skipped = [], []
    unstamped = 0
    for d in letters:
        if d.origin_topic is None or d.origin_partition is None:
            unstamped += 1
            if picked is not None:
                raise InvalidRequest(
                    f"the record at offset {d.offset} of {dead_letter!r} carries no {ORIGIN_TOPIC} and "
                    f"{ORIGIN_PARTITION} headers: it was not dead-lettered by a queue group"
                )
            skipped.append(d.offset)
        elif d.origin_topic == dead_letter:
            # A record redriven to its origin keeps its stamp: this is that
            # origin topic, not a dead-letter topic.
            raise InvalidRequest(
                f"{dead_letter!r} is not a dead-letter topic: its record at offset {d.offset} was "
                f"redriven to it (its origin stamp names {dead_letter!r} itself); nothing was changed"
            )
        elif origin is not None and d.origin_topic != origin:
            if picked is not None:
                raise InvalidRequest(
                    f"the dead letter at offset {d.offset} came from {d.origin_topic!r}, not {origin!r}"
                )
            skipped.append(d.offset)
        else:
            chosen.append(d)
    if not letters and picked is None and any(p.records for p in log.describe(dead_letter).partitions):
        # Dead letters are written to partition 0: records only elsewhere are none.
        raise InvalidRequest(
            f"{dead_letter!r} is not a dead-letter topic: it holds records, none in partition "
            f"{DEAD_LETTER_PARTITION} where a queue group writes its dead letters; nothing was changed"
        )
    if letters and unstamped == len(letters):
        raise InvalidRequest(
            f"{dead_letter!r} is not a dead-letter topic: none of its records carries the "
            f"{ORIGIN_TOPIC} header a queue group stamps on a dead letter; nothing was changed"
        )
    return chosen, skipped


def redrive(
    log: Core,
    dead_letter: str,
    offsets: Sequence[int] | None = None,
    *,
    origin: str | None = None,
    dry_run: bool = False,
) -> Redriven:
    """Move dead letters back to their origin topics (see the module's docstring).

    `offsets` picks dead letters by offset (all must be there, stamped, and
    of `origin` when given); without it, every stamped dead letter (of
    `origin` when given) moves, up to MAX_REDRIVE a call. Bad input, a topic
    that is not a dead-letter topic, a dead letter's origin topic or
    partition that no longer exists: an error, and nothing moves. A
    `dry_run` checks the same and moves nothing (each Moved has offset 0).
    """
    check_name("topic", dead_letter)
    if origin is not None:
        check_name("topic", origin)
    if not isinstance(dry_run, bool):
        raise InvalidRequest(f"dry_run must be true or false, not {dry_run!r}")
    picked = None if offsets is None else _check_offsets(offsets)
    store = log.store
    if isinstance(store, RedrivesRemotely):  # a server's store (http://): its own core moves them
        remote_moved, remote_skipped = store.redrive(dead_letter, picked, origin, dry_run)
        return Redriven(dead_letter, [Moved(*m) for m in remote_moved], remote_skipped, dry_run)
    if not isinstance(store, Cleanable):
        raise ConfigurationError(f"the {type(store).__name__} store cannot remove dead letters")
    chosen, skipped = _pick(log, dead_letter, picked, origin)
    if not chosen:
        return Redriven(dead_letter, [], skipped, dry_run)
    for d in chosen:  # every origin must still be there before anything moves
        assert d.origin_topic is not None and d.origin_partition is not None
        try:
            partitions = log.topic(d.origin_topic).partitions
        except UnknownTopic:
            raise UnknownTopic(
                f"the origin topic {d.origin_topic!r} of the dead letter at offset {d.offset} "
                "does not exist (deleted?); nothing was redriven"
            ) from None
        if d.origin_partition >= partitions:
            raise UnknownPartition(
                f"the origin partition {d.origin_topic!r}/{d.origin_partition} of the dead letter at "
                f"offset {d.offset} does not exist; nothing was redriven"
            )
    if dry_run:
        planned = [Moved(d.offset, str(d.origin_topic), int(d.origin_partition or 0), 0) for d in chosen]
        return Redriven(dead_letter, planned, skipped, True)
    now = log.clock()
    # One batch per run of dead letters bound for the same partition, in order.
    runs: list[list[DeadLetter]] = []
    for d in chosen:
        if runs and (runs[-1][0].origin_topic, runs[-1][0].origin_partition) == (
            d.origin_topic,
            d.origin_partition,
        ):
            runs[-1].append(d)
        else:
            runs.append([d])
    batches = [
        AppendBatch(
            str(run[0].origin_topic),
            int(run[0].origin_partition or 0),
            now,
            [d.message[2] for d in run],
            [d.message[3] for d in run],
        )
        for run in runs
    ]
    firsts = store.append_many(batches, _txn_id(dead_letter, chosen))
    starts = [f for _, _, f, _ in firsts.batches] if isinstance(firsts, Replayed) else firsts
    moved = [
        Moved(d.offset, b.topic, b.partition, first + i)
        for b, run, first in zip(batches, runs, starts, strict=True)
        for i, d in enumerate(run)
    ]
    store.delete_offsets(dead_letter, DEAD_LETTER_PARTITION, [d.offset for d in chosen])
    for b, first in zip(batches, starts, strict=True):
        log.notifier.notify(b.topic, b.partition, first + len(b.values) - 1)
    return Redriven(dead_letter, moved, skipped)


def purge(
    log: Core,
    dead_letter: str,
    offsets: Sequence[int] | None = None,
    *,
    origin: str | None = None,
    dry_run: bool = False,
) -> Purged:
    """Remove dead letters from their dead-letter topic without moving them.

    Picks as `redrive` does (named offsets, or every stamped dead letter of
    `origin` when given, up to MAX_REDRIVE a call), with the same refusals;
    records without an origin stamp are left. A `dry_run` removes nothing.
    Offsets are never reused: the topic's next dead letter takes the next one.
    """
    check_name("topic", dead_letter)
    if origin is not None:
        check_name("topic", origin)
    if not isinstance(dry_run, bool):
        raise InvalidRequest(f"dry_run must be true or false, not {dry_run!r}")
    picked = None if offsets is None else _check_offsets(offsets)
    store = log.store
    if isinstance(store, RedrivesRemotely):  # a server's store (http://): its own core removes them
        removed, remote_skipped = store.purge_dead_letters(dead_letter, picked, origin, dry_run)
        return Purged(dead_letter, removed, remote_skipped, dry_run)
    if not isinstance(store, Cleanable):
        raise ConfigurationError(f"the {type(store).__name__} store cannot remove dead letters")
    chosen, skipped = _pick(log, dead_letter, picked, origin)
    gone = [d.offset for d in chosen]
    if gone and not dry_run:
        store.delete_offsets(dead_letter, DEAD_LETTER_PARTITION, gone)
    return Purged(dead_letter, gone, skipped, dry_run)


def _txn_id(dead_letter: str, chosen: list[DeadLetter]) -> str:
    """The redrive's idempotent-write id: the dead letters it moves (offset and
    append time, so a dead-letter topic made again under the same name is new)."""
    digest = hashlib.sha256(dead_letter.encode())
    for d in chosen:
        digest.update(f"{d.offset}:{d.message.timestamp};".encode())
    return f"redrive:{digest.hexdigest()[:48]}"


__all__ = ["DeadLetter", "Moved", "Purged", "Redriven", "dead_letter_of", "dead_letters", "purge", "redrive"]
