"""`tidelog consume` (a stream group) and `tidelog read` (no group).

consume prints records as NDJSON and then commits what it printed: after a
batch is written and stdout flushed, each partition's committed offset moves
to the last record printed from it (records skipped by --exclude-producer
count as done). Stopping it (Ctrl-C, SIGINT, SIGTERM, or a reader that closes
the pipe) ends the command cleanly with exit 0 and the group committed up to
the last record it flushed, never past it. Processing is at least once: a
record printed just before a crash may be printed again by the next run.

--from sets where this run starts reading, instead of the group's committed
offset + 1: `earliest` (the first record held), `latest` (the end of the
partition: only records appended from now on), N (offset N onwards) or -N
(the last N records of each partition, as `tail -n`). It
does not rewind the group: commits still only move the committed offset
forward (use `tidelog offsets G TOPIC --set N` to move it back).
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, TextIO

import click

import tidelog
from tidelog.config import check_name

from .context import Session, check_partition, common_options, pass_session
from .member import consume_as_member
from .output import write_records
from .reading import Stopped, StopSignals, start_positions

FETCH = 500  # records a fetch: the most printed before a commit
MAX_READ = 100_000
WAIT_S = 5.0  # a follow re-checks the topic (new partitions, deletion) this often


class StartParam(click.ParamType):
    """--from: earliest, latest, an offset N >= 1, or -N (the last N records of each partition)."""

    name = "earliest|latest|N|-N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str | int:
        if isinstance(value, int) or value in ("earliest", "latest"):
            return value
        try:
            offset = int(value)
        except ValueError:
            self.fail(
                f"{value!r} is not earliest, latest, an offset N or -N (the last N records)", param, ctx
            )
        if offset == 0:
            self.fail(
                "offset 0 is before the first record: use 1 or earliest (or -N for the last N)", param, ctx
            )
        return offset


class Printer:
    """Writes records to stdout and commits them once they are flushed."""

    def __init__(self, out: TextIO, consumer: tidelog.Consumer | None, topic: str):
        self.out = out
        self.consumer = consumer
        self.topic = topic
        self.pending: dict[int, int] = {}  # partition -> position written, not yet committed
        self.printed = 0

    def write(self, partition: int, messages: list[tidelog.Message], position: int) -> None:
        write_records(self.out, messages)
        self.printed += len(messages)
        self.pending[partition] = position

    def flush_and_commit(self) -> None:
        self.out.flush()
        pending, self.pending = self.pending, {}
        if self.consumer is not None:
            for partition, offset in pending.items():
                self.consumer.commit(self.topic, partition, offset)


class Waiter:
    """Blocks until a partition being consumed may hold new records.

    One partition: `Log.wait_for_records`. All of a topic's: a `Log.listen`
    callback sets an event; it is cleared before each pass over the
    partitions so an append during the pass is never missed.
    """

    def __init__(self, log: tidelog.Log, topic: str, partition: int | None):
        self.log = log
        self.topic = topic
        self.partition = partition
        self.event = threading.Event()
        self._stop_listening = None if partition is not None else log.listen(lambda *_: self.event.set())

    def before_pass(self) -> None:
        self.event.clear()

    def wait(self, consumer: tidelog.Consumer) -> None:
        if self.partition is not None:
            after = consumer.position(self.topic, self.partition)
            self.log.wait_for_records(self.topic, self.partition, after, WAIT_S)
        else:
            self.event.wait(WAIT_S)

    def close(self) -> None:
        if self._stop_listening is not None:
            self._stop_listening()


@click.command()
@click.argument("topic")
@click.option("--group", "-g", required=True, help="The stream group to consume as.")
@click.option(
    "--partition", "-p", type=click.IntRange(min=0), help="One partition (default: all of the topic's)."
)
@click.option("--from", "start", type=StartParam(), help="Where this run starts instead of committed + 1.")
@click.option("--limit", "-n", type=click.IntRange(min=1), help="Stop after this many records.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing records as they arrive until interrupted.")
@click.option("--no-commit", is_flag=True, help="Print without committing (the group does not move).")
@click.option("--exclude-producer", metavar="ID", help="Skip records this producer sent.")
@common_options
@pass_session
def consume(
    session: Session,
    topic: str,
    group: str,
    partition: int | None,
    start: str | int | None,
    limit: int | None,
    follow: bool,
    no_commit: bool,
    exclude_producer: str | None,
) -> None:
    """Print TOPIC's records for GROUP as NDJSON, and commit what was printed.

    Without --partition it joins GROUP as a member and reads the partitions
    the group assigns it (all of them when it is alone); with --partition it
    reads that partition by hand. Each starts from the group's committed
    offset + 1, or from --from: earliest, latest (only new records) or offset
    N onwards, or -N: the last N records of each partition. --from does not rewind the group: commits only move forward.
    Without --follow it stops at the end of its partitions.
    """
    log = session.log()
    info = log.topic(topic)
    check_partition(info, partition)
    partitions = [partition] if partition is not None else list(range(info.partitions))
    if exclude_producer is not None:
        check_name("producer", exclude_producer)
    # Every check before the group is registered: bad input changes nothing.
    positions = {} if start is None else start_positions(log, topic, partitions, start)
    if partition is None:
        # No partition named: join the group and share the topic with its other members.
        try:
            consume_as_member(log, topic, group, start, limit, follow, no_commit, exclude_producer)
        except BrokenPipeError:
            _silence_stdout()
        return
    consumer = log.consumer(group)
    for p, position in positions.items():
        consumer.set_position(topic, p, position)
    printer = Printer(sys.stdout, None if no_commit else consumer, topic)
    run = Consumption(log, consumer, topic, partitions, printer, limit, exclude_producer)
    if follow:
        run.waiter = Waiter(log, topic, partition)
        run.all_partitions = partition is None
    stop = StopSignals()
    try:
        with stop.installed():
            try:
                run.run(stop)
            except Stopped:
                pass  # a signal while waiting: nothing is half printed
            printer.flush_and_commit()
    except BrokenPipeError:
        # The reader went away: batches flushed before were committed; the
        # one in the buffer was never read, so it stays uncommitted.
        _silence_stdout()
    except Stopped:
        raise click.ClickException(
            "stopped by a second signal before the last commit; the group may see its last records again"
        ) from None
    finally:
        if run.waiter is not None:
            run.waiter.close()


@dataclass
class Consumption:
    """One run of `tidelog consume`: fetch, print, flush, commit, and wait when following."""

    log: tidelog.Log
    consumer: tidelog.Consumer
    topic: str
    partitions: list[int]
    printer: Printer
    limit: int | None = None
    exclude_producer: str | None = None
    waiter: Waiter | None = None  # set when following
    all_partitions: bool = True  # take in partitions added while following

    def done(self) -> bool:
        return self.limit is not None and self.printer.printed >= self.limit

    def run(self, stop: StopSignals) -> None:
        while not stop.requested:
            if self.waiter is not None:
                self.waiter.before_pass()
            moved = self.fetch_pass(stop)
            self.printer.flush_and_commit()
            if self.done():
                return
            if moved:
                continue
            if self.waiter is None:
                return  # caught up and not following
            with stop.wait():
                self.waiter.wait(self.consumer)
            if self.all_partitions:
                # The topic may have grown (or been deleted) meanwhile.
                count = self.log.topic(self.topic).partitions
                self.partitions.extend(range(len(self.partitions), count))

    def fetch_pass(self, stop: StopSignals) -> bool:
        """Fetch once from every partition; True when any position moved."""
        moved = False
        for p in self.partitions:
            want = FETCH if self.limit is None else min(FETCH, self.limit - self.printer.printed)
            before = self.consumer.position(self.topic, p)
            messages = self.consumer.fetch(self.topic, p, want, exclude_producer=self.exclude_producer)
            position = self.consumer.position(self.topic, p)
            if position != before:
                moved = True
                self.printer.write(p, messages, position)
            if self.done() or stop.requested:
                break
        return moved


def _silence_stdout() -> None:
    """Point stdout at /dev/null so exiting does not fail flushing a closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


@click.command()
@click.argument("topic")
@click.option("--partition", "-p", type=click.IntRange(min=0), required=True)
@click.option(
    "--after",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Print records after this offset.",
)
@click.option("--limit", "-n", type=click.IntRange(min=1), default=100, show_default=True)
@common_options
@pass_session
def read(session: Session, topic: str, partition: int, after: int, limit: int) -> None:
    """Print records of one partition after an offset, as NDJSON, without a group."""
    log = session.log()
    printer = Printer(sys.stdout, None, topic)
    try:
        while limit > 0:
            messages = log.read(topic, partition, after=after, limit=min(limit, MAX_READ))
            if not messages:
                break
            printer.write(partition, messages, messages[-1].offset)
            after = messages[-1].offset
            limit -= len(messages)
        printer.flush_and_commit()
    except BrokenPipeError:
        _silence_stdout()
