"""The console's history: figures the server samples on an interval and keeps
in memory for a bounded window, so a chart never scans the log.

Kept in memory, not in a table of the log: the history is a view for a
person watching now (the last hour), it costs the log no writes (a sample
every few seconds would otherwise be the busiest writer of a quiet log and
grow it), and a store shared by several servers would get one history per
server anyway. A restart starts the charts afresh; `/metrics` and a
Prometheus server are the place for long history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("tidelog.server")

DEFAULT_INTERVAL_S = 5.0
DEFAULT_WINDOW_S = 3600.0


class History:
    """Series of (ms since epoch, value) by name, each at most `window` long. Thread-safe."""

    def __init__(self, interval: float = DEFAULT_INTERVAL_S, window: float = DEFAULT_WINDOW_S):
        if not interval > 0 or not window >= interval:
            raise ValueError("the console samples every interval > 0 s over a window >= interval")
        self.interval = interval
        self.window = window
        self._maxlen = int(window / interval) + 1
        self._series: dict[str, deque[tuple[int, float]]] = {}
        self._lock = threading.Lock()
        # The figures of the last sample and when (time.monotonic()): what the
        # overview's refresh answers, so open pages add no reads of their own.
        self.latest: tuple[float, Any] | None = None

    def fresh(self) -> Any | None:
        """The last sample's figures if taken within the last interval and a half, else None."""
        latest = self.latest
        if latest is None or time.monotonic() - latest[0] > self.interval * 1.5:
            return None
        return latest[1]

    def record(self, at: int, values: dict[str, float]) -> None:
        """One sample of several series; series absent from it (a deleted topic) stop growing."""
        with self._lock:
            for name, value in values.items():
                series = self._series.get(name)
                if series is None:
                    series = self._series[name] = deque(maxlen=self._maxlen)
                series.append((at, value))
            # Forget series that got no sample for a whole window (deleted topics, groups).
            stale = [n for n, s in self._series.items() if s and s[-1][0] < at - self.window * 1000]
            for name in stale:
                del self._series[name]

    def points(self, name: str, since: int | None = None) -> list[tuple[int, float]]:
        with self._lock:
            series = list(self._series.get(name, ()))
        return series if since is None else [p for p in series if p[0] >= since]

    def rate(self, name: str, over_ms: int) -> float | None:
        """How fast a counter rose over the last `over_ms` (per second); None before two samples."""
        series = self.points(name)
        if len(series) < 2:
            return None
        end = series[-1]
        start = next((p for p in series if p[0] >= end[0] - over_ms), series[0])
        if start[0] == end[0]:
            start = series[-2]
        return max(0.0, (end[1] - start[1]) * 1000 / (end[0] - start[0]))

    def rates(self, name: str, over_ms: int) -> list[tuple[int, float]]:
        """`rate(name, over_ms)` as it stood at each sample: the chart of a
        figure whose last point is the figure (a header's rate and its chart
        never disagree)."""
        series = self.points(name)
        out = []
        j = 0
        for i in range(1, len(series)):
            end = series[i]
            while series[j][0] < end[0] - over_ms:
                j += 1
            start = series[j] if j < i and series[j][0] != end[0] else series[i - 1]
            if end[0] > start[0]:
                out.append((end[0], max(0.0, (end[1] - start[1]) * 1000 / (end[0] - start[0]))))
        return out

    def per_second(self, name: str) -> list[tuple[int, float]]:
        """A counter's series as its rate between consecutive samples."""
        series = self.points(name)
        return [
            (b[0], max(0.0, (b[1] - a[1]) * 1000 / (b[0] - a[0])))
            for a, b in zip(series, series[1:])
            if b[0] > a[0]
        ]

    def rising(self, name: str, samples: int = 3) -> bool:
        """True when the last `samples` steps each went up (a lag that keeps growing)."""
        series = self.points(name)[-(samples + 1) :]
        return len(series) == samples + 1 and all(b[1] > a[1] for a, b in zip(series, series[1:]))


class Sampler:
    """Calls `sample()` every `interval` seconds on the server's loop until stopped."""

    def __init__(self, interval: float, sample: Callable[[], Awaitable[Any]]):
        self.interval = interval
        self._sample = sample
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self._sample()
            except asyncio.CancelledError:
                raise
            except Exception:  # a failed sample (a store hiccup) leaves a gap, not a dead sampler
                log.exception("console: sampling failed")
            await asyncio.sleep(self.interval)
