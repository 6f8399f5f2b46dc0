"""ApiVersions, Metadata and the topic admin APIs, over the core's topics.

A Kafka topic is a tidelog topic: the same name, partitions and records.
Every partition's leader, replica and in-sync replica is this broker (a
store keeps one copy, made durable by its own commit). Kafka's topic
settings map to tidelog's where tidelog has one (`KAFKA_CONFIGS`); any
other is refused with INVALID_CONFIG rather than silently dropped.
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ...config import TopicConfig
from ...errors import InvalidRequest, TidelogError, UnknownTopic
from ...store.base import TopicInfo
from .broker import CLUSTER_ID, NO_OPERATIONS, Broker, Session
from .codes import Refused, error_code
from .wire import Request, api_keys

# Kafka's topic setting -> (tidelog's, from Kafka's text, to Kafka's text).
# -1 is Kafka's "no bound" for the retention settings, None in tidelog.
KAFKA_CONFIGS: dict[str, str] = {
    "max.message.bytes": "max_message_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "cleanup.policy": "cleanup_policy",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "delete.retention.ms": "delete_retention_ms",
}
_UNBOUNDED = ("retention_ms", "retention_bytes")
_TOPIC_NAMESPACE = uuid.UUID("3e0f6a2c-5d1b-4a8e-9c7f-0b2d4e6f8a1c")


def topic_id(info: TopicInfo) -> uuid.UUID:
    """A stable id for a topic (Metadata v10+): its name and creation time,
    so a topic deleted and made again under its name gets a new one."""
    return uuid.uuid5(_TOPIC_NAMESPACE, f"{info.name}/{info.created}")


def tidelog_name(kafka_name: str) -> str:
    """tidelog's name of a Kafka topic setting; InvalidRequest on one it has not."""
    name = KAFKA_CONFIGS.get(kafka_name)
    if name is None:
        raise InvalidRequest(
            f"topic setting {kafka_name!r} is not supported; known: {', '.join(sorted(KAFKA_CONFIGS))}"
        )
    return name


def tidelog_config(configs: Any) -> dict[str, Any]:
    """Kafka's settings of a CreateTopics or AlterConfigs as tidelog's; InvalidRequest on one it has not."""
    out: dict[str, Any] = {}
    for entry in configs or ():
        name = tidelog_name(entry.name)
        value: Any = entry.value
        if value is None:
            continue
        if name in _UNBOUNDED and value.strip() == "-1":
            value = None
        elif name != "cleanup_policy":
            try:
                value = int(value)
            except ValueError:
                raise InvalidRequest(
                    f"topic setting {entry.name!r} must be an integer, got {value!r}"
                ) from None
        out[name] = value
    TopicConfig.from_dict(out)  # validated now, so a refused topic is never made
    return out


def kafka_config(config: dict[str, Any]) -> list[tuple[str, str]]:
    """A tidelog topic's settings as Kafka's (name, text) pairs."""
    full = TopicConfig.from_dict({k: v for k, v in config.items() if k in TopicConfig.__dataclass_fields__})
    out = []
    for kafka_name, name in sorted(KAFKA_CONFIGS.items()):
        value = getattr(full, name)
        out.append((kafka_name, "-1" if value is None else str(value)))
    return out


async def api_versions(session: Session, request: Request) -> dict[str, Any]:
    return {"error_code": 0, "api_keys": api_keys(), "throttle_time": 0}


def _partitions(broker: Broker, count: int) -> list[dict[str, Any]]:
    node = broker.node_id
    return [
        {
            "error_code": 0,
            "partition_index": p,
            "leader_id": node,
            "leader_epoch": 0,
            "replica_nodes": (node,),
            "isr_nodes": (node,),
            "offline_replicas": (),
        }
        for p in range(count)
    ]


def _topic_entry(broker: Broker, info: TopicInfo) -> dict[str, Any]:
    return {
        "error_code": 0,
        "name": info.name,
        "topic_id": topic_id(info),
        "is_internal": False,
        "partitions": _partitions(broker, info.partitions),
        "topic_authorized_operations": NO_OPERATIONS,
    }


def _look_up(broker: Broker, names: list[str], create: bool) -> list[TopicInfo | TidelogError]:
    """Each named topic; a missing one is made when `create` and the log's
    policy allow (a producer's Metadata, as Kafka's auto.create.topics.enable),
    else its error."""
    log = broker.log
    out: list[TopicInfo | TidelogError] = []
    for name in names:
        try:
            out.append(log.topic(name))
        except UnknownTopic as e:
            if not (create and log.auto_create):
                out.append(e)
                continue
            try:
                out.append(log.create_topic(name, log.default_partitions))
            except TidelogError as made:
                out.append(made)
        except TidelogError as e:
            out.append(e)
    return out


async def metadata(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    body = request.body
    topics = body.topics
    create = bool(getattr(body, "allow_auto_topic_creation", True))
    entries = []
    if topics is None or (request.version == 0 and not topics):  # every topic
        for info in await broker.run(broker.log.topics):
            entries.append(_topic_entry(broker, info))
    else:
        asked = [t.name for t in topics if t.name is not None]
        for name, info in zip(asked, await broker.run(_look_up, broker, asked, create)):
            if isinstance(info, TopicInfo):
                entries.append(_topic_entry(broker, info))
            else:
                entries.append({"error_code": error_code(info), "name": name, "partitions": ()})
        for t in topics:
            if t.name is None:  # asked by topic id, which tidelog does not keep
                entries.append(
                    {"error_code": ErrorCode.unknown_topic_id, "topic_id": t.topic_id, "name": None}
                )
    return {
        "throttle_time": 0,
        "brokers": [broker.broker_entry],
        "cluster_id": CLUSTER_ID,
        "controller_id": broker.node_id,
        "topics": entries,
        "cluster_authorized_operations": NO_OPERATIONS,
    }


# Kafka's controller makes at most this many records a request (a topic's and each
# partition's and setting's): a request past it is a POLICY_VIOLATION.
MAX_RECORDS_PER_REQUEST = 10_000


def _replicas(broker: Broker, assignments: Any) -> None:
    """Each new partition's replicas as a client named them (a manual assignment),
    checked as Kafka's controller checks them; every replica is this broker."""
    for a in assignments:
        if not a.broker_ids:
            raise Refused(
                ErrorCode.invalid_replica_assignment,
                "The manual partition assignment includes an empty replica list.",
            )
        for node in a.broker_ids:
            if a.broker_ids.count(node) > 1:
                raise Refused(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes the broker {node} more than once.",
                )
            if node != broker.node_id:
                raise Refused(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes broker {node}, but no such broker is registered.",
                )


def _partition_count(broker: Broker, topic: Any) -> int:
    """A new topic's partitions: its count, or the broker's default (-1, KIP-464), or
    as many as its manual assignment names; Refused with Kafka's code and words."""
    if topic.assignments:
        for field in ("num_partitions", "replication_factor"):
            if getattr(topic, field) != -1:
                words = "numPartitions" if field == "num_partitions" else "replicationFactor"
                raise Refused(
                    ErrorCode.invalid_request,
                    f"A manual partition assignment was specified, but {words} was not set to -1.",
                )
        indexes = [a.partition_index for a in topic.assignments]
        for index in indexes:
            if indexes.count(index) > 1:
                raise Refused(
                    ErrorCode.invalid_replica_assignment,
                    f"Found multiple manual partition assignments for partition {index}",
                )
        _replicas(broker, topic.assignments)
        if sorted(indexes) != list(range(len(indexes))):
            raise Refused(
                ErrorCode.invalid_replica_assignment,
                "partitions should be a consecutive 0-based integer sequence",
            )
        return len(indexes)
    # Any replication factor above 0 is taken: the store keeps one durable copy.
    if topic.replication_factor != -1 and topic.replication_factor < 1:
        raise Refused(
            ErrorCode.invalid_replication_factor,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    count: int = topic.num_partitions
    if count == -1:
        return broker.log.default_partitions
    if count < 1:
        raise Refused(
            ErrorCode.invalid_partitions, "Number of partitions was set to an invalid non-positive value."
        )
    return count


def _create(broker: Broker, topic: Any, validate_only: bool) -> dict[str, Any]:
    log = broker.log
    name = topic.name
    try:
        if log.store.topic(name) is not None:
            return {
                "name": name,
                "error_code": ErrorCode.topic_already_exists,
                "error_message": f"topic {name!r} already exists",
            }
        count = _partition_count(broker, topic)
        if count > MAX_RECORDS_PER_REQUEST:
            raise Refused(ErrorCode.policy_violation, "Excessively large number of partitions per request.")
        if count + 1 + len(topic.configs or ()) > MAX_RECORDS_PER_REQUEST:
            raise Refused(ErrorCode.policy_violation, "Unable to perform excessively large batch operation.")
        config = tidelog_config(topic.configs)
        if validate_only:
            TopicConfig.from_dict(config)
            info = TopicInfo(name, count, TopicConfig.from_dict(config).to_dict())
        else:
            info = log.create_topic(name, count, **config)
    except Refused as e:
        return {"name": name, "error_code": e.code, "error_message": str(e)}
    except TidelogError as e:
        code = error_code(e)
        if code == ErrorCode.invalid_request:
            code = ErrorCode.invalid_config if "setting" in str(e) else ErrorCode.invalid_partitions
        return {"name": name, "error_code": code, "error_message": str(e)}
    return {
        "name": name,
        "topic_id": topic_id(info),
        "error_code": 0,
        "error_message": None,
        "num_partitions": info.partitions,
        "replication_factor": 1,
        "configs": [
            {"name": k, "value": v, "read_only": False, "config_source": 5, "is_sensitive": False}
            for k, v in kafka_config(info.config)
        ],
    }


async def create_topics(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    body = request.body
    validate_only = bool(getattr(body, "validate_only", False))
    results = [await broker.run(_create, broker, t, validate_only) for t in body.topics]
    return {"throttle_time": 0, "topics": results}


def _delete(broker: Broker, name: str) -> dict[str, Any]:
    try:
        if not broker.log.delete_topic(name):
            return {"name": name, "error_code": ErrorCode.unknown_topic_or_partition, "error_message": None}
    except TidelogError as e:
        return {"name": name, "error_code": error_code(e), "error_message": str(e)}
    return {"name": name, "error_code": 0, "error_message": None}


async def delete_topics(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    return {
        "throttle_time": 0,
        "responses": [await broker.run(_delete, broker, name) for name in request.body.topic_names],
    }


def _grow(broker: Broker, topic: Any, validate_only: bool) -> dict[str, Any]:
    log = broker.log
    try:
        info = log.topic(topic.name)
        if topic.count <= info.partitions:
            return {
                "name": topic.name,
                "error_code": ErrorCode.invalid_partitions,
                "error_message": f"topic {topic.name!r} has {info.partitions} partitions; "
                f"partitions only grow (asked for {topic.count})",
            }
        added = topic.count - info.partitions
        if added > MAX_RECORDS_PER_REQUEST:
            raise Refused(
                ErrorCode.policy_violation, "Excessively large number of additional partitions per request."
            )
        if topic.assignments is not None:
            if len(topic.assignments) != added:
                raise Refused(
                    ErrorCode.invalid_replica_assignment,
                    f"Attempted to add {added} additional partition(s), but only "
                    f"{len(topic.assignments)} assignment(s) were specified.",
                )
            _replicas(broker, topic.assignments)
        if not validate_only:
            log.add_partitions(topic.name, topic.count)
    except Refused as e:
        return {"name": topic.name, "error_code": e.code, "error_message": str(e)}
    except TidelogError as e:
        code = error_code(e)
        return {
            "name": topic.name,
            "error_code": ErrorCode.invalid_partitions if code == ErrorCode.invalid_request else code,
            "error_message": str(e),
        }
    return {"name": topic.name, "error_code": 0, "error_message": None}


async def create_partitions(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    body = request.body
    return {
        "throttle_time": 0,
        "results": [await broker.run(_grow, broker, t, bool(body.validate_only)) for t in body.topics],
    }


TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
DEFAULT_CONFIG, DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG = 5, 1, 4


def _broker_configs(broker: Broker) -> list[tuple[str, str]]:
    """The listener's settings, as Kafka names them (read-only: they are `tidelog serve` flags)."""
    limits = broker.limits
    log = broker.log
    return [
        ("auto.create.topics.enable", str(log.auto_create).lower()),
        ("connections.max.idle.ms", str(int(limits.idle_timeout * 1000) or -1)),
        ("max.connections", str(limits.max_connections)),
        ("num.partitions", str(log.default_partitions)),
        ("sasl.enabled.mechanisms", "PLAIN" if broker.token else ""),
        ("socket.request.max.bytes", str(limits.max_request)),
    ]


_DEFAULT_TEXTS = dict(kafka_config({}))


def _topic_source(name: str, value: str) -> int:
    """A setting at its default is described as Kafka describes one the topic does not set
    (DEFAULT_CONFIG): tools that show a topic's overrides (kafka-configs --describe,
    sarama's ListTopics, franz-go's kadm) list only the settings changed from it."""
    return DEFAULT_CONFIG if _DEFAULT_TEXTS.get(name) == value else DYNAMIC_TOPIC_CONFIG


def _describe(broker: Broker, resource: Any, synonyms: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
        "error_code": 0,
        "error_message": "",  # Kafka's, where nothing went wrong
    }
    try:
        if resource.resource_type == TOPIC_RESOURCE:
            info = broker.log.topic(resource.resource_name)
            configs = [(k, v, _topic_source(k, v)) for k, v in kafka_config(info.config)]
            read_only = False
        elif resource.resource_type == BROKER_RESOURCE:
            configs = [(k, v, STATIC_BROKER_CONFIG) for k, v in _broker_configs(broker)]
            read_only = True
        else:
            return {
                **entry,
                "error_code": ErrorCode.invalid_request,
                "error_message": "only topics and brokers",
            }
    except TidelogError as e:
        return {**entry, "error_code": error_code(e), "error_message": str(e)}
    keys = resource.configuration_keys
    return {
        **entry,
        "configs": [
            {
                "name": k,
                "value": v,
                "read_only": read_only,
                "config_source": source,
                "is_sensitive": False,
                "synonyms": _synonyms(k, v, source) if synonyms else (),
            }
            for k, v, source in configs
            if keys is None or k in keys
        ],
    }


def _synonyms(name: str, value: str, source: int) -> tuple[dict[str, Any], ...]:
    """A topic's override is its own synonym, first in the order Kafka applies them
    (kafka-configs --describe prints it); tidelog has no broker-level topic defaults."""
    if source != DYNAMIC_TOPIC_CONFIG:
        return ()
    return ({"name": name, "value": value, "source": source},)


async def describe_configs(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    body = request.body
    synonyms = bool(getattr(body, "include_synonyms", False))  # v1 and later
    return {
        "throttle_time": 0,
        "results": [await broker.run(_describe, broker, r, synonyms) for r in body.resources],
    }


# Altering topic settings --------------------------------------------------------------

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs' operations
LIST_SETTINGS = frozenset({"cleanup.policy"})  # of KAFKA_CONFIGS, the one whose type is a list
_DEFAULTS = TopicConfig().to_dict()


def _alter(broker: Broker, resource: Any, changes: dict[str, Any], validate_only: bool) -> dict[str, Any]:
    """Set a topic's settings (`changes`, tidelog's names) through the core; the resource's answer."""
    entry = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
    if resource.resource_type == BROKER_RESOURCE:
        return {
            **entry,
            "error_code": ErrorCode.invalid_request,
            "error_message": "a broker's settings are `tidelog serve` flags; they cannot be altered",
        }
    if resource.resource_type != TOPIC_RESOURCE:
        return {
            **entry,
            "error_code": ErrorCode.invalid_request,
            "error_message": "only topics have settings",
        }
    try:
        info = broker.log.topic(resource.resource_name)
        if validate_only:
            TopicConfig.normalize(changes, info.config)
        else:
            broker.log.alter_topic(resource.resource_name, **changes)
    except TidelogError as e:
        code = error_code(e)
        if code == ErrorCode.invalid_request:
            code = ErrorCode.invalid_config
        return {**entry, "error_code": code, "error_message": str(e)}
    return {**entry, "error_code": 0, "error_message": None}


def _config_error(resource: Any, e: Exception) -> dict[str, Any]:
    return {
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
        "error_code": ErrorCode.invalid_config,
        "error_message": str(e),
    }


async def alter_configs(session: Session, request: Request) -> dict[str, Any]:
    """The legacy AlterConfigs: a topic's Kafka settings become the ones named,
    the rest back to their defaults (tidelog's own settings stay as they are)."""
    broker = session.broker
    body = request.body
    out = []
    for resource in body.resources:
        try:
            named = tidelog_config(resource.configs)
        except TidelogError as e:
            out.append(_config_error(resource, e))
            continue
        changes = {name: _DEFAULTS[name] for name in KAFKA_CONFIGS.values()} | named
        out.append(await broker.run(_alter, broker, resource, changes, bool(body.validate_only)))
    return {"throttle_time": 0, "responses": out}


def _incremental(broker: Broker, resource: Any, validate_only: bool) -> dict[str, Any]:
    """A resource's IncrementalAlterConfigs, on a thread: its operations as
    tidelog's settings (APPEND and SUBTRACT on the one list, `cleanup.policy`,
    from its current value), then `_alter`."""
    try:
        changes: dict[str, Any] = {}
        for c in resource.configs:
            op = c.config_operation
            if op == SET:
                changes |= tidelog_config([c])
            elif op == DELETE:
                name = tidelog_name(c.name)
                changes[name] = _DEFAULTS[name]
            elif op in (APPEND, SUBTRACT):
                if c.value is None:
                    raise Refused(ErrorCode.invalid_request, f"Null value not supported for : {c.name}")
                name = tidelog_name(c.name)
                if c.name not in LIST_SETTINGS:
                    word = "APPEND" if op == APPEND else "SUBTRACT"
                    raise InvalidRequest(f"Can't {word} to key {c.name} because its type is not LIST.")
                if name not in changes and resource.resource_type == TOPIC_RESOURCE:
                    changes[name] = broker.log.topic(resource.resource_name).config.get(name, _DEFAULTS[name])
                changes[name] = _list_change(c.name, changes.get(name, _DEFAULTS[name]), op, c.value)
            else:  # Kafka's broker fails on an operation it has no name for
                raise Refused(ErrorCode.unknown_server_error, f"config operation {op} is not one of 0 to 3")
    except Refused as e:
        return {**_config_error(resource, e), "error_code": e.code}
    except UnknownTopic as e:
        return {**_config_error(resource, e), "error_code": ErrorCode.unknown_topic_or_partition}
    except TidelogError as e:
        return _config_error(resource, e)
    return _alter(broker, resource, changes, validate_only)


def _list_change(kafka_name: str, current: str, op: int, value: str) -> str:
    """A list setting after APPEND (the values not yet in it, at its end) or SUBTRACT."""
    items = [p.strip() for p in current.split(",") if p.strip()]
    values = [v.strip() for v in value.split(",") if v.strip()]
    if op == APPEND:
        items += [v for v in values if v not in items]
    else:
        items = [i for i in items if i not in values]
    if not items:
        # Kafka 4 keeps an empty cleanup.policy (nothing deleted, nothing compacted);
        # a tidelog topic deletes, compacts, or both.
        raise InvalidRequest(f"{kafka_name} would name no policy: keep delete, compact or both")
    return ",".join(items)


async def incremental_alter_configs(session: Session, request: Request) -> dict[str, Any]:
    """SET a setting, DELETE it back to its default, APPEND to or SUBTRACT from a list."""
    broker = session.broker
    body = request.body
    validate_only = bool(body.validate_only)
    return {
        "throttle_time": 0,
        "responses": [await broker.run(_incremental, broker, r, validate_only) for r in body.resources],
    }


BROKERS_ENDPOINT = 1  # DescribeCluster's endpoint type: brokers (2 asks for the controllers)


async def describe_cluster(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    asked = getattr(request.body, "endpoint_type", BROKERS_ENDPOINT)
    answer = {
        "throttle_time": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": asked,
        "cluster_id": CLUSTER_ID,
        "controller_id": broker.node_id,
        "brokers": [{"broker_id": broker.node_id, "host": broker.host, "port": broker.port, "rack": None}],
        "cluster_authorized_operations": NO_OPERATIONS,
    }
    if asked != BROKERS_ENDPOINT:  # Kafka's broker answers so; its controllers are a listener apart
        return {
            **answer,
            "error_code": ErrorCode.unsupported_endpoint_type,
            "error_message": "only brokers answer DescribeCluster here",
            "controller_id": -1,
            "brokers": (),
        }
    return answer
