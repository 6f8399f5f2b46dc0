"""Options of format "tidelog": defaults in one place, each with a validation step.

Spark hands a data source its options as strings in a case-insensitive map.
The names and meanings follow Spark's Kafka source and sink, so that people
who know `format("kafka")` need nothing new; what differs is said here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..config import check_name
from ..errors import ConfigurationError, TidelogError

# Kafka's markers inside a JSON offset map: -2 the earliest, -1 the latest.
EARLIEST = -2
LATEST = -1

SOURCE_KEYS = (
    "url",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "failOnDataLoss",
    "includeHeaders",
    "includeFormat",
    "group",
)
SINK_KEYS = ("url", "topic", "checkpointLocation", "path")

# A starting or ending position: "earliest", "latest", or topic -> partition -> offset.
Position = str | dict[str, dict[int, int]]


@dataclass(frozen=True)
class SourceOptions:
    url: str
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting: Position = "earliest"
    ending: Position = "latest"
    starting_timestamp: int | None = None  # ms since epoch
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    include_format: bool = False
    group: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        """Validate a reader's options; a stream starts at the latest records
        by default and a batch at the earliest, as Kafka's source does."""
        raw = _lower(options, SOURCE_KEYS, "source")
        chosen = [k for k in ("subscribe", "subscribePattern", "assign") if k.lower() in raw]
        if len(chosen) != 1:
            raise ConfigurationError(
                "format 'tidelog' needs exactly one of the options subscribe (a comma list of topics), "
                f"subscribePattern (a regex) or assign (JSON topic -> partitions); got {chosen or 'none'}"
            )
        subscribe: tuple[str, ...] = ()
        pattern = None
        assign = None
        if "subscribe" in raw:
            subscribe = tuple(sorted({t.strip() for t in raw["subscribe"].split(",") if t.strip()}))
            if not subscribe:
                raise ConfigurationError("option subscribe names no topic")
            for topic in subscribe:
                _check(check_name, "topic", topic)
        elif "subscribepattern" in raw:
            pattern = raw["subscribepattern"]
            try:
                re.compile(pattern)
            except re.error as e:
                raise ConfigurationError(f"option subscribePattern is not a valid regex: {e}") from None
        else:
            assign = _parse_assign(raw["assign"])

        starting = _parse_position("startingOffsets", raw.get("startingoffsets"), ending=False)
        ending = _parse_position("endingOffsets", raw.get("endingoffsets"), ending=True)
        if starting is None:
            starting = "latest" if streaming else "earliest"
        if streaming and ending is not None:
            raise ConfigurationError("option endingOffsets is for batch queries only; a stream has no end")
        if not streaming and (starting == "latest" or _has(starting, LATEST)):
            raise ConfigurationError("startingOffsets latest (or -1) is for streaming queries only")
        timestamp = raw.get("startingtimestamp")
        max_per_trigger = raw.get("maxoffsetspertrigger")
        if max_per_trigger is not None and not streaming:
            raise ConfigurationError("option maxOffsetsPerTrigger is for streaming queries only")
        group = raw.get("group")
        if group is not None:
            _check(check_name, "group", group)
            if not streaming:
                raise ConfigurationError("option group is for streaming queries only")
        return cls(
            url=_url(raw),
            subscribe=subscribe,
            subscribe_pattern=pattern,
            assign=assign,
            starting=starting,
            ending=ending or "latest",
            starting_timestamp=None if timestamp is None else _int("startingTimestamp", timestamp, 0),
            max_offsets_per_trigger=None
            if max_per_trigger is None
            else _int("maxOffsetsPerTrigger", max_per_trigger, 1),
            min_partitions=None
            if raw.get("minpartitions") is None
            else _int("minPartitions", raw["minpartitions"], 1),
            fail_on_data_loss=_bool("failOnDataLoss", raw.get("failondataloss", "true")),
            include_headers=_bool("includeHeaders", raw.get("includeheaders", "false")),
            include_format=_bool("includeFormat", raw.get("includeformat", "false")),
            group=group,
        )


@dataclass(frozen=True)
class SinkOptions:
    url: str
    topic: str | None = None  # rows may name their own topic in a `topic` column

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        raw = _lower(options, SINK_KEYS, "sink")
        topic = raw.get("topic")
        if topic is not None:
            _check(check_name, "topic", topic)
        return cls(url=_url(raw), topic=topic)


def url_of(options: Mapping[str, str]) -> str:
    """The option url, validated: what `load()` checks before anything else."""
    return _url({str(k).lower(): str(v) for k, v in options.items()})


def include_headers(options: Mapping[str, str]) -> bool:
    """What the source schema needs to know before a reader exists."""
    return _bool("includeHeaders", {k.lower(): v for k, v in options.items()}.get("includeheaders", "false"))


def include_format(options: Mapping[str, str]) -> bool:
    """Whether the schema has a `format` column ("bytes", "text" or "json"):
    what `Message.data` needs to decode a value, which Kafka's schema lacks."""
    return _bool("includeFormat", {k.lower(): v for k, v in options.items()}.get("includeformat", "false"))


# parsing helpers ---------------------------------------------------------------


def _lower(options: Mapping[str, str], known: tuple[str, ...], what: str) -> dict[str, str]:
    raw = {str(k).lower(): str(v) for k, v in options.items()}
    names = {k.lower(): k for k in known}
    unknown = sorted(k for k in raw if k not in names)
    if unknown:
        raise ConfigurationError(
            f"unknown option(s) {', '.join(unknown)} for a tidelog {what}; known: {', '.join(known)}"
        )
    return raw


def _url(raw: dict[str, str]) -> str:
    url = raw.get("url", "").strip()
    if not url:
        raise ConfigurationError(
            "format 'tidelog' needs option url: a SQLite file path, sqlite:///path, postgresql://... "
            "or http://host:port, as tidelog.open takes (executors open it themselves)"
        )
    if url in (":memory:", "sqlite:///:memory:", "sqlite://"):
        raise ConfigurationError(
            f"option url {url!r} is a log private to one process, which Spark's executors cannot reach: "
            "give a SQLite file path, postgresql://... or http://host:port"
        )
    return url


def _check(fn: Any, kind: str, name: str) -> None:
    try:
        fn(kind, name)
    except TidelogError as e:
        raise ConfigurationError(str(e)) from None


def _int(what: str, text: str, minimum: int) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ConfigurationError(f"option {what} must be an integer, got {text!r}") from None
    if value < minimum:
        raise ConfigurationError(f"option {what} must be >= {minimum}, got {value}")
    return value


def _bool(what: str, text: str) -> bool:
    value = str(text).strip().lower()
    if value not in ("true", "false"):
        raise ConfigurationError(f"option {what} must be true or false, got {text!r}")
    return value == "true"


def _json(what: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise ConfigurationError(f"option {what} is not valid JSON: {e}") from None


def _parse_assign(text: str) -> dict[str, tuple[int, ...]]:
    value = _json("assign", text)
    if not isinstance(value, dict) or not value:
        raise ConfigurationError(
            'option assign must be a JSON object of topic -> partitions, e.g. {"orders": [0, 1]}'
        )
    out = {}
    for topic, partitions in sorted(value.items()):
        _check(check_name, "topic", topic)
        if (
            not isinstance(partitions, list)
            or not partitions
            or not all(type(p) is int and p >= 0 for p in partitions)
        ):
            raise ConfigurationError(f"option assign: topic {topic!r} needs a list of partition numbers >= 0")
        out[topic] = tuple(sorted(set(partitions)))
    return out


def _parse_position(what: str, text: str | None, *, ending: bool) -> Position | None:
    if text is None:
        return None
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        if ending and word == "earliest":
            raise ConfigurationError(f"option {what} cannot be earliest")
        return word
    value = _json(what, text)
    if not isinstance(value, dict):
        raise ConfigurationError(
            f'option {what} must be earliest, latest or JSON like {{"orders": {{"0": 5, "1": -2}}}}'
        )
    out: dict[str, dict[int, int]] = {}
    for topic, offsets in sorted(value.items()):
        _check(check_name, "topic", topic)
        if not isinstance(offsets, dict):
            raise ConfigurationError(f"option {what}: topic {topic!r} needs an object of partition -> offset")
        parsed = {}
        for partition, offset in offsets.items():
            try:
                p = int(partition)
            except ValueError:
                raise ConfigurationError(f"option {what}: partition {partition!r} is not a number") from None
            lowest = LATEST if ending else EARLIEST
            if p < 0 or type(offset) is not int or offset < lowest or offset == 0:
                raise ConfigurationError(
                    f"option {what}: {topic}/{partition} must map to the next offset to read (>= 1), "
                    f"{'' if ending else '-2 (earliest), '}or -1 (latest); got {offset!r}"
                )
            parsed[p] = offset
        out[topic] = dict(sorted(parsed.items()))
    return out


def _has(position: Position | None, marker: int) -> bool:
    return isinstance(position, dict) and any(marker in o.values() for o in position.values())
