"""`tidelog topics`: list, create, describe, add-partitions, delete."""

from __future__ import annotations

from typing import Any

import click

import tidelog

from .context import Session, SummaryGroup, common_options, pass_session
from .output import emit, table, when


def topic_json(info: tidelog.TopicInfo, **extra: Any) -> dict[str, Any]:
    return {
        "name": info.name,
        "partitions": info.partitions,
        "config": info.config,
        "created": info.created,
    } | extra


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@click.group(cls=SummaryGroup)
def topics() -> None:
    """Create, inspect and delete topics."""


@topics.command("list")
@common_options
@pass_session
def list_topics(session: Session) -> None:
    """Every topic with its partitions and record count."""
    log = session.log()
    described = [log.describe(info.name) for info in log.topics()]
    if session.json:
        for d in described:
            emit(
                {
                    "name": d.name,
                    "partitions": len(d.partitions),
                    "records": d.records,
                    "config": d.config,
                    "created": d.created,
                }
            )
        return
    table(
        ["NAME", "PARTITIONS", "RECORDS", "CREATED"],
        ([d.name, len(d.partitions), d.records, when(d.created)] for d in described),
        right=(1, 2),
    )


@topics.command("create")
@click.argument("name")
@click.option("--partitions", "-p", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--max-message-bytes",
    type=click.IntRange(min=1),
    help="Largest record (value, key and headers) the topic takes.",
)
@click.option(
    "--config",
    "-c",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="A topic setting, e.g. retention_ms=7d, retention_bytes=1GiB, cleanup_policy=compact, retention=consumed.",
)
@common_options
@pass_session
def create_topic(
    session: Session, name: str, partitions: int, max_message_bytes: int | None, settings: tuple[str, ...]
) -> None:
    """Create topic NAME; succeeds unchanged when it exists with these settings."""
    log = session.log(writes=True)
    try:
        log.topic(name)
        new = False
    except tidelog.UnknownTopic:
        new = True
    config: dict = parse_settings(settings)
    if max_message_bytes is not None:
        config["max_message_bytes"] = max_message_bytes
    info = log.create_topic(name, partitions, **config)
    if session.json:
        emit(topic_json(info, new=new))
    else:
        verb = "created topic" if new else "topic exists:"
        click.echo(f"{verb} {info.name} ({_plural(info.partitions, 'partition')})")


def parse_settings(settings: tuple[str, ...]) -> dict:
    """KEY=VALUE pairs; numbers become integers, `none` clears a bound."""
    out: dict = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--config")
        out[key.strip()] = None if value.lower() == "none" else (int(value) if value.isdigit() else value)
    return out


@topics.command("alter")
@click.argument("name")
@click.option("--config", "-c", "settings", multiple=True, metavar="KEY=VALUE", required=True)
@common_options
@pass_session
def alter_topic(session: Session, name: str, settings: tuple[str, ...]) -> None:
    """Change settings of topic NAME (retention, compaction, limits)."""
    info = session.log().alter_topic(name, **parse_settings(settings))
    if session.json:
        emit(topic_json(info))
    else:
        click.echo(
            f"altered topic {info.name}: " + ", ".join(f"{k}={v}" for k, v in sorted(info.config.items()))
        )


@topics.command("describe")
@click.argument("name")
@common_options
@pass_session
def describe_topic(session: Session, name: str) -> None:
    """Partitions of NAME with their first and last offsets and record counts."""
    d = session.log().describe(name)
    parts = [
        {
            "partition": p.partition,
            "first_offset": p.first_offset,
            "last_offset": p.last_offset,
            "records": p.records,
        }
        for p in d.partitions
    ]
    if session.json:
        emit(
            {
                "name": d.name,
                "partitions": parts,
                "records": d.records,
                "config": d.config,
                "created": d.created,
            }
        )
        return
    settings = ", ".join(f"{k}={v}" for k, v in sorted(d.config.items()))
    click.echo(
        f"topic {d.name}: {_plural(len(parts), 'partition')}, {_plural(d.records, 'record')}, created {when(d.created)}"
    )
    if settings:
        click.echo(f"config: {settings}")
    table(
        ["PARTITION", "FIRST", "LAST", "RECORDS"],
        ([p["partition"], p["first_offset"], p["last_offset"], p["records"]] for p in parts),
        right=(0, 1, 2, 3),
    )


@topics.command("add-partitions")
@click.argument("name")
@click.argument("partitions", type=click.IntRange(min=1))
@common_options
@pass_session
def add_partitions(session: Session, name: str, partitions: int) -> None:
    """Grow NAME to PARTITIONS partitions in all (topics never shrink)."""
    info = session.log().add_partitions(name, partitions)
    if session.json:
        emit(topic_json(info))
    else:
        click.echo(f"topic {info.name} has {_plural(info.partitions, 'partition')}")


@topics.command("delete")
@click.argument("name")
@common_options
@pass_session
def delete_topic(session: Session, name: str) -> None:
    """Delete NAME with all its records and committed offsets."""
    if not session.log().delete_topic(name):
        raise tidelog.UnknownTopic(f"topic {name!r} does not exist")
    if session.json:
        emit({"name": name, "deleted": True})
    else:
        click.echo(f"deleted topic {name}")
