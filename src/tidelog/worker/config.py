"""The worker's configuration: TOML (or the same structure as JSON), checked at start.

    engine   = "spark"               # or "local": asyncio + httpx, no JVM
    work_dir = ".tidelog-worker"     # Spark checkpoints (spark engine only)
    [spark]                          # spark engine only; both keys optional
    master = "local[2]"
    conf   = { "spark.ui.enabled" = "false" }
    [topics.orders.groups.order-processor]
    partitions = [0, 1]              # omit for all the topic's partitions
    endpoint   = "https://api.example.com/process-orders"
    batch_size = 50                  # default 100
    interval   = "5s"                # ms, s or m; default 5s
    timeout    = "10s"               # per request; default 10s
    headers    = { Authorization = "Bearer ..." }

A group may also be an array of tables (`[[topics.orders.groups.g]]`) to
send different partitions of one group to different endpoints. Every
mistake is refused with a ConfigurationError that names the key: `parse`
checks the structure, `resolve` checks it against the log (the topic and
its partitions exist, no two entries claim one group partition).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..config import check_name
from ..errors import ConfigurationError, InvalidName, UnknownTopic
from ..log import MAX_BATCH, Log

ENGINES = ("spark", "local")
TOP_KEYS = ("engine", "work_dir", "spark", "topics")
SPARK_KEYS = ("master", "conf")
TOPIC_KEYS = ("groups",)
FEED_KEYS = ("partitions", "endpoint", "batch_size", "interval", "timeout", "headers")

DEFAULT_ENGINE = "spark"
# What to do when the default engine's dependencies are missing.
SPARK_MISSING = (
    "pip install 'tidelog[spark,worker]' (and Java 17), or run without Spark: "
    '--engine local on the command line, engine = "local" in the config'
)
DEFAULT_WORK_DIR = ".tidelog-worker"
DEFAULT_MASTER = "local[2]"
DEFAULT_BATCH_SIZE = 100
DEFAULT_INTERVAL = "5s"
DEFAULT_TIMEOUT = "10s"

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000}
# RFC 9110 token: what an HTTP header name may hold.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


@dataclass(frozen=True)
class Feed:
    """One (group, topic) entry: its partitions go to one endpoint.

    `partitions` is None until `WorkerConfig.resolve` fills in "all of the
    topic's partitions" from the log.
    """

    key: str  # where it came from, e.g. "topics.orders.groups.billing": every message names it
    topic: str
    group: str
    endpoint: str
    partitions: tuple[int, ...] | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    interval_ms: int = 5000
    timeout_ms: int = 10_000
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class WorkerConfig:
    feeds: tuple[Feed, ...]
    engine: str = DEFAULT_ENGINE
    work_dir: str = DEFAULT_WORK_DIR
    spark_master: str = DEFAULT_MASTER
    spark_conf: tuple[tuple[str, str], ...] = field(default=())

    @classmethod
    def parse(cls, raw: Any) -> WorkerConfig:
        """Check the structure of a parsed TOML or JSON document."""
        table = _table("the configuration", raw)
        _known("", table, TOP_KEYS)
        engine = table.get("engine", DEFAULT_ENGINE)
        if engine not in ENGINES:
            raise ConfigurationError(f"engine: must be one of {', '.join(ENGINES)}, got {engine!r}")
        work_dir = table.get("work_dir", DEFAULT_WORK_DIR)
        if not isinstance(work_dir, str) or not work_dir.strip():
            raise ConfigurationError(f"work_dir: must be a directory path, got {work_dir!r}")
        master, conf = _spark(table.get("spark", {}))
        topics = _table("topics", table.get("topics"))
        if not topics:
            raise ConfigurationError("topics: names no topic; add [topics.<topic>.groups.<group>] tables")
        feeds = []
        for topic, body in topics.items():
            where = f"topics.{topic}"
            _name(where, "topic", topic)
            body = _table(where, body)
            _known(where, body, TOPIC_KEYS)
            groups = _table(f"{where}.groups", body.get("groups"))
            if not groups:
                raise ConfigurationError(f"{where}.groups: names no group")
            for group, entries in groups.items():
                gwhere = f"{where}.groups.{group}"
                _name(gwhere, "group", group)
                if isinstance(entries, list):
                    if not entries:
                        raise ConfigurationError(f"{gwhere}: an empty list of entries")
                    feeds += [_feed(f"{gwhere}[{i}]", topic, group, e) for i, e in enumerate(entries)]
                else:
                    feeds.append(_feed(gwhere, topic, group, entries))
        config = cls(tuple(feeds), engine, work_dir, master, conf)
        config.check_overlaps()
        return config

    def resolve(self, log: Log) -> WorkerConfig:
        """Check every entry against the log and fill in "all partitions"."""
        feeds = []
        for feed in self.feeds:
            try:
                held = log.topic(feed.topic).partitions
            except UnknownTopic:
                raise ConfigurationError(
                    f"{feed.key}: topic {feed.topic!r} does not exist; create it first "
                    f"(tidelog topics create {feed.topic} --partitions N)"
                ) from None
            if feed.partitions is None:
                feed = replace(feed, partitions=tuple(range(held)))
            missing = [p for p in feed.partitions or () if p >= held]
            if missing:
                raise ConfigurationError(
                    f"{feed.key}.partitions: topic {feed.topic!r} has partitions 0..{held - 1}; "
                    f"partition {missing[0]} does not exist"
                )
            feeds.append(feed)
        config = replace(self, feeds=tuple(feeds))
        config.check_overlaps()
        return config

    def check_overlaps(self) -> None:
        """Refuse two entries that claim one (group, topic, partition):
        they would both post its records and commit over each other."""
        claimed: dict[tuple[str, str, int | None], str] = {}
        for feed in self.feeds:
            # None (all partitions, not yet resolved) overlaps anything on the same group and topic.
            mine = [None] if feed.partitions is None else list(feed.partitions)
            for (group, topic, p), key in claimed.items():
                if (group, topic) == (feed.group, feed.topic) and (p is None or None in mine or p in mine):
                    what = "all partitions" if p is None or None in mine else f"partition {p}"
                    raise ConfigurationError(
                        f"{feed.key}: group {group!r} already takes {what} of topic {topic!r} in {key}; "
                        "a group partition goes to one entry"
                    )
            for p in mine:
                claimed[(feed.group, feed.topic, p)] = feed.key


def load(source: Any) -> WorkerConfig:
    """A WorkerConfig from itself, a dict, or a .toml / .json file path."""
    if isinstance(source, WorkerConfig):
        return source
    if isinstance(source, Mapping):
        return WorkerConfig.parse(source)
    if not isinstance(source, (str, os.PathLike)):
        raise ConfigurationError(
            f"a worker configuration is a .toml or .json path or a dict, not {type(source).__name__}"
        )
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigurationError(
            f"cannot read the worker configuration {str(path)!r}: {e.strerror}"
        ) from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"the worker configuration {str(path)!r} is not UTF-8 text") from None
    if path.suffix.lower() == ".json":
        try:
            raw = json.loads(text, object_pairs_hook=_no_duplicates)
        except ValueError as e:
            raise ConfigurationError(f"{path}: not valid JSON: {e}") from None
    elif path.suffix.lower() == ".toml":
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            # tomllib refuses a table or key given twice, e.g. one group twice.
            raise ConfigurationError(f"{path}: not valid TOML: {e}") from None
    else:
        raise ConfigurationError(f"{path}: a worker configuration file ends in .toml or .json")
    return WorkerConfig.parse(raw)


def parse_duration(key: str, value: Any) -> int:
    """`500ms`, `5s`, `1.5m` to milliseconds (> 0). A bare number is refused:
    "5" could mean seconds or milliseconds."""
    m = _DURATION.fullmatch(value.strip()) if isinstance(value, str) else None
    if m is None:
        raise ConfigurationError(
            f"{key}: {value!r} is not a duration; write a number with a unit ms, s or m, e.g. 500ms, 5s, 1m"
        )
    ms = round(float(m.group(1)) * _UNIT_MS[m.group(2)])
    if ms <= 0:
        raise ConfigurationError(f"{key}: must be more than 0, got {value!r}")
    return ms


# parts -------------------------------------------------------------------------


def _feed(where: str, topic: str, group: str, raw: Any) -> Feed:
    body = _table(where, raw)
    _known(where, body, FEED_KEYS)
    if "endpoint" not in body:
        raise ConfigurationError(f"{where}.endpoint: missing; every entry needs the URL to POST to")
    return Feed(
        key=where,
        topic=topic,
        group=group,
        endpoint=_endpoint(f"{where}.endpoint", body["endpoint"]),
        partitions=_partitions(f"{where}.partitions", body.get("partitions")),
        batch_size=_batch_size(f"{where}.batch_size", body.get("batch_size", DEFAULT_BATCH_SIZE)),
        interval_ms=parse_duration(f"{where}.interval", body.get("interval", DEFAULT_INTERVAL)),
        timeout_ms=parse_duration(f"{where}.timeout", body.get("timeout", DEFAULT_TIMEOUT)),
        headers=_headers(f"{where}.headers", body.get("headers", {})),
    )


def _spark(raw: Any) -> tuple[str, tuple[tuple[str, str], ...]]:
    body = _table("spark", raw)
    _known("spark", body, SPARK_KEYS)
    master = body.get("master", DEFAULT_MASTER)
    if not isinstance(master, str) or not master.strip():
        raise ConfigurationError(f"spark.master: must be a Spark master URL such as local[2], got {master!r}")
    conf = _table("spark.conf", body.get("conf", {}))
    for k, v in conf.items():
        if not isinstance(v, (str, int, float, bool)):
            raise ConfigurationError(f"spark.conf.{k}: must be a string, number or boolean, got {v!r}")
    return master, tuple((k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in conf.items())


def _endpoint(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigurationError(f"{key}: must be an http:// or https:// URL, got {value!r}")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as e:
        raise ConfigurationError(f"{key}: {value!r} is not a valid URL: {e}") from None
    if parts.scheme not in ("http", "https"):
        raise ConfigurationError(
            f"{key}: {value!r} is not an http:// or https:// URL (scheme {parts.scheme or 'missing'!r})"
        )
    if not parts.hostname:
        raise ConfigurationError(f"{key}: {value!r} names no host")
    return value


def _partitions(key: str, value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    ok = isinstance(value, list) and all(type(p) is int and p >= 0 for p in value)
    if not ok or not value:
        raise ConfigurationError(
            f"{key}: must be a non-empty list of partition numbers >= 0 (or left out for all), got {value!r}"
        )
    twice = sorted({p for p in value if value.count(p) > 1})
    if twice:
        raise ConfigurationError(f"{key}: partition {twice[0]} is listed twice")
    return tuple(sorted(value))


def _batch_size(key: str, value: Any) -> int:
    if type(value) is not int or not 1 <= value <= MAX_BATCH:
        raise ConfigurationError(f"{key}: must be an integer from 1 to {MAX_BATCH}, got {value!r}")
    return value


def _headers(key: str, value: Any) -> tuple[tuple[str, str], ...]:
    body = _table(key, value)
    out = []
    for name, v in body.items():
        if not _HEADER_NAME.fullmatch(name):
            raise ConfigurationError(f"{key}: {name!r} is not a valid HTTP header name")
        if not isinstance(v, str) or "\n" in v or "\r" in v:
            raise ConfigurationError(f"{key}.{name}: must be a one-line string, got {v!r}")
        if name.lower() in ("content-type", "content-length"):
            raise ConfigurationError(f"{key}.{name}: the worker sets this header itself")
        out.append((name, v))
    return tuple(out)


def _table(key: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{key}: must be a table (an object), got {type(value).__name__}")
    return dict(value)


def _known(where: str, table: Mapping[str, Any], known: tuple[str, ...]) -> None:
    unknown = [k for k in table if k not in known]
    if unknown:
        prefix = f"{where}." if where else ""
        raise ConfigurationError(f"{prefix}{unknown[0]}: unknown key; known keys here: {', '.join(known)}")


def _name(where: str, kind: str, name: str) -> None:
    try:
        check_name(kind, name)
    except InvalidName as e:
        raise ConfigurationError(f"{where}: {e}") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys without a word; two entries
    # for one group would then silently become one.
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {k!r} appears twice in one object")
        out[k] = v
    return out
