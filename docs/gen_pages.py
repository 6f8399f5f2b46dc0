"""The reference pages generated from the code at build time (mkdocs-gen-files runs this).

- reference/openapi.json and reference/http.md: the server's own OpenAPI document
  (`tidelog.server.http.openapi.spec()`), rendered as tables of paths, parameters,
  bodies and statuses (plain markdown, so nothing is fetched from a CDN).
- reference/redis.md: the Redis front's command registry (`resp.commands.COMMANDS`).
- reference/kafka.md: the Kafka listener's APIs and versions (`kafka.wire.APIS`).
- operations/metrics.md: every Prometheus series the server and the push worker
  export, read from their registries after a little traffic on a throwaway log.

The hand-written text here is only what frames a table; the rows come from the code.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from tidelog.server.http.openapi import spec  # noqa: E402
from tidelog.server.kafka.wire import APIS  # noqa: E402
from tidelog.server.resp.commands import COMMANDS, SUMMARIES  # noqa: E402

# -- HTTP -------------------------------------------------------------------------

SECTIONS = (
    ("Topics and records (/v1)", ("/v1/topics", "/v1/records", "/v1/changes")),
    ("Stream groups (/v1/groups)", ("/v1/groups",)),
    ("Queue groups (/v1/queues)", ("/v1/queues",)),
    ("Retention", ("/v1/clean",)),
    ("Pub/sub routes (/api, /publish, /subscribe)", ("/api", "/publish", "/subscribe")),
    ("Operations", ("/healthz", "/metrics")),
)


def _type(schema: dict[str, Any]) -> str:
    """A one-line reading of a JSON schema: type, bounds, pattern or choices."""
    if not schema:
        return "any"
    for either in ("oneOf", "anyOf"):
        if either in schema:
            return " or ".join(_type(s) for s in schema[either])
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array":
        items = schema.get("items")
        return f"array of {_type(items)}" if items else "array"
    bounds = []
    low = schema.get("minimum")
    if low is None and "exclusiveMinimum" in schema:
        low = f">{schema['exclusiveMinimum']}"
    if low is not None or "maximum" in schema:
        bounds.append(f"{low if low is not None else ''}..{schema.get('maximum', '')}")
    if "pattern" in schema:
        bounds.append(
            "a name" if schema["pattern"] == "^[A-Za-z0-9._-]{1,200}$" else f"`{schema['pattern']}`"
        )
    return f"{kind} ({', '.join(bounds)})" if bounds else str(kind)


def _cell(text: str) -> str:
    return text.replace("<", "&lt;").replace("|", "\\|").replace("\n", " ")


def _operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    lines = [f"### `{method.upper()} {path}`", "", _cell(op.get("summary", "")), ""]
    params = op.get("parameters") or []
    if params:
        lines += ["| parameter | in | required | type | meaning |", "| --- | --- | --- | --- | --- |"]
        for p in params:
            lines.append(
                f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} "
                f"| {_cell(_type(p.get('schema', {})))} | {_cell(p.get('description', ''))} |"
            )
        lines.append("")
    body = op.get("requestBody")
    if body:
        schema = next(iter(body["content"].values()))["schema"]
        props = schema.get("properties") or {}
        need = set(schema.get("required", ()))
        optional = "" if body.get("required") else " (optional)"
        if props:
            lines += [
                f"Body{optional}:",
                "",
                "| field | required | type | meaning |",
                "| --- | --- | --- | --- |",
            ]
            for name, sub in props.items():
                lines.append(
                    f"| `{name}` | {'yes' if name in need else 'no'} | {_cell(_type(sub))} "
                    f"| {_cell(sub.get('description', ''))} |"
                )
            lines.append("")
        else:
            lines += [f"Body{optional}: {_cell(_type(schema))}.", ""]
    statuses = ", ".join(f"{code} {r['description']}" for code, r in op["responses"].items())
    lines += [f"Answers: {statuses}.", ""]
    return lines


def http_page(document: dict[str, Any]) -> str:
    lines = [
        "# HTTP API",
        "",
        "Generated from the server's own OpenAPI document, which a running server also serves at",
        "`/openapi.json` (and as Swagger UI at `/docs`); [download it](openapi.json).",
        "Every route but `/healthz` needs `Authorization: Bearer <token>` when the server has a token.",
        'Errors are `{"error": {"code", "message"}}`; see [Serving over HTTP](../guides/http.md).',
        "",
    ]
    placed: set[str] = set()
    for title, prefixes in SECTIONS:
        paths = [p for p in document["paths"] if p.startswith(prefixes) and p not in placed]
        if not paths:
            continue
        lines += [f"## {title}", ""]
        for path in paths:
            placed.add(path)
            for method, op in document["paths"][path].items():
                lines += _operation(method, path, op)
    rest = [p for p in document["paths"] if p not in placed]
    if rest:
        lines += ["## Other routes", ""]
        for path in rest:
            for method, op in document["paths"][path].items():
                lines += _operation(method, path, op)
    return "\n".join(lines)


# -- Redis --------------------------------------------------------------------------


def _arity(n: int) -> str:
    # Redis counts the command name; a negative arity means "at least".
    args = abs(n) - 1
    return f"at least {args}" if n < 0 else str(args)


def redis_page() -> str:
    lines = [
        "# Redis commands",
        "",
        "Generated from the Redis front's command registry",
        "(`tidelog.server.resp.commands.COMMANDS`). Arguments are counted after the command",
        "name; the key column is the position of the first stream or topic name.",
        "What the stream commands mean on a tidelog topic is in [Redis clients](../guides/redis.md).",
        "",
        "| command | arguments | key at | what it does |",
        "| --- | --- | --- | --- |",
    ]
    for name in sorted(COMMANDS):
        _, arity, first_key = COMMANDS[name]
        lines.append(
            f"| `{name.upper()}` | {_arity(arity)} | {first_key or '-'} | {_cell(SUMMARIES.get(name, ''))} |"
        )
    return "\n".join(lines) + "\n"


# -- Metrics ------------------------------------------------------------------------


def kafka_page() -> str:
    lines = [
        "# Kafka APIs",
        "",
        "Generated from the Kafka listener's table (`tidelog.server.kafka.wire.APIS`): the APIs",
        "and versions `tidelog serve --kafka-port` answers in ApiVersions. What each means on a",
        "tidelog topic is in [Kafka clients](../guides/kafka.md).",
        "",
        "| key | API | versions |",
        "| --- | --- | --- |",
    ]
    for key, (name, low, high) in sorted(APIS.items()):
        title = "".join(part.capitalize() for part in name.split("_"))
        lines.append(f"| {key} | {title} | {low} to {high} |")
    return "\n".join(lines) + "\n"


def _families(registry: Any) -> list[tuple[str, str, str, list[str]]]:
    rows = []
    for family in registry.collect():
        labels: list[str] = []
        for sample in family.samples:
            labels += [k for k in sample.labels if k not in labels and k != "le"]
        name = family.name + ("_total" if family.type == "counter" else "")
        rows.append((name, family.type, family.documentation, labels))
    return rows


def _server_metrics(work: Path) -> list[tuple[str, str, str, list[str]]]:
    import tidelog
    from tidelog.server.http.metrics import Metrics

    log = tidelog.open(str(work / "metrics.db"))
    try:
        log.create_topic("orders", partitions=2)
        sent = log.producer().send_batch("orders", [b"a", b"b"], partition=0)
        consumer = log.consumer("billing")
        consumer.commit("orders", 0, 1)
        queue = log.queue("orders", group="mailer", dead_letter="orders.dlq")
        queue.receive(max_messages=1)
        log.clean()
        metrics = Metrics(log)
        # Touch every labelled series once so its labels show; the values do not matter.
        metrics.written([sent])
        metrics.records_read("orders", 1)
        metrics.requests.labels("POST", "/v1/topics/{topic}/records", "200").inc()
        metrics.latency.labels("POST", "/v1/topics/{topic}/records").observe(0.001)
        for counter in (metrics.deliveries, metrics.acks, metrics.dead_letters):
            counter.labels("orders", "mailer").inc()
        with log.consumer("billing", topics=["orders"], session_timeout=10) as member:
            member.poll(timeout=0)
            return _families(metrics.registry)
    finally:
        log.close()


def _worker_metrics(work: Path) -> list[tuple[str, str, str, list[str]]]:
    import tidelog
    from tidelog.worker.config import load
    from tidelog.worker.metrics import Metrics

    log = tidelog.open(str(work / "worker.db"))
    try:
        log.create_topic("orders")
        config = load(
            {"topics": {"orders": {"groups": {"mailer": {"endpoint": "http://127.0.0.1:9/"}}}}}
        ).resolve(log)
        metrics = Metrics(log, config)
        metrics.delivered("mailer", "orders", 0, records=1)
        metrics.failed("mailer", "orders", 0, "timeout")
        return _families(metrics.registry)
    finally:
        log.close()


def _table(rows: list[tuple[str, str, str, list[str]]]) -> list[str]:
    lines = ["| series | type | labels | meaning |", "| --- | --- | --- | --- |"]
    for name, kind, doc, labels in rows:
        shown = ", ".join(f"`{label}`" for label in labels) or "-"
        lines.append(f"| `{name}` | {kind} | {shown} | {_cell(doc)} |")
    return lines


def metrics_page() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        server, worker = _server_metrics(Path(tmp)), _worker_metrics(Path(tmp))
    return "\n".join(
        [
            "# Metrics",
            "",
            "`tidelog serve` exports Prometheus metrics at `/metrics`; the push worker at",
            "`--metrics-port N`. The tables are generated from their registries. Gauges about",
            "groups, partitions, queues and cleaning are read from the log when scraped, so",
            "they are never stale and cost nothing between scrapes (the byte count of a",
            "partition sums it, so scraping a large log reads it).",
            "",
            "## Server (`/metrics`)",
            "",
            *_table(server),
            "",
            "A histogram also has `_bucket`, `_count` and `_sum` series; the latency buckets run",
            "from 0.5 ms to 30 s. `route` is the route template (`/v1/topics/{topic}/records`),",
            "not the raw path, so the series stay few.",
            "",
            "## Push worker (`--metrics-port`)",
            "",
            *_table(worker),
            "",
            "`cause` is `http_<status>`, `timeout` or `connection`.",
            "",
            "## What to alert on",
            "",
            "- `tidelog_group_lag` growing for a stream group: its consumers fall behind.",
            "- `tidelog_queue_oldest_available_age_seconds` growing: a queue group's workers do not",
            "  keep up, or a record fails again and again (a nack does not make it younger);",
            '  `tidelog_queue_messages{state="dead_lettered"}` rising: records fail',
            "  more often than `max_deliveries` allows.",
            "- `tidelog_worker_failures_total` rising while `tidelog_worker_lag` grows: an endpoint",
            "  refuses or times out, and the worker retries the same batch.",
            "- `tidelog_last_clean_at` far in the past: the cleaner is not running.",
            "",
        ]
    )


document = spec()
with mkdocs_gen_files.open("reference/openapi.json", "w") as f:
    json.dump(document, f, indent=2)
with mkdocs_gen_files.open("reference/http.md", "w") as f:
    f.write(http_page(document))
with mkdocs_gen_files.open("reference/redis.md", "w") as f:
    f.write(redis_page())
with mkdocs_gen_files.open("reference/kafka.md", "w") as f:
    f.write(kafka_page())
with mkdocs_gen_files.open("operations/metrics.md", "w") as f:
    f.write(metrics_page())
