"""What every route answers with: JSON bodies, records on the wire, the request's context."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ...records import Message
from ...wire import row_to_wire

if TYPE_CHECKING:
    from .context import Context


def ctx_of(request: Request) -> Context:
    return request.app.state.ctx


def raw_json(text: str) -> orjson.Fragment:
    return orjson.Fragment(text)


def json_response(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status, media_type="application/json")


def messages_out(msgs: list[Message]) -> list[dict[str, Any]]:
    """Records as the /v1 API answers them."""
    return [row_to_wire(m.topic, m.partition, m, raw_json) for m in msgs]
