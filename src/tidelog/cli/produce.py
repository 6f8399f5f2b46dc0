"""`tidelog produce`: records from `--data` or from stdin, one JSON value a line.

Stdin is written in chunks of `--batch` lines (default 1000), each chunk one
atomic batch (`Producer.send_batch`): every record of a chunk is written or
none is. Input is checked line by line as it is read, so a line that is not
JSON stops the command before its chunk is written; the chunks before it
stay written, and the message says which lines were and were not. For an
all-or-nothing file, set `--batch` above its line count (at most 100,000). A
live pipe (`tail -f app.log | tidelog produce ...`) wants `--batch 1`.

Blank lines are skipped. Each batch is printed as it commits (with --json
one line a batch, else a table of offset ranges per partition at the end).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

import click

import tidelog

from .context import Session, check_partition, common_options, pass_session
from .output import emit, table

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


def parse_data(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError as e:
        raise click.BadParameter(
            f"not JSON ({e}); quote text as a JSON string, e.g. '\"hello\"'", param_hint="--data"
        ) from None


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
    callback=parse_data,
    metavar="JSON",
    help="Send this one JSON value instead of reading stdin.",
)
@click.option(
    "--producer", "producer_id", metavar="ID", help="Name the producer (see consume --exclude-producer)."
)
@click.option(
    "--batch",
    type=click.IntRange(1, MAX_CHUNK),
    default=DEFAULT_CHUNK,
    show_default=True,
    help="Stdin lines a batch; each batch is written atomically.",
)
@common_options
@pass_session
def produce(
    session: Session,
    topic: str,
    key: str | None,
    partition: int | None,
    headers: list[tuple[str, str]],
    data: Any,
    producer_id: str | None,
    batch: int,
) -> None:
    """Append records to TOPIC and print their offsets.

    With --data, one record; else each line of stdin is one record, a JSON
    value (NDJSON), written in atomic batches of --batch lines. A line that
    is not JSON stops the command before its batch is written.
    """
    log = session.log(writes=True)
    try:
        info = log.topic(topic)  # fail before reading any input
    except tidelog.UnknownTopic as e:
        raise tidelog.UnknownTopic(f"{e}; create it first: tidelog topics create {topic}") from None
    check_partition(info, partition)
    producer = log.producer(producer_id)
    options = {"key": key, "partition": partition, "headers": headers or None}
    ranges = Ranges()

    def write(values: list[Any], first_line: int, last_line: int) -> None:
        try:
            sent = producer.send_batch(topic, values, **options)
        except tidelog.TidelogError as e:
            raise click.ClickException(f"{_lines(first_line, last_line)} not written: {e}") from None
        ranges.add(sent)
        if session.json:
            emit(sent_json(sent))

    if data is not None:
        write_one(producer, topic, data, options, ranges, session.json)
    else:
        read_lines(sys.stdin.buffer, batch, write, ranges)
    if not session.json:
        table(["PARTITION", "FIRST", "LAST", "COUNT"], ranges.rows, right=(0, 1, 2, 3))


def write_one(
    producer: tidelog.Producer, topic: str, data: Any, options: dict[str, Any], ranges: Ranges, as_json: bool
) -> None:
    sent = producer.send(topic, data, **options)
    batch = tidelog.BatchSent(sent.topic, sent.partition, sent.offset, 1, sent.timestamp)
    ranges.add(batch)
    if as_json:
        emit(sent_json(batch))


def read_lines(
    stream: BinaryIO, chunk_size: int, write: Callable[[list[Any], int, int], None], ranges: Ranges
) -> None:
    """Parse stdin line by line and hand full chunks to `write`."""
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
                chunk.append(json.loads(raw.rstrip(b"\r\n")))
            except ValueError as e:
                raise click.ClickException(_bad_line(lineno, e, first_line, ranges.written)) from None
            if len(chunk) >= chunk_size:
                write(chunk, first_line, lineno)
                chunk = []
                bar.update(read)
                read = 0
        if chunk:
            write(chunk, first_line, lineno)
        bar.update(read)


def _bad_line(lineno: int, error: ValueError, chunk_start: int, written: int) -> str:
    why = f"{error.msg} at column {error.colno}" if isinstance(error, json.JSONDecodeError) else "not UTF-8"
    if not written:
        return f"line {lineno} is not JSON ({why}); nothing was written"
    return f"line {lineno} is not JSON ({why}); {_lines(chunk_start, lineno)} not written, the {written} records before were"


def _lines(first: int, last: int) -> str:
    return f"line {first} was" if first == last else f"lines {first} to {last} were"
