"""How the console writes figures: counts, bytes, durations, rates, times,
retention and record payloads (JSON pretty-printed, text, hex and base64)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

from ....records import Message


def count(n: int | float | None) -> str:
    return "–" if n is None else f"{n:,}"


def size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def duration(ms: int | None) -> str:
    if ms is None:
        return "forever"
    s = ms / 1000
    for unit, span in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= span:
            return f"{s / span:g} {unit}"
    return f"{s:g} s"


def rate(r: float | None) -> str:
    return "–" if r is None else f"{r:,.1f}/s"


def when(ms: int | None) -> str:
    if not ms:
        return "–"
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (ValueError, OverflowError, OSError):  # a producer may stamp any year: shown as sent
        return f"{ms} ms"


def retention(config: dict[str, Any]) -> str:
    """A topic's retention policy in a few words."""
    parts = []
    if config.get("cleanup_policy") == "compact":
        parts.append("compact")
    if config.get("retention") == "consumed":
        parts.append("delete when consumed")
    if config.get("retention_ms") is not None:
        parts.append(f"keep {duration(config['retention_ms'])}")
    if config.get("retention_bytes") is not None:
        parts.append(f"at most {size(config['retention_bytes'])}")
    return ", ".join(parts) or "keep forever"


def bytes_text(raw: bytes | None) -> str:
    """A key or header value: its text when it is UTF-8, else its base64 (marked)."""
    if raw is None:
        return "–"
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode()


def hexdump(raw: bytes, limit: int = 4096) -> str:
    lines = []
    for i in range(0, min(len(raw), limit), 16):
        chunk = raw[i : i + 16]
        printable = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{i:08x}  {chunk.hex(' '):<47}  {printable}")
    if len(raw) > limit:
        lines.append(f"… {len(raw) - limit} more bytes")
    return "\n".join(lines)


def value_views(msg: Message) -> dict[str, str]:
    """The record's value as a person reads it: "pretty" for JSON and text,
    "hex" and "base64" for bytes (and for any value, on request)."""
    raw = msg.value
    views: dict[str, str] = {}
    if msg.format == "json":
        views["pretty"] = json.dumps(msg.data, indent=2, ensure_ascii=False)
    elif msg.format == "text":
        views["pretty"] = msg.data
    views["hex"] = hexdump(raw)
    views["base64"] = base64.b64encode(raw).decode()
    return views


def preview(msg: Message, width: int = 120) -> str:
    """One line of the value for a list of records."""
    if msg.format == "json":
        text = json.dumps(msg.data, ensure_ascii=False)
    elif msg.format == "text":
        text = msg.data
    else:
        text = f"({len(msg.value)} bytes) {msg.value[:24].hex(' ')}"
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
