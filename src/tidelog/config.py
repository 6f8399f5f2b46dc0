"""Names and options: defaults in one place, each with a validation step."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from .errors import ConfigurationError, InvalidName, InvalidRequest

NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,200}")
TXN_RE = re.compile(r"[A-Za-z0-9._:-]{1,255}")

DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
MAX_PARTITIONS = 10_000
DURABILITY = ("normal", "full")


def check_name(kind: str, name: Any) -> str:
    """Validate a topic, group or producer name at the API edge.

    Names are stored as values, never spliced into SQL; the pattern keeps
    them printable and safe in URLs and file paths too.
    """
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InvalidName(f"invalid {kind} name {name!r}: use 1 to 200 characters from A-Z a-z 0-9 . _ -")
    return name


def check_txn(txn: Any) -> str:
    """Validate the id of an idempotent write (`Log.write(..., txn=...)`)."""
    if not isinstance(txn, str) or not TXN_RE.fullmatch(txn):
        raise InvalidRequest(f"invalid txn id {txn!r}: use 1 to 255 characters from A-Z a-z 0-9 . _ : -")
    return txn


def check_int(what: str, value: Any, minimum: int = 0, maximum: int | None = None) -> int:
    """An int between `low` and `high` (inclusive), else InvalidRequest naming `name`."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidRequest(f"{what} must be an integer, not {type(value).__name__}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise InvalidRequest(f"{what} must be {bound}, got {value}")
    return value


_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*")
_DURATION_MS = {"ms": 1, None: 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB|K|M|G)?\s*", re.IGNORECASE)
_SIZE_BYTES = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
    "k": 1024,
    "m": 1024**2,
    "g": 1024**3,
}


def parse_duration_ms(what: str, value: Any) -> int:
    """`7d`, `12h`, `30m`, `10s`, `500ms`, or an integer of milliseconds."""
    if isinstance(value, bool):
        raise InvalidRequest(f"{what} must be a duration such as 7d, 12h, 30m, 10s or 500ms, not {value!r}")
    if isinstance(value, int):
        ms = value
    else:
        m = _DURATION.fullmatch(value) if isinstance(value, str) else None
        if m is None:
            raise InvalidRequest(
                f"{what} must be a duration such as 7d, 12h, 30m, 10s or 500ms, not {value!r}"
            )
        ms = int(float(m.group(1)) * _DURATION_MS[m.group(2)])
    if ms < 0:
        raise InvalidRequest(f"{what} must not be negative, got {value!r}")
    return ms


def parse_size_bytes(what: str, value: Any) -> int:
    """`1GiB`, `500MB`, `64KiB`, `100B`, or an integer of bytes."""
    if isinstance(value, bool):
        raise InvalidRequest(f"{what} must be a size such as 1GiB or 500MB, not {value!r}")
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE.fullmatch(value) if isinstance(value, str) else None
        if m is None:
            raise InvalidRequest(f"{what} must be a size such as 1GiB or 500MB, not {value!r}")
        n = int(float(m.group(1)) * _SIZE_BYTES[(m.group(2) or "b").lower()])
    if n < 0:
        raise InvalidRequest(f"{what} must not be negative, got {value!r}")
    return n


CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
RETENTION_MODES = ("time", "consumed")
WEEK_MS = 7 * 86_400_000
MAX_SETTING = (1 << 63) - 1
DEFAULT_DEDUP_WINDOW_MS = 5 * 60_000
DAY_MS = 86_400_000


@dataclass(frozen=True)
class TopicConfig:
    """Per-topic settings stored with the topic.

    retention_ms / retention_bytes bound what `delete` keeps (None = no
    bound); retention="consumed" also removes what every group finished;
    `compact` keeps the latest record per key, tombstones (a key with a
    null value) for delete_retention_ms, never touching the newest
    min_compaction_lag_ms of the log.
    """

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    retention_ms: int | None = WEEK_MS
    retention_bytes: int | None = None
    retention: str = "time"
    cleanup_policy: str = "delete"
    min_compaction_lag_ms: int = 0
    delete_retention_ms: int = DAY_MS
    # A queue send's dedup id is remembered this long (`Queue.send(dedup_id=)`).
    dedup_window_ms: int = DEFAULT_DEDUP_WINDOW_MS

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> TopicConfig:
        """Settings from a dict of known names; InvalidRequest on unknown or bad ones."""
        return cls.normalize(raw)

    @classmethod
    def normalize(cls, raw: dict[str, Any] | None, base: dict[str, Any] | None = None) -> TopicConfig:
        """Parse and validate settings given by a user, over `base` if given."""
        raw = dict(raw or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidRequest(
                f"unknown topic setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        values = dict(base or {})
        values = {k: v for k, v in values.items() if k in known}
        values.update(cls.parse(raw))
        cfg = cls(**values)
        cfg.validate()
        return cfg

    @staticmethod
    def parse(raw: dict[str, Any]) -> dict[str, Any]:
        """Turn durations and sizes given as text into integers."""
        out = dict(raw)
        for key in ("retention_ms", "min_compaction_lag_ms", "delete_retention_ms", "dedup_window_ms"):
            if key in out and out[key] is not None:
                out[key] = parse_duration_ms(key, out[key])
        for key in ("retention_bytes", "max_message_bytes"):
            if key in out and out[key] is not None:
                out[key] = parse_size_bytes(key, out[key])
        if isinstance(out.get("cleanup_policy"), str):
            out["cleanup_policy"] = ",".join(sorted(p.strip() for p in out["cleanup_policy"].split(",")))
        return out

    def validate(self) -> None:
        """Check each setting is in range; InvalidRequest names the first bad one."""
        check_int("max_message_bytes", self.max_message_bytes, 1, 1 << 30)
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise InvalidRequest(
                f"cleanup_policy must be one of {', '.join(CLEANUP_POLICIES)}, got {self.cleanup_policy!r}"
            )
        if self.retention not in RETENTION_MODES:
            raise InvalidRequest(
                f"retention must be one of {', '.join(RETENTION_MODES)}, got {self.retention!r}"
            )
        # Bounded to 64 bits: settings travel as JSON, and most JSON codecs stop there.
        for key in ("min_compaction_lag_ms", "delete_retention_ms", "dedup_window_ms"):
            check_int(key, getattr(self, key), 0, MAX_SETTING)
        if self.retention_ms is not None:
            check_int("retention_ms", self.retention_ms, 0, MAX_SETTING)
        if self.retention_bytes is not None:
            check_int("retention_bytes", self.retention_bytes, 0, MAX_SETTING)

    def to_dict(self) -> dict[str, Any]:
        """The settings as a plain dict."""
        return asdict(self)


def check_durability(durability: Any) -> str:
    """Validate a durability setting ('full', 'normal' or 'off')."""
    if durability not in DURABILITY:
        raise ConfigurationError(f"durability must be one of {', '.join(DURABILITY)}, got {durability!r}")
    return str(durability)
