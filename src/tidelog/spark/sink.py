"""Format "tidelog" as a Spark sink, exactly once.

Each Spark task appends its whole share in ONE idempotent transaction
(`Log.write`, or `Log.write_stream` as its rows arrive) named by what the
task is: `spark:<query id>:<batch id>:<task partition>`
for a micro-batch (Spark hands the query and batch ids to tasks as local
properties), `spark-write:<write id>:<task partition>` for a batch write
(the id is drawn once when Spark plans the write). A micro-batch that Spark
runs again after a failure or a restart plans the same tasks over the same
input, so every task that had committed finds its txn id recorded and
appends nothing, and the ones that had not write now. No staging, no second
copy: the records are durable when the task ends, and the driver's
`commit` has nothing left to publish.

That holds when a re-run gives each task the same rows, which Spark
guarantees for deterministic queries (sources replay the same offsets,
shuffles are by hash). A query whose output per task is not deterministic
(say it draws random numbers) gets at-least-once instead.
"""

from __future__ import annotations

import json
import queue
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from ..errors import ConfigurationError, InvalidValue, UnknownTopic
from ..log import Log, Producer
from ..partitioner import partition_for_key
from ..records import BatchSent, NewRecord, Prepared, encode_key
from . import urls
from .options import SinkOptions

# Spark's local properties naming the running query and micro-batch.
QUERY_ID = "sql.streaming.queryId"
BATCH_ID = "streaming.sql.batchId"
COLUMNS = ("value", "key", "headers", "partition", "topic", "format")
# What column `format` may say, as the source's includeFormat writes it: a row's value is
# written back as the kind it was read as (a JSON record stays JSON, not bytes).
FORMATS = ("json", "text", "bytes")


@dataclass
class Written(WriterCommitMessage):
    """What one task appended (or found appended by an earlier run)."""

    txn: str
    records: int


def check_schema(schema: StructType, options: SinkOptions) -> None:
    """Refuse a DataFrame the sink cannot write, before any task runs."""
    names = {f.name: f.dataType for f in schema.fields}
    unknown = sorted(set(names) - set(COLUMNS))
    if unknown:
        raise ConfigurationError(
            f"the tidelog sink takes columns {', '.join(COLUMNS)}; unknown column(s) {', '.join(unknown)} "
            "(select or drop them first)"
        )
    text_or_bytes = (StringType, BinaryType)
    if not isinstance(names.get("value"), text_or_bytes):
        raise ConfigurationError("the tidelog sink needs a column value of type binary or string")
    if "key" in names and not isinstance(names["key"], text_or_bytes):
        raise ConfigurationError("column key must be binary or string")
    if "partition" in names and not isinstance(names["partition"], (IntegerType, LongType, ShortType)):
        raise ConfigurationError("column partition must be an integer")
    if "topic" in names and not isinstance(names["topic"], StringType):
        raise ConfigurationError("column topic must be a string")
    if "format" in names and not isinstance(names["format"], StringType):
        raise ConfigurationError(f"column format must be a string: {', '.join(FORMATS)}")
    if "topic" not in names and options.topic is None:
        raise ConfigurationError("the tidelog sink needs option topic, or a column topic naming one per row")
    if "headers" in names:
        h = names["headers"]
        element = h.elementType if isinstance(h, ArrayType) else None
        ok = isinstance(element, StructType)
        if isinstance(element, StructType):
            inner = {f.name: f.dataType for f in element.fields}
            ok = isinstance(inner.get("key"), StringType) and isinstance(inner.get("value"), text_or_bytes)
        if not ok:
            raise ConfigurationError("column headers must be array<struct<key: string, value: binary>>")


def _check_mode(overwrite: bool) -> None:
    if overwrite:
        raise ConfigurationError("a tidelog topic only appends: use mode('append'), not overwrite")


class BatchWriter(DataSourceArrowWriter):
    """`df.write.format("tidelog")`: each task once, also when Spark retries it."""

    def __init__(self, options: SinkOptions, schema: StructType, overwrite: bool, cluster: bool = False):
        _check_mode(overwrite)
        check_schema(schema, options)
        self.options = options
        self.cluster = cluster
        self.write_id = uuid.uuid4().hex  # drawn once, on the driver, for the whole write

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        txn = f"spark-write:{self.write_id}:{_task().partitionId()}"
        return write_task(self.options, iterator, txn, self.cluster)


def _task() -> TaskContext:
    """The running task's context (writers run in Spark tasks only)."""
    task = TaskContext.get()
    if task is None:
        raise ConfigurationError("the tidelog sink's writers run inside Spark tasks only")
    return task


class StreamWriter(DataSourceStreamArrowWriter):
    """`writeStream.format("tidelog")`: each (query, batch, task) once."""

    def __init__(self, options: SinkOptions, schema: StructType, overwrite: bool, cluster: bool = False):
        _check_mode(overwrite)
        check_schema(schema, options)
        self.options = options
        self.cluster = cluster

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        task = _task()
        query, batch = task.getLocalProperty(QUERY_ID), task.getLocalProperty(BATCH_ID)
        if query is None or batch is None:
            raise ConfigurationError("the tidelog stream sink runs inside a streaming query only")
        return write_task(self.options, iterator, f"spark:{query}:{batch}:{task.partitionId()}", self.cluster)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Every task's records committed with the task; nothing is left to publish.
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Tasks that did commit stay committed: the batch's re-run skips them by txn id.
        pass


def write_task(
    options: SinkOptions, batches: Iterator[pa.RecordBatch], txn: str, cluster: bool = False
) -> Written:
    """Encode a task's rows and append them in one idempotent write.

    Rows for the option topic are written while Spark still hands rows
    over: this thread receives and encodes them, a writer thread appends
    them as they come inside one transaction (`Log.write_stream`). A task
    whose writer waits for the store (the topic's partitions on
    PostgreSQL, held by the task before it) goes on receiving, so its
    rows are in hand when its turn comes; on a SQLite file, where the
    store has one writer, the waiting task's writer also stages them in
    a table of its own and copies them in at once when its turn comes.
    The task that writes overlaps the JVM making the next Arrow batch
    with the store writing this one. Gathering first and then writing
    left each task's conversion and the other task's write one after the
    other.
    Rows that name their own topics are gathered first, as one of them
    may have to be created, which cannot happen inside the open
    transaction.
    """
    log = urls.open_log(options.url, cluster)
    try:
        producer = log.producer()
        rows = (batch for batch in batches if batch.num_rows)
        first = next(rows, None)
        if first is None:
            return Written(txn, 0)
        counts: dict[str, int] = {}
        if "topic" in first.schema.names:
            prepared = [p for b in chain([first], rows) for p in _prepare(log, producer, options, b, counts)]
            sent = log.write(prepared, txn=txn)
        else:
            assert options.topic is not None  # check_schema made sure
            counts[options.topic] = _partition_count(log, options.topic)  # exists before the write opens
            # The first batch is encoded here, before the writer starts: it fills the topic cache.
            encoded = (_prepare(log, producer, options, b, counts) for b in chain([first], rows))
            sent = _write_while_receiving(log, txn, encoded, rows)
        return Written(txn, sum(s.count for s in sent))
    finally:
        log.close()


_END = object()


def _write_while_receiving(
    log: Log, txn: str, encoded: Iterator[list[Prepared]], rest: Iterator[pa.RecordBatch]
) -> list[BatchSent]:
    """`log.write_stream` on a writer thread, fed from this one as batches arrive."""
    handoff: queue.SimpleQueue[object] = queue.SimpleQueue()
    outcome: list[list[BatchSent]] = []
    failure: list[BaseException] = []

    def handed() -> Iterator[Prepared]:
        while (item := handoff.get()) is not _END:
            if isinstance(item, BaseException):
                raise item  # this thread failed: the writer's transaction rolls back
            yield from item  # type: ignore[misc]  # lists of Prepared, put below

    def write() -> None:
        try:
            outcome.append(log.write_stream(handed(), txn))
        except BaseException as e:
            failure.append(e)

    handoff.put(next(encoded))
    writer = threading.Thread(target=write, name="tidelog-sink-writer", daemon=True)
    writer.start()
    try:
        for prepared in encoded:
            handoff.put(prepared)
            if not writer.is_alive():
                break  # failed, or found its txn written by an earlier run
    except BaseException as e:
        handoff.put(e)
        writer.join()
        raise
    handoff.put(_END)
    writer.join()
    if failure:
        raise failure[0]
    for _ in rest:
        pass  # a replayed txn drew no batch; Spark still hands the task's rows over
    return outcome[0]


def _prepare(
    log: Log, producer: Producer, options: SinkOptions, batch: pa.RecordBatch, counts: dict[str, int]
) -> list[Prepared]:
    """A batch's rows as prepared batches, one per (topic, partition);
    `counts` caches partition counts across the task's batches."""
    names = batch.schema.names
    values = batch.column("value").to_pylist()
    if None in values:
        raise InvalidValue(f"column value is null in row {values.index(None)}; a record needs a value")
    if names == ["value"]:
        # The common case needs no per-row work: one batch to one partition,
        # the next batch to the next (Kafka's sticky partitioning).
        return [producer.prepare(options.topic, values)]  # type: ignore[arg-type]
    n = len(values)
    if "format" in names:
        values = [
            _as_format(v, f, row)
            for row, (v, f) in enumerate(zip(values, batch.column("format").to_pylist()))
        ]
    keys = batch.column("key").to_pylist() if "key" in names else [None] * n
    headers = batch.column("headers").to_pylist() if "headers" in names else [None] * n
    partitions = batch.column("partition").to_pylist() if "partition" in names else [None] * n
    topics = batch.column("topic").to_pylist() if "topic" in names else [None] * n
    groups: dict[tuple[str, int | None], list[NewRecord]] = {}
    for value, key, hdrs, partition, topic in zip(values, keys, headers, partitions, topics):
        topic = topic or options.topic
        if topic is None:
            raise InvalidValue("a row has no topic and the sink has no option topic")
        if partition is None and key is not None:
            if topic not in counts:
                counts[topic] = _partition_count(log, topic)
            partition = partition_for_key(encode_key(key), counts[topic])
        # Rows with neither partition nor key go together: prepare() picks one partition for them.
        pairs = None if not hdrs else [(h["key"], h["value"]) for h in hdrs]
        groups.setdefault((topic, partition), []).append(NewRecord(value, key=key, headers=pairs))
    return [producer.prepare(t, records, partition=p) for (t, p), records in groups.items()]


def _as_format(value: bytes | str, fmt: str | None, row: int) -> Any:
    """A row's value as the kind its `format` column names (None: as the column's type says)."""
    if fmt is None:
        return value
    if fmt not in FORMATS:
        raise InvalidValue(f"column format is {fmt!r} in row {row}; it takes {', '.join(FORMATS)} or null")
    if fmt == "bytes":
        return value.encode() if isinstance(value, str) else value
    try:
        text = value if isinstance(value, str) else value.decode()
    except UnicodeDecodeError:
        raise InvalidValue(f"row {row} says format {fmt!r} but its value is not UTF-8 text") from None
    if fmt == "text":
        return text
    try:
        return json.loads(text)
    except ValueError as e:
        raise InvalidValue(f"row {row} says format 'json' but its value is not JSON: {e}") from None


def _partition_count(log: Log, topic: str) -> int:
    try:
        return log.topic(topic).partitions
    except UnknownTopic:
        if not log.auto_create:
            raise
        return log.create_topic(topic, log.default_partitions).partitions
