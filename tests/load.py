"""Load on a running `tidelog serve` for the fault tests, with acked-record accounting.

Producers write through HTTP (`POST /publish/{topic}`) and the Redis
protocol (`XADD`), one topic each, and keep what was acknowledged: the
offset each write was answered with and its value. A consumer receives
from a queue group over HTTP and keeps the offsets it acked. Requests that
fail (a connection reset by a killed worker, a 503 while the store is
away) are counted by what they got and retried on a new connection: only
acknowledged writes count. `check(url)` then reads the store directly:
every acknowledged write must be in its topic at its offset.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import httpx

import tidelog

PAUSE_S = 0.01  # between the requests of one producer, so four share two cores with the server
RETRY_S = 0.05  # after a failed request


class Load:
    def __init__(self, port: int, resp_port: int = 0, http_producers: int = 2, resp_producers: int = 2):
        self.base = f"http://127.0.0.1:{port}"
        self.resp_port = resp_port
        self.topics = [f"load-http-{i}" for i in range(http_producers)]
        self.topics += [f"load-resp-{i}" for i in range(resp_producers if resp_port else 0)]
        self.acked: dict[str, list[tuple[int, bytes]]] = {t: [] for t in self.topics}
        self.consumed: list[int] = []  # offsets the consumer acked, of the first topic
        self.failed: collections.Counter[str] = collections.Counter()  # what failed requests got
        self.statuses: list[tuple[float, int, str]] = []  # HTTP producers: (when, status, error code)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    # --- running -------------------------------------------------------------------------------

    def start(self) -> Load:
        for topic in self.topics:
            target = self._http_producer if topic.startswith("load-http") else self._resp_producer
            self._threads.append(threading.Thread(target=target, args=(topic,), daemon=True))
        self._threads.append(threading.Thread(target=self._consumer, args=(self.topics[0],), daemon=True))
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        assert not any(t.is_alive() for t in self._threads), "a load thread did not stop"

    def total(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.acked.values())

    def wait_for(self, more: int, timeout: float = 30.0) -> None:
        """Until `more` writes beyond those acked now are acked (the server serves)."""
        goal = self.total() + more
        deadline = time.monotonic() + timeout
        while self.total() < goal:
            assert time.monotonic() < deadline, (
                f"no {more} acked writes in {timeout} s; failures: {self.failed}"
            )
            time.sleep(0.02)

    def _failure(self, what: str) -> None:
        with self._lock:
            self.failed[what] += 1
        time.sleep(RETRY_S)

    def _http_producer(self, topic: str) -> None:
        client = httpx.Client(base_url=self.base, timeout=10)
        i = 0
        while not self._stop.is_set():
            value = f"{topic}:{i}".encode()
            try:
                answer = client.post(f"/publish/{topic}", content=value)
            except httpx.TransportError as e:
                self._failure(type(e).__name__)
                client.close()
                client = httpx.Client(base_url=self.base, timeout=10)
                continue
            code = answer.json()["error"]["code"] if answer.status_code >= 400 else ""
            with self._lock:
                self.statuses.append((time.monotonic(), answer.status_code, code))
            if answer.status_code == 201:
                with self._lock:
                    self.acked[topic].append((answer.json()["offset"], value))
                i += 1
                time.sleep(PAUSE_S)
            else:
                self._failure(f"{answer.status_code} {code}")
        client.close()

    def _resp_producer(self, topic: str) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        def connect() -> Any:
            return redis.Redis(port=self.resp_port, socket_timeout=10, retry=Retry(NoBackoff(), 0))

        client = connect()
        i = 0
        while not self._stop.is_set():
            value = f"{topic}:{i}".encode()
            try:
                entry = client.xadd(topic, {"value": value})
            except (redis.ConnectionError, redis.TimeoutError) as e:
                self._failure(type(e).__name__)
                client.close()
                client = connect()
                continue
            except redis.ResponseError as e:
                self._failure(f"-ERR {str(e)[:40]}")
                continue
            offset = int(entry.decode().rsplit("-", 1)[1])  # the entry id is <ms>-<offset>
            with self._lock:
                self.acked[topic].append((offset, value))
            i += 1
            time.sleep(PAUSE_S)
        client.close()

    def _consumer(self, topic: str) -> None:
        client = httpx.Client(base_url=self.base, timeout=10)
        receive = f"/v1/queues/{topic}/receive?group=load&max=20&wait=0.2&visibility_timeout=60"
        while not self._stop.is_set():
            try:
                answer = client.post(receive)
                if answer.status_code == 404:  # the topic is not made yet
                    time.sleep(RETRY_S)
                    continue
                if answer.status_code != 200:
                    self._failure(f"receive {answer.status_code}")
                    continue
                for message in answer.json()["messages"]:
                    acked = client.post(
                        f"/v1/queues/{topic}/ack?group=load", json={"receipt": message["receipt"]}
                    )
                    if acked.status_code == 200:
                        with self._lock:
                            self.consumed.append(message["offset"])
            except httpx.TransportError as e:
                self._failure(f"consumer {type(e).__name__}")
                client.close()
                client = httpx.Client(base_url=self.base, timeout=10)
        client.close()

    # --- accounting ----------------------------------------------------------------------------

    def check(self, url: str) -> dict[str, int]:
        """Every acknowledged write is in the log at its offset; no record acked twice by the consumer."""
        with tidelog.open(url) as log:
            for topic, acked in self.acked.items():
                if not acked:
                    continue
                stored = {m.offset: m.value for m in log.read(topic, 0, limit=10**6)}
                lost = [(o, v) for o, v in acked if stored.get(o) != v]
                assert lost == [], (
                    f"{len(lost)} acknowledged writes to {topic} are not in the log: {lost[:5]}"
                )
            stored_first = {m.offset for m in log.read(self.topics[0], 0, limit=10**6)}
        assert len(self.consumed) == len(set(self.consumed)), "a record was acked twice"
        assert set(self.consumed) <= stored_first
        return {
            "acked_http": sum(len(v) for t, v in self.acked.items() if t.startswith("load-http")),
            "acked_resp": sum(len(v) for t, v in self.acked.items() if t.startswith("load-resp")),
            "consumer_acks": len(self.consumed),
            "failed_requests": sum(self.failed.values()),
        }
