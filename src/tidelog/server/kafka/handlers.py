"""The Kafka listener's table: each API key's handler.

A handler takes the client's session and the decoded request and returns
the response's values (`wire.build` makes kio's response of the request's
version from them), the response's frame when the handler wrote it
(`wire.respond_numbers`), or None for no response (a Produce with acks=0).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from . import fetch, groups, produce, sasl, topics
from .broker import Session
from .wire import Request

Handler = Callable[[Session, Request], Awaitable[dict[str, Any] | bytes | None]]

HANDLERS: dict[int, Handler] = {
    0: produce.produce,
    1: fetch.fetch,
    2: fetch.list_offsets,
    3: topics.metadata,
    8: groups.offset_commit,
    9: groups.offset_fetch,
    10: groups.find_coordinator,
    11: groups.join_group,
    12: groups.heartbeat,
    13: groups.leave_group,
    14: groups.sync_group,
    15: groups.describe_groups,
    16: groups.list_groups,
    17: sasl.sasl_handshake,
    18: topics.api_versions,
    19: topics.create_topics,
    20: topics.delete_topics,
    21: fetch.delete_records,
    22: produce.init_producer_id,
    32: topics.describe_configs,
    33: topics.alter_configs,
    36: sasl.sasl_authenticate,
    37: topics.create_partitions,
    42: groups.delete_groups,
    44: topics.incremental_alter_configs,
    47: groups.offset_delete,
    60: topics.describe_cluster,
}
