"""Produce and InitProducerId: Kafka's record batches become tidelog records.

A Kafka record is a tidelog record: its key, value and headers as they came
(a header's null value kept null for Kafka's consumers, read as empty bytes
by tidelog's API; a null name as empty text), its timestamp the producer's
(CreateTime, whatever timestamp type the batch names, as Kafka keeps it for a
topic of CreateTime; the log's clock when the producer sent none), and a null
value (a tombstone) is tidelog's null value, which compaction treats as one.
Kafka offsets start at 0: tidelog's offset n is Kafka's n - 1 on the wire.

A partition's records are one record batch of at least one record, as Kafka 4
takes them (INVALID_RECORD otherwise, and for a control batch, which is the
broker's to write); zstd from Produce v7 (UNSUPPORTED_COMPRESSION_TYPE before);
an LZ4 frame of linked blocks, which Kafka's broker and Java clients cannot
read, is refused with the UNKNOWN_SERVER_ERROR Kafka answers it with. An
error under acks=0 closes the connection, as Kafka does: the client has no
answer to learn it from.

A request's partitions are decoded and checked on the group-commit writer's
thread, in its job; those that pass are committed together (one transaction
with the produce requests of every connection waiting), so `acks=1` and
`acks=all` are answered after the commit, and a partition refused (a bad
CRC, a missing topic with auto-create off, a record over max.message.bytes)
writes nothing and gets its own error code. A compressed batch whose
records read back as they came is kept beside them where the store can
(the batch's last records carry it: `Prepared.wire`), for fetch.py.

Idempotent producers (`enable.idempotence`): InitProducerId hands out a
random 62-bit producer id (no store state, so any broker of the cluster may
answer), and each batch of a producer id is written under an idempotent
write id made of the producer id, epoch, partition, base sequence and topic:
a retried batch is found and answered with its first offsets, never written
twice (for as long as `--txn-window`, 7 days by default). Sequence gaps are
not checked (no OUT_OF_ORDER_SEQUENCE_NUMBER). tidelog has no transactions: a
transactional batch is refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka
answers one sent without a transactional id), while a transactional id on a
request of plain batches is ignored, as Kafka ignores it.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import struct
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import TidelogError
from ...records import Prepared
from ...store.base import WireBatch
from .batches import (
    CODEC,
    CONTROL,
    HEAD_SIZE,
    LOG_APPEND_TIME,
    TRANSACTIONAL,
    ZSTD,
    Batch,
    CorruptBatch,
    LinkedLz4Blocks,
    UnsupportedCodec,
    read_batches,
)
from .broker import Broker, Session
from .codes import Refused, error_code
from .wire import Request, respond_numbers

_PRODUCER = struct.Struct(">qhi")  # a batch's producer id, epoch and base sequence, at byte 43
_ATTRIBUTES_LOW = 22  # the low byte of a batch's attributes (an i16 at byte 21)
ZSTD_PRODUCE = 7  # the first Produce version whose batches may be zstd (KIP-110)


def _runs(topic: str, partition: int, batch: Batch, broker: Broker) -> list[Prepared]:
    """A batch as Prepared runs of records that share a timestamp (a
    Prepared has one); most batches are one run, written as they were decoded.
    A compressed batch whose records read back as they came rides on the
    last run, for a store that keeps wire batches (fetch.py serves them)."""
    producer = broker.producer
    values, metas, runs, exact = batch.records
    # The producer's clock (CreateTime), or the log's for a record with none. A
    # batch marked LogAppendTime keeps its producer's stamps too: the topic's
    # setting decides the type, not the batch, and tidelog's topics are CreateTime.
    out: list[Prepared] = []
    ends = [i for i, _ in runs[1:]] + [len(values)]
    for (i, stamp), j in zip(runs, ends):
        ts = None if stamp < 0 else stamp
        if len(runs) == 1:
            out.append(producer.prepare_stored(topic, partition, values, metas, ts))
        else:
            part = None if metas is None else metas[i:j]
            out.append(producer.prepare_stored(topic, partition, values[i:j], part, ts))
    if (
        broker.keeps_wire
        and exact
        and batch.attributes & CODEC
        and not batch.attributes & (LOG_APPEND_TIME | CONTROL)
        and all(stamp >= 0 for _, stamp in runs)
    ):
        out[-1] = out[-1]._replace(wire=WireBatch(len(values), bytes(batch.data), batch.size))
    return out


def _prepare(broker: Broker, topic: str, partition: int, data: bytes | None, version: int) -> list[Prepared]:
    """Decode a partition's batch and check it as Kafka and a write would; Refused with Kafka's code."""
    try:
        batches = read_batches(data or b"", broker.limits.max_batch_inflated)
        if len(batches) != 1:
            raise Refused(
                ErrorCode.invalid_record,
                f"a partition's records are one record batch (Produce v3 and later), not {len(batches)}",
            )
        (batch,) = batches
        if batch.attributes & CONTROL:
            raise Refused(
                ErrorCode.invalid_record, "a control batch is the broker's to write, not a producer's"
            )
        if not batch.records.values:
            raise Refused(ErrorCode.invalid_record, "a record batch of no records")
        if batch.attributes & CODEC == ZSTD and version < ZSTD_PRODUCE:
            raise Refused(
                ErrorCode.unsupported_compression_type, f"zstd batches need Produce v{ZSTD_PRODUCE} or later"
            )
        return _runs(topic, partition, batch, broker)
    except CorruptBatch as e:
        raise Refused(ErrorCode.corrupt_message, str(e)) from None
    except UnsupportedCodec as e:
        raise Refused(ErrorCode.unsupported_compression_type, str(e)) from None
    except LinkedLz4Blocks as e:
        # Kafka's broker fails on these with an unexpected error; so does its Java consumer,
        # which would be handed the batch as it came (fetch.py serves kept batches).
        raise Refused(ErrorCode.unknown_server_error, str(e)) from None
    except TidelogError as e:
        raise Refused(error_code(e), str(e)) from None


def _idempotent_id(topic: str, partition: int, data: bytes | None) -> str | None:
    """The idempotent write id of a partition's records, from its first batch's
    header (a producer sends one batch a partition a request); None when the
    producer is not idempotent or the bytes are too short to tell."""
    if data is None or len(data) < HEAD_SIZE:
        return None
    producer_id, epoch, sequence = _PRODUCER.unpack_from(data, 43)
    if producer_id < 0:
        return None
    return f"kafka:{producer_id}:{epoch}:{partition}:{sequence}:{topic}"


def _transactional(data: bytes | None) -> bool:
    """Whether a partition's first batch is part of a transaction: marked
    transactional, by a producer id (Kafka lets the mark pass without one)."""
    return (
        data is not None
        and len(data) >= HEAD_SIZE
        and bool(data[_ATTRIBUTES_LOW] & TRANSACTIONAL)
        and _PRODUCER.unpack_from(data, 43)[0] >= 0
    )


async def produce(session: Session, request: Request) -> dict[str, Any] | bytes | None:
    """Decoding runs in the writer's jobs, on its thread and in the order the
    requests came: a connection's produce requests are taken in while earlier
    ones commit (server.py) and still land in the order they were sent."""
    broker = session.broker
    body = request.body
    acks = body.acks
    order = [(t.name, p.index) for t in body.topic_data for p in t.partition_data]
    results: dict[tuple[str, int], dict[str, Any]] = {}
    refuse: Refused | None = None
    if acks not in (0, 1, -1):
        refuse = Refused(ErrorCode.invalid_required_acks, f"acks must be 0, 1 or -1 (all), got {acks}")
    elif any(_transactional(p.records) for t in body.topic_data for p in t.partition_data):
        # Kafka refuses the whole request when a batch is transactional and its
        # transactional id is not one the client may use; tidelog has none to use.
        refuse = Refused(
            ErrorCode.transactional_id_authorization_failed, "transactions are not supported by tidelog"
        )
    plain: list[tuple[tuple[str, int], bytes | None]] = []
    idempotent: list[tuple[tuple[str, int], str, bytes | None]] = []
    for t in body.topic_data:
        for p in t.partition_data:
            key = (t.name, p.index)
            if refuse is not None:
                results[key] = _answer(p.index, refuse.code, -1, str(refuse))
                continue
            txn = _idempotent_id(t.name, p.index, p.records)
            if txn is None:
                plain.append((key, p.records))
            else:
                idempotent.append((key, txn, p.records))
    writes = []
    counts: dict[tuple[str, int], int] = {}
    if plain:

        def job() -> list[Prepared]:
            out: list[Prepared] = []
            for key, data in plain:
                try:
                    prepared = _prepare(broker, key[0], key[1], data, request.version)
                except Refused as e:
                    results[key] = _answer(key[1], e.code, -1, str(e))
                    continue
                counts[key] = len(prepared)
                out.extend(prepared)
            return out

        writes.append(broker.writer.write(job))
    for key, txn, data in idempotent:
        job = functools.partial(_prepare, broker, key[0], key[1], data, request.version)
        writes.append(broker.writer.write(job, txn=txn))
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    if plain:
        sent = outcomes.pop(0)
        if isinstance(sent, BaseException):
            for key, _ in plain:
                results.setdefault(key, _failed(key, sent))
        else:
            i = 0
            for key, _ in plain:
                if key in counts:
                    results[key] = _answer(key[1], ErrorCode.none, sent[i].first_offset - 1, None)
                    i += counts[key]
    for (key, _, _), outcome in zip(idempotent, outcomes):
        if isinstance(outcome, BaseException):
            results[key] = _failed(key, outcome)
        else:  # also a replay: the first write's offsets
            results[key] = _answer(key[1], ErrorCode.none, outcome[0].first_offset - 1, None)
    if acks == 0:
        # Kafka answers nothing to acks=0, and closes the connection when a partition
        # failed: the one way a client that waits for no answer learns of it.
        if any(a["error_code"] != ErrorCode.none for a in results.values()):
            session.close_after = True
        return None
    answers = [results[key] for key in order]
    if all(a["error_code"] == ErrorCode.none for a in answers):
        # The usual answer: the same shape as the last, other base offsets.
        return respond_numbers(
            request,
            tuple(order),
            functools.partial(_response, order, answers),
            [a["base_offset"] for a in answers],
        )
    return _response(order, answers)


def _response(
    order: list[tuple[str, int]], answers: list[dict[str, Any]], base_offsets: list[int] | None = None
) -> dict[str, Any]:
    """The response's values: each partition's answer (with these base offsets when given), by topic."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for i, ((name, _), answer) in enumerate(zip(order, answers)):
        if base_offsets is not None:
            answer = {**answer, "base_offset": base_offsets[i]}
        topics.setdefault(name, []).append(answer)
    return {
        "responses": [{"name": name, "partition_responses": parts} for name, parts in topics.items()],
        "throttle_time": 0,
    }


def _failed(key: tuple[str, int], e: BaseException) -> dict[str, Any]:
    if isinstance(e, Refused):
        return _answer(key[1], e.code, -1, str(e))
    if not isinstance(e, TidelogError):
        raise e
    return _answer(key[1], error_code(e), -1, str(e))


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
    if (getattr(body, "producer_id", -1) == -1) != (getattr(body, "producer_epoch", -1) == -1):
        # An id without an epoch, or the reverse: Kafka refuses the pair.
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.invalid_request,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    # A new id and epoch 0 for every idempotent producer, also one that names its
    # last id to bump its epoch (KIP-360): Kafka's coordinator does the same for a
    # producer without a transactional id, so its sequences start again at 0.
    return {"throttle_time": 0, "error_code": 0, "producer_id": secrets.randbits(62), "producer_epoch": 0}
