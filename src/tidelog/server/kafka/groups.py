"""Kafka consumer groups: FindCoordinator, the classic protocol's Join, Sync,
Heartbeat and Leave, OffsetCommit, OffsetFetch and OffsetDelete, ListGroups,
DescribeGroups and DeleteGroups.

A Kafka consumer group is a tidelog stream group: the same name, and its
commits are the group's committed offsets (`Log.group_offsets`, its lag in
the console and /metrics), the same number on both sides (see fetch.py).
The protocol's state and policy are the core's (`tidelog.classic_groups`);
here each request becomes one of its steps, run in the store's transaction,
and a JoinGroup or SyncGroup that must wait for the other members looks
again every POLL_S (sooner when a request of this process changed the group).
Every broker is the coordinator of every group.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ... import classic_groups as cg
from ...config import check_name
from ...errors import InvalidName, TidelogError
from ...store.base import ClassicGroupStore, ClassicGroupTx
from .broker import NO_OPERATIONS, Broker, Session
from .codes import error_code
from .wire import Request

POLL_S = 0.1  # how often a waiting JoinGroup or SyncGroup looks at the group again
MIN_SESSION_MS = 6000  # Kafka's group.min.session.timeout.ms
MAX_SESSION_MS = 30 * 60_000  # Kafka's group.max.session.timeout.ms
# How long a rebalance waits for the members to join again, at most: Kafka takes
# any rebalance timeout (Kafka Streams asks for 2^31 - 1 ms), and so does the
# listener, but it holds a JoinGroup waiting no longer than this.
MAX_REBALANCE_MS = MAX_SESSION_MS
MAX_METADATA = 4096  # Kafka's offset.metadata.max.bytes, counted as Java counts a string's length
GROUP_KEY, TRANSACTION_KEY = 0, 1

_STATES = {
    cg.EMPTY: "Empty",
    cg.PREPARING: "PreparingRebalance",
    cg.COMPLETING: "CompletingRebalance",
    cg.STABLE: "Stable",
}
_ERRORS = {
    cg.UNKNOWN_MEMBER_ID: ErrorCode.unknown_member_id,
    cg.ILLEGAL_GENERATION: ErrorCode.illegal_generation,
    cg.REBALANCE_IN_PROGRESS: ErrorCode.rebalance_in_progress,
    cg.INCONSISTENT_GROUP_PROTOCOL: ErrorCode.inconsistent_group_protocol,
    cg.MEMBER_ID_REQUIRED: ErrorCode.member_id_required,
    cg.GROUP_ID_NOT_FOUND: ErrorCode.group_id_not_found,
    cg.NON_EMPTY_GROUP: ErrorCode.non_empty_group,
    cg.GROUP_SUBSCRIBED_TO_TOPIC: ErrorCode.group_subscribed_to_topic,
    None: ErrorCode.none,
}


def _store(broker: Broker) -> ClassicGroupStore:
    store = broker.log.store
    if not isinstance(store, ClassicGroupStore):
        raise TidelogError(f"the {type(store).__name__} store cannot keep Kafka groups")
    return store


async def _step(broker: Broker, group: str, step: Callable[[ClassicGroupTx], Any]) -> Any:
    return await broker.run(cg.run, _store(broker), group, broker.log.clock(), step)


async def _until_ready(
    broker: Broker,
    group: str,
    outcome: Any,
    poll: Callable[[int], Callable[[ClassicGroupTx], Any]],
    wait_s: float,
) -> Any:
    """Look again (`poll(now)`) while `outcome` is PENDING, for `wait_s` at most."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while outcome is cg.PENDING:
        left = deadline - loop.time()
        if left <= 0:
            return outcome
        event = broker.change_event(group)
        try:
            await asyncio.wait_for(event.wait(), min(POLL_S, left))
        except TimeoutError:
            pass
        outcome = await _step(broker, group, poll(broker.log.clock()))
    return outcome


def _java_length(text: str) -> int:
    """A string's length as Java counts it (UTF-16 code units), which Kafka bounds a
    commit's metadata by: 4096 of "é" pass (8192 bytes of UTF-8), 2049 emoji do not."""
    return len(text.encode("utf-16-le")) // 2


def _group_error(group: str) -> ErrorCode | None:
    try:
        check_name("group", group)
    except InvalidName:
        return ErrorCode.invalid_group_id
    return None


async def find_coordinator(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    body = request.body
    key_type = getattr(body, "key_type", GROUP_KEY)

    def coordinator(key: str) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "key": key,
            "node_id": broker.node_id,
            "host": broker.host,
            "port": broker.port,
        }
        if key_type == TRANSACTION_KEY:
            return {
                **entry,
                "node_id": -1,
                "host": "",
                "port": -1,
                # Fatal to a transactional producer (retried, INVALID_REQUEST only timed out).
                "error_code": ErrorCode.transactional_id_authorization_failed,
                "error_message": "transactions are not supported by tidelog",
            }
        bad = _group_error(key)
        if bad is not None:
            return {**entry, "node_id": -1, "host": "", "port": -1, "error_code": bad, "error_message": None}
        return {**entry, "error_code": 0, "error_message": ""}

    if request.version >= 4:
        return {"throttle_time": 0, "coordinators": [coordinator(k) for k in body.coordinator_keys]}
    found = coordinator(body.key)
    if found["error_code"] == 0:
        found["error_message"] = "NONE"  # Kafka's words for no error, v1 to v3
    return {"throttle_time": 0, **found}


def _member_id(client_id: str | None) -> str:
    prefix = "".join(c if c.isalnum() or c in "._-" else "-" for c in (client_id or "consumer"))[:100]
    return f"{prefix}-{secrets.token_hex(8)}"


async def join_group(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    body = request.body
    group = body.group_id
    session_ms = int(body.session_timeout.total_seconds() * 1000)
    rebalance = getattr(body, "rebalance_timeout", None)
    rebalance_ms = int(rebalance.total_seconds() * 1000) if rebalance is not None else session_ms

    def refused(code: ErrorCode, member: str = "") -> dict[str, Any]:
        return {
            "throttle_time": 0,
            "error_code": code,
            "generation_id": -1,
            "leader": "",
            "member_id": member,
        }

    bad = _group_error(group)
    if bad is not None:
        return refused(bad, body.member_id)
    if not MIN_SESSION_MS <= session_ms <= MAX_SESSION_MS:
        return refused(ErrorCode.invalid_session_timeout, body.member_id)
    rebalance_ms = max(1, min(rebalance_ms, MAX_REBALANCE_MS))
    join = cg.JoinRequest(
        body.member_id,
        getattr(body, "group_instance_id", None),
        request.client_id or "",
        session.peer.rsplit(":", 1)[0],
        session_ms,
        rebalance_ms,
        body.protocol_type,
        [(p.name, p.metadata) for p in body.protocols],
        request.version >= 4,
    )
    new_id = _member_id(request.client_id)
    outcome = await _step(broker, group, cg.join(join, broker.log.clock(), lambda: new_id))
    broker.changed(group)
    member = body.member_id or new_id
    outcome = await _until_ready(
        broker, group, outcome, lambda now: cg.join_poll(member, now), rebalance_ms / 1000 + 5
    )
    if outcome is cg.PENDING:
        return refused(ErrorCode.rebalance_in_progress, member)
    return {
        "throttle_time": 0,
        "error_code": _ERRORS[outcome.error],
        "generation_id": outcome.generation,
        "protocol_type": outcome.protocol_type or None,
        "protocol_name": (outcome.protocol or None) if request.version >= 7 else outcome.protocol,
        "leader": outcome.leader,
        "skip_assignment": False,
        "member_id": outcome.member,
        "members": [
            {"member_id": m, "group_instance_id": i, "metadata": meta} for m, i, meta in outcome.members
        ],
    }


async def sync_group(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    body = request.body
    group = body.group_id
    bad = _group_error(group)
    if bad is not None:
        return {"throttle_time": 0, "error_code": bad, "assignment": b""}
    assignments = {a.member_id: a.assignment for a in body.assignments}
    now = broker.log.clock()
    step = cg.sync(
        body.member_id,
        body.generation_id,
        assignments,
        now,
        getattr(body, "protocol_type", None),
        getattr(body, "protocol_name", None),
    )
    outcome = await _step(broker, group, step)
    broker.changed(group)
    outcome = await _until_ready(
        broker, group, outcome, lambda now: cg.sync_poll(body.member_id, body.generation_id, now), 60.0
    )
    if outcome is cg.PENDING:
        return {"throttle_time": 0, "error_code": ErrorCode.rebalance_in_progress, "assignment": b""}
    return {
        "throttle_time": 0,
        "error_code": _ERRORS[outcome.error],
        "protocol_type": outcome.protocol_type or None,
        "protocol_name": outcome.protocol or None,
        "assignment": outcome.assignment,
    }


async def heartbeat(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    body = request.body
    bad = _group_error(body.group_id)
    if bad is not None:
        return {"throttle_time": 0, "error_code": bad}
    error = await _step(
        broker, body.group_id, cg.heartbeat(body.member_id, body.generation_id, broker.log.clock())
    )
    return {"throttle_time": 0, "error_code": _ERRORS[error]}


async def leave_group(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    body = request.body
    bad = _group_error(body.group_id)
    if bad is not None:
        return {"throttle_time": 0, "error_code": bad, "members": ()}
    if request.version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in body.members]
    else:
        leaving = [(body.member_id, None)]
    errors = await _step(broker, body.group_id, cg.leave([m for m, _ in leaving], broker.log.clock()))
    broker.changed(body.group_id)
    if request.version < 3:
        return {"throttle_time": 0, "error_code": _ERRORS[errors[0]]}
    return {
        "throttle_time": 0,
        "error_code": 0,
        "members": [
            {"member_id": m, "group_instance_id": i, "error_code": _ERRORS[e]}
            for (m, i), e in zip(leaving, errors)
        ],
    }


async def offset_commit(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    body = request.body
    group = body.group_id
    asked = [(t.name, p) for t in body.topics for p in t.partitions]
    codes: list[ErrorCode] = []
    bad = _group_error(group)
    if bad is not None:
        codes = [bad] * len(asked)
    else:
        offsets = []
        for topic, p in asked:
            # Any offset goes, negative ones too: Kafka keeps -1 and -2 (kafkajs's
            # resetOffsets commits them for "latest" and "earliest") and hands them back.
            metadata = p.committed_metadata or ""
            if _java_length(metadata) > MAX_METADATA:
                codes.append(ErrorCode.offset_metadata_too_large)
            else:
                codes.append(ErrorCode.none)
                offsets.append((topic, p.partition_index, p.committed_offset, metadata))
        step = cg.commit(body.member_id, body.generation_id_or_member_epoch, offsets, broker.log.clock())
        outcome = await _step(broker, group, step)
        results = iter(outcome.partitions)
        for i, code in enumerate(codes):
            if code == ErrorCode.none:
                if outcome.error is not None:
                    codes[i] = _ERRORS[outcome.error]
                else:
                    failed = next(results)
                    codes[i] = ErrorCode.none if failed is None else error_code(failed)
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), code in zip(asked, codes):
        topics.setdefault(topic, []).append({"partition_index": p.partition_index, "error_code": code})
    return {"throttle_time": 0, "topics": [{"name": t, "partitions": parts} for t, parts in topics.items()]}


def _fetch_offsets(
    broker: Broker, group: str, asked: list[tuple[str, list[int]]] | None
) -> list[dict[str, Any]]:
    committed: dict[str, dict[int, cg.KafkaCommitted]] = {}
    for c in cg.kafka_committed(_store(broker).classic_commits(group)):
        committed.setdefault(c.topic, {})[c.partition] = c
    if asked is None:
        asked = [(t, sorted(parts)) for t, parts in sorted(committed.items())]
    nothing = cg.KafkaCommitted("", 0, -1, "")  # -1: the client's reset policy applies
    out = []
    for topic, partitions in asked:
        parts = []
        for p in partitions:
            c = committed.get(topic, {}).get(p, nothing)
            parts.append(
                {
                    "partition_index": p,
                    "committed_offset": c.offset,
                    "committed_leader_epoch": -1,
                    "metadata": c.metadata,
                    "error_code": 0,
                }
            )
        out.append({"name": topic, "partitions": parts})
    return out


async def offset_fetch(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    body = request.body
    bad = _group_error(body.group_id)
    if bad is not None:
        return {"throttle_time": 0, "topics": (), "error_code": bad}
    asked = None if body.topics is None else [(t.name, list(t.partition_indexes)) for t in body.topics]
    try:
        topics = await broker.run(_fetch_offsets, broker, body.group_id, asked)
    except TidelogError as e:
        return {"throttle_time": 0, "topics": (), "error_code": error_code(e)}
    return {"throttle_time": 0, "topics": topics, "error_code": 0}


# Java's String.trim(): what Kafka strips from a state filter before it compares.
_TRIMMED = "".join(map(chr, range(0x21)))
GROUP_TYPE = "classic"  # ListGroups v5's group_type: the classic protocol is the one tidelog serves


async def list_groups(session: Session, request: Request) -> dict[str, Any]:
    """ListGroups: every group, or those in the states and of the types asked for
    (v4, v5); Kafka 4 compares both filters without regard to case (" empty "
    finds an Empty group), and a type it does not know finds nothing."""
    broker = session.broker
    body = request.body
    states = {s.lower().strip(_TRIMMED) for s in getattr(body, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(body, "types_filter", ()) or ()}
    if types and GROUP_TYPE not in types:
        return {"throttle_time": 0, "error_code": 0, "groups": []}
    groups = await broker.run(_store(broker).classic_list)
    return {
        "throttle_time": 0,
        "error_code": 0,
        "groups": [
            {
                "group_id": name,
                "protocol_type": state.protocol_type,
                "group_state": _STATES[state.phase],
                "group_type": GROUP_TYPE,
            }
            for name, state in groups
            if not states or _STATES[state.phase].lower() in states
        ],
    }


async def describe_groups(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    out = []
    for group in request.body.groups:
        bad = _group_error(group)
        if bad is not None:
            out.append({"error_code": bad, "group_id": group, "group_state": "Dead"})
            continue
        found = await broker.run(_store(broker).classic_describe, group)
        if found is None:
            out.append(
                {
                    "error_code": 0,
                    "group_id": group,
                    "group_state": "Dead",
                    "authorized_operations": NO_OPERATIONS,
                }
            )
            continue
        state, members = found
        # As Kafka describes a group: the protocol and each member's metadata
        # for it once the group is stable, its address as Java writes one.
        stable = state.phase == cg.STABLE
        out.append(
            {
                "error_code": 0,
                "group_id": group,
                "group_state": _STATES[state.phase],
                "protocol_type": state.protocol_type,
                "protocol_data": state.protocol if stable else "",
                "members": [
                    {
                        "member_id": m.member,
                        "group_instance_id": m.instance,
                        "client_id": m.client_id,
                        "client_host": f"/{m.host}",
                        "member_metadata": (
                            dict(cg.decode_protocols(m.protocols)).get(state.protocol, b"") if stable else b""
                        ),
                        "member_assignment": m.assignment,
                    }
                    for m in members
                    if m.generation == state.generation or state.phase == cg.PREPARING
                ],
                "authorized_operations": NO_OPERATIONS,
            }
        )
    return {"throttle_time": 0, "groups": out}


async def delete_groups(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    results = []
    for group in request.body.groups_names:
        code = _group_error(group)
        if code is None:
            try:
                code = _ERRORS[await _step(broker, group, cg.delete(broker.log.clock()))]
            except TidelogError as e:
                code = error_code(e)
            broker.changed(group)
        results.append({"group_id": group, "error_code": code})
    return {"throttle_time": 0, "results": results}


async def offset_delete(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    body = request.body
    asked = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    refused = _group_error(body.group_id)
    if refused is None:
        error, outcomes = await _step(broker, body.group_id, cg.delete_offsets(asked, broker.log.clock()))
        refused = None if error is None else _ERRORS[error]
    if refused is not None:
        return {"throttle_time": 0, "error_code": refused, "topics": ()}
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), outcome in zip(asked, outcomes):
        code = error_code(outcome) if isinstance(outcome, TidelogError) else _ERRORS[outcome]
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return {
        "throttle_time": 0,
        "error_code": 0,
        "topics": [{"name": t, "partitions": parts} for t, parts in topics.items()],
    }
