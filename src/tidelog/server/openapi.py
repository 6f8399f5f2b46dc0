"""The OpenAPI 3.1 description of every route, served at /openapi.json.

Written out rather than generated: the server validates by hand (see
bodies.py and wire.py) and this spec states the same rules, which the test
suite checks by fuzzing the server against it (schemathesis).
"""

from __future__ import annotations

from typing import Any

NAME = {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,200}$"}
OFFSET = {"type": "integer", "minimum": 0}
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
RECORD_OUT = {
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


WAIT = _q("wait", {"type": "number", "minimum": 0, "maximum": 30}, description="long-poll seconds")
TOPIC_P, GROUP_P, PARTITION_P = _p("topic", NAME), _p("group", NAME), _p("partition", OFFSET)


def _op(
    summary: str,
    ok: int = 200,
    body: dict[str, Any] | None = None,
    params: list[dict[str, Any]] | None = None,
    result: dict[str, Any] | None = None,
    errors: tuple[int, ...] = (400, 404),
    content: str = "application/json",
    extra_ok: tuple[int, ...] = (),
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
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
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
                errors=(400, 404, 413),
            )
        },
        "/api/topics/{name}/pull": {
            "get": _op(
                "Messages after the group's lastAckedId, oldest first",
                params=[
                    _p("name", NAME),
                    _q("group", NAME, required=True),
                    _q("batch", {"type": "integer", "minimum": 1, "maximum": 1000}),
                    WAIT,
                ],
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
                        "config": {
                            "type": "object",
                            "properties": {"max_message_bytes": {"type": "integer", "minimum": 1}},
                            "additionalProperties": False,
                        },
                    },
                    "additionalProperties": False,
                },
                errors=(400, 409),
            ),
        },
        "/v1/topics/{topic}": {
            "get": _op("Describe a topic: first and last offset per partition", params=[TOPIC_P]),
            "delete": _op("Delete a topic with its records and offsets", params=[TOPIC_P]),
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
                        "timestamp": OFFSET,
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
                    _q("limit", {"type": "integer", "minimum": 1, "maximum": 10000}),
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
                                    "timestamp": OFFSET,
                                    "records": {"type": "array", "items": RECORD_IN, "minItems": 1},
                                },
                                "additionalProperties": False,
                            },
                        }
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
                    _q("max", {"type": "integer", "minimum": 1, "maximum": 10000}),
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
            "post": _op("Commit an offset (moves forward only)", params=[GROUP_P], body=OFFSET_BODY)
        },
        "/v1/groups/{group}/seek": {
            "post": _op("Set the committed offset, backwards too", params=[GROUP_P], body=OFFSET_BODY)
        },
        "/v1/changes": {
            "get": _op(
                "Long-poll for any append; answers the change counter once it passes `after`",
                params=[_q("after", {"type": "integer", "minimum": -1}), WAIT],
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
