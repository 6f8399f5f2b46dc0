"""The console's pages: what each shows, built once for the HTML and for its
live refresh (`/console/api/...` answers the same figures as JSON).

Every builder is blocking (it reads the log) and runs on the server's read
threads; it returns the template's context, whose "fields" (element id ->
text) and "charts" (name -> points) the page's script refreshes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ....bounds import MAX_OFFSET
from ....config import MAX_PARTITIONS, check_int, check_name
from ....errors import InvalidRequest, NotFound, UnknownGroup, UnknownPartition
from ....log import Log
from ....queues import peek
from ....records import Message
from ....resets import offset_for_time
from ....schedules import describe as describe_schedules
from ....store.base import NamedConsumers, Pending
from . import figures, text
from .history import History

PAGE = 20  # records a page of the browser
SCAN_LIMIT = 10_000  # records a key search reads at most a request
DEAD_LETTERS_SHOWN = 100
IN_FLIGHT_SHOWN = 100
WAITING_SHOWN = 20


def overview(log: Log, history: History, cached: bool = False) -> dict[str, Any]:
    """The overview; `cached`: the sampler's last figures when they are fresh
    (the refresh of every open overview costs no reads of its own)."""
    ov = (history.fresh() if cached else None) or figures.overview(log, history)
    fields: dict[str, str] = {}
    for t in ov.topics:
        fields[f"topic:{t.name}:records"] = text.count(t.records)
        fields[f"topic:{t.name}:bytes"] = text.size(t.bytes)
        fields[f"topic:{t.name}:rate"] = text.rate(t.rate)
    for s in ov.stream_groups:
        fields[f"group:{s.name}:members"] = text.count(len(s.members))
        fields[f"group:{s.name}:lag"] = text.count(s.lag)
    for q in ov.queue_groups:
        key = f"queue:{q.topic}:{q.group}"
        fields[f"{key}:available"] = text.count(q.stats.available)
        fields[f"{key}:in_flight"] = text.count(q.stats.in_flight)
        fields[f"{key}:delayed"] = text.count(q.stats.delayed)
        fields[f"{key}:dead"] = text.count(q.dead_letter_records)
        fields[f"{key}:oldest"] = f"{q.stats.oldest_available_age_ms / 1000:.1f} s"
        fields[f"{key}:consumers"] = text.count(q.consumers)
    return {"ov": ov, "fields": fields, "charts": {}, "banners": ov.banners}


def _int_arg(args: dict[str, str], name: str, maximum: int, minimum: int = 0) -> int | None:
    raw = args.get(name, "").strip()
    if not raw:
        return None
    if not raw.isascii() or not raw.lstrip("-").isdigit() or len(raw) > 40:
        raise InvalidRequest(f"{name} must be a whole number from {minimum} to {maximum}, not {raw[:40]!r}")
    return check_int(name, int(raw), minimum, maximum)


def parse_time(raw: str, what: str = "from time") -> int:
    """A time typed in a form (ISO 8601; UTC unless it names a zone) as ms since epoch."""
    try:
        moment = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise InvalidRequest(f"{what} must be a date and time like 2026-01-31T12:00, not {raw!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _browse(
    log: Log, topic: str, partition: int, first: int, last: int, args: dict[str, str]
) -> dict[str, Any]:
    """The record browser: a page of records from an offset or a time, or a key search."""
    after = _int_arg(args, "after", MAX_OFFSET)
    key = args.get("key", "")
    note = ""
    if args.get("from_time", "").strip():
        after = offset_for_time(log, topic, partition, first, last, parse_time(args["from_time"])) - 1
    if after is None:
        after = max(first - 1, last - PAGE)
    if after < first - 1:
        note = f"records before offset {first} were removed by retention; showing from {first}"
        after = first - 1
    records: list[Message] = []
    scanned = 0
    cursor = after
    if key:
        wanted = key.encode()
        while len(records) < PAGE and scanned < SCAN_LIMIT and cursor < last:
            chunk = log.read(topic, partition, cursor, min(1000, SCAN_LIMIT - scanned))
            if not chunk:
                break
            for m in chunk:
                scanned += 1
                cursor = m.offset
                if m.key == wanted:
                    records.append(m)
                    if len(records) == PAGE:
                        break
        note = note or (
            f"searched {scanned:,} records after offset {after} for key {key!r}: {len(records)} found"
            + (f"; search on from offset {cursor}" if cursor < last else "")
        )
    else:
        records = log.read(topic, partition, after, PAGE) if after < last else []
        cursor = records[-1].offset if records else after
    return {
        "records": records,
        "after": after,
        "key": key,
        "note": note,
        "older": max(first - 1, after - PAGE) if after > first - 1 and not key else None,
        "newer": cursor if cursor < last else None,
    }


def topic(log: Log, history: History, name: str, args: dict[str, str]) -> dict[str, Any]:
    check_name("topic", name)
    desc = log.describe(name)
    partition = _int_arg(args, "partition", MAX_PARTITIONS - 1) or 0
    if partition >= len(desc.partitions):
        raise UnknownPartition(
            f"topic {name!r} has partitions 0..{len(desc.partitions) - 1}; partition {partition} does not exist"
        )
    p = desc.partitions[partition]
    browse = _browse(log, name, partition, p.first_offset, p.last_offset, args)
    lag_rows, queue_groups = figures.groups_of_topic(log, name)
    fields = {}
    for q in desc.partitions:
        fields[f"p:{q.partition}:first"] = text.count(q.first_offset if q.records else None)
        fields[f"p:{q.partition}:last"] = text.count(q.last_offset)
        fields[f"p:{q.partition}:records"] = text.count(q.records)
        fields[f"p:{q.partition}:bytes"] = text.size(q.bytes)
    rate = history.rate(f"topic:{name}:end", figures.RATE_WINDOW_MS)
    fields["rate"] = text.rate(rate)
    for r in lag_rows:
        fields[f"lag:{r.group}:{r.partition}"] = text.count(r.lag)
    return {
        "topic": desc,
        "partition": partition,
        "browse": browse,
        "lag_rows": lag_rows,
        "queue_groups": queue_groups,
        "rate": rate,
        "fields": fields,
        # The chart's last point is the header's rate: the same one-minute window.
        "charts": {"rate": history.rates(f"topic:{name}:end", figures.RATE_WINDOW_MS)},
        "charts_meta": {"rate": "records appended per second"},
    }


def record(log: Log, name: str, partition: int, offset: int) -> dict[str, Any]:
    check_name("topic", name)
    check_int("partition", partition, 0, MAX_PARTITIONS - 1)
    check_int("offset", offset, 1, MAX_OFFSET)
    desc = log.describe(name)
    if partition >= len(desc.partitions):
        raise UnknownPartition(f"topic {name!r} has no partition {partition}")
    found = log.read(name, partition, offset - 1, 1)
    if not found or found[0].offset != offset:
        p = desc.partitions[partition]
        raise NotFound(
            f"{name}/{partition} holds no record at offset {offset} (it holds {p.first_offset}..{p.last_offset})"
        )
    msg = found[0]
    return {"topic": desc, "partition": partition, "msg": msg, "views": text.value_views(msg)}


def stream_group(log: Log, history: History, name: str) -> dict[str, Any]:
    check_name("group", name)
    queues = [(t, g) for t, g in figures.queue_group_names(log) if g == name]
    if name not in log.groups():
        raise UnknownGroup(f"group {name!r} does not exist")
    g = figures.stream_group(log, name, history)
    owners = {tp: m.member for m in g.members for tp in m.partitions}
    fields = {"lag": text.count(g.lag), "members": text.count(len(g.members))}
    for r in g.rows:
        fields[f"{r.topic}:{r.partition}:committed"] = text.count(r.committed)
        fields[f"{r.topic}:{r.partition}:last"] = text.count(r.last_offset)
        fields[f"{r.topic}:{r.partition}:lag"] = text.count(r.lag)
        fields[f"{r.topic}:{r.partition}:owner"] = owners.get((r.topic, r.partition)) or "–"
    return {
        "g": g,
        "owners": owners,
        "queues": queues,
        "fields": fields,
        "charts": {"lag": history.points(f"group:{name}:lag")},
        "charts_meta": {"lag": "records behind"},
        "banners": [{"text": f"The lag of {name} is growing.", "href": ""}] if g.growing else [],
    }


def queue_group(log: Log, history: History, topic: str, group: str) -> dict[str, Any]:
    check_name("topic", topic)
    check_name("group", group)
    log.topic(topic)
    q = figures.queue_group(log, topic, group, history)
    store = log.store
    leased: list[Pending] = []
    if isinstance(store, NamedConsumers):
        for p in range(log.topic(topic).partitions):
            leased += store.queue_pending(group, topic, p, limit=IN_FLIGHT_SHOWN - len(leased))
            if len(leased) >= IN_FLIGHT_SHOWN:
                break
    letters = [
        d
        for d in figures.dead_letters_page(log, q.dead_letter, DEAD_LETTERS_SHOWN)
        # Another group of the topic may share the dead-letter topic: show this group's.
        if d.origin_topic == topic and d.origin_group in (None, group)
    ]
    fields = {
        "available": text.count(q.stats.available),
        "in_flight": text.count(q.stats.in_flight),
        "delayed": text.count(q.stats.delayed),
        "dead_lettered": text.count(q.stats.dead_lettered),
        "dead_letter_records": text.count(q.dead_letter_records),
        "oldest": f"{q.stats.oldest_available_age_ms / 1000:.1f} s",
        "consumers": text.count(q.consumers),
    }
    banners = []
    if q.growing:
        banners.append({"text": f"The backlog of {group} is growing.", "href": ""})
    return {
        "q": q,
        "waiting": peek(log, topic, group, WAITING_SHOWN),
        "received": None,  # the deliveries of the receive that rendered the page, with their receipts
        "leased": leased,
        "letters": letters,
        # A job runner's periodic jobs on this queue, from its ticks topic (none: no section).
        "schedules": describe_schedules(log, topic) if group == topic else [],
        "fields": fields,
        "charts": {
            "depth": history.points(f"queue:{topic}:{group}:depth"),
            "finished": figures.finished_per_second(history, topic, group),
        },
        "charts_meta": {
            "depth": "records waiting or leased",
            "finished": "acked or dead-lettered per second",
        },
        "banners": banners,
    }
