"""What `tidelog consume` and its group-member loop share.

Where --from starts each partition, and how SIGINT / SIGTERM stop a loop
cleanly (finish the batch, flush, commit, return).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import tidelog


class Stopped(Exception):
    """Raised by the signal handler to leave a wait for records."""


class StopSignals:
    """Turns SIGINT and SIGTERM into a clean stop.

    A signal sets `requested`; the loop finishes its batch, flushes, commits
    and returns. Only while waiting for records does the handler raise, so a
    signal never lands in the middle of printing a line or committing. A
    second signal raises at once.
    """

    def __init__(self) -> None:
        self.requested = False
        self.waiting = False

    def _handle(self, _signum: int, _frame: Any) -> None:
        again = self.requested
        self.requested = True
        if self.waiting or again:
            raise Stopped

    @contextmanager
    def installed(self) -> Iterator[StopSignals]:
        if threading.current_thread() is not threading.main_thread():
            yield self  # signals reach only the main thread; leave them alone
            return
        previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @contextmanager
    def wait(self) -> Iterator[None]:
        if self.requested:
            raise Stopped
        self.waiting = True
        try:
            yield
        finally:
            self.waiting = False


def start_positions(log: tidelog.Log, topic: str, partitions: list[int], start: str | int) -> dict[int, int]:
    """Where --from puts each partition: the offset its next record follows."""
    described = {p.partition: p for p in log.describe(topic).partitions}
    positions = {}
    for partition in partitions:
        p = described[partition]
        if start == "earliest":
            positions[partition] = p.first_offset - 1
        elif start == "latest":
            positions[partition] = p.last_offset
        elif int(start) < 0:  # the last N records (fewer when fewer are kept)
            positions[partition] = max(p.first_offset - 1, p.last_offset + int(start))
        elif int(start) - 1 <= p.last_offset:
            positions[partition] = int(start) - 1
        else:
            raise tidelog.OffsetOutOfRange(
                f"--from {start} is past the end of {topic!r}/{partition} (last offset {p.last_offset})",
                first=p.first_offset,
                last=p.last_offset,
            )
    return positions
