"""The bounds of every number the core takes, and the checks that hold them.

One table for the numbers a caller can give a queue, a job or a read:
offsets, timestamps, delays, leases, priorities, deliveries. The Python API
checks them at its edge (the sync and asyncio twins share these checks), the
HTTP routes and the Redis front call the same ones, so a number out of range
is an InvalidRequest that names the field and its range, and nothing is
written. The read side never trusts what is already in the log either: a
queue header written by a plain produce, or by an older version, is read as
a bounded value (`deliver_at`, `priority`), never as an error for every
receive.

Why these bounds:

- offsets are Kafka's: signed 64-bit. Every store answers every offset up
  to MAX_OFFSET (past the end is an empty read, an OffsetOutOfRange or a
  404, never an overflow).
- times in ms since epoch stop at 2^53 - 1 (the year 287396): exact in a
  double, so a JSON client in any language reads them as sent.
- a send's delay stops at a year (MAX_DELAY_S): far enough for scheduled
  jobs, near enough that a delay is a time, not "never" (SQS stops at 15
  minutes). A record is held at most that long past its append time,
  whatever its deliver-at header says.
- a lease, an extend and a nack's delay stop at 12 hours, SQS's visibility
  bound: a lease longer than that is a lost worker nobody notices.
- max deliveries stops at 1000, SQS's maxReceiveCount: a record delivered
  that often is a poison message, and its dead-letter topic is the place
  to look at it.
"""

from __future__ import annotations

from typing import Any

from .errors import InvalidRequest, InvalidValue

MAX_OFFSET = (1 << 63) - 1
MAX_TIMESTAMP_MS = (1 << 53) - 1
DAY_S = 86_400
MAX_DELAY_S = 365 * DAY_S
MAX_DELAY_MS = MAX_DELAY_S * 1000
MAX_VISIBILITY_S = 12 * 3600
MAX_WAIT_S = 3600
MAX_PRIORITY = 9
MAX_DELIVERIES = 1000
MAX_RECEIVE = 10_000

# The headers that carry a queue send's delay and priority (see tidelog.queues).
DELIVER_AT = "tidelog-deliver-at"
PRIORITY = "tidelog-priority"
QUEUE_HEADERS = frozenset((DELIVER_AT, PRIORITY))
# Longest decimal text either header may hold: 2^53 - 1 has 16 digits.
_MAX_DIGITS = 16


def check_seconds(what: str, value: Any, maximum: float, *, positive: bool = False) -> float:
    """A number of seconds from 0 (or more than 0 when `positive`) to `maximum`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise InvalidRequest(f"{what} must be a number of seconds, not {value!r}")
    # Compared before any conversion: a huge int is refused, not an OverflowError.
    if value < 0 or value > maximum or (positive and value == 0):
        low = "more than 0 and at most" if positive else "from 0 to"
        raise InvalidRequest(f"{what} must be {low} {_seconds(maximum)}, got {_short(value)}")
    return float(value)


def check_visibility_timeout(value: Any) -> float:
    """A lease's length: more than 0 and at most MAX_VISIBILITY_S seconds."""
    return check_seconds("visibility_timeout", value, MAX_VISIBILITY_S, positive=True)


def check_time_ms(what: str, value: Any) -> int:
    """A time in ms since epoch, 0 to MAX_TIMESTAMP_MS."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TIMESTAMP_MS:
        raise InvalidRequest(
            f"{what} must be a time in ms since epoch from 0 to {MAX_TIMESTAMP_MS}, got {_short(value)}"
        )
    return value


def check_priority(priority: Any) -> int:
    """A send's priority: an int from 0 to MAX_PRIORITY."""
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= MAX_PRIORITY:
        raise InvalidRequest(f"priority must be an integer from 0 to {MAX_PRIORITY}, got {_short(priority)}")
    return priority


def check_queue_header(name: str, value: bytes) -> None:
    """A produce that writes a queue's own header writes a value the queue can use.

    DELIVER_AT: ms since epoch as decimal digits, 0 to MAX_TIMESTAMP_MS;
    PRIORITY: 0 to MAX_PRIORITY. InvalidValue otherwise (nothing written).
    """
    if name == DELIVER_AT and not _within(value, MAX_TIMESTAMP_MS):
        raise InvalidValue(
            f"header {DELIVER_AT} must be a time in ms since epoch from 0 to {MAX_TIMESTAMP_MS}, "
            f"got {value[:40]!r}"
        )
    if name == PRIORITY and not _within(value, MAX_PRIORITY):
        raise InvalidValue(
            f"header {PRIORITY} must be an integer from 0 to {MAX_PRIORITY}, got {value[:40]!r}"
        )


def deliver_at(timestamp: int, value: bytes) -> int:
    """When a record appended at `timestamp` with this deliver-at header is due.

    Whatever the header holds: text that is not a time is no delay, and a
    time more than MAX_DELAY past the append is held to that (a header
    written before the produce checked it, or by an older version, must not
    stop every receive of the queue)."""
    if not _digits(value):
        return timestamp
    if len(value) > _MAX_DIGITS:
        return timestamp + MAX_DELAY_MS
    return min(max(timestamp, int(value)), timestamp + MAX_DELAY_MS)


def priority(value: bytes) -> int:
    """A priority header's value, held to 0..MAX_PRIORITY (0 for text that is not a number)."""
    if not _digits(value):
        return 0
    return MAX_PRIORITY if len(value) > _MAX_DIGITS else min(MAX_PRIORITY, int(value))


def _within(value: bytes, maximum: int) -> bool:
    """`value` is decimal digits for an integer from 0 to `maximum`."""
    return _digits(value) and len(value) <= _MAX_DIGITS and int(value) <= maximum


def _digits(value: bytes) -> bool:
    """`value` is a decimal number: ASCII digits only (bytes.isdigit takes no other script's)."""
    return bool(value) and value.isdigit()


def _seconds(n: float) -> str:
    """A bound in seconds, as a reader checks it: '43200 seconds (12 hours)'."""
    text = f"{n:.0f}" if n == int(n) else f"{n:g}"
    for unit, size in (("days", DAY_S), ("hours", 3600)):
        if n >= size and n % size == 0:
            return f"{text} seconds ({n // size:.0f} {unit})"
    return f"{text} seconds"


def _short(value: Any) -> str:
    """A number for an error message, shortened when it is huge."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
