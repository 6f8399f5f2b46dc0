"""The lengths a request announces, checked against the bytes it has before kio reads it.

kio's native reader reserves room for an array as soon as it reads the array's
count: a frame of a few dozen bytes announcing 2^31-1 elements once asked for
208 GB and the process aborted ("memory allocation ... failed"), whatever the
connection's state (requests are decoded before the SASL check). So each count
and each string or bytes length is walked first, with the request's schema,
and refused (LengthTooLong) when it claims more than the bytes left: an
element takes a byte at least. A null array where the schema allows none is
refused here too, as Kafka refuses it, instead of reaching a handler.

The walk reads lengths and skips values; it allocates nothing the frame does
not already hold, and costs a few microseconds for the requests clients send
(a Produce's records are one length).
"""

from __future__ import annotations

import struct
from dataclasses import fields
from functools import cache

from kio.serial.readers import read_unsigned_varint

from .plans import FieldPlan, plan_of


class LengthTooLong(ValueError):
    """A count or length claims more than the frame holds (parse_request: MalformedRequest)."""


# Bytes a fixed-size value takes on the wire, by kio's kafka_type.
FIXED = {
    "int8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


# A compiled walk: one op a field, consecutive fixed-size fields merged into one.
FIXED_OP, STRING, BYTES, ENTITY, ARRAY = range(5)
Op = tuple  # (code, argument, optional, name)


@cache
def _program(cls: type) -> tuple[Op, ...]:
    """The ops that walk one `cls` entity's written fields (a flexible entity's tagged
    fields come after them, as tags). _Unknown when a field's type cannot be sized."""
    tagged = {f.name for f in fields(cls) if "tag" in f.metadata}
    ops: list[Op] = []
    for plan in plan_of(cls):
        if plan.name in tagged:
            continue
        if plan.kind in ("entities", "primitives"):
            element = (ENTITY, plan.inner, False, plan.name) if plan.kind == "entities" else _value_op(plan)
            ops.append((ARRAY, element, plan.optional, plan.name))
        elif plan.kind == "entity":
            ops.append((ENTITY, plan.inner, plan.optional, plan.name))
        else:
            op = _value_op(plan)
            if op[0] == FIXED_OP and ops and ops[-1][0] == FIXED_OP:
                ops[-1] = (FIXED_OP, ops[-1][1] + op[1], False, f"{ops[-1][3]}, {plan.name}")
            else:
                ops.append(op)
    return tuple(ops)


def _value_op(plan: FieldPlan) -> Op:
    kind = plan.kafka_type
    if kind == "string":
        return (STRING, 2, plan.optional, plan.name)
    if kind in ("bytes", "records"):
        return (BYTES, 4, plan.optional, plan.name)
    size = FIXED.get(kind)
    if size is None:
        raise _Unknown
    return (FIXED_OP, size, plan.optional, plan.name)


def check_lengths(cls: type, frame: bytes, at: int) -> None:
    """LengthTooLong when a count or a length in `frame` from `at` claims more than
    the bytes left, or an array the schema says is never null is null."""
    try:
        program = _program(cls)
    except _Unknown:
        return  # a type the walk cannot size: kio's reader alone decides
    _walk(program, frame, at, len(frame), bool(getattr(cls, "__flexible__", False)))


def _length(frame: bytes, at: int, end: int, width: int, flexible: bool, what: str) -> tuple[int, int]:
    """(length or count, position after it): compact (varint + 1) when flexible, else a
    signed int of `width` bytes; -1 for null. LengthTooLong when it claims more than is left."""
    if flexible:
        n, size = read_unsigned_varint(frame, at)
        value = n - 1
    else:
        if end - at < width:
            raise LengthTooLong(f"{what}: the request ends inside its length")
        (value,) = (_I16 if width == 2 else _I32).unpack_from(frame, at)
        size = width
    at += size
    if value > end - at:
        raise LengthTooLong(f"{what}: {value} announced, {end - at} bytes left")
    return value, at


def _walk(program: tuple[Op, ...], frame: bytes, at: int, end: int, flexible: bool) -> int:
    """Walk one entity: its fields, then (flexible) its tagged fields."""
    for op in program:
        at = _one(op, frame, at, end, flexible)
    if flexible:
        at = _tags(frame, at, end)
    return at


def _one(op: Op, frame: bytes, at: int, end: int, flexible: bool) -> int:
    code, arg, optional, what = op
    if code == FIXED_OP:
        at += arg
        if at > end:
            raise LengthTooLong(f"{what}: the request ends inside it")
        return at
    if code in (STRING, BYTES):
        length, at = _length(frame, at, end, arg, flexible, what)
        return at + max(length, 0)
    if code == ENTITY:
        return _walk(_program(arg), frame, at, end, flexible)
    count, at = _length(frame, at, end, 4, flexible, what)  # an array
    if count < 0:
        if not optional:
            raise LengthTooLong(f"{what} is null, which its schema does not allow")
        return at
    if arg[0] == FIXED_OP:
        at += count * arg[1]
        if at > end:
            raise LengthTooLong(f"{what}: {count} announced, the request ends first")
        return at
    for _ in range(count):
        at = _one(arg, frame, at, end, flexible)
    return at


def _tags(frame: bytes, at: int, end: int) -> int:
    count, size = read_unsigned_varint(frame, at)
    at += size
    if count > end - at:
        raise LengthTooLong(f"{count} tagged fields announced, {end - at} bytes left")
    for _ in range(count):
        _, size = read_unsigned_varint(frame, at)
        at += size
        length, size = read_unsigned_varint(frame, at)
        at += size + length
        if at > end:
            raise LengthTooLong("a tagged field runs past the frame")
    return at


class _Unknown(Exception):
    """A field type the walk cannot size: the rest is left to kio's reader."""
