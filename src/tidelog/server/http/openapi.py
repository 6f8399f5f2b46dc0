"""The OpenAPI 3.1 description of every route, served at /openapi.json.

Written out rather than generated: the server validates by hand (see
bodies.py and wire.py) and this spec states the same rules, which the test
suite checks by fuzzing the server against it (schemathesis).
"""

from __future__ import annotations

from typing import Any

from ...bounds import MAX_DELAY_S, MAX_DELIVERIES, MAX_OFFSET, MAX_TIMESTAMP_MS, MAX_VISIBILITY_S
from ...results import MAX_RESULT_TTL_S
from ...results import STATUSES as JOB_STATUSES

NAME = {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,200}$"}
# Every integer is bounded (tidelog.bounds): offsets to 64 bits, times to what a double holds exactly.
OFFSET = {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET}
TIME_MS = {"type": "integer", "minimum": 0, "maximum": MAX_TIMESTAMP_MS, "description": "ms since epoch"}
ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}
HEADERS_IN = {
    "oneOf": [
        {"type": "object", "additionalProperties": {"type": "string"}},
        {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string"},
                    "value": {"type": "string"},
                    "value_base64": {"type": "string", "contentEncoding": "base64"},
                },
                "additionalProperties": False,
            },
        },
    ]
}
RECORD_IN = {
    "type": "object",
    "required": ["value"],
    "properties": {
        "value": {"description": "the JSON value; the string itself for text; base64 for bytes"},
        "format": {"enum": ["json", "text", "bytes"], "default": "json"},
        "key": {"type": "string"},
        "key_base64": {"type": "string", "contentEncoding": "base64"},
        "headers": HEADERS_IN,
        "partition": {"type": "integer", "minimum": 0},
    },
    "additionalProperties": False,
}
RECORD_OUT: dict[str, Any] = {
    "type": "object",
    "required": ["topic", "partition", "offset", "timestamp", "format", "value", "headers"],
    "properties": {
        "topic": {"type": "string"},
        "partition": {"type": "integer"},
        "offset": {"type": "integer"},
        "timestamp": {"type": "integer", "description": "ms since epoch"},
        "format": {"enum": ["json", "text", "bytes"]},
        "value": {},
        "key": {"type": ["string", "null"]},
        "key_base64": {"type": "string"},
        "headers": {"type": "array", "items": {"type": "object"}},
        "producer": {"type": ["string", "null"]},
    },
}
TOPIC = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "partitions": {"type": "integer"},
        "config": {"type": "object"},
        "created": {"type": "integer"},
    },
}
DURATION = {
    "oneOf": [
        {"type": "integer", "minimum": 0, "maximum": (1 << 63) - 1, "description": "milliseconds"},
        {
            "type": "string",
            "pattern": "^[0-9]+(\\.[0-9]+)?(ms|s|m|h|d|w)?$",
            "examples": ["7d", "12h", "500ms"],
        },
    ]
}
SIZE = {
    "oneOf": [
        {"type": "integer", "minimum": 0, "maximum": (1 << 63) - 1, "description": "bytes"},
        {
            "type": "string",
            "pattern": "^[0-9]+(\\.[0-9]+)?(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?$",
            "examples": ["1GiB", "500MB"],
        },
    ]
}
TOPIC_CONFIG = {
    "type": "object",
    "description": "Topic settings; durations and sizes also as text (7d, 12h, 1GiB). A bad one is a 400 naming it.",
    "properties": {
        "max_message_bytes": {
            "oneOf": [{"type": "integer", "minimum": 1, "maximum": 1 << 30}, SIZE["oneOf"][1]]
        },
        "retention_ms": {
            "oneOf": [*DURATION["oneOf"], {"type": "null"}],
            "description": "default 7d; null: no time bound",
        },
        "retention_bytes": {
            "oneOf": [*SIZE["oneOf"], {"type": "null"}],
            "description": "per partition; default unlimited",
        },
        "retention": {"enum": ["time", "consumed"]},
        "cleanup_policy": {"enum": ["delete", "compact", "compact,delete"]},
        "min_compaction_lag_ms": DURATION,
        "delete_retention_ms": DURATION,
    },
    "additionalProperties": False,
}
OFFSET_BODY = {
    "type": "object",
    "required": ["topic", "partition", "offset"],
    "properties": {"topic": NAME, "partition": OFFSET, "offset": OFFSET},
    "additionalProperties": False,
}


def _q(name: str, schema: dict[str, Any], required: bool = False, description: str = "") -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


def _p(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _limit(name: str, maximum: int) -> dict[str, Any]:
    """A how-many query parameter: more than `maximum` is served as `maximum`, not refused."""
    return _q(
        name,
        {"type": "integer", "minimum": 1},
        description=f"at most {maximum} are answered; a larger value is held to {maximum}",
    )


WAIT = _q("wait", {"type": "number", "minimum": 0, "maximum": 30}, description="long-poll seconds")
TOPIC_P, GROUP_P, PARTITION_P = _p("topic", NAME), _p("group", NAME), _p("partition", OFFSET)
QGROUP = _q("group", NAME, description="the queue group (default: the topic's name)")
CHUNK = _q("chunk", {"type": "integer", "minimum": 1, "maximum": 100000}, description="records a step")
RECEIPT = {"type": "string", "description": "the opaque receipt of a delivery"}
RECEIPTS = {
    "type": "array",
    "items": RECEIPT,
    "minItems": 1,
    "maxItems": 10000,
    "description": "several deliveries, settled in one store transaction; each succeeds or is "
    "listed in the answer's `failed` (index, error) on its own",
}
DELIVERY = {
    **RECORD_OUT,
    "required": [*RECORD_OUT["required"], "delivery_count", "receipt", "lease_deadline"],
    "properties": {
        **RECORD_OUT["properties"],
        "delivery_count": {"type": "integer"},
        "receipt": RECEIPT,
        "lease_deadline": {"type": "integer", "description": "ms since epoch"},
    },
}
PEEKED = {
    **RECORD_OUT,
    "properties": {
        **RECORD_OUT["properties"],
        "delivery_count": {"type": "integer", "description": "deliveries so far"},
        "due": {"type": "integer", "description": "ms since epoch; 0: nacked to the front"},
        "priority": {"type": "integer"},
        "delayed": {"type": "boolean", "description": "not due yet"},
    },
}
JOB_P = _p("job", {"type": "string", "pattern": "^[0-9]{1,6}-[0-9]{1,19}$", "examples": ["0-42"]})
JOB_QUEUE = _q("queue", NAME, description="the job runner's queue (default: jobs)")
ATTEMPTS = {"type": "integer", "minimum": 1, "maximum": (1 << 31) - 1}
TTL_MS = {"type": "integer", "minimum": 1, "maximum": int(MAX_RESULT_TTL_S * 1000)}
JOB_INFO = {
    "type": "object",
    "required": ["id", "status", "attempts"],
    "properties": {
        "id": {"type": "string"},
        "status": {"enum": list(JOB_STATUSES)},
        "attempts": {"type": "integer"},
        "result": {"description": "the handler's return value (done)"},
        "error": {"type": ["string", "null"]},
        "updated": {"type": ["integer", "null"], "description": "ms since epoch"},
    },
}
JOB_ROW = {
    "type": "object",
    "properties": {
        "state": {"type": "string"},
        "attempts": {"type": "integer"},
        "body": {"type": ["string", "null"]},
        "updated": {"type": "integer"},
        "expires": {"type": "integer"},
    },
}
DEAD_LETTER_PICK = {
    "type": "object",
    "properties": {
        "offsets": {
            "type": "array",
            "items": {"type": "integer", "minimum": 1, "maximum": MAX_OFFSET},
            "minItems": 1,
            "maxItems": 10000,
            "uniqueItems": True,
        },
        "origin": NAME,
        "dry_run": {"type": "boolean", "default": False},
    },
    "additionalProperties": False,
}
TOPIC_PARTITION = {
    "type": "array",
    "prefixItems": [NAME, {"type": "integer", "minimum": 0}],
    "minItems": 2,
    "maxItems": 2,
}
MEMBER_BODY = {
    "type": "object",
    "required": ["member_id"],
    "properties": {"member_id": NAME},
    "additionalProperties": False,
}
MEMBER_VIEW = {
    "type": "object",
    "properties": {
        "group": {"type": "string"},
        "member_id": {"type": "string"},
        "generation": {"type": "integer"},
        "assignment": {"type": "array", "items": TOPIC_PARTITION},
        "revoke": {
            "type": "array",
            "items": TOPIC_PARTITION,
            "description": "commit these; poll releases them",
        },
    },
}
MEMBER_COMMIT = {
    "type": "object",
    "required": ["member_id"],
    "properties": {
        "member_id": NAME,
        "generation": OFFSET,
        "topic": NAME,
        "partition": {"type": "integer", "minimum": 0, "maximum": 9999},
        "offset": OFFSET,
    },
    "additionalProperties": False,
}


def _op(
    summary: str,
    ok: int = 200,
    body: dict[str, Any] | None = None,
    params: list[dict[str, Any]] | None = None,
    result: dict[str, Any] | None = None,
    errors: tuple[int, ...] = (400, 404),
    content: str = "application/json",
    extra_ok: tuple[int, ...] = (),
    optional_body: bool = False,
) -> dict[str, Any]:
    responses: dict[str, Any] = {
        str(ok): {"description": "ok", "content": {content: {"schema": result or {"type": "object"}}}}
    }
    for status in extra_ok:
        responses[str(status)] = {"description": "ok", "content": {content: {"schema": result or {}}}}
    for status in (*errors, 401):
        responses[str(status)] = {
            "description": "error",
            "content": {"application/json": {"schema": ERROR}},
        }
    op: dict[str, Any] = {"summary": summary, "parameters": params or [], "responses": responses}
    if body is not None:
        op["requestBody"] = {"required": not optional_body, "content": {"application/json": {"schema": body}}}
    return op


def spec() -> dict[str, Any]:
    paths: dict[str, Any] = {
        "/healthz": {"get": {**_op("Liveness", errors=()), "security": []}},
        "/metrics": {"get": _op("Prometheus metrics", errors=(), content="text/plain")},
        "/api/topics": {
            "post": _op(
                "Create or ensure a single-partition topic (201 new, 200 existing)",
                ok=201,
                extra_ok=(200,),
                body={"type": "object", "required": ["name"], "properties": {"name": NAME}},
                errors=(400,),
            )
        },
        "/api/topics/{name}/publish": {
            "post": _op(
                "Publish a JSON payload; answers its id (offset)",
                ok=201,
                params=[_p("name", NAME)],
                body={"type": "object", "required": ["payload"], "properties": {"payload": {}}},
                errors=(400, 404, 409, 413),
            )
        },
        "/api/topics/{name}/pull": {
            "get": _op(
                "Messages after the group's lastAckedId, oldest first",
                params=[
                    _p("name", NAME),
                    _q("group", NAME, required=True),
                    _limit("batch", 1000),
                    WAIT,
                ],
                errors=(400, 404, 409),
            )
        },
        "/api/topics/{name}/ack": {
            "post": _op(
                "Advance the group (monotonic: a lower id never rewinds)",
                params=[_p("name", NAME)],
                body={
                    "type": "object",
                    "required": ["group", "lastAckedId"],
                    "properties": {"group": NAME, "lastAckedId": OFFSET},
                },
                errors=(400, 404, 409),
            )
        },
        "/publish/{topic}": {
            "post": {
                **_op(
                    "Publish the raw request body as one bytes record",
                    ok=201,
                    params=[
                        TOPIC_P,
                        _q("key", {"type": "string"}),
                        _q("partition", {"type": "integer", "minimum": 0}),
                    ],
                    errors=(400, 404, 413),
                ),
                "requestBody": {
                    "required": False,
                    "content": {
                        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
                    },
                },
            }
        },
        "/v1/topics": {
            "get": _op("List topics", errors=()),
            "post": _op(
                "Create a topic (201; 200 when it exists with these settings; 409 when they differ)",
                ok=201,
                extra_ok=(200,),
                body={
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": NAME,
                        "partitions": {"type": "integer", "minimum": 1, "maximum": 10000},
                        "config": TOPIC_CONFIG,
                    },
                    "additionalProperties": False,
                },
                errors=(400, 409),
            ),
        },
        "/v1/topics/{topic}": {
            "get": _op(
                "Describe a topic: settings, first/last offset, records and bytes per partition, last cleaning",
                params=[TOPIC_P],
            ),
            "patch": _op(
                "Change a topic's settings (retention, compaction, limits)",
                params=[TOPIC_P],
                body={
                    "type": "object",
                    "required": ["config"],
                    "properties": {"config": TOPIC_CONFIG},
                    "additionalProperties": False,
                },
            ),
            "delete": _op("Delete a topic with its records and offsets", params=[TOPIC_P]),
        },
        "/v1/topics/{topic}/clean": {
            "post": _op(
                "Apply the topic's retention and compaction now; answers the cleaning's figures",
                params=[TOPIC_P, CHUNK],
            )
        },
        "/v1/clean": {
            "post": _op("Apply every topic's retention and compaction now", params=[CHUNK], errors=(400,))
        },
        "/v1/topics/{topic}/partitions": {
            "post": _op(
                "Grow a topic to `partitions` (never shrinks)",
                params=[TOPIC_P],
                body={
                    "type": "object",
                    "required": ["partitions"],
                    "properties": {"partitions": {"type": "integer", "minimum": 1, "maximum": 10000}},
                    "additionalProperties": False,
                },
            )
        },
        "/v1/topics/{topic}/records": {
            "post": _op(
                "Produce records; each record's partition, key or the spread picks its partition",
                params=[TOPIC_P],
                body={
                    "type": "object",
                    "required": ["records"],
                    "properties": {
                        "records": {"type": "array", "items": RECORD_IN, "minItems": 1},
                        "partition": OFFSET,
                        "producer": NAME,
                        "timestamp": TIME_MS,
                    },
                    "additionalProperties": False,
                },
                errors=(400, 404, 413),
            )
        },
        "/v1/topics/{topic}/partitions/{partition}/records": {
            "get": _op(
                "Read a partition after an offset, without a group",
                params=[
                    TOPIC_P,
                    PARTITION_P,
                    _q("after", OFFSET),
                    _limit("limit", 10000),
                    WAIT,
                ],
                result={
                    "type": "object",
                    "properties": {"records": {"type": "array", "items": RECORD_OUT}},
                },
            )
        },
        "/v1/topics/{topic}/stream": {
            "get": _op(
                "Server-Sent Events: the topic's records for a group, as they arrive",
                params=[
                    TOPIC_P,
                    _q("group", NAME, required=True),
                    _q("partition", OFFSET),
                    _q("commit", {"type": "boolean"}),
                ],
                content="text/event-stream",
            )
        },
        "/v1/records": {
            "post": _op(
                "Produce batches to any topics in one transaction (all or none)",
                body={
                    "type": "object",
                    "required": ["batches"],
                    "properties": {
                        "batches": {
                            "type": "array",
                            "minItems": 1,
                            "items": {
                                "type": "object",
                                "required": ["topic", "records"],
                                "properties": {
                                    "topic": NAME,
                                    "partition": OFFSET,
                                    "key": {"type": "string"},
                                    "producer": NAME,
                                    "timestamp": TIME_MS,
                                    "records": {"type": "array", "items": RECORD_IN, "minItems": 1},
                                },
                                "additionalProperties": False,
                            },
                        },
                        "txn": {
                            "type": "string",
                            "pattern": "^[A-Za-z0-9._:-]{1,255}$",
                            "description": "an idempotent write: a txn id seen before writes nothing and answers that write",
                        },
                        "txn_since": {
                            **TIME_MS,
                            "description": "ms since epoch: a txn id recorded by a write stamped earlier "
                            "no longer counts (a dedup window); this write takes it over",
                        },
                    },
                    "additionalProperties": False,
                },
                errors=(400, 404, 413),
            )
        },
        "/v1/groups": {
            "get": _op("List groups", errors=()),
            "post": _op(
                "Register a stream group",
                body={
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": NAME, "mode": {"enum": ["stream"]}},
                    "additionalProperties": False,
                },
                errors=(400,),
            ),
        },
        "/v1/groups/{group}": {
            "get": _op(
                "Describe a group: committed offset, end offset and lag per partition",
                params=[GROUP_P, _q("topic", NAME)],
            )
        },
        "/v1/groups/{group}/offsets": {
            "get": _op("A group's committed offsets", params=[GROUP_P], errors=(400,))
        },
        "/v1/groups/{group}/topics/{topic}/records": {
            "get": _op(
                "Fetch records after the group's committed offset",
                params=[
                    GROUP_P,
                    TOPIC_P,
                    _q("partition", OFFSET),
                    _limit("max", 10000),
                    _q("exclude_producer", NAME),
                    WAIT,
                ],
            )
        },
        "/v1/groups/{group}/topics/{topic}/partitions/{partition}": {
            "get": _op(
                "A group's committed offset and lag on one partition", params=[GROUP_P, TOPIC_P, PARTITION_P]
            )
        },
        "/v1/groups/{group}/commit": {
            "post": _op(
                "Commit an offset (moves forward only); with member_id, a member's fenced commit "
                "(without topic/partition/offset: everything its polls returned)",
                params=[GROUP_P],
                body={"oneOf": [OFFSET_BODY, MEMBER_COMMIT]},
                errors=(400, 404, 409),
            )
        },
        "/v1/groups/{group}/join": {
            "post": _op(
                "Join a stream group as a member: answers member_id, generation, assignment and revoke",
                params=[GROUP_P],
                body={
                    "type": "object",
                    "required": ["topics"],
                    "properties": {
                        "topics": {"type": "array", "items": NAME, "minItems": 1},
                        "member_id": NAME,
                        "session_timeout": {"type": "number", "minimum": 0.1, "maximum": 3600, "default": 10},
                        "assignor": {"enum": ["range", "roundrobin", "sticky"]},
                        "start": {"enum": ["earliest", "latest"]},
                    },
                    "additionalProperties": False,
                },
                result=MEMBER_VIEW,
            )
        },
        "/v1/groups/{group}/heartbeat": {
            "post": _op(
                "Keep a member alive (every third of its session) and learn its assignment",
                params=[GROUP_P],
                body=MEMBER_BODY,
                result=MEMBER_VIEW,
                errors=(400, 409),
            )
        },
        "/v1/groups/{group}/poll": {
            "post": _op(
                "Release the partitions in revoke, then records from the member's partitions",
                params=[GROUP_P],
                body={
                    "type": "object",
                    "required": ["member_id"],
                    "properties": {
                        "member_id": NAME,
                        "max_messages": {
                            "type": "integer",
                            "minimum": 1,
                            "description": "at most 100000 are answered; a larger value is held to 100000",
                        },
                        "wait": {"type": "number", "minimum": 0, "maximum": 30},
                    },
                    "additionalProperties": False,
                },
                errors=(400, 404, 409),
            )
        },
        "/v1/groups/{group}/release": {
            "post": _op(
                "Give up partitions now (default: those in revoke)",
                params=[GROUP_P],
                body={
                    "type": "object",
                    "required": ["member_id"],
                    "properties": {
                        "member_id": NAME,
                        "partitions": {"type": "array", "items": TOPIC_PARTITION},
                    },
                    "additionalProperties": False,
                },
                result=MEMBER_VIEW,
                errors=(400, 409),
            )
        },
        "/v1/groups/{group}/leave": {
            "post": _op(
                "Leave the group: its partitions go to the others",
                params=[GROUP_P],
                body=MEMBER_BODY,
                errors=(400, 409),
            )
        },
        "/v1/groups/{group}/seek": {
            "post": _op("Set the committed offset, backwards too", params=[GROUP_P], body=OFFSET_BODY)
        },
        "/v1/groups/{group}/reset": {
            "post": _op(
                "Reset a stream group's committed offsets on a topic (earliest, latest, an offset, a time); "
                "409 group_active while it has live members",
                params=[GROUP_P],
                body={
                    "type": "object",
                    "required": ["topic", "to"],
                    "properties": {
                        "topic": NAME,
                        "to": {"enum": ["earliest", "latest", "offset", "time"]},
                        "value": {
                            "type": "integer",
                            "minimum": 0,
                            "description": "the offset, or ms since epoch",
                        },
                        "partition": OFFSET,
                    },
                    "additionalProperties": False,
                },
                errors=(400, 404, 409),
            )
        },
        "/v1/topics/{topic}/redrive": {
            "post": _op(
                "Move dead letters of this dead-letter topic back to their origin topics (all, or by offset); "
                "dry_run: check and answer the plan (offset 0 each), move nothing. A topic holding no dead "
                "letter: 400",
                params=[TOPIC_P],
                body=DEAD_LETTER_PICK,
                optional_body=True,
                result={
                    "type": "object",
                    "properties": {
                        "dead_letter": {"type": "string"},
                        "moved": {"type": "array", "items": {"type": "object"}},
                        "skipped": {"type": "array", "items": {"type": "integer"}},
                        "dry_run": {"type": "boolean"},
                    },
                },
            )
        },
        "/v1/topics/{topic}/purge": {
            "post": _op(
                "Remove dead letters of this dead-letter topic without moving them (all, or by offset; "
                "records without an origin stamp stay); dry_run: answer what would go, remove nothing. "
                "A topic holding no dead letter: 400",
                params=[TOPIC_P],
                body=DEAD_LETTER_PICK,
                optional_body=True,
                result={
                    "type": "object",
                    "properties": {
                        "dead_letter": {"type": "string"},
                        "removed": {"type": "array", "items": {"type": "integer"}},
                        "skipped": {"type": "array", "items": {"type": "integer"}},
                        "dry_run": {"type": "boolean"},
                    },
                },
            )
        },
        "/v1/queues": {
            "get": _op(
                "The queue groups of the log (or of one topic), oldest first on each topic",
                params=[_q("topic", NAME)],
                result={
                    "type": "object",
                    "properties": {
                        "queues": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {"topic": {"type": "string"}, "group": {"type": "string"}},
                            },
                        }
                    },
                },
            )
        },
        "/v1/queues/{topic}": {
            "post": _op(
                "Open a queue group: stores max_deliveries, dead_letter, start and ordering on first use, "
                "answers the stored ones (another ordering than the stored one: 409 group_conflict)",
                params=[TOPIC_P, QGROUP],
                body={
                    "type": "object",
                    "properties": {
                        "max_deliveries": {"type": "integer", "minimum": 1, "maximum": MAX_DELIVERIES},
                        "dead_letter": NAME,
                        "start": {"enum": ["earliest", "latest"]},
                        "ordering": {
                            "enum": ["none", "key"],
                            "description": "key: a key's records one at a time, in offset order",
                        },
                    },
                    "additionalProperties": False,
                },
                optional_body=True,
            )
        },
        "/v1/queues/{topic}/messages": {
            "post": _op(
                "Send records; with delay, queue groups do not deliver them before then; with priority "
                "(0-9), before available records of lower priority",
                params=[TOPIC_P, QGROUP],
                body={
                    "type": "object",
                    "required": ["records"],
                    "properties": {
                        "records": {"type": "array", "items": RECORD_IN, "minItems": 1},
                        "delay": {"type": "number", "minimum": 0, "maximum": MAX_DELAY_S},
                        "priority": {"type": "integer", "minimum": 0, "maximum": 9, "default": 0},
                        "dedup_id": {
                            "type": "string",
                            "minLength": 1,
                            "description": "at most 128 bytes: sent again within the topic's dedup_window_ms, "
                            "nothing is appended and the first send's offsets are answered",
                        },
                        "partition": OFFSET,
                        "producer": NAME,
                    },
                    "additionalProperties": False,
                },
                errors=(400, 404, 413),
            )
        },
        "/v1/queues/{topic}/receive": {
            "post": _op(
                "Lease up to max records (a long-poll with wait: woken by an append or a record falling due)",
                params=[
                    TOPIC_P,
                    QGROUP,
                    _limit("max", 10000),
                    _q(
                        "visibility_timeout",
                        {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_VISIBILITY_S},
                    ),
                    WAIT,
                ],
                result={
                    "type": "object",
                    "properties": {
                        "messages": {"type": "array", "items": DELIVERY},
                        "next_due": {"type": ["integer", "null"]},
                    },
                },
            )
        },
        "/v1/queues/{topic}/ack": {
            "post": _op(
                "Finish a delivery (receipt), or several (receipts: one transaction, each on its own, "
                "failures listed)",
                params=[TOPIC_P, QGROUP],
                body={
                    "type": "object",
                    "properties": {
                        "receipt": RECEIPT,
                        "receipts": RECEIPTS,
                    },
                    "additionalProperties": False,
                },
                errors=(400, 404, 409),
            )
        },
        "/v1/queues/{topic}/nack": {
            "post": _op(
                "Available again: at the front (default), back (behind every record waiting now), after "
                "delay seconds, or at due (ms); receipts: several in one transaction (answers released, failed)",
                params=[TOPIC_P, QGROUP],
                body={
                    "type": "object",
                    "properties": {
                        "receipt": RECEIPT,
                        "receipts": RECEIPTS,
                        "back": {"type": "boolean"},
                        "delay": {"type": "number", "minimum": 0, "maximum": MAX_VISIBILITY_S},
                        "due": {**TIME_MS, "description": "ms since epoch, server clock; held to 12 h ahead"},
                    },
                    "additionalProperties": False,
                },
                errors=(400, 404, 409),
            )
        },
        "/v1/queues/{topic}/extend": {
            "post": _op(
                "Push the lease deadline out: seconds from now, or to deadline (ms since epoch, server "
                "clock); receipts: several in one transaction (answers extended, lease_deadline, failed)",
                params=[TOPIC_P, QGROUP],
                body={
                    "type": "object",
                    "properties": {
                        "receipt": RECEIPT,
                        "receipts": RECEIPTS,
                        "seconds": {"type": "number", "minimum": 0, "maximum": MAX_VISIBILITY_S},
                        "deadline": {
                            **TIME_MS,
                            "description": "ms since epoch, server clock; held to 12 h ahead",
                        },
                    },
                    "additionalProperties": False,
                },
                errors=(400, 404, 409),
            )
        },
        "/v1/queues/{topic}/reject": {
            "post": _op(
                "Move a delivery straight to the dead-letter topic",
                params=[TOPIC_P, QGROUP],
                body={
                    "type": "object",
                    "required": ["receipt"],
                    "properties": {"receipt": RECEIPT, "reason": {"type": "string"}},
                    "additionalProperties": False,
                },
                errors=(400, 404, 409),
            )
        },
        "/v1/queues/{topic}/stats": {
            "get": _op(
                "Available, in flight, delayed, dead-lettered and the oldest available record's age",
                params=[TOPIC_P, QGROUP],
            )
        },
        "/v1/queues/{topic}/peek": {
            "get": _op(
                "Up to max records the group holds for a receive, leasing nothing: the due ones in the "
                "order a receive takes them, then the delayed ones (a missing group: 404, never made)",
                params=[TOPIC_P, QGROUP, _limit("max", 1000)],
                result={
                    "type": "object",
                    "properties": {"messages": {"type": "array", "items": PEEKED}},
                },
            )
        },
        "/v1/queues/{topic}/in-flight": {
            "get": _op(
                "Up to max records the group has leased now: partition, offset, consumer, delivered, "
                "delivery_count, deadline",
                params=[TOPIC_P, QGROUP, _limit("max", 10000)],
            )
        },
        "/v1/queues/{topic}/purge": {
            "post": _op(
                "Finish every record the group holds now (waiting, delayed, in flight) in one transaction; "
                "the records stay in the topic, later ones are delivered as usual (a missing group: 404)",
                params=[TOPIC_P, QGROUP],
                body={"type": "object", "additionalProperties": False},
                optional_body=True,
                result={"type": "object", "properties": {"purged": {"type": "integer"}}},
            )
        },
        "/v1/jobs/{job}": {
            "get": _op(
                "What became of a job: status (waiting, delayed, running, done, failed, dead-lettered, "
                "cancelled), attempts, the handler's result once done, the error of its last failure",
                params=[JOB_P, JOB_QUEUE, QGROUP],
                result=JOB_INFO,
            )
        },
        "/v1/jobs/{job}/cancel": {
            "post": _op(
                "Cancel a job that waits, is delayed or waits for a retry: no runner runs it "
                "(409 when it runs or has finished; a cancelled job again is a no-op)",
                params=[JOB_P, JOB_QUEUE, QGROUP],
                body={"type": "object", "additionalProperties": False},
                optional_body=True,
                result=JOB_INFO,
                errors=(400, 404, 409),
            )
        },
        "/v1/jobs/{job}/start": {
            "post": _op(
                "A runner's claim before it runs a job (the http:// store's): the job's row after it; "
                "its state is running when the runner may go on",
                params=[JOB_P, JOB_QUEUE, QGROUP],
                body={
                    "type": "object",
                    "required": ["attempts", "ttl_ms"],
                    "properties": {"attempts": ATTEMPTS, "ttl_ms": TTL_MS},
                    "additionalProperties": False,
                },
                result=JOB_ROW,
            )
        },
        "/v1/jobs/{job}/finish": {
            "post": _op(
                "A runner's record of how a run ended (the http:// store's): done with a result, "
                "failed (a retry follows) or dead-lettered with an error",
                params=[JOB_P, JOB_QUEUE, QGROUP],
                body={
                    "type": "object",
                    "required": ["state", "attempts", "ttl_ms"],
                    "properties": {
                        "state": {"enum": ["done", "failed", "dead-lettered"]},
                        "result": {"description": "the handler's value (done)"},
                        "error": {"type": "string", "description": "the failure (failed, dead-lettered)"},
                        "attempts": ATTEMPTS,
                        "ttl_ms": TTL_MS,
                    },
                    "additionalProperties": False,
                },
                result=JOB_ROW,
            )
        },
        "/subscribe/{topic}": {
            "get": {
                **_op(
                    "WebSocket (ws://): send INIT; each message is pushed as "
                    '{"msg": "<base64 value>", "dackCount": n}; answer ACK, NACK, BACK or DACK <seconds>',
                    ok=101,
                    params=[TOPIC_P, QGROUP],
                    errors=(),
                ),
                "x-websocket": True,
            },
            "post": {
                **_op(
                    "miniqueue's subscribe over HTTP/2: the request body streams commands, the response "
                    'streams answers, one JSON value a line ("INIT", "ACK", "NACK", "BACK", "DACK <s>"; '
                    '{"msg": "<base64 value>", "dackCount": n} or {"error": "..."})',
                    params=[TOPIC_P, QGROUP],
                    errors=(400, 404),
                ),
                "requestBody": {
                    "required": True,
                    "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
                },
            },
        },
        "/{topic}": {
            "delete": _op(
                "Delete a topic with its records and offsets (miniqueue's route; as DELETE /v1/topics/{topic})",
                params=[TOPIC_P],
            ),
        },
        "/v1/changes": {
            "get": _op(
                "Long-poll for any append; answers the change counter once it passes `after`",
                params=[_q("after", {"type": "integer", "minimum": -1, "maximum": MAX_OFFSET}), WAIT],
                errors=(400,),
            )
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "tidelog", "version": "1", "description": "A durable, partitioned message log."},
        "paths": paths,
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }
