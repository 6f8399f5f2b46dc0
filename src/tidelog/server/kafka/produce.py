"""Produce and InitProducerId: Kafka's record batches become tidelog records.

A Kafka record is a tidelog record: its key, value and headers as they came
(a header's null value as empty bytes), its timestamp the producer's
(CreateTime; the log's clock when the producer sent none), and a null value
(a tombstone) is tidelog's null value, which compaction treats as one.
Kafka offsets start at 0: tidelog's offset n is Kafka's n - 1 on the wire.

A request's partitions are decoded and checked on a thread; those that pass
are committed together through the group-commit writer (one transaction
with other connections' produce requests), so `acks=1` and `acks=all` are
answered after the commit, and a partition refused (a bad CRC, a missing
topic with auto-create off, a record over max.message.bytes) writes nothing
and gets its own error code.

Idempotent producers (`enable.idempotence`): InitProducerId hands out a
random 62-bit producer id (no store state, so any broker of the cluster may
answer), and each batch of a producer id is written under an idempotent
write id made of the producer id, epoch, partition, base sequence and topic:
a retried batch is found and answered with its first offsets, never written
twice (for as long as `--txn-window`, 7 days by default). Sequence gaps are
not checked (no OUT_OF_ORDER_SEQUENCE_NUMBER).
"""

from __future__ import annotations

import secrets
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from ...errors import InvalidValue, TidelogError
from ...records import BatchSent, NewRecord, Prepared
from .batches import LOG_APPEND_TIME, Batch, CorruptBatch, UnsupportedCodec, read_batches
from .broker import Broker, Session
from .codes import error_code
from .wire import Request


class Ready(NamedTuple):
    """A partition's records, checked and encoded: one write, or one a batch when idempotent."""

    writes: list[tuple[str | None, list[Prepared]]]  # (idempotent write id or None, batches)


class Refused(NamedTuple):
    code: ErrorCode
    message: str


def _runs(topic: str, partition: int, batch: Batch, broker: Broker) -> list[Prepared]:
    """A batch as Prepared runs of records that share a timestamp (a Prepared has one)."""
    producer = broker.producer
    append_time = batch.attributes & LOG_APPEND_TIME
    out: list[Prepared] = []
    run: list[NewRecord] = []
    run_ts: int | None = None
    for record in batch.records:
        ts: int | None = None if append_time or record.timestamp < 0 else record.timestamp
        if run and ts != run_ts:
            out.append(producer.prepare(topic, run, partition=partition, timestamp=run_ts))
            run = []
        run_ts = ts
        headers = None
        if record.headers:
            try:
                headers = [
                    (name.decode() if name is not None else "", value or b"")
                    for name, value in record.headers
                ]
            except UnicodeDecodeError:
                raise InvalidValue("a header name is not UTF-8 text") from None
        run.append(NewRecord(record.value, record.key, headers))
    if run:
        out.append(producer.prepare(topic, run, partition=partition, timestamp=run_ts))
    return out


def _prepare(broker: Broker, topic: str, partition: int, data: bytes | None) -> Ready | Refused:
    """On a thread: decode a partition's batches and check them as a write would."""
    try:
        batches = read_batches(data or b"", broker.limits.max_request)
        if not batches:
            return Refused(ErrorCode.corrupt_message, "a produce with no record batch")
        writes: list[tuple[str | None, list[Prepared]]] = []
        plain: list[Prepared] = []
        for batch in batches:
            if not batch.records:
                continue
            prepared = _runs(topic, partition, batch, broker)
            if batch.producer_id >= 0:
                txn = f"kafka:{batch.producer_id}:{batch.producer_epoch}:{partition}:{batch.base_sequence}:{topic}"
                writes.append((txn, prepared))
            else:
                plain.extend(prepared)
        if plain:
            writes.append((None, plain))
        return Ready(writes)
    except CorruptBatch as e:
        return Refused(ErrorCode.corrupt_message, str(e))
    except UnsupportedCodec as e:
        return Refused(ErrorCode.unsupported_compression_type, str(e))
    except TidelogError as e:
        return Refused(error_code(e), str(e))


async def produce(session: Session, request: Request) -> dict[str, Any] | None:
    broker = session.broker
    body = request.body
    acks = body.acks
    results: dict[tuple[str, int], dict[str, Any]] = {}
    order = [(t.name, p.index) for t in body.topic_data for p in t.partition_data]
    refuse: Refused | None = None
    if acks not in (0, 1, -1):
        refuse = Refused(ErrorCode.invalid_required_acks, f"acks must be 0, 1 or -1 (all), got {acks}")
    elif body.transactional_id is not None:
        refuse = Refused(
            ErrorCode.transactional_id_authorization_failed, "transactions are not supported by tidelog"
        )
    writes: list[tuple[tuple[str, int], str | None, list[Prepared]]] = []
    for t in body.topic_data:
        for p in t.partition_data:
            key = (t.name, p.index)
            ready = refuse or await broker.run(_prepare, broker, t.name, p.index, p.records)
            if isinstance(ready, Refused):
                results[key] = _answer(p.index, ready.code, -1, ready.message)
            else:
                writes.extend((key, txn, prepared) for txn, prepared in ready.writes)
    firsts = await _write(broker, writes)
    for key, first in firsts.items():
        if isinstance(first, BaseException):
            results[key] = _answer(key[1], error_code(first), -1, str(first))
        else:
            results[key] = _answer(key[1], ErrorCode.none, first - 1, None)
    if acks == 0:
        return None  # Kafka answers nothing to acks=0
    topics: dict[str, list[dict[str, Any]]] = {}
    for name, index in order:
        topics.setdefault(name, []).append(results[(name, index)])
    return {
        "responses": [{"name": name, "partition_responses": parts} for name, parts in topics.items()],
        "throttle_time": 0,
    }


async def _write(
    broker: Broker, writes: list[tuple[tuple[str, int], str | None, list[Prepared]]]
) -> dict[tuple[str, int], int | BaseException]:
    """Commit the checked partitions; each partition's first tidelog offset, or its error."""
    firsts: dict[tuple[str, int], int | BaseException] = {}
    plain = [(key, prepared) for key, txn, prepared in writes if txn is None]
    if plain:
        batches = [b for _, prepared in plain for b in prepared]
        try:
            sent = await broker.writer.write(lambda: batches)
        except TidelogError as e:
            for key, _ in plain:
                firsts[key] = e
        else:
            i = 0
            for key, prepared in plain:
                _first(firsts, key, sent[i])
                i += len(prepared)
    for key, txn, prepared in writes:
        if txn is None or isinstance(firsts.get(key), BaseException):
            continue
        try:
            sent = await broker.writer.write(lambda p=prepared: p, txn=txn)  # type: ignore[misc]
        except TidelogError as e:
            firsts[key] = e
        else:
            _first(firsts, key, sent[0])
    return firsts


def _first(firsts: dict[tuple[str, int], int | BaseException], key: tuple[str, int], sent: BatchSent) -> None:
    # A partition's answer is the first offset of its first batch.
    if key not in firsts:
        firsts[key] = sent.first_offset


def _answer(index: int, code: ErrorCode, base_offset: int, message: str | None) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": code,
        "base_offset": base_offset,
        "log_append_time": None,
        "log_start_offset": -1,
        "record_errors": (),
        "error_message": message,
    }


async def init_producer_id(session: Session, request: Request) -> dict[str, Any]:
    body = request.body
    if body.transactional_id is not None:
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.transactional_id_authorization_failed,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    producer_id = getattr(body, "producer_id", -1)
    if producer_id >= 0:  # an idempotent producer bumping its epoch (KIP-360)
        epoch = getattr(body, "producer_epoch", -1) + 1
        if epoch > 0x7FFF:
            producer_id, epoch = secrets.randbits(62), 0
        return {"throttle_time": 0, "error_code": 0, "producer_id": producer_id, "producer_epoch": epoch}
    return {"throttle_time": 0, "error_code": 0, "producer_id": secrets.randbits(62), "producer_epoch": 0}
