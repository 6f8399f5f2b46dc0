"""The OpenAPI 3.1 description of every route, served at /openapi.json.

Generated: the bodies are the typed models of models.py (msgspec states
their JSON schema), the paths and parameters come from the route table in
operations.py. The test suite fuzzes the server against this document
(schemathesis), and checks that it describes every route the app serves.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec

from .models import Error
from .operations import OPERATIONS, Op

_REF = "#/$defs/"


def _inline(schema: Any, components: dict[str, Any]) -> Any:
    """`schema` with every $ref replaced by the component it names (the
    document states each body where it is used, as a reader of one route
    wants it), and without the models' class names as titles."""
    if isinstance(schema, list):
        return [_inline(s, components) for s in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF):
        return _inline(components[ref[len(_REF) :]], components)
    return {k: _inline(v, components) for k, v in schema.items() if k != "title"}


class _Schemas:
    """The JSON schema of each type the table names, from one msgspec pass."""

    def __init__(self, types: list[Any]):
        found, components = msgspec.json.schema_components(types, ref_template=_REF + "{name}")
        self._by_type = {id(t): _inline(s, components) for t, s in zip(types, found)}

    def __call__(self, typ: Any) -> Any:
        if isinstance(typ, tuple):
            return {"oneOf": [self(t) for t in typ]}
        return self._by_type[id(typ)]


def _types() -> list[Any]:
    types: list[Any] = [Error]
    for op in OPERATIONS:
        types += [op.result, *(p.type for p in op.params)]
        if op.body is not None:
            types += list(op.body) if isinstance(op.body, tuple) else [op.body]
    return types


def _operation(op: Op, schema: _Schemas) -> dict[str, Any]:
    ok = {"description": "ok", "content": {op.content: {"schema": schema(op.result)}}}
    responses: dict[str, Any] = {str(op.ok): ok}
    for status in op.extra_ok:
        responses[str(status)] = ok
    error = {"description": "error", "content": {"application/json": {"schema": schema(Error)}}}
    for status in (*op.errors, 401):
        responses[str(status)] = error
    params = [
        {
            "name": p.name,
            "in": p.where,
            "required": p.required,
            "schema": schema(p.type),
            **({"description": p.description} if p.description else {}),
        }
        for p in op.params
    ]
    out: dict[str, Any] = {"summary": op.summary, "parameters": params, "responses": responses}
    if op.body is not None:
        out["requestBody"] = {
            "required": not op.optional_body,
            "content": {op.body_content: {"schema": schema(op.body)}},
        }
    if op.public:
        out["security"] = []
    if op.websocket:
        out["x-websocket"] = True
    return out


@cache
def _document() -> bytes:
    types = _types()
    schema = _Schemas(types)
    paths: dict[str, Any] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method] = _operation(op, schema)
    return msgspec.json.encode(
        {
            "openapi": "3.1.0",
            "info": {
                "title": "tidelog",
                "version": "1",
                "description": "A durable, partitioned message log.",
            },
            "paths": paths,
            "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
            "security": [{"bearer": []}],
        }
    )


def spec() -> dict[str, Any]:
    """The document, a fresh copy each call (built once)."""
    document: dict[str, Any] = msgspec.json.decode(_document())
    return document
