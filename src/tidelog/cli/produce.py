"""`tidelog produce`: records from `--data` or from stdin, one record a line.

A line is a JSON value (`--format json`, the default), a text record
(`--format text`: the line as it is, kcat's default) or raw bytes
(`--format bytes`). `--key-delimiter` / `-K` splits each line at its first
delimiter into a key and the value (kcat's `-K`); a line without the
delimiter has no key.

Records without a key or --partition are spread over the topic's partitions
round-robin, record by record, as `Producer.send` spreads them; keyed
records go to their key's partition.

Stdin is written in chunks of `--batch` lines (default 1000), each chunk one
atomic batch (`Producer.send_batch`): every record of a chunk is written or
none is. Input is checked line by line as it is read, so a line that is not
JSON stops the command before its chunk is written; the chunks before it
stay written, and the message says which lines were and were not. For an
all-or-nothing file, set `--batch` above its line count (at most 100,000). A
live pipe (`tail -f app.log | tidelog produce ...`) wants `--batch 1`.

Blank lines are skipped. What was written is printed: with --json one line
a batch as it commits; else, at the end, where each record went, as
`TOPIC/PARTITION@OFFSET` (a run of records as `@FIRST..LAST`).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

import click

import tidelog
from tidelog.bounds import MAX_PRIORITY, PRIORITY
from tidelog.partitioner import partition_for_key
from tidelog.queues import check_dedup_id, dedup_write
from tidelog.topics import check_partition

from .context import Session, common_options, pass_session, topic_policy_options
from .output import emit

DEFAULT_CHUNK = 1000
MAX_CHUNK = 100_000


def parse_headers(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> list[tuple[str, str]]:
    headers = []
    for item in values:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--header")
        headers.append((name, value))
    return headers


FORMATS = ("json", "text", "bytes")


def decode_line(raw: bytes, fmt: str) -> Any:
    """One input line (without its newline) as the record value --format says.

    Raises ValueError saying what is wrong with the line.
    """
    if fmt == "bytes":
        return raw
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise ValueError("is not UTF-8") from None
    if fmt == "text":
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"is not JSON ({e.msg} at column {e.colno})") from None


def decode_record(raw: bytes, fmt: str, delimiter: bytes | None) -> Any:
    """A line as a value, or a NewRecord with its key when -K splits it."""
    if delimiter is not None:
        key, found, value = raw.partition(delimiter)
        if found:
            return tidelog.NewRecord(decode_line(value, fmt), key=key)
    return decode_line(raw, fmt)


class Ranges:
    """Offsets written, merged into contiguous ranges per partition."""

    def __init__(self) -> None:
        self.rows: list[list[int]] = []  # [partition, first, last, count]

    def add(self, sent: tidelog.BatchSent) -> None:
        for row in self.rows:
            if row[0] == sent.partition and row[2] + 1 == sent.first_offset:
                row[2] = sent.last_offset
                row[3] += sent.count
                return
        self.rows.append([sent.partition, sent.first_offset, sent.last_offset, sent.count])

    @property
    def written(self) -> int:
        return sum(row[3] for row in self.rows)


def sent_json(sent: tidelog.BatchSent) -> dict[str, Any]:
    return {
        "topic": sent.topic,
        "partition": sent.partition,
        "first_offset": sent.first_offset,
        "last_offset": sent.last_offset,
        "count": sent.count,
        "timestamp": sent.timestamp,
    }


def _regular_file_size(stream: BinaryIO) -> int | None:
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None  # not a real file descriptor (a test runner's buffer)
    return st.st_size if stat.S_ISREG(st.st_mode) else None


@contextmanager
def progress(stream: BinaryIO) -> Iterator[Any]:
    """A progress bar over stdin's bytes, on stderr, when stderr is a terminal
    and stdin is a file of known size; otherwise one that shows nothing."""
    size = _regular_file_size(stream)
    hidden = size is None or not sys.stderr.isatty()
    with click.progressbar(length=size or 1, file=sys.stderr, hidden=hidden, label="producing") as bar:
        yield bar


@click.command()
@click.argument("topic")
@click.option("--key", "-k", help="Key of every record (it picks the partition unless --partition is given).")
@click.option("--partition", "-p", type=click.IntRange(min=0), help="Partition to write to.")
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="NAME=VALUE",
    callback=parse_headers,
    help="A header on every record; repeat for more.",
)
@click.option(
    "--data",
    "-d",
    metavar="VALUE",
    help="Send this one record (read as --format says) instead of reading stdin.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="json",
    show_default=True,
    help="What a line is: a JSON value, a text record (the line as it is), or raw bytes.",
)
@click.option(
    "--key-delimiter",
    "-K",
    metavar="DELIM",
    help="Split each line at its first DELIM into key and value (kcat's -K).",
)
@click.option(
    "--producer", "producer_id", metavar="ID", help="Name the producer (see consume --exclude-producer)."
)
@click.option(
    "--priority",
    type=click.IntRange(0, MAX_PRIORITY),
    default=0,
    help="Queue groups hand these records out before available records of lower priority (0-9).",
)
@click.option(
    "--dedup-id",
    metavar="ID",
    help="With --data: a record sent again with this id within the topic's dedup window "
    "is not appended; the first one's offset is printed.",
)
@click.option(
    "--batch",
    type=click.IntRange(1, MAX_CHUNK),
    default=DEFAULT_CHUNK,
    show_default=True,
    help="Stdin lines a batch; each batch is written atomically.",
)
@common_options
@topic_policy_options
@pass_session
def produce(
    session: Session,
    topic: str,
    key: str | None,
    partition: int | None,
    headers: list[tuple[str, str]],
    data: str | None,
    fmt: str,
    key_delimiter: str | None,
    producer_id: str | None,
    priority: int,
    dedup_id: str | None,
    batch: int,
) -> None:
    """Append records to TOPIC and print where they went: TOPIC/PARTITION@OFFSET.

    With --data, one record; else each line of stdin is one record (a JSON
    value by default, see --format), written in atomic batches of --batch
    lines. A line that cannot be read stops the command before its batch is
    written. Records without a key spread over the partitions. A missing
    TOPIC is created by the first batch written (see --no-auto-create).
    """
    if key_delimiter is not None and not key_delimiter:
        raise click.BadParameter("the delimiter must not be empty", param_hint="--key-delimiter")
    delimiter = None if key_delimiter is None else key_delimiter.encode()
    value = None
    if data is not None:
        try:
            value = decode_record(data.encode(), fmt, delimiter)
        except ValueError as e:
            hint = (
                "; quote text as a JSON string, e.g. '\"hello\"', or use --format text"
                if fmt == "json"
                else ""
            )
            raise click.BadParameter(f"the value {e}{hint}", param_hint="--data") from None
    log = session.log(writes=True)
    try:
        partitions = log.topic(topic).partitions  # fail before reading any input
    except tidelog.UnknownTopic as e:
        if not log.auto_create:
            raise tidelog.UnknownTopic(
                f"{e}; create it first: tidelog topics create {topic} (or drop --no-auto-create)"
            ) from None
        # Made by the first batch's write, once its lines were read and
        # checked: input refused before that creates no topic.
        partitions = log.default_partitions
    check_partition(topic, partition if partition is not None else 0, partitions)
    if dedup_id is not None:
        if data is None:
            raise click.UsageError("--dedup-id names one record: give it with --data")
        try:
            check_dedup_id(dedup_id)
        except tidelog.InvalidRequest as e:
            raise click.BadParameter(str(e), param_hint="--dedup-id") from None
    producer = log.producer(producer_id)
    if priority:
        # The queue's header (see tidelog.queues); stream groups see it as any other.
        headers = [*headers, (PRIORITY, str(priority))]
    spread = Spreader(log, producer, topic, partitions, key, partition, headers or None)
    ranges = Ranges()

    def write(values: list[Any], first_line: int, last_line: int) -> None:
        try:
            written = spread.write(values)
        except tidelog.TidelogError as e:
            raise click.ClickException(f"{_lines(first_line, last_line)} not written: {e}") from None
        for sent in written:
            ranges.add(sent)
            if session.json:
                emit(sent_json(sent))

    if value is not None and dedup_id is not None:
        try:
            prepared = producer.prepare(topic, [value], key=key, partition=partition, headers=headers or None)
            txn, since = dedup_write(log, topic, dedup_id)
            sent = log.write([prepared], txn, txn_since=since)[0]
        except tidelog.TidelogError as e:
            raise click.ClickException(f"not written: {e}") from None
        ranges.add(sent)
        if session.json:
            emit(sent_json(sent))
    elif value is not None:
        write([value], 0, 0)
    else:
        read_lines(sys.stdin.buffer, batch, write, ranges, lambda raw: decode_record(raw, fmt, delimiter))
    if not session.json:
        for p, first, last, count in ranges.rows:
            click.echo(
                f"{topic}/{p}@{first}" if count == 1 else f"{topic}/{p}@{first}..{last} ({count} records)"
            )


class Spreader:
    """Writes a chunk of records in one transaction, each to its partition.

    --partition or --key: the whole chunk goes to one partition. Otherwise a
    record's own key (-K) picks its partition and unkeyed records go
    round-robin from a random start, as `Producer.send` places them; the
    chunk's per-partition batches commit together (`Log.write`), so a chunk is
    still all or nothing.
    """

    def __init__(
        self,
        log: tidelog.Log,
        producer: tidelog.Producer,
        topic: str,
        partitions: int,
        key: str | None,
        partition: int | None,
        headers: list[tuple[str, str]] | None,
    ):
        self.log = log
        self.producer = producer
        self.topic = topic
        self.partitions = partitions
        self.key = key
        self.partition = partition
        self.headers = headers
        self._next = itertools.count(random.randrange(partitions))

    def write(self, values: list[Any]) -> list[tidelog.BatchSent]:
        if self.partition is not None or self.key is not None or self.partitions == 1:
            return [
                self.producer.send_batch(
                    self.topic, values, key=self.key, partition=self.partition, headers=self.headers
                )
            ]
        by_partition: dict[int, list[Any]] = {}
        for v in values:
            own_key = v.key if isinstance(v, tidelog.NewRecord) else None
            p = (
                next(self._next) % self.partitions
                if own_key is None
                else partition_for_key(own_key, self.partitions)
            )
            by_partition.setdefault(p, []).append(v)
        prepared = [
            self.producer.prepare(self.topic, batch, partition=p, headers=self.headers)
            for p, batch in sorted(by_partition.items())
        ]
        return self.log.write(prepared)


def read_lines(
    stream: BinaryIO,
    chunk_size: int,
    write: Callable[[list[Any], int, int], None],
    ranges: Ranges,
    decode: Callable[[bytes], Any],
) -> None:
    """Read stdin line by line, decode each, and hand full chunks to `write`."""
    chunk: list[Any] = []
    first_line = lineno = read = 0
    with progress(stream) as bar:
        for lineno, raw in enumerate(stream, 1):
            read += len(raw)
            if not raw.strip():
                continue
            if not chunk:
                first_line = lineno
            try:
                chunk.append(decode(raw.rstrip(b"\r\n")))
            except ValueError as e:
                raise click.ClickException(_bad_line(lineno, str(e), first_line, ranges.written)) from None
            if len(chunk) >= chunk_size:
                write(chunk, first_line, lineno)
                chunk = []
                bar.update(read)
                read = 0
        if chunk:
            write(chunk, first_line, lineno)
        bar.update(read)


def _bad_line(lineno: int, why: str, chunk_start: int, written: int) -> str:
    if not written:
        return f"line {lineno} {why}; nothing was written"
    return (
        f"line {lineno} {why}; {_lines(chunk_start, lineno)} not written, the {written} records before were"
    )


def _lines(first: int, last: int) -> str:
    return f"line {first} was" if first == last else f"lines {first} to {last} were"
