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
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidRequest(f"{what} must be an integer, not {type(value).__name__}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise InvalidRequest(f"{what} must be {bound}, got {value}")
    return value


@dataclass(frozen=True)
class TopicConfig:
    """Per-topic settings stored with the topic."""

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> TopicConfig:
        raw = dict(raw or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidRequest(
                f"unknown topic setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        cfg = cls(**raw)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        check_int("max_message_bytes", self.max_message_bytes, 1, 1 << 30)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_durability(durability: Any) -> str:
    if durability not in DURABILITY:
        raise ConfigurationError(f"durability must be one of {', '.join(DURABILITY)}, got {durability!r}")
    return durability
