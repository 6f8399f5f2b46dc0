"""Retention and compaction: what a topic keeps, decided here, removed by the store.

- delete: whole prefixes of a partition older than retention_ms or beyond
  retention_bytes go; the first offset advances; offsets are never reused.
- retention="consumed": also what every stream group committed and every
  queue group finished (retention_ms stays the outer bound).
- compact: the latest record per key stays (records without a key stay); a
  tombstone (a key with a null value) goes after delete_retention_ms; the
  newest min_compaction_lag_ms of the log is never touched. Kept records keep
  their offsets, so readers see gaps.
- Never removed: records a queue group holds in flight.
- Idempotent-write ids (`Log.write(..., txn=...)`) are kept for a window
  (`txn_window_ms`, default 7 days): a write retried within it appends
  nothing; an id older than that is forgotten by a cleaning of the whole log,
  so the ids do not grow forever.

Work happens in chunks of `chunk` records, each its own short transaction,
so producers never wait long for the write lock.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from . import results
from .config import TopicConfig
from .core import Core
from .errors import ConfigurationError, TidelogError, UnknownTopic
from .records import decode_meta
from .store.base import Cleanable, Reclaimable

DEFAULT_CHUNK = 2000
DEFAULT_TXN_WINDOW_MS = 7 * 86_400_000  # how long an idempotent write's id is remembered
RECLAIM_PAGES = 256  # pages given back per step: each step holds the write lock


@dataclass
class CleanReport:
    """What one cleaning of a topic removed and kept."""

    topic: str
    at: int  # ms since epoch
    removed: int = 0
    bytes_removed: int = 0
    compacted: int = 0
    duration_ms: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values."""
        return asdict(self)


def clean(
    log: Core,
    topic: str | None = None,
    *,
    chunk: int = DEFAULT_CHUNK,
    txn_window_ms: int | None = DEFAULT_TXN_WINDOW_MS,
) -> list[CleanReport]:
    """Apply every topic's retention and compaction settings (or one topic's).

    Cleaning the whole log also forgets idempotent-write ids older than
    `txn_window_ms` (None: keep them all) and the jobs' statuses and results
    older than their `result_ttl`.
    """
    if topic is None and txn_window_ms is not None:
        prune_txns(log, txn_window_ms, chunk=chunk)
    if topic is None:  # the jobs' states past their result_ttl (tidelog.results)
        results.prune(log, chunk)
    names = [topic] if topic is not None else [t.name for t in log.topics()]
    reports = []
    for name in names:
        try:
            reports.append(clean_topic(log, name, chunk=chunk))
        except UnknownTopic:
            if topic is not None:
                raise  # deleted meanwhile: only an error when asked for by name
    return reports


def prune_txns(log: Core, window_ms: int, *, chunk: int = DEFAULT_CHUNK) -> int:
    """Forget idempotent-write ids recorded more than `window_ms` ago, `chunk`
    at a time (each its own short transaction); returns how many went."""
    store = log.store
    if not isinstance(store, Cleanable):
        raise ConfigurationError(f"the {type(store).__name__} store cannot clean")
    pruned = 0
    while True:
        gone = store.prune_txns(window_ms, chunk)
        pruned += gone
        if gone < chunk:
            return pruned


def clean_topic(log: Core, name: str, *, chunk: int = DEFAULT_CHUNK) -> CleanReport:
    """Apply a topic's retention and compaction now."""
    started = time.perf_counter()
    info = log.topic(name)
    cfg = TopicConfig.normalize({}, info.config)
    now = log.clock()
    report = CleanReport(name, now)
    store = log.store
    if not isinstance(store, Cleanable):
        raise ConfigurationError(f"the {type(store).__name__} store cannot clean")
    keyed = 0
    for p in store.partitions(name):
        if p.records == 0:
            continue
        usage = store.consumption(name, p.partition)
        in_flight = usage.in_flight
        # ---- delete: a prefix ------------------------------------------------
        through = 0
        if "delete" in cfg.cleanup_policy.split(","):
            through = max(through, _time_prefix(store, name, p, cfg, now, chunk))
            through = max(through, _size_prefix(store, name, p, cfg, chunk))
        if cfg.retention == "consumed":
            finished = usage.stream + usage.queues
            if finished:
                through = max(through, min(finished))
        through = min(through, p.last_offset)
        if in_flight is not None:
            through = min(through, in_flight - 1)
        if through >= p.first_offset:
            while True:
                count, size = store.delete_prefix(name, p.partition, through, chunk)
                report.removed += count
                report.bytes_removed += size
                if count < chunk:
                    break
        # ---- compact: the latest per key ---------------------------------------
        if "compact" in cfg.cleanup_policy.split(","):
            gone, size, seen_keys = _compact(store, name, p.partition, cfg, now, in_flight, chunk)
            report.compacted += gone
            report.removed += gone
            report.bytes_removed += size
            keyed += seen_keys
    if "compact" in cfg.cleanup_policy and keyed == 0:
        report.notes.append("no record has a key: compaction keeps everything")
    if isinstance(store, Reclaimable) and report.removed:
        while store.reclaim(RECLAIM_PAGES) > RECLAIM_PAGES:
            pass
    report.duration_ms = round((time.perf_counter() - started) * 1000, 3)
    store.record_clean(name, report.to_dict())
    return report


def _time_prefix(store: Any, name: str, p: Any, cfg: TopicConfig, now: int, chunk: int) -> int:
    """The highest offset such that it and everything before it is too old."""
    if cfg.retention_ms is None:
        return 0
    cutoff = now - cfg.retention_ms
    through, after = 0, p.first_offset - 1
    while True:
        rows = store.scan(name, p.partition, after, chunk)
        for offset, ts, *_ in rows:
            if ts >= cutoff:
                return through
            through = offset
        if len(rows) < chunk:
            return through
        after = rows[-1][0]


def _size_prefix(store: Any, name: str, p: Any, cfg: TopicConfig, chunk: int) -> int:
    """The shortest prefix whose removal brings the partition within retention_bytes."""
    if cfg.retention_bytes is None:
        return 0
    excess = store.partition_bytes(name, p.partition) - cfg.retention_bytes
    through, after = 0, p.first_offset - 1
    while excess > 0:
        rows = store.scan(name, p.partition, after, chunk)
        if not rows:
            break
        for offset, _, size, *_ in rows:
            if excess <= 0:
                break
            excess -= size
            through = offset
        after = rows[-1][0]
    return through


def _compact(
    store: Any, name: str, partition: int, cfg: TopicConfig, now: int, in_flight: int | None, chunk: int
) -> tuple[int, int, int]:
    lag_cutoff = now - cfg.min_compaction_lag_ms
    tomb_cutoff = now - cfg.delete_retention_ms
    latest: dict[bytes, int] = {}
    candidates: list[tuple[int, int, bytes, bool]] = []
    after = 0
    while True:
        rows = store.scan(name, partition, after, chunk, with_meta=True)
        for offset, ts, _, meta, is_null in rows:
            key = decode_meta(meta)[1] if meta is not None else None
            if key is None:
                continue
            latest[key] = offset
            if ts <= lag_cutoff:
                candidates.append((offset, ts, key, bool(is_null)))
        if len(rows) < chunk:
            break
        after = rows[-1][0]
    doomed = []
    for offset, ts, key, tombstone in candidates:
        if in_flight is not None and offset >= in_flight:
            continue  # a queue group has not finished it
        if latest[key] != offset or (tombstone and ts <= tomb_cutoff):
            doomed.append(offset)
    size = 0
    for i in range(0, len(doomed), chunk):
        size += store.delete_offsets(name, partition, doomed[i : i + chunk])
    return len(doomed), size, len(latest)


class Cleaner:
    """Runs `clean()` every `interval` seconds in a background thread."""

    def __init__(
        self,
        log: Core,
        interval: float = 60.0,
        *,
        chunk: int = DEFAULT_CHUNK,
        txn_window_ms: int | None = DEFAULT_TXN_WINDOW_MS,
    ):
        self.log = log
        self.interval = interval
        self.chunk = chunk
        self.txn_window_ms = txn_window_ms
        self.last: list[CleanReport] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Cleaner:
        """Start cleaning in a background thread, every `interval` seconds."""
        self._thread = threading.Thread(target=self._run, name="tidelog-cleaner", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.last = clean(self.log, chunk=self.chunk, txn_window_ms=self.txn_window_ms)
            except TidelogError:
                pass  # try again next round; a topic may have gone meanwhile

    def stop(self) -> None:
        """Stop the background thread and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
