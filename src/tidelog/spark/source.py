"""Format "tidelog" as a Spark source: batch reads and Structured Streaming.

Spark pickles readers and partitions and runs `read()` in executor
processes, so nothing here keeps a connection in an object that travels:
every `read()` opens the log by URL, and the stream reader opens its own
driver-side log lazily and drops it when pickled.
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import tidelog

from ..errors import OffsetOutOfRange, UnknownPartition, UnknownTopic
from ..log import Log
from ..records import Message, decode_headers, decode_meta
from . import offsets, urls
from .offsets import OffsetRange, Positions
from .options import SinkOptions, SourceOptions, include_format, include_headers, url_of

# Records per Arrow batch: large enough that per-batch costs vanish, small
# enough that a batch of 1 KiB records stays near 16 MiB.
PAGE = 16_384
# Kafka's timestampType: 1 is LogAppendTime, what a tidelog timestamp is.
LOG_APPEND_TIME = 1

# A Message is a tuple (offset, timestamp, stored value, meta): see records.py.
_OFFSET, _TIMESTAMP, _VALUE, _META = (itemgetter(i) for i in range(4))

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def source_schema(with_headers: bool, with_format: bool = False) -> StructType:
    """The schema of Spark's Kafka source (plus `format` with includeFormat)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if with_headers:
        fields.append(StructField("headers", HEADERS))
    if with_format:
        fields.append(StructField("format", StringType()))
    return StructType(fields)


class TidelogDataSource(DataSource):
    """`spark.read.format("tidelog")`, `readStream`, `write` and `writeStream`.

    Spark instantiates a data source in a Python worker that knows nothing
    of the session, so `register()` registers a subclass carrying the
    session's `master`: on a cluster, a URL the executors cannot open is
    refused here, when the query is planned, and not in an executor.
    """

    master: str | None = None  # unknown when registered by hand: no cluster checks

    @classmethod
    def name(cls) -> str:
        return "tidelog"

    @classmethod
    def for_master(cls, master: str | None) -> type[TidelogDataSource]:
        """This class bound to a session's master (pickled by value, attribute and all)."""
        return type(cls.__name__, (cls,), {"master": master, "__doc__": cls.__doc__})

    def _checked(self, url: str) -> bool:
        urls.check(url, self.master)
        return urls.on_cluster(self.master)

    def schema(self) -> StructType:
        # Called by load(): a bad url is refused there, before any task runs.
        self._checked(url_of(self.options))
        return source_schema(include_headers(self.options), include_format(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        options = SourceOptions.parse(self.options, streaming=False)
        return BatchReader(options, schema, cluster=self._checked(options.url))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = SourceOptions.parse(self.options, streaming=True)
        return StreamReader(options, schema, cluster=self._checked(options.url))

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from .sink import BatchWriter

        options = SinkOptions.parse(self.options)
        return BatchWriter(options, schema, overwrite, cluster=self._checked(options.url))

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from .sink import StreamWriter

        options = SinkOptions.parse(self.options)
        return StreamWriter(options, schema, overwrite, cluster=self._checked(options.url))


class RangePartition(InputPartition):
    """One Spark task: an offset range of one partition."""

    def __init__(self, value: OffsetRange):
        super().__init__(value)


class _Reading:
    """What batch and stream readers share: turning ranges into Arrow batches."""

    options: SourceOptions
    schema: StructType
    cluster: bool  # executors may run on other machines

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        r: OffsetRange = partition.value
        arrow = to_arrow_schema(self.schema, timezone="UTC")
        log = urls.open_log(self.options.url, self.cluster)
        try:
            for page in read_range(log, r, self.options.fail_on_data_loss):
                yield to_record_batch(
                    page,
                    r.topic,
                    r.partition,
                    arrow,
                    self.options.include_headers,
                    self.options.include_format,
                )
        finally:
            log.close()


class BatchReader(_Reading, DataSourceReader):
    def __init__(self, options: SourceOptions, schema: StructType, cluster: bool = False):
        self.options = options
        self.schema = schema
        self.cluster = cluster

    def partitions(self) -> list[InputPartition]:
        o = self.options
        with tidelog.open(o.url) as log:
            held = offsets.bounds(log, o, strict=True)
            start = offsets.resolve(log, o.starting, held, default="earliest", timestamp=o.starting_timestamp)
            end = offsets.resolve(log, o.ending, held, default="latest")
        for tp, s in start.items():
            if s > end[tp]:
                raise OffsetOutOfRange(
                    f"startingOffsets {s} is after endingOffsets {end[tp]} for {tp[0]}/{tp[1]}"
                )
        ranges = offsets.plan(start, end, o.min_partitions)
        # Spark wants at least one partition; an empty range reads nothing.
        return [RangePartition(r) for r in ranges] or [RangePartition(OffsetRange("", 0, 1, 1))]


class StreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over positions; the checkpoint is the record of progress."""

    def __init__(self, options: SourceOptions, schema: StructType, cluster: bool = False):
        self.options = options
        self.schema = schema
        self.cluster = cluster
        self._log: Log | None = None
        self._target: Positions | None = None  # Trigger.AvailableNow: read up to here

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_log"] = None  # a connection never travels
        return state

    @property
    def log(self) -> Log:
        if self._log is None:
            self._log = tidelog.open(self.options.url)
        return self._log

    def _latest(self) -> Positions:
        return {tp: b.next for tp, b in offsets.bounds(self.log, self.options, strict=False).items()}

    def initialOffset(self) -> dict:
        o = self.options
        held = offsets.bounds(self.log, o, strict=False)
        start = offsets.resolve(self.log, o.starting, held, default="latest", timestamp=o.starting_timestamp)
        return offsets.to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets.from_json(start)
        # `start` is where the last finished batch ended: the group may know it.
        self._commit_group(begin)
        latest = self._latest() if self._target is None else dict(self._target)
        for tp, position in begin.items():
            now = latest.get(tp)
            if now is None:
                latest[tp] = position  # gone or not in the target: stays where it is
            elif now < position:
                self._lost(f"{tp[0]}/{tp[1]} now ends before offset {position}: its records were removed")
                latest[tp] = position
        if isinstance(limit, ReadMaxRows):
            latest = offsets.admit(begin, latest, limit.max_rows)
        return offsets.to_json(latest)

    def reportLatestOffset(self) -> dict:
        return offsets.to_json(self._latest())

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        ranges = offsets.plan(offsets.from_json(start), offsets.from_json(end), self.options.min_partitions)
        return [RangePartition(r) for r in ranges]

    def commit(self, end: dict) -> None:
        self._commit_group(offsets.from_json(end))

    def stop(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def _commit_group(self, done: Positions) -> None:
        """Tell the `group` option's tidelog group how far the query got."""
        group = self.options.group
        if group is None:
            return
        consumer = self.log.consumer(group)
        for (topic, partition), position in done.items():
            if position > 1:
                try:
                    consumer.commit(topic, partition, position - 1)
                except (UnknownTopic, UnknownPartition, OffsetOutOfRange):
                    pass  # the topic went away; the checkpoint still holds the position

    def _lost(self, what: str) -> None:
        if self.options.fail_on_data_loss:
            raise OffsetOutOfRange(f"{what}; set option failOnDataLoss=false to go on without them")


# reading -------------------------------------------------------------------------


def read_range(log: Log, r: OffsetRange, fail_on_data_loss: bool) -> Iterator[list[Message]]:
    """Pages of records start <= offset < end, checking that none are missing."""
    after = r.start - 1
    last = r.end - 1
    while after < last:
        try:
            page = log.read(r.topic, r.partition, after=after, limit=min(PAGE, last - after))
        except (UnknownTopic, UnknownPartition):
            page = []
        if not page or page[0][0] != after + 1:
            upto = last if not page else page[0][0] - 1
            if fail_on_data_loss:
                raise OffsetOutOfRange(
                    f"records {after + 1}..{upto} of {r.topic}/{r.partition} are gone (removed, or the "
                    "topic was deleted) but the query still needs them; set option failOnDataLoss=false "
                    "to go on without them"
                )
            if not page:
                return
        if page[-1][0] > last:  # only after a gap: offsets are dense otherwise
            page = [m for m in page if m[0] <= last]
        yield page
        after = page[-1][0]


def to_record_batch(
    page: list[Message],
    topic: str,
    partition: int,
    schema: pa.Schema,
    with_headers: bool,
    with_format: bool = False,
) -> pa.RecordBatch:
    """Records as one Arrow batch in the source schema, built column by column."""
    n = len(page)
    # One C-level pass per column; zip(*page) would build tuples of tuples first.
    metas = list(map(_META, page))
    if metas.count(None) == n:
        keys = pa.nulls(n, pa.binary())
        headers = pa.nulls(n, schema.field("headers").type) if with_headers else None
    else:
        decoded = [decode_meta(m) for m in metas]
        keys = pa.array([d[1] for d in decoded], pa.binary())
        headers = None
        if with_headers:
            headers = pa.array(
                [
                    None if d[2] is None else [{"key": k, "value": v} for k, v in decode_headers(d[2])]
                    for d in decoded
                ],
                schema.field("headers").type,
            )
    columns = [
        keys,
        pa.array(list(map(_VALUE, page)), pa.binary()),  # text and JSON go out as their UTF-8 bytes
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(list(map(_OFFSET, page)), pa.int64()),
        pa.array(list(map(_TIMESTAMP, page)), pa.timestamp("ms", tz="UTC")).cast(
            pa.timestamp("us", tz="UTC")
        ),
        pa.repeat(pa.scalar(LOG_APPEND_TIME, pa.int32()), n),
    ]
    if with_headers:
        columns.append(headers)
    if with_format:
        columns.append(pa.array([m.format for m in page], pa.string()))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
