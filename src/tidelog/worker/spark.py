"""The Spark engine: each entry of the configuration is a Structured Streaming query.

    spark.readStream.format("tidelog")
        .option("assign", {topic: partitions})                   # the entry's partitions
        .option("startingOffsets", {topic: {p: committed + 1}})  # the group's progress
        .load()
        .writeStream.foreachBatch(MicroBatch(...))               # trigger: every `interval`

The source plans one Spark task per partition, holding its records in
offset order. `MicroBatch` maps `Deliver` over the micro-batch's partitions
(`rdd.mapPartitions`, which needs no pandas), so the POSTs go out from the
executors: each task cuts its partition into batches of batch_size starting
after the group's committed offset, posts them one after another, and
commits the group's offset after each 2xx. A failed post fails the
micro-batch, which ends the query; the driver restarts the query after
`interval` from its checkpoint, and Spark runs the failed micro-batch again
over the same offsets. Records the group committed meanwhile are skipped,
so the batches posted are the ones the local engine posts, in the same
order.

The group's committed offsets are the record of progress. A checkpoint
(under `work_dir`) lives for one run of the worker: it is what makes Spark
replay a failed micro-batch; a new run starts new queries from the group's
committed offsets, so a group moved back with `tidelog offsets` is obeyed.

Shutdown: the driver creates a stop marker file under `work_dir`; tasks look
for it before each post and stop there (a post in flight finishes and is
committed), then the driver stops the queries. On a cluster the executors
see the marker only if `work_dir` is on a filesystem they share with the
driver; otherwise they finish the micro-batch they are in.

Counting: each task returns what it delivered and the post that failed, if
any; the driver counts and logs them, then fails the micro-batch when a
post failed. A task does not raise on a refused post, so the other tasks
of the micro-batch are not cancelled in the middle of theirs.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import httpx

import tidelog

from ..errors import ConfigurationError
from ..log import Consumer, Log
from ..logs import event
from . import delivery
from .config import SPARK_MISSING, Feed, WorkerConfig
from .metrics import Metrics
from .shutdown import Shutdown

# Spark settings for a session the worker starts itself; the config's [spark.conf] wins.
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.python.worker.reuse": "true",
    "spark.sql.shuffle.partitions": "2",
}
POLL_S = 0.2
# The columns Deliver reads, in this order; the timestamp as ms since epoch
# (a TimestampType would reach Python as a local-time datetime).
COLUMNS = ("partition", "offset", "unix_millis(timestamp) AS ms", "key", "format", "value", "headers")
# Marks the error of a micro-batch failed on purpose (its posts are logged and counted already).
REFUSED = "[tidelog-worker: a post failed]"


class Outcome(NamedTuple):
    """What one task did on one partition, sent back to the driver."""

    partition: int
    batches: int  # delivered and committed
    records: int
    cause: str | None = None  # the failed post's, if one failed
    detail: str = ""
    first: int = 0  # the failed batch's offsets
    last: int = 0


class DeliveryFailed(Exception):
    """Raised on the driver when a post of the micro-batch failed: fails the
    micro-batch, so that Spark runs it again from the same offsets."""


@dataclass(frozen=True)
class Deliver:
    """Runs in executors: posts a task's records in batches, commits after each 2xx.

    Pickled to the executors; opens the log and an HTTP client itself.
    Takes rows of COLUMNS in offset order (one source partition a task).
    A failed post ends the task's posting (later batches must wait for it)
    and is reported rather than raised, so that the other tasks of the
    micro-batch finish their own posts instead of being cancelled mid-way.
    """

    feed: Feed
    url: str
    marker: str

    def __call__(self, rows: Iterator[Any]) -> Iterator[Outcome]:
        feed = self.feed
        log = tidelog.open(self.url)
        consumer = log.consumer(feed.group)
        assert isinstance(consumer, Consumer)
        client = httpx.Client(headers=delivery.request_headers(feed), timeout=delivery.timeout(feed))
        done: dict[int, Outcome] = {}
        committed: dict[int, int] = {}
        pending: list[str] = []
        at: list[int] = []  # [partition, first, last] of the pending batch
        halted = False  # a post failed, or shutdown began

        def flush() -> None:
            nonlocal halted
            if not pending:
                return
            partition, first, last = at
            if os.path.exists(self.marker):
                halted = True
                return
            attempt = delivery.post(client, feed.endpoint, delivery.body(feed.topic, partition, pending))
            so_far = done.get(partition, Outcome(partition, 0, 0))
            if not attempt.ok:
                done[partition] = so_far._replace(
                    cause=attempt.cause, detail=attempt.detail, first=first, last=last
                )
                halted = True
                return
            consumer.commit(feed.topic, partition, last)
            committed[partition] = last
            done[partition] = so_far._replace(
                batches=so_far.batches + 1, records=so_far.records + len(pending)
            )
            pending.clear()

        try:
            for row in rows:
                if halted:
                    continue  # drain what Spark hands over; post nothing more
                partition, offset = row[0], row[1]
                if partition not in committed:
                    committed[partition] = consumer.committed(feed.topic, partition)
                if offset <= committed[partition]:
                    continue  # delivered by an earlier run of this micro-batch
                if pending and at[0] != partition:
                    flush()
                    if halted:
                        continue
                if not pending:
                    at[:] = [partition, offset, offset]
                pending.append(_message(row))
                at[2] = offset
                if len(pending) == feed.batch_size:
                    flush()
            if not halted:
                flush()
        finally:
            client.close()
            log.close()
        return iter(list(done.values()))


def _message(row: Any) -> str:
    _partition, offset, ms, key, fmt, value, headers = row
    return delivery.message_json(
        offset,
        ms,
        None if key is None else bytes(key),
        fmt,
        bytes(value),
        None if headers is None else [(h[0], bytes(h[1])) for h in headers],
    )


@dataclass(frozen=True)
class MicroBatch:
    """The foreachBatch function (runs on the driver): deliver from the
    executors, count, and fail the micro-batch if a post failed."""

    deliver: Deliver
    metrics: Any  # Metrics; foreachBatch runs in the driver's process, so it is never pickled

    def __call__(self, df: Any, batch_id: int) -> None:
        feed = self.deliver.feed
        outcomes = df.selectExpr(*COLUMNS).rdd.mapPartitions(self.deliver).collect()
        failed = []
        for o in map(Outcome._make, outcomes):
            where = {"group": feed.group, "topic": feed.topic, "partition": o.partition}
            if o.batches:
                self.metrics.delivered(feed.group, feed.topic, o.partition, o.records, o.batches)
                event(logging.DEBUG, "batches delivered", **where, batches=o.batches, records=o.records)
            if o.cause is not None:
                failed.append(o)
                self.metrics.failed(feed.group, feed.topic, o.partition, o.cause)
                event(
                    logging.WARNING,
                    "delivery failed",
                    **where,
                    first=o.first,
                    last=o.last,
                    cause=o.cause,
                    detail=o.detail,
                    retry_in_ms=feed.interval_ms,
                )
        if failed:
            summary = ", ".join(
                f"{feed.topic}/{o.partition} offsets {o.first}..{o.last}: {o.cause}" for o in failed
            )
            raise DeliveryFailed(f"{REFUSED} micro-batch {batch_id}: {summary}")


class SparkEngine:
    def __init__(
        self,
        url: str,
        log: Log,
        config: WorkerConfig,
        metrics: Metrics,
        shutdown: Shutdown,
        spark: Any = None,
    ):
        self.url = url
        self.log = log
        self.config = config
        self.metrics = metrics
        self.shutdown = shutdown
        self.spark = spark
        self.run_id = uuid.uuid4().hex[:12]
        self.work_dir = Path(config.work_dir).absolute()
        self.marker = str(self.work_dir / f"stop-{self.run_id}")

    def run(self) -> None:
        own = self.spark is None
        queries: dict[str, Any] = {}
        with self.shutdown.signals() as reinstall:
            spark = self.spark if not own else self._session()
            reinstall()  # PySpark's SparkContext put in a SIGINT handler of its own
            try:
                if not self.shutdown.is_set():
                    self._loop(spark, queries)
            finally:
                self._stop(queries)
                if own:
                    spark.stop()

    def _session(self) -> Any:
        try:
            import tidelog.spark as tspark
        except (ImportError, ConfigurationError) as e:
            # tidelog.spark says which of pyspark / pyarrow is missing.
            raise ConfigurationError(f"the spark engine cannot start ({e}): {SPARK_MISSING}") from None
        conf = {**DEFAULT_CONF, **dict(self.config.spark_conf)}
        spark = tspark.session(self.config.spark_master, "tidelog-worker", **conf)
        # A refused post fails a task and a query by design; Spark would log
        # each as an ERROR with pages of traceback. The worker logs its own
        # line for every failure (with Spark's full text when it is not a post).
        spark.sparkContext.setLogLevel("FATAL")
        return spark

    def _loop(self, spark: Any, queries: dict[str, Any]) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        restart_at: dict[str, float] = {}
        feeds = {feed.key: feed for feed in self.config.feeds}
        for feed in feeds.values():
            shutil.rmtree(self._checkpoint(feed), ignore_errors=True)  # a new run starts from the group
            queries[feed.key] = self._start(spark, feed, restart=False)
        while not self.shutdown.wait(POLL_S):
            now = time.monotonic()
            for key, feed in feeds.items():
                query = queries.get(key)
                if query is not None and not query.isActive:
                    self._failed(feed, query)
                    queries.pop(key)
                    restart_at[key] = now + feed.interval_ms / 1000
                elif query is None and now >= restart_at.get(key, now) and not self.shutdown.is_set():
                    queries[key] = self._start(spark, feed, restart=True)

    def _start(self, spark: Any, feed: Feed, restart: bool) -> Any:
        """Start the entry's query: from the group's committed offsets on a
        first start, from the checkpoint (the failed micro-batch) on a restart."""
        consumer = self.log.consumer(feed.group)
        assert isinstance(consumer, Consumer)
        partitions = list(feed.partitions or ())
        starting = {feed.topic: {str(p): consumer.committed(feed.topic, p) + 1 for p in partitions}}
        df = (
            spark.readStream.format("tidelog")
            .option("url", self.url)
            .option("assign", json.dumps({feed.topic: partitions}))
            .option("startingOffsets", json.dumps(starting))
            .option("includeHeaders", "true")
            .option("includeFormat", "true")
            # As the local engine's consumer does: records removed by retention are skipped.
            .option("failOnDataLoss", "false")
            .load()
        )
        query = (
            df.writeStream.foreachBatch(MicroBatch(Deliver(feed, self.url, self.marker), self.metrics))
            .trigger(processingTime=f"{feed.interval_ms} milliseconds")
            .option("checkpointLocation", str(self._checkpoint(feed)))
            .queryName(f"tidelog-worker-{self.run_id}-{self.config.feeds.index(feed)}")
            .start()
        )
        event(
            logging.INFO,
            "query restarted" if restart else "query started",
            group=feed.group,
            topic=feed.topic,
            partitions=partitions,
            **({"from": "checkpoint"} if restart else {"starting": starting[feed.topic]}),
            endpoint=feed.endpoint,
        )
        return query

    def _checkpoint(self, feed: Feed) -> Path:
        parts = "-".join(map(str, feed.partitions or ()))
        return self.work_dir / "checkpoints" / feed.group / feed.topic / parts

    def _failed(self, feed: Feed, query: Any) -> None:
        error = query.exception()
        text = "" if error is None else str(error)
        if REFUSED in text:
            return  # MicroBatch logged and counted each failed post
        self.metrics.failed(feed.group, feed.topic, -1, "spark")
        event(
            logging.WARNING,
            "query failed",
            group=feed.group,
            topic=feed.topic,
            cause="spark",
            detail=text,
            retry_in_ms=feed.interval_ms,
        )

    def _stop(self, queries: dict[str, Any]) -> None:
        """Let posts in flight finish (tasks stop at the marker), then stop the queries."""
        Path(self.marker).parent.mkdir(parents=True, exist_ok=True)
        Path(self.marker).touch()
        patience = max((f.timeout_ms for f in self.config.feeds), default=0) / 1000 + 60
        deadline = time.monotonic() + patience
        try:
            for query in queries.values():
                while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
                    time.sleep(0.05)
                query.stop()
        finally:
            Path(self.marker).unlink(missing_ok=True)
            for feed in self.config.feeds:
                shutil.rmtree(self._checkpoint(feed), ignore_errors=True)
            event(logging.INFO, "worker stopped", run=self.run_id)
