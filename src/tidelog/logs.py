"""Structured logs: an event name and its fields, and how the commands print them.

A log record made by `event` carries its fields in `record.tidelog` as well
as in the message text (`batch delivered group=billing topic=orders ...`),
so plain logging reads well and `JsonFormatter` writes one JSON object a
line for a log shipper to index. `log_to_stderr` is what the `tidelog`
commands (serve, worker, jobs run) call at their entry point.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

logger = logging.getLogger("tidelog.worker")


def event(level: int, name: str, **fields: Any) -> None:
    if not logger.isEnabledFor(level):
        return
    text = " ".join(f"{k}={v}" for k, v in fields.items())
    logger.log(level, "%s %s", name, text, extra={"tidelog": {"event": name, **fields}})


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, event, then the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "tidelog", None) or {"event": record.getMessage()}
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            **fields,
        }
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")


def log_to_stderr(
    level: str = "info", fmt: str = "json", loggers: tuple[str, ...] = ("tidelog.worker",)
) -> None:
    """Send `loggers` to stderr at `level`, as JSON lines or as text."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in loggers:
        log = logging.getLogger(name)
        log.handlers[:] = [handler]
        log.setLevel(level.upper())
        log.propagate = False
