"""`tidelog queues`: queue work from the shell, as pgmq's functions and SQS's console offer it.

    list, stats      what queue groups hold (counts by state)
    send             enqueue records, with a delay, a priority, a dedup id
    receive          lease records: each line carries a receipt
    ack, nack        settle receipts printed by receive (in this run or a later one)
    peek             the records a receive would hand out next, leasing nothing
    in-flight        the records leased now
    purge            finish everything a group holds (after a confirmation)

A receipt is the token the HTTP API hands out (`tidelog.server.http.receipts`):
it names the group, topic, partition, offset and lease, so `ack` needs
nothing else, and a receipt printed against a served log (`--db http://...`)
settles through the server, one printed against the file through the file.
`send` and `receive` register a missing group (the topic's name unless --group
says), as the HTTP API and the console do: a queue that has had a send answers
every verb. The other verbs refuse a group that does not exist and change nothing.
"""

from __future__ import annotations

import sys
from typing import Any

import click

import tidelog
from tidelog.bounds import MAX_PRIORITY, MAX_RECEIVE, MAX_VISIBILITY_S
from tidelog.config import check_name
from tidelog.errors import LeaseLost
from tidelog.log import MAX_BATCH
from tidelog.queues import (
    MAX_PEEK,
    Delivery,
    check_dedup_id,
    dedup_write,
    in_flight,
    peek,
    purge,
    queue_headers,
)
from tidelog.queues import queue_stats as read_stats
from tidelog.server.http import receipts

from .context import Session, SummaryGroup, common_options, confirm, pass_session, topic_policy_options
from .output import dumps, emit, record_line, table, when
from .produce import FORMATS, decode_record, parse_headers

STATS = ("available", "in_flight", "delayed", "dead_lettered", "oldest_available_age_ms")
GROUP_HELP = "The queue group (default: the topic's name)."


def _group(topic: str, group: str | None) -> str:
    return check_name("group", group if group is not None else topic)


def _must_exist(log: tidelog.Log, topic: str, name: str) -> None:
    if (topic, name) not in log.queue_groups(topic):
        raise tidelog.UnknownGroup(f"queue group {name!r} does not exist on topic {topic!r}")


def _registers(log: tidelog.Log, topic: str, name: str) -> bool:
    """Opening the group will register it (the topic has no queue group of that name)."""
    return log.store.topic(topic) is None or (topic, name) not in log.queue_groups(topic)


def _existing(log: tidelog.Log, topic: str, group: str | None) -> tidelog.Queue:
    name = _group(topic, group)
    _must_exist(log, topic, name)
    return log.queue(topic, name)


def _served(log: tidelog.Log) -> bool:
    """The log is a server's (http://): its receipts are the server's tokens already."""
    return getattr(log.store, "dialect", "") == "http"


def receipt_of(log: tidelog.Log, group: str, d: Delivery) -> str:
    return d.receipt if _served(log) else receipts.encode(group, d)


def delivery_of(log: tidelog.Log, token: str, group: str, topic: str) -> Delivery:
    """The Delivery a receipt settles; LeaseLost for one that is not a receipt
    of `group` on `topic`."""
    d = receipts.delivery(receipts.decode(token, group, topic))
    return d._replace(receipt=token) if _served(log) else d


def delivery_line(msg_line: str, d: Delivery, receipt: str) -> str:
    """A record line with the delivery's count, receipt and lease deadline."""
    return (
        f'{msg_line[:-2]},"delivery_count":{d.delivery_count},"receipt":{dumps(receipt)},'
        f'"lease_deadline":{d.lease_deadline}}}\n'
    )


@click.group(cls=SummaryGroup)
def queues() -> None:
    """Queue groups: send, receive, ack, nack, peek, purge, and what they hold."""


@queues.command("list")
@click.argument("topic", required=False)
@common_options
@pass_session
def list_queues(session: Session, topic: str | None) -> None:
    """Every queue group (of TOPIC, or of all topics) with its counts."""
    log = session.log()
    rows = []
    for t, g in log.queue_groups(topic):
        rows.append((t, g, read_stats(log, t, g)))
    if session.json:
        for t, g, s in rows:
            emit({"topic": t, "group": g, **s._asdict()})
        return
    table(
        ["TOPIC", "GROUP", "AVAILABLE", "IN FLIGHT", "DELAYED", "DEAD", "OLDEST AGE S"],
        ([t, g, *s[:4], f"{s.oldest_available_age_ms / 1000:.1f}"] for t, g, s in rows),
        right=(2, 3, 4, 5, 6),
    )


@queues.command("stats")
@click.argument("topic")
@click.option("--group", "-g", help=GROUP_HELP)
@common_options
@pass_session
def queue_stats(session: Session, topic: str, group: str | None) -> None:
    """Available, in flight, delayed and dead-lettered records, and the oldest waiting's age."""
    log = session.log()
    name = _group(topic, group)
    _must_exist(log, topic, name)
    s = read_stats(log, topic, name)
    if session.json:
        emit({"topic": topic, "group": name, **s._asdict()})
        return
    table(["STAT", "VALUE"], zip(STATS, s, strict=True), right=(1,))


def _values(data: str | None, fmt: str, delimiter: bytes | None) -> list[Any]:
    """--data's one record, or stdin's lines (blank ones skipped)."""
    if data is not None:
        try:
            return [decode_record(data.encode(), fmt, delimiter)]
        except ValueError as e:
            raise click.BadParameter(f"the value {e}", param_hint="--data") from None
    values: list[Any] = []
    for lineno, raw in enumerate(sys.stdin.buffer, 1):
        if not raw.strip():
            continue
        if len(values) == MAX_BATCH:
            raise click.ClickException(
                f"a send takes at most {MAX_BATCH} records; nothing was sent (tidelog produce writes more)"
            )
        try:
            values.append(decode_record(raw.rstrip(b"\r\n"), fmt, delimiter))
        except ValueError as e:
            raise click.ClickException(f"line {lineno} {e}; nothing was sent") from None
    if not values:
        raise click.UsageError("nothing to send: give --data VALUE, or records on stdin, one a line")
    return values


@queues.command("send")
@click.argument("topic")
@click.option(
    "--group",
    "-g",
    help="The queue group a send registers when missing (default: the topic's name); every queue"
    " group of the topic hands the records out.",
)
@click.option("--data", "-d", metavar="VALUE", help="Send this one record instead of reading stdin.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="json",
    show_default=True,
    help="What a value is: a JSON value, text, or raw bytes.",
)
@click.option("--key", "-k", help="Key of every record (with an ordered group: one at a time per key).")
@click.option(
    "--key-delimiter", "-K", metavar="DELIM", help="Split each line at its first DELIM into key and value."
)
@click.option("--partition", "-p", type=click.IntRange(min=0), help="Partition to write to.")
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="NAME=VALUE",
    callback=parse_headers,
    help="A header; repeat.",
)
@click.option(
    "--delay",
    type=click.FloatRange(0, MAX_VISIBILITY_S),
    default=0,
    metavar="SECONDS",
    help="Queue groups hand the records out no sooner than this.",
)
@click.option(
    "--priority",
    type=click.IntRange(0, MAX_PRIORITY),
    default=0,
    help="Handed out before available records of lower priority (0-9).",
)
@click.option(
    "--dedup-id",
    metavar="ID",
    help="Sent again with this id within the topic's dedup window, nothing is appended.",
)
@common_options
@topic_policy_options
@pass_session
def send(
    session: Session,
    topic: str,
    group: str | None,
    data: str | None,
    fmt: str,
    key: str | None,
    key_delimiter: str | None,
    partition: int | None,
    headers: list[tuple[str, str]],
    delay: float,
    priority: int,
    dedup_id: str | None,
) -> None:
    """Enqueue records on TOPIC for its queue groups; print TOPIC/PARTITION@OFFSET of each.

    With --data one record, else one a line of stdin, sent as one atomic
    batch. Every queue group of the topic will hand them out; the group
    named by --group (the topic's name by default) is registered when
    missing, so `peek`, `stats` and `purge` answer at once. A missing TOPIC
    is created (see --no-auto-create).
    """
    check_name("topic", topic)
    name = _group(topic, group)
    if key_delimiter is not None and not key_delimiter:
        raise click.BadParameter("the delimiter must not be empty", param_hint="--key-delimiter")
    if dedup_id is not None:
        try:
            check_dedup_id(dedup_id)
        except tidelog.InvalidRequest as e:
            raise click.BadParameter(str(e), param_hint="--dedup-id") from None
    values = _values(data, fmt, None if key_delimiter is None else key_delimiter.encode())
    log = session.log(writes=True)
    stamped = queue_headers(headers or None, log.clock(), delay=delay, priority=priority)
    # Checked whole (sizes, partition) before the group is registered: a refused send changes nothing.
    prepared = log.producer().prepare(topic, values, key=key, partition=partition, headers=stamped)
    if _registers(log, topic, name):
        click.echo(f"created queue group {name!r} on {topic!r}", err=True)
    log.queue(topic, name)
    if dedup_id is None:
        sent = log.write([prepared])[0]
    else:
        txn, since = dedup_write(log, topic, dedup_id)
        sent = log.write([prepared], txn, txn_since=since)[0]
    for i in range(sent.count):
        if session.json:
            emit({"topic": topic, "partition": sent.partition, "offset": sent.first_offset + i})
        else:
            click.echo(f"{topic}/{sent.partition}@{sent.first_offset + i}")


@queues.command("receive")
@click.argument("topic")
@click.option("--group", "-g", help=GROUP_HELP)
@click.option(
    "--max", "-n", "max_messages", type=click.IntRange(1, MAX_RECEIVE), default=1, show_default=True
)
@click.option(
    "--wait",
    type=click.FloatRange(0, 3600),
    default=0,
    show_default=True,
    metavar="SECONDS",
    help="Wait this long for a record when none is available (woken by an append).",
)
@click.option(
    "--visibility-timeout",
    type=click.FloatRange(0, MAX_VISIBILITY_S, min_open=True),
    default=30,
    show_default=True,
    metavar="SECONDS",
    help="How long each lease lasts: unacked by then, the record is handed out again.",
)
@common_options
@pass_session
def receive(
    session: Session, topic: str, group: str | None, max_messages: int, wait: float, visibility_timeout: float
) -> None:
    """Lease records of TOPIC for the queue group and print them as NDJSON.

    Each line is a record line with `delivery_count`, `receipt` and
    `lease_deadline` (ms since epoch); pass the receipt to `ack` or `nack`,
    now or in a later command, before the lease runs out. Prints nothing
    when nothing is available (exit 0).
    """
    log = session.log()
    log.topic(topic)  # a missing topic is an error, never created by a read
    name = _group(topic, group)
    if _registers(log, topic, name):
        click.echo(
            f"created queue group {name!r} on {topic!r} (it starts at the topic's first record)", err=True
        )
    q = log.queue(topic, name)
    got = q.receive(max_messages, wait=wait, visibility_timeout=visibility_timeout)
    out = sys.stdout
    for d in got:
        out.write(delivery_line(record_line(d.message), d, receipt_of(log, name, d)))
    out.flush()


def _tokens(given: tuple[str, ...]) -> list[str]:
    """The receipts given, or one a line of stdin for `-` (blank lines skipped)."""
    tokens = []
    for token in given:
        if token == "-":
            tokens += [line.strip() for line in sys.stdin if line.strip()]
        else:
            tokens.append(token)
    if not tokens:
        raise click.UsageError("give the receipts to settle (or - to read them from stdin, one a line)")
    if len(tokens) > MAX_RECEIVE:
        raise click.UsageError(f"settle at most {MAX_RECEIVE} receipts a command")
    return tokens


def _settle(
    session: Session, topic: str, group: str | None, given: tuple[str, ...], verb: str, many: Any
) -> None:
    """Settle the receipts in one store transaction; say which failed, and exit 1 if any did."""
    tokens = _tokens(given)
    log = session.log()
    q = _existing(log, topic, group)
    deliveries: list[Delivery] = []
    failed: list[tuple[str, str]] = []
    for token in tokens:
        try:
            deliveries.append(delivery_of(log, token, q.group, topic))
        except LeaseLost as e:
            failed.append((token, str(e)))
    results = many(q, deliveries) if deliveries else []
    done = 0
    for d, result in zip(deliveries, results):
        if result is None:
            done += 1
        else:
            failed.append((d.receipt if _served(log) else receipts.encode(q.group, d), str(result)))
    if session.json:
        emit({verb: done, "failed": [{"receipt": t, "error": m} for t, m in failed]})
    else:
        click.echo(f"{verb} {done}")
    for token, message in failed:
        click.echo(f"not {verb}: {token[:24]}...: {message}", err=True)
    if failed:
        raise SystemExit(1)


@queues.command("ack")
@click.argument("topic")
@click.argument("receipt", nargs=-1)
@click.option("--group", "-g", help=GROUP_HELP)
@common_options
@pass_session
def ack(session: Session, topic: str, receipt: tuple[str, ...], group: str | None) -> None:
    """Finish the records of these RECEIPTs (from `receive`; - reads them from stdin).

    Acking a record done already is a no-op; a receipt whose lease ran out
    and went to another receive is refused. Exit 1 when any was not acked.
    """
    _settle(session, topic, group, receipt, "acked", lambda q, ds: q.ack_many(ds))


@queues.command("nack")
@click.argument("topic")
@click.argument("receipt", nargs=-1)
@click.option("--group", "-g", help=GROUP_HELP)
@click.option("--back", is_flag=True, help="Behind every record waiting now (default: at the front).")
@click.option(
    "--delay",
    type=click.FloatRange(0, MAX_VISIBILITY_S),
    metavar="SECONDS",
    help="Available again after this many seconds.",
)
@common_options
@pass_session
def nack(
    session: Session, topic: str, receipt: tuple[str, ...], group: str | None, back: bool, delay: float | None
) -> None:
    """Hand the records of these RECEIPTs out again: at the front, at the back, or after --delay."""
    if back and delay is not None:
        raise click.UsageError("give at most one of --back and --delay")
    _settle(session, topic, group, receipt, "released", lambda q, ds: q.nack_many(ds, back=back, delay=delay))


@queues.command("peek")
@click.argument("topic")
@click.option("--group", "-g", help=GROUP_HELP)
@click.option("--limit", "-n", type=click.IntRange(1, MAX_PEEK), default=10, show_default=True)
@common_options
@pass_session
def peek_records(session: Session, topic: str, group: str | None, limit: int) -> None:
    """The records a receive would hand out next, as NDJSON, leasing nothing.

    Due records first, in the order a receive takes them (priority, then
    the time they became due), then the delayed ones. Each line has
    `delivery_count`, `priority`, `due` (ms since epoch; 0: nacked to the
    front) and `delayed`. Records leased now are listed by `in-flight`.
    """
    log = session.log()
    name = _group(topic, group)
    out = sys.stdout
    for p in peek(log, topic, name, limit):
        out.write(
            f'{record_line(p.message)[:-2]},"delivery_count":{p.delivery_count},"priority":{p.priority},'
            f'"due":{p.due},"delayed":{"true" if p.delayed else "false"}}}\n'
        )
    out.flush()


@queues.command("in-flight")
@click.argument("topic")
@click.option("--group", "-g", help=GROUP_HELP)
@click.option("--limit", "-n", type=click.IntRange(1, 10_000), default=100, show_default=True)
@common_options
@pass_session
def leased_now(session: Session, topic: str, group: str | None, limit: int) -> None:
    """The records leased now, with their delivery counts and lease deadlines; changes nothing."""
    name = _group(topic, group)
    leased = in_flight(session.log(), topic, name, limit)
    if session.json:
        for p in leased:
            emit({"topic": topic, "group": name, **p._asdict()})
        return
    table(
        ["PARTITION", "OFFSET", "DELIVERIES", "CONSUMER", "DELIVERED", "LEASE UNTIL"],
        (
            [p.partition, p.offset, p.delivery_count, p.consumer or "-", when(p.delivered), when(p.deadline)]
            for p in leased
        ),
        right=(0, 1, 2),
    )


@queues.command("purge")
@click.argument("topic")
@click.option("--group", "-g", help=GROUP_HELP)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for a confirmation.")
@common_options
@pass_session
def purge_queue(session: Session, topic: str, group: str | None, yes: bool) -> None:
    """Finish every record the queue group holds: waiting, delayed and in flight.

    The records stay in TOPIC for its other groups; this group gets only
    what is appended from now on. Asks first (--yes does not).
    """
    log = session.log()
    name = _group(topic, group)
    _must_exist(log, topic, name)
    s = read_stats(log, topic, name)
    held = s.available + s.in_flight + s.delayed
    confirm(
        f"Purge queue group {name!r} on {topic!r}: {s.available} available, {s.in_flight} in flight, "
        f"{s.delayed} delayed?",
        yes,
        "nothing was purged",
    )
    purged = purge(log, topic, name)
    if session.json:
        emit({"topic": topic, "group": name, "purged": purged})
    else:
        click.echo(
            f"purged {purged} record(s) of {name} on {topic}"
            + ("" if purged == held else f" ({held} when asked)")
        )
