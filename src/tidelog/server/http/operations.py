"""The route table the OpenAPI document is generated from: each operation's
path, method, summary, parameters and body and answer types (models.py).

Data only: openapi.py turns it into the document. test_http_v1 checks that
every route the app serves is here and nothing else is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from msgspec import Meta

from ...bounds import MAX_OFFSET, MAX_VISIBILITY_S
from . import models as m


@dataclass(frozen=True)
class Param:
    name: str
    type: Any
    where: str = "query"
    required: bool = False
    description: str = ""


@dataclass(frozen=True)
class Op:
    method: str
    path: str
    summary: str
    ok: int = 200
    params: tuple[Param, ...] = ()
    body: Any = None  # a type, or a tuple of types: one of them
    result: Any = m.AnyObject
    errors: tuple[int, ...] = (400, 404)
    content: str = "application/json"
    body_content: str = "application/json"
    extra_ok: tuple[int, ...] = ()
    optional_body: bool = False
    public: bool = False  # no token needed
    websocket: bool = False


def path(name: str, typ: Any) -> Param:
    return Param(name, typ, "path", required=True)


def limit(name: str, maximum: int) -> Param:
    """A how-many query parameter: more than `maximum` is served as `maximum`, not refused."""
    return Param(
        name,
        Annotated[int, Meta(ge=1)],
        description=f"at most {maximum} are answered; a larger value is held to {maximum}",
    )


TOPIC, GROUP, PARTITION = path("topic", m.Name), path("group", m.Name), path("partition", m.Offset)
WAIT = Param("wait", Annotated[float, Meta(ge=0, le=30)], description="long-poll seconds")
QGROUP = Param("group", m.Name, description="the queue group (default: the topic's name)")
CHUNK = Param("chunk", Annotated[int, Meta(ge=1, le=100_000)], description="records a step")
JOB = path("job", m.JobId)
JOB_QUEUE = Param("queue", m.Name, description="the job runner's queue (default: jobs)")
JOB_PARAMS = (JOB, JOB_QUEUE, QGROUP)
QUEUE_PARAMS = (TOPIC, QGROUP)
SETTLE = (400, 404, 409)

OPERATIONS: tuple[Op, ...] = (
    Op("get", "/healthz", "Liveness", errors=(), public=True),
    Op("get", "/metrics", "Prometheus metrics", errors=(), content="text/plain", result=str),
    # -- the pub/sub routes (miniqueue's) --
    Op(
        "post",
        "/api/topics",
        "Create or ensure a single-partition topic (201 new, 200 existing)",
        ok=201,
        extra_ok=(200,),
        body=m.EnsureTopic,
        errors=(400,),
    ),
    Op(
        "post",
        "/api/topics/{name}/publish",
        "Publish a JSON payload; answers its id (offset)",
        ok=201,
        params=(path("name", m.Name),),
        body=m.PublishPayload,
        errors=(400, 404, 409, 413),
    ),
    Op(
        "get",
        "/api/topics/{name}/pull",
        "Messages after the group's lastAckedId, oldest first",
        params=(path("name", m.Name), Param("group", m.Name, required=True), limit("batch", 1000), WAIT),
        errors=SETTLE,
    ),
    Op(
        "post",
        "/api/topics/{name}/ack",
        "Advance the group (monotonic: a lower id never rewinds)",
        params=(path("name", m.Name),),
        body=m.AckUpTo,
        errors=SETTLE,
    ),
    Op(
        "post",
        "/publish/{topic}",
        "Publish the raw request body as one bytes record",
        ok=201,
        params=(TOPIC, Param("key", str), Param("partition", Annotated[int, Meta(ge=0)])),
        body=m.Binary,
        body_content="application/octet-stream",
        optional_body=True,
        errors=(400, 404, 413),
    ),
    # -- /v1: topics and records --
    Op("get", "/v1/topics", "List topics", errors=()),
    Op(
        "post",
        "/v1/topics",
        "Create a topic (201; 200 when it exists with these settings; 409 when they differ)",
        ok=201,
        extra_ok=(200,),
        body=m.CreateTopic,
        result=m.TopicOut,
        errors=(400, 409),
    ),
    Op(
        "get",
        "/v1/topics/{topic}",
        "Describe a topic: settings, first/last offset, records and bytes per partition, last cleaning",
        params=(TOPIC,),
    ),
    Op(
        "patch",
        "/v1/topics/{topic}",
        "Change a topic's settings (retention, compaction, limits)",
        params=(TOPIC,),
        body=m.ChangeTopic,
    ),
    Op("delete", "/v1/topics/{topic}", "Delete a topic with its records and offsets", params=(TOPIC,)),
    Op(
        "post",
        "/v1/topics/{topic}/clean",
        "Apply the topic's retention and compaction now; answers the cleaning's figures",
        params=(TOPIC, CHUNK),
    ),
    Op(
        "post",
        "/v1/clean",
        "Apply every topic's retention and compaction now",
        params=(CHUNK,),
        errors=(400,),
    ),
    Op(
        "post",
        "/v1/topics/{topic}/partitions",
        "Grow a topic to `partitions` (never shrinks)",
        params=(TOPIC,),
        body=m.GrowTopic,
        result=m.TopicOut,
    ),
    Op(
        "post",
        "/v1/topics/{topic}/records",
        "Produce records; each record's partition, key or the spread picks its partition",
        params=(TOPIC,),
        body=m.Produce,
        result=m.Produced,
        errors=(400, 404, 413),
    ),
    Op(
        "get",
        "/v1/topics/{topic}/partitions/{partition}/records",
        "Read a partition after an offset, without a group",
        params=(TOPIC, PARTITION, Param("after", m.Offset), limit("limit", 10000), WAIT),
        result=m.RecordsOut,
    ),
    Op(
        "get",
        "/v1/topics/{topic}/stream",
        "Server-Sent Events: the topic's records for a group, as they arrive",
        params=(
            TOPIC,
            Param("group", m.Name, required=True),
            Param("partition", m.Offset),
            Param("commit", bool),
        ),
        content="text/event-stream",
    ),
    Op(
        "post",
        "/v1/records",
        "Produce batches to any topics in one transaction (all or none)",
        body=m.ProduceBatches,
        errors=(400, 404, 413),
    ),
    # -- /v1: stream groups --
    Op("get", "/v1/groups", "List groups", errors=()),
    Op("post", "/v1/groups", "Register a stream group", body=m.CreateGroup, errors=(400,)),
    Op(
        "get",
        "/v1/groups/{group}",
        "Describe a group: committed offset, end offset and lag per partition",
        params=(GROUP, Param("topic", m.Name)),
    ),
    Op("get", "/v1/groups/{group}/offsets", "A group's committed offsets", params=(GROUP,), errors=(400,)),
    Op(
        "get",
        "/v1/groups/{group}/topics/{topic}/records",
        "Fetch records after the group's committed offset",
        params=(
            GROUP,
            TOPIC,
            Param("partition", m.Offset),
            limit("max", 10000),
            Param("exclude_producer", m.Name),
            WAIT,
        ),
    ),
    Op(
        "get",
        "/v1/groups/{group}/topics/{topic}/partitions/{partition}",
        "A group's committed offset and lag on one partition",
        params=(GROUP, TOPIC, PARTITION),
    ),
    Op(
        "post",
        "/v1/groups/{group}/commit",
        "Commit an offset (moves forward only); with member_id, a member's fenced commit "
        "(without topic/partition/offset: everything its polls returned)",
        params=(GROUP,),
        body=(m.OffsetBody, m.MemberCommit),
        errors=SETTLE,
    ),
    Op(
        "post",
        "/v1/groups/{group}/join",
        "Join a stream group as a member: answers member_id, generation, assignment and revoke",
        params=(GROUP,),
        body=m.Join,
        result=m.MemberView,
    ),
    Op(
        "post",
        "/v1/groups/{group}/heartbeat",
        "Keep a member alive (every third of its session) and learn its assignment",
        params=(GROUP,),
        body=m.Member,
        result=m.MemberView,
        errors=(400, 409),
    ),
    Op(
        "post",
        "/v1/groups/{group}/poll",
        "Release the partitions in revoke, then records from the member's partitions",
        params=(GROUP,),
        body=m.Poll,
        errors=SETTLE,
    ),
    Op(
        "post",
        "/v1/groups/{group}/release",
        "Give up partitions now (default: those in revoke)",
        params=(GROUP,),
        body=m.Release,
        result=m.MemberView,
        errors=(400, 409),
    ),
    Op(
        "post",
        "/v1/groups/{group}/leave",
        "Leave the group: its partitions go to the others",
        params=(GROUP,),
        body=m.Member,
        errors=(400, 409),
    ),
    Op(
        "post",
        "/v1/groups/{group}/seek",
        "Set the committed offset, backwards too",
        params=(GROUP,),
        body=m.OffsetBody,
    ),
    Op(
        "post",
        "/v1/groups/{group}/reset",
        "Reset a stream group's committed offsets on a topic (earliest, latest, an offset, a time); "
        "409 group_active while it has live members",
        params=(GROUP,),
        body=m.Reset,
        errors=SETTLE,
    ),
    # -- dead letters --
    Op(
        "post",
        "/v1/topics/{topic}/redrive",
        "Move dead letters of this dead-letter topic back to their origin topics (all, or by offset); "
        "dry_run: check and answer the plan (offset 0 each), move nothing. A topic holding no dead "
        "letter: 400",
        params=(TOPIC,),
        body=m.DeadLetterPick,
        optional_body=True,
        result=m.Redriven,
    ),
    Op(
        "post",
        "/v1/topics/{topic}/purge",
        "Remove dead letters of this dead-letter topic without moving them (all, or by offset; "
        "records without an origin stamp stay); dry_run: answer what would go, remove nothing. "
        "A topic holding no dead letter: 400",
        params=(TOPIC,),
        body=m.DeadLetterPick,
        optional_body=True,
        result=m.Purged,
    ),
    # -- /v1: queue groups --
    Op(
        "get",
        "/v1/queues",
        "The queue groups of the log (or of one topic), oldest first on each topic",
        params=(Param("topic", m.Name),),
        result=m.QueueList,
    ),
    Op(
        "post",
        "/v1/queues/{topic}",
        "Open a queue group: stores max_deliveries, dead_letter, start and ordering on first use, "
        "answers the stored ones (another ordering than the stored one: 409 group_conflict)",
        params=QUEUE_PARAMS,
        body=m.OpenQueue,
        optional_body=True,
    ),
    Op(
        "post",
        "/v1/queues/{topic}/messages",
        "Send records; with delay, queue groups do not deliver them before then; with priority "
        "(0-9), before available records of lower priority",
        params=QUEUE_PARAMS,
        body=m.Send,
        errors=(400, 404, 413),
    ),
    Op(
        "post",
        "/v1/queues/{topic}/receive",
        "Lease up to max records (a long-poll with wait: woken by an append or a record falling due)",
        params=(
            *QUEUE_PARAMS,
            limit("max", 10000),
            Param("visibility_timeout", Annotated[float, Meta(gt=0, le=MAX_VISIBILITY_S)]),
            WAIT,
        ),
        result=m.Received,
    ),
    Op(
        "post",
        "/v1/queues/{topic}/ack",
        "Finish a delivery (receipt), or several (receipts: one transaction, each on its own, failures listed)",
        params=QUEUE_PARAMS,
        body=m.Ack,
        errors=SETTLE,
    ),
    Op(
        "post",
        "/v1/queues/{topic}/nack",
        "Available again: at the front (default), back (behind every record waiting now), after "
        "delay seconds, or at due (ms); receipts: several in one transaction (answers released, failed)",
        params=QUEUE_PARAMS,
        body=m.Nack,
        errors=SETTLE,
    ),
    Op(
        "post",
        "/v1/queues/{topic}/extend",
        "Push the lease deadline out: seconds from now, or to deadline (ms since epoch, server "
        "clock); receipts: several in one transaction (answers extended, lease_deadline, failed)",
        params=QUEUE_PARAMS,
        body=m.Extend,
        errors=SETTLE,
    ),
    Op(
        "post",
        "/v1/queues/{topic}/reject",
        "Move a delivery straight to the dead-letter topic",
        params=QUEUE_PARAMS,
        body=m.Reject,
        errors=SETTLE,
    ),
    Op(
        "get",
        "/v1/queues/{topic}/stats",
        "Available, in flight, delayed, dead-lettered and the oldest available record's age",
        params=QUEUE_PARAMS,
    ),
    Op(
        "get",
        "/v1/queues/{topic}/peek",
        "Up to max records the group holds for a receive, leasing nothing: the due ones in the "
        "order a receive takes them, then the delayed ones (a missing group: 404, never made)",
        params=(*QUEUE_PARAMS, limit("max", 1000)),
        result=m.PeekedList,
    ),
    Op(
        "get",
        "/v1/queues/{topic}/in-flight",
        "Up to max records the group has leased now: partition, offset, consumer, delivered, "
        "delivery_count, deadline",
        params=(*QUEUE_PARAMS, limit("max", 10000)),
    ),
    Op(
        "post",
        "/v1/queues/{topic}/purge",
        "Finish every record the group holds now (waiting, delayed, in flight) in one transaction; "
        "the records stay in the topic, later ones are delivered as usual (a missing group: 404)",
        params=QUEUE_PARAMS,
        body=m.Empty,
        optional_body=True,
        result=m.PurgedQueue,
    ),
    # -- jobs --
    Op(
        "get",
        "/v1/jobs/{job}",
        "What became of a job: status (waiting, delayed, running, done, failed, dead-lettered, "
        "cancelled), attempts, the handler's result once done, the error of its last failure",
        params=JOB_PARAMS,
        result=m.JobInfo,
    ),
    Op(
        "post",
        "/v1/jobs/{job}/cancel",
        "Cancel a job that waits, is delayed or waits for a retry: no runner runs it "
        "(409 when it runs or has finished; a cancelled job again is a no-op)",
        params=JOB_PARAMS,
        body=m.Empty,
        optional_body=True,
        result=m.JobInfo,
        errors=SETTLE,
    ),
    Op(
        "post",
        "/v1/jobs/{job}/start",
        "A runner's claim before it runs a job (the http:// store's): the job's row after it; "
        "its state is running when the runner may go on",
        params=JOB_PARAMS,
        body=m.StartJob,
        result=m.JobRow,
    ),
    Op(
        "post",
        "/v1/jobs/{job}/finish",
        "A runner's record of how a run ended (the http:// store's): done with a result, "
        "failed (a retry follows) or dead-lettered with an error",
        params=JOB_PARAMS,
        body=m.FinishJob,
        result=m.JobRow,
    ),
    # -- miniqueue's subscribe --
    Op(
        "get",
        "/subscribe/{topic}",
        "WebSocket (ws://): send INIT; each message is pushed as "
        '{"msg": "<base64 value>", "dackCount": n}; answer ACK, NACK, BACK or DACK <seconds>',
        ok=101,
        params=QUEUE_PARAMS,
        errors=(),
        websocket=True,
    ),
    Op(
        "post",
        "/subscribe/{topic}",
        "miniqueue's subscribe over HTTP/2: the request body streams commands, the response "
        'streams answers, one JSON value a line ("INIT", "ACK", "NACK", "BACK", "DACK <s>"; '
        '{"msg": "<base64 value>", "dackCount": n} or {"error": "..."})',
        params=QUEUE_PARAMS,
        body=str,
        body_content="application/x-ndjson",
    ),
    Op(
        "delete",
        "/{topic}",
        "Delete a topic with its records and offsets (miniqueue's route; as DELETE /v1/topics/{topic})",
        params=(TOPIC,),
    ),
    Op(
        "get",
        "/v1/changes",
        "Long-poll for any append; answers the change counter once it passes `after`",
        params=(Param("after", Annotated[int, Meta(ge=-1, le=MAX_OFFSET)]), WAIT),
        errors=(400,),
    ),
)
