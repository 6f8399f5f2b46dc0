"""The http:// store: the Store protocol over a tidelog server's /v1 API.

`tidelog.open("http://host:7070")` puts the ordinary core (Log, Producer,
Consumer, queue groups, group members, retention) on top of this store, so
code written against a file runs unchanged against a server. The core still
validates and encodes here; the server checks again and commits. Records
round-trip byte for byte (see `tidelog.wire`) and server errors come back as
the same `tidelog.errors` classes, by their `code`.

Where the core hands a store policy, the server's core applies its own: a
`LeasePolicy` travels as its data (the lease length; the group's ordering
was stored when the group was opened), a `rebalance` and the client's clock
(`now`) not at all. The server owns leases, receipts, assignment and
cleaning, whoever its clients are.

A token travels in the URL (`http://:TOKEN@host:7070`) or in the
TIDELOG_TOKEN environment variable, read by `tidelog.open`.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from .. import errors
from ..errors import ConfigurationError, LeaseLost, StoreError, TidelogError, TopicConflict, UnknownTopic
from ..records import decode_headers, decode_meta
from ..wire import stored_to_wire, wire_to_row
from .base import (
    ACK,
    EXTEND,
    RELEASE,
    RETURN,
    AppendBatch,
    CleansRemotely,
    GroupMember,
    GroupOffset,
    GroupSync,
    JobsRemotely,
    Leased,
    LeasePolicy,
    PartitionInfo,
    Pending,
    QueueStats,
    QueueUpkeep,
    Rebalance,
    RedrivesRemotely,
    Replayed,
    Row,
    Settle,
    Store,
    TopicInfo,
    Waiting,
    Watchable,
)

READ_PAGE = 10_000  # the server's largest read
WATCH_WAIT_S = 5.0


def _codes() -> dict[str, type[TidelogError]]:
    out: dict[str, type[TidelogError]] = {}
    todo: list[type[TidelogError]] = [TidelogError]
    while todo:
        cls = todo.pop()
        out.setdefault(cls.code, cls)
        todo.extend(cls.__subclasses__())
    return out


_BY_STATUS = {
    400: errors.InvalidRequest,
    401: ConfigurationError,
    404: errors.NotFound,
    405: errors.InvalidRequest,
    409: errors.Conflict,
    413: errors.MessageTooLarge,
}


def _seg(name: str) -> str:
    # Names are validated by the core ([A-Za-z0-9._-]); only "." and ".."
    # need escaping, so that no client or proxy folds them as path steps.
    return "%2E" * len(name) if name in (".", "..") else quote(name, safe="")


def split_token(url: str) -> tuple[str, str | None]:
    """(url without credentials, token from its userinfo or None)."""
    parts = urlsplit(url)
    token = parts.password or parts.username or None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", "")), token


@functools.cache
def _tls_context() -> Any:
    import httpx

    return httpx.create_ssl_context()  # honours SSL_CERT_FILE and SSL_CERT_DIR


class HTTPStore(Store, QueueUpkeep, CleansRemotely, RedrivesRemotely, JobsRemotely, Watchable):
    """Store protocol over HTTP. Thread-safe: one connection pool, reused."""

    dialect = "http"

    def __init__(self, url: str, token: str | None = None, timeout: float = 60.0):
        try:
            import httpx
        except ImportError:
            raise ConfigurationError("the http:// store needs httpx: pip install 'tidelog[client]'") from None
        self._httpx = httpx
        self.url, url_token = split_token(url)
        token = url_token or token
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = timeout
        self._http = self._client(timeout)
        self._codes = _codes()
        self._closed = False
        self._watch_client: Any = None

    # plumbing ------------------------------------------------------------------------

    def _client(self, timeout: float) -> Any:
        # Loading the CA bundle costs ~30 ms: once a process, and never for http://.
        verify = _tls_context() if self.url.startswith("https:") else False
        return self._httpx.Client(base_url=self.url, headers=self._headers, timeout=timeout, verify=verify)

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        if self._closed:
            raise errors.Closed("the http:// store is closed")
        try:
            try:
                response = self._http.request(method, path, **kw)
            except self._httpx.RemoteProtocolError:
                # The server closed a kept-alive connection as this request
                # went out on it, before answering: a read is safe to send
                # again (once, on a new connection); a write may have landed.
                if method != "GET":
                    raise
                response = self._http.request(method, path, **kw)
        except self._httpx.TransportError as e:
            raise StoreError(f"cannot reach the tidelog server at {self.url}: {e}") from None
        if response.status_code >= 400:
            raise self._error(response)
        return response.json()

    def _error(self, response: Any) -> TidelogError:
        try:
            body = response.json()["error"]
            code, message = body["code"], body["message"]
        except Exception:
            code, message, body = "", f"HTTP {response.status_code}: {response.text[:200]}", {}
        cls = self._codes.get(code) or _BY_STATUS.get(response.status_code, StoreError)
        if cls is errors.OffsetOutOfRange:
            return errors.OffsetOutOfRange(message, body.get("first"), body.get("last"))
        if response.status_code == 401:
            return ConfigurationError(f"the tidelog server at {self.url} refused the request: {message}")
        return cls(message)

    # topics --------------------------------------------------------------------------

    @staticmethod
    def _info(d: dict[str, Any]) -> TopicInfo:
        return TopicInfo(d["name"], d["partitions"], d["config"], d["created"])

    def create_topic(self, name: str, partitions: int, config: dict[str, Any]) -> tuple[TopicInfo, bool]:
        body = {"name": name, "partitions": partitions, "config": config}
        try:
            response = self._http.post("/v1/topics", json=body) if not self._closed else None
        except self._httpx.TransportError as e:
            raise StoreError(f"cannot reach the tidelog server at {self.url}: {e}") from None
        if response is None:
            raise errors.Closed("the http:// store is closed")
        if response.status_code in (200, 201):
            return self._info(response.json()), response.status_code == 201
        err = self._error(response)
        if isinstance(err, TopicConflict):
            # A store returns the existing topic; only other partitions conflict here.
            existing = self.topic(name)
            if existing is not None and existing.partitions == partitions:
                return existing, False
        raise err

    def topic(self, name: str) -> TopicInfo | None:
        try:
            return self._info(self._call("GET", f"/v1/topics/{_seg(name)}"))
        except UnknownTopic:
            return None

    def topics(self) -> list[TopicInfo]:
        return [self._info(t) for t in self._call("GET", "/v1/topics")["topics"]]

    def add_partitions(self, name: str, partitions: int) -> TopicInfo:
        return self._info(
            self._call("POST", f"/v1/topics/{_seg(name)}/partitions", json={"partitions": partitions})
        )

    def delete_topic(self, name: str) -> bool:
        try:
            self._call("DELETE", f"/v1/topics/{_seg(name)}")
            return True
        except UnknownTopic:
            return False

    def partitions(self, topic: str) -> list[PartitionInfo]:
        d = self._call("GET", f"/v1/topics/{_seg(topic)}")
        return [
            PartitionInfo(p["partition"], p["first_offset"], p["last_offset"], p["records"], p["bytes"])
            for p in d["offsets"]
        ]

    # retention -----------------------------------------------------------------------
    #
    # Cleaning runs on the server, with its own core and store (`Log.clean`
    # hands it over through `clean` below): scanning a log over HTTP to decide
    # what to remove would move every record across the network, and removal
    # by offset is not something the API offers to clients.

    def set_topic_config(self, name: str, config: dict[str, Any]) -> None:
        self._call("PATCH", f"/v1/topics/{_seg(name)}", json={"config": config})

    def clean(self, topic: str | None, chunk: int) -> list[dict[str, Any]]:
        path = "/v1/clean" if topic is None else f"/v1/topics/{_seg(topic)}/clean"
        reports: list[dict[str, Any]] = self._call("POST", path, params={"chunk": chunk})["reports"]
        return reports

    @staticmethod
    def _dead_letter_body(offsets: list[int] | None, origin: str | None, dry_run: bool) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if offsets is not None:
            body["offsets"] = offsets
        if origin is not None:
            body["origin"] = origin
        if dry_run:
            body["dry_run"] = True
        return body

    def redrive(
        self, dead_letter: str, offsets: list[int] | None, origin: str | None, dry_run: bool = False
    ) -> tuple[list[tuple[int, str, int, int]], list[int]]:
        body = self._dead_letter_body(offsets, origin, dry_run)
        got = self._call("POST", f"/v1/topics/{_seg(dead_letter)}/redrive", json=body)
        moved = [(m["dead_letter_offset"], m["topic"], m["partition"], m["offset"]) for m in got["moved"]]
        return moved, got["skipped"]

    def purge_dead_letters(
        self, dead_letter: str, offsets: list[int] | None, origin: str | None, dry_run: bool = False
    ) -> tuple[list[int], list[int]]:
        body = self._dead_letter_body(offsets, origin, dry_run)
        got = self._call("POST", f"/v1/topics/{_seg(dead_letter)}/purge", json=body)
        return got["removed"], got["skipped"]

    def last_clean(self, topic: str) -> dict[str, Any] | None:
        last: dict[str, Any] | None = self._call("GET", f"/v1/topics/{_seg(topic)}")["last_clean"]
        return last

    def partition_bytes(self, topic: str, partition: int) -> int:
        for p in self.partitions(topic):
            if p.partition == partition:
                return p.bytes
        raise errors.UnknownPartition(f"topic {topic!r} has no partition {partition}")

    # records -------------------------------------------------------------------------

    def append_one(
        self, topic: str, partition: int, timestamp: int, value: bytes | str, meta: bytes | None = None
    ) -> int:
        return self.append_many([AppendBatch(topic, partition, timestamp, [value], [meta])])[0]

    def append_many(
        self, batches: Sequence[AppendBatch], txn: str | None = None, txn_since: int = 0
    ) -> list[int] | Replayed:
        """One request, one transaction on the server: all batches or none.

        With a `txn` id the server answers a replay with the earlier write's
        batches; when they differ from these, that is what we return.
        """
        wire: list[dict[str, Any]] = []
        owner: list[int] = []  # wire batch -> index of the AppendBatch it came from
        for i, batch in enumerate(batches):
            metas = batch.metas or [None] * len(batch.values)
            # A wire batch has one producer; split where the producer changes.
            run: dict[str, Any] | None = None
            for value, meta in zip(batch.values, metas):
                record, producer = stored_to_wire(value, meta)
                if run is None or run.get("producer") != producer:
                    run = {"topic": batch.topic, "partition": batch.partition, "timestamp": batch.timestamp}
                    if producer is not None:
                        run["producer"] = producer
                    run["records"] = []
                    wire.append(run)
                    owner.append(i)
                run["records"].append(record)
        body: dict[str, Any] = {"batches": wire}
        if txn is not None:
            body["txn"] = txn
            if txn_since:
                body["txn_since"] = txn_since
        sent = self._call("POST", "/v1/records", json=body)["batches"]
        if txn is not None:
            asked = [(w["topic"], w["partition"], len(w["records"]), w["timestamp"]) for w in wire]
            got = [(s["topic"], s["partition"], s["count"], s["timestamp"]) for s in sent]
            if got != asked:  # a replay: nothing was written now
                return Replayed(
                    sent[0]["timestamp"] if sent else 0,
                    [(s["topic"], s["partition"], s["first_offset"], s["count"]) for s in sent],
                )
        firsts: list[int | None] = [None] * len(batches)
        for i, s in zip(owner, sent):
            if firsts[i] is None:
                firsts[i] = s["first_offset"]
        return firsts  # type: ignore[return-value]

    def read(self, topic: str, partition: int, after: int, limit: int) -> list[Row]:
        path = f"/v1/topics/{_seg(topic)}/partitions/{partition}/records"
        rows: list[Row] = []
        while len(rows) < limit:
            page = min(READ_PAGE, limit - len(rows))
            got = self._call("GET", path, params={"after": after, "limit": page})["records"]
            rows += map(wire_to_row, got)
            if len(got) < page:
                break
            after = rows[-1][0]
        return rows

    # stream group offsets --------------------------------------------------------------

    def _offset(self, action: str, group: str, topic: str, partition: int, offset: int) -> None:
        body = {"topic": topic, "partition": partition, "offset": offset}
        self._call("POST", f"/v1/groups/{_seg(group)}/{action}", json=body)

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        self._offset("commit", group, topic, partition, offset)

    def seek(self, group: str, topic: str, partition: int, offset: int) -> None:
        self._offset("seek", group, topic, partition, offset)

    def committed(self, group: str, topic: str, partition: int) -> int:
        path = f"/v1/groups/{_seg(group)}/topics/{_seg(topic)}/partitions/{partition}"
        return int(self._call("GET", path)["committed"])

    def ensure_group(self, group: str, mode: str) -> None:
        self._call("POST", "/v1/groups", json={"name": group, "mode": mode})

    def group_offsets(self, group: str) -> list[GroupOffset]:
        d = self._call("GET", f"/v1/groups/{_seg(group)}/offsets")
        return [GroupOffset(group, o["topic"], o["partition"], o["committed"]) for o in d["offsets"]]

    def groups(self) -> list[str]:
        return list(self._call("GET", "/v1/groups")["groups"])

    # stream group membership -----------------------------------------------------------
    #
    # The server holds a member handle per member id and applies its core's
    # assignor; `rebalance` and the client's clock (`now`) are not sent.

    def _member(self, action: str, group: str, body: dict[str, Any]) -> Any:
        return self._call("POST", f"/v1/groups/{_seg(group)}/{action}", json=body)

    @staticmethod
    def _sync(d: dict[str, Any]) -> GroupSync:
        return GroupSync(
            d["generation"], [tuple(tp) for tp in d["assignment"]], [tuple(tp) for tp in d["revoke"]]
        )

    def group_join(
        self,
        group: str,
        member: str,
        topics: list[str],
        session_ms: int,
        assignor: str,
        now: int,
        rebalance: Rebalance,
    ) -> GroupSync:
        body = {
            "member_id": member,
            "topics": topics,
            "session_timeout": session_ms / 1000,
            "assignor": assignor,
        }
        return self._sync(self._member("join", group, body))

    def group_heartbeat(self, group: str, member: str, now: int, rebalance: Rebalance) -> GroupSync:
        return self._sync(self._member("heartbeat", group, {"member_id": member}))

    def group_release(
        self, group: str, member: str, partitions: list[tuple[str, int]], now: int, rebalance: Rebalance
    ) -> GroupSync:
        body = {"member_id": member, "partitions": [list(tp) for tp in partitions]}
        return self._sync(self._member("release", group, body))

    def group_leave(self, group: str, member: str, now: int, rebalance: Rebalance) -> None:
        try:
            self._member("leave", group, {"member_id": member})
        except errors.StaleGeneration:
            pass  # gone already: expired, or the server restarted

    def group_commit(
        self, group: str, member: str, generation: int, topic: str, partition: int, offset: int
    ) -> None:
        body = {
            "member_id": member,
            "generation": generation,
            "topic": topic,
            "partition": partition,
            "offset": offset,
        }
        self._member("commit", group, body)

    def group_members(self, group: str) -> list[GroupMember]:
        try:
            d = self._call("GET", f"/v1/groups/{_seg(group)}")
        except errors.UnknownGroup:
            return []
        return [
            GroupMember(
                m["member_id"],
                m["topics"],
                m["session_ms"],
                m["heartbeat"],
                [tuple(tp) for tp in m["partitions"]],
                m["generation"],
            )
            for m in d["members"]
        ]

    # queue groups --------------------------------------------------------------------
    #
    # The server's core applies the queue policy (which records to lease,
    # when a record is due, what a receipt looks like, dead-lettering past max
    # deliveries) from the group's config, so of a `LeasePolicy` only its data
    # travels: the lease length. Its ordering is the group's, sent when the
    # group was opened (`queue_open`) and kept by the server; its window and
    # priorities are the server core's own (the same defaults). The client's
    # clock (`now`) is not sent. Receipts are the server's opaque tokens;
    # absolute times (`deadline`, `due`) travel as they are and are read on
    # the server's clock.

    @staticmethod
    def _queue_path(topic: str, action: str = "") -> str:
        return f"/v1/queues/{_seg(topic)}" + (f"/{action}" if action else "")

    def queue_open(
        self, group: str, topic: str, config: dict[str, Any], start: str, now: int
    ) -> dict[str, Any]:
        body = {
            k: config[k] for k in ("max_deliveries", "dead_letter", "ordering") if config.get(k) is not None
        }
        body["start"] = start
        d = self._call("POST", self._queue_path(topic), params={"group": group}, json=body)
        return {k: d[k] for k in ("max_deliveries", "dead_letter", "ordering") if k in d}

    def queue_receive(
        self, group: str, topic: str, policy: LeasePolicy, now: int, limit: int
    ) -> tuple[list[Leased], int | None]:
        params = {"group": group, "max": limit, "visibility_timeout": policy.lease_ms / 1000}
        d = self._call("POST", self._queue_path(topic, "receive"), params=params)
        leases = []
        for m in d["messages"]:
            offset, timestamp, value, meta = wire_to_row(m)
            leases.append(
                Leased(
                    m["partition"],
                    offset,
                    timestamp,
                    value,
                    meta,
                    m["delivery_count"],
                    m["receipt"],
                    m["lease_deadline"],
                )
            )
        return leases, d["next_due"]

    def _settle(self, action: str, group: str, topic: str, body: dict[str, Any]) -> Any:
        return self._call("POST", self._queue_path(topic, action), params={"group": group}, json=body)

    def queue_ack(self, group: str, topic: str, partition: int, offset: int, receipt: str) -> None:
        self._settle("ack", group, topic, {"receipt": receipt})

    def queue_extend(
        self, group: str, topic: str, partition: int, offset: int, receipt: str, deadline: int
    ) -> None:
        self._settle("extend", group, topic, {"receipt": receipt, "deadline": deadline})

    def queue_release(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        receipt: str,
        due: int,
        behind: bool = False,
    ) -> None:
        self._settle("nack", group, topic, {"receipt": receipt, **self._release_body(due, behind)})

    @staticmethod
    def _release_body(due: int, behind: bool) -> dict[str, Any]:
        # Behind is "at the back" on the server's clock; a due time is absolute.
        return {"back": True} if behind else {"due": due}

    def queue_settle(self, group: str, topic: str, settles: Sequence[Settle]) -> list[LeaseLost | None]:
        # One request (one transaction on the server) per kind of settling:
        # the routes take many receipts with one setting each.
        kinds: dict[tuple[str, int, bool], list[int]] = {}
        for i, s in enumerate(settles):
            kinds.setdefault((s.action, s.time, s.behind), []).append(i)
        out: list[LeaseLost | None] = [None] * len(settles)
        for (action, at, behind), indexes in kinds.items():
            body: dict[str, Any] = {"receipts": [settles[i].receipt for i in indexes]}
            if action == EXTEND:
                body["deadline"] = at
            elif action in (RELEASE, RETURN):
                body.update(self._release_body(at, behind))
            # The server's routes have no return: a returned lease goes back
            # as a nack, its delivery counted.
            route = {ACK: "ack", EXTEND: "extend", RELEASE: "nack", RETURN: "nack"}[action]
            d = self._settle(route, group, topic, body)
            for failure in d["failed"]:
                error = failure["error"]
                # Only a lost lease fails one receipt alone; anything else failed the request.
                out[indexes[failure["index"]]] = LeaseLost(error["message"])
        return out

    def queue_dead_letter(
        self, group: str, topic: str, partition: int, offset: int, receipt: str, dead_letter: AppendBatch
    ) -> int:
        # The server builds the dead-letter record itself (same headers); only
        # the reason travels.
        reason = "rejected"
        metas = dead_letter.metas or [None]
        for name, value in decode_headers(decode_meta(metas[0])[2]):
            if name == "tidelog-reason":
                reason = value.decode(errors="replace")
        return int(self._settle("reject", group, topic, {"receipt": receipt, "reason": reason})["offset"])

    def queue_stats(self, group: str, topic: str, policy: LeasePolicy, now: int) -> QueueStats:
        d = self._call("GET", self._queue_path(topic, "stats"), params={"group": group})
        return QueueStats(*(d[f] for f in QueueStats._fields))

    # looking into and emptying queue groups (QueueUpkeep) ------------------------------

    def queue_list(self, topic: str) -> list[str]:
        d = self._call("GET", "/v1/queues", params={"topic": topic})
        return [q["group"] for q in d["queues"]]

    def queue_peek(self, group: str, topic: str, policy: LeasePolicy, now: int, limit: int) -> list[Waiting]:
        params = {"group": group, "max": limit}
        d = self._call("GET", self._queue_path(topic, "peek"), params=params)
        out = []
        for m in d["messages"]:
            offset, timestamp, value, meta = wire_to_row(m)
            out.append(
                Waiting(
                    m["partition"],
                    offset,
                    timestamp,
                    value,
                    meta,
                    m["delivery_count"],
                    m["due"],
                    m["priority"],
                    m["delayed"],
                )
            )
        return out

    def queue_in_flight(self, group: str, topic: str, now: int, limit: int) -> list[Pending]:
        d = self._call("GET", self._queue_path(topic, "in-flight"), params={"group": group, "max": limit})
        return [Pending(*(m[f] for f in Pending._fields)) for m in d["leases"]]

    def queue_purge(self, group: str, topic: str, now: int) -> int:
        return int(self._call("POST", self._queue_path(topic, "purge"), params={"group": group})["purged"])

    # what became of a job (JobsRemotely) ------------------------------------------------

    @staticmethod
    def _job_path(job_id: str, action: str = "") -> str:
        return f"/v1/jobs/{_seg(job_id)}" + (f"/{action}" if action else "")

    def job_status(self, topic: str, group: str, job_id: str) -> dict[str, Any]:
        return dict(self._call("GET", self._job_path(job_id), params={"queue": topic, "group": group}))

    def job_cancel(self, topic: str, group: str, job_id: str) -> dict[str, Any]:
        params = {"queue": topic, "group": group}
        return dict(self._call("POST", self._job_path(job_id, "cancel"), params=params))

    def job_start(self, topic: str, group: str, job_id: str, attempts: int, ttl_ms: int) -> dict[str, Any]:
        params = {"queue": topic, "group": group}
        payload = {"attempts": attempts, "ttl_ms": ttl_ms}
        return dict(self._call("POST", self._job_path(job_id, "start"), params=params, json=payload))

    def job_finish(
        self, topic: str, group: str, job_id: str, state: str, body: Any, attempts: int, ttl_ms: int
    ) -> dict[str, Any]:
        params = {"queue": topic, "group": group}
        payload = {"state": state, "attempts": attempts, "ttl_ms": ttl_ms, **body}
        return dict(self._call("POST", self._job_path(job_id, "finish"), params=params, json=payload))

    # wake-ups --------------------------------------------------------------------------

    def watch(self, callback: Callable[[], None]) -> None:
        """Call `callback()` after appends on the server (any client's).

        A daemon thread long-polls /v1/changes on its own connection: the
        server answers as soon as something is appended, not on a tick.
        """
        client = self._client(WATCH_WAIT_S + 30)
        self._watch_client = client

        def loop() -> None:
            seq = -1
            while not self._closed:
                try:
                    params = {"after": seq, "wait": WATCH_WAIT_S} if seq >= 0 else {}
                    response = client.get("/v1/changes", params=params)
                    new = response.json()["seq"]
                except Exception:
                    if self._closed:
                        return
                    time.sleep(0.2)  # server away: try again, gently
                    continue
                # The first answer only fixes where we are; still call back, in case
                # an append slipped in before the watch began.
                if new != seq:
                    callback()
                seq = new

        threading.Thread(target=loop, name="tidelog-http-watch", daemon=True).start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._http.close()
        if self._watch_client is not None:
            self._watch_client.close()
