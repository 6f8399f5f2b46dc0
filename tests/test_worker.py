"""The push worker: configuration, the POST body, delivery through failures,
metrics, the command line, and a real process killed and stopped.

Every test runs the local engine against a real endpoint (tests/endpoint.py:
Starlette on granian, a free loopback port); the Spark engine's share is in
tests/spark/test_worker_engine.py.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import threading
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import tidelog
import tidelog.worker
from endpoint import Endpoint, check_deliveries
from tidelog.cli.app import cli
from tidelog.worker.config import WorkerConfig, load
from worker_process import kill_restart_terminate

TOPIC = "orders"


def fill(db: str, counts: dict[int, int], topic: str = TOPIC) -> None:
    """Records of every kind: JSON, text, bytes (not UTF-8), keys and headers."""
    with tidelog.open(db) as log:
        log.create_topic(topic, partitions=max(counts) + 1)
        producer = log.producer()
        for p, n in counts.items():
            batch = []
            for i in range(1, n + 1):
                if i % 7 == 0:
                    batch.append(tidelog.NewRecord(bytes([0xFF, p, i % 256]), key=b"\xfe\x01"))
                elif i % 5 == 0:
                    batch.append(tidelog.NewRecord(f"text {p}/{i}", key=f"k{i}", headers={"trace": f"t{i}"}))
                else:
                    batch.append(tidelog.NewRecord({"p": p, "i": i}, headers=[("bin", b"\xff"), ("n", "1")]))
            producer.send_batch(topic, batch, partition=p)


def feed(endpoint: str, **options: Any) -> dict[str, Any]:
    # A timeout well above what a loaded machine needs for an answer: only "hang" should reach it.
    return {"endpoint": endpoint, "batch_size": 25, "interval": "100ms", "timeout": "2s", **options}


def config(endpoint: str, **options: Any) -> dict[str, Any]:
    return {"engine": "local", "topics": {TOPIC: {"groups": {"g": feed(endpoint, **options)}}}}


class Running:
    """tidelog.worker.run on a thread, stopped the way an embedding program would."""

    def __init__(self, target: Any, cfg: Any, **options: Any):
        self.stop = threading.Event()
        self.metrics: Any = None
        self.error: BaseException | None = None

        def main() -> None:
            try:
                tidelog.worker.run(target, cfg, stop=self.stop, on_metrics=self._got, **options)
            except BaseException as e:
                self.error = e

        self.thread = threading.Thread(target=main, name="worker-under-test")

    def _got(self, metrics: Any) -> None:
        self.metrics = metrics

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the worker did not stop"
        if exc[0] is None and self.error is not None:
            raise self.error


def all_accepted(expected: dict[int, int]):
    def done(received: list) -> bool:
        have = {(r.partition, o) for r in received if r.accepted for o in r.offsets}
        return len(have) == sum(expected.values())

    return done


def all_accepted_on(topic: str, records: int):
    def done(received: list) -> bool:
        have = {
            (r.partition, o) for r in received if r.accepted and r.body["topic"] == topic for o in r.offsets
        }
        return len(have) == records

    return done


def committed(db: str, group: str, partitions: int, topic: str = TOPIC) -> dict[int, int]:
    with tidelog.open(db) as log:
        consumer = log.consumer(group)
        return {p: consumer.committed(topic, p) for p in range(partitions)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# the body ------------------------------------------------------------------------


def test_a_batch_carries_each_record_as_message_data_with_offsets_and_timestamps(tmp_path):
    db = str(tmp_path / "w.db")
    fill(db, {0: 14})
    with tidelog.open(db) as log:
        records = log.read(TOPIC, 0, limit=100)
    cfg = config("", batch_size=100, headers={"Authorization": "Bearer abc", "X-Tenant": "t1"})
    with Endpoint() as endpoint:
        cfg["topics"][TOPIC]["groups"]["g"]["endpoint"] = endpoint.url
        with Running(db, cfg):
            (post,) = endpoint.wait_for(lambda rs: len(rs) >= 1)
    assert post.headers["content-type"] == "application/json"
    assert post.headers["authorization"] == "Bearer abc" and post.headers["x-tenant"] == "t1"
    assert post.body["topic"] == TOPIC and post.body["partition"] == 0
    messages = post.body["messages"]
    assert [m["offset"] for m in messages] == [r.offset for r in records]
    for m, r in zip(messages, records):
        assert m["timestamp"] == r.timestamp
        assert m["format"] == r.format
        if r.format == "bytes":
            assert base64.b64decode(m["data"]["base64"]) == r.data
            assert base64.b64decode(m["key"]["base64"]) == r.key == b"\xfe\x01"
        else:
            assert m["data"] == r.data
        if r.format == "text":
            assert m["key"] == r.key.decode() and m["headers"] == [["trace", f"t{r.offset}"]]
        if r.format == "json":
            assert m["key"] is None
            assert m["headers"] == [["bin", {"base64": base64.b64encode(b"\xff").decode()}], ["n", "1"]]
    assert {m["format"] for m in messages} == {"json", "text", "bytes"}


# delivery --------------------------------------------------------------------------


def test_failures_are_retried_with_the_same_batch_and_commits_follow_only_2xx(tmp_path):
    db = str(tmp_path / "w.db")
    expected = {0: 80, 1: 60, 2: 30}
    fill(db, expected)
    # A 500, a hang past the timeout, a cut connection, a 404 and a redirect, then all is well.
    script = {2: 500, 3: "hang", 5: "drop", 7: 404, 9: 302}
    with (
        Endpoint(script=script, hang_s=3, db=db, group="g") as endpoint,
        Running(db, config(endpoint.url, timeout="1s")) as worker,
    ):
        received = endpoint.wait_for(all_accepted(expected), 60)
    check_deliveries(received, expected)
    assert committed(db, "g", 3) == expected
    failed = [r for r in received if not r.accepted]
    assert [r.action for r in failed] == ["500", "hang", "drop", "404", "302"]
    m = worker.metrics
    for cause, n in {"http_500": 1, "timeout": 1, "connection": 1, "http_404": 1, "http_302": 1}.items():
        assert sum(m.value("tidelog_worker_failures_total", group="g", topic=TOPIC, partition=p, cause=cause)
                   for p in expected) == n, cause  # fmt: skip
    accepted = [r for r in received if r.accepted]
    for p, last in expected.items():
        assert m.value("tidelog_worker_records_delivered_total", group="g", topic=TOPIC, partition=p) == last
        assert m.value("tidelog_worker_batches_delivered_total", group="g", topic=TOPIC, partition=p) == len(
            [r for r in accepted if r.partition == p]
        )
        assert m.value("tidelog_worker_lag", group="g", topic=TOPIC, partition=p) == 0


def test_a_backlog_is_drained_without_waiting_and_an_idle_partition_is_polled(tmp_path):
    db = str(tmp_path / "w.db")
    fill(db, {0: 150, 1: 150})
    with tidelog.open(db) as log:
        log.create_topic("idle", partitions=1)
    with Endpoint() as endpoint:
        cfg = {
            "engine": "local",
            "topics": {
                # An hour between polls: the backlog must not wait for it, nor must shutdown.
                TOPIC: {"groups": {"drain": feed(endpoint.url, interval="60m", batch_size=10)}},
                "idle": {"groups": {"poll": feed(endpoint.url, interval="50ms")}},
            },
        }
        with Running(db, cfg):
            endpoint.wait_for(all_accepted_on(TOPIC, 300), 30)
            assert not [r for r in endpoint.snapshot() if r.body["topic"] == "idle"]
            with tidelog.open(db) as log:
                log.producer().send("idle", {"late": True})
            (late,) = endpoint.wait_for(lambda rs: [r for r in rs if r.body["topic"] == "idle"], 30)[-1:]
    assert late.body["messages"][0]["data"] == {"late": True}
    assert committed(db, "drain", 2) == {0: 150, 1: 150}
    assert committed(db, "poll", 1, "idle") == {0: 1}


def test_entries_of_one_group_split_partitions_between_endpoints(tmp_path):
    db = str(tmp_path / "w.db")
    expected = {0: 30, 1: 30, 2: 30}
    fill(db, expected)
    with Endpoint() as first, Endpoint() as second:
        cfg = {
            "engine": "local",
            "topics": {
                TOPIC: {
                    "groups": {"g": [feed(first.url, partitions=[0, 2]), feed(second.url, partitions=[1])]}
                }
            },
        }
        with Running(db, cfg):
            first.wait_for(all_accepted({0: 30, 2: 30}), 30)
            second.wait_for(all_accepted({1: 30}), 30)
    assert {r.partition for r in first.snapshot()} == {0, 2}
    assert {r.partition for r in second.snapshot()} == {1}
    assert committed(db, "g", 3) == expected


def test_metrics_are_served_with_lag_and_failures_by_cause(tmp_path):
    db = str(tmp_path / "w.db")
    fill(db, {0: 30, 1: 20})
    port = free_port()

    def refuse_partition_1(number: int, body: dict, received: list) -> Any:
        return 503 if body["partition"] == 1 else "ok"

    with (
        Endpoint(script=refuse_partition_1) as endpoint,
        Running(db, config(endpoint.url), metrics_port=port),
    ):
        endpoint.wait_for(lambda rs: len([r for r in rs if r.partition == 1]) >= 3, 30)
        endpoint.wait_for(all_accepted({0: 30}), 30)
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line[:1] != "#"
    }
    labels = 'group="g",partition="{}",topic="orders"'
    assert samples["tidelog_worker_lag{" + labels.format(0) + "}"] == 0
    assert samples["tidelog_worker_lag{" + labels.format(1) + "}"] == 20
    assert samples["tidelog_worker_batches_delivered_total{" + labels.format(0) + "}"] == 2
    assert samples["tidelog_worker_records_delivered_total{" + labels.format(0) + "}"] == 30
    failures = 'tidelog_worker_failures_total{cause="http_503",group="g",partition="1",topic="orders"}'
    assert samples[failures] >= 3
    assert committed(db, "g", 2) == {0: 30, 1: 0}


def test_a_restarted_worker_resumes_after_the_last_commit(tmp_path):
    db = str(tmp_path / "w.db")
    fill(db, {0: 60})
    # The third POST is refused and the worker is stopped during the wait before its retry.
    with Endpoint(script={3: 500}, db=db, group="g") as endpoint:
        with Running(db, config(endpoint.url, interval="60m")):
            endpoint.wait_for(lambda rs: len(rs) >= 3, 30)
        assert committed(db, "g", 1) == {0: 50}
        with Running(db, config(endpoint.url)):
            received = endpoint.wait_for(all_accepted({0: 60}), 30)
    assert received[3].offsets == received[2].offsets == list(range(51, 61))
    check_deliveries(received, {0: 60})


def test_worker_process_killed_restarted_and_terminated_loses_nothing(tmp_path):
    kill_restart_terminate("local", tmp_path, timeout_s=60)


# configuration ------------------------------------------------------------------------


def base(**feed_options: Any) -> dict[str, Any]:
    return {
        "engine": "local",
        "topics": {TOPIC: {"groups": {"g": {"endpoint": "http://127.0.0.1:9/in", **feed_options}}}},
    }


G = f"topics.{TOPIC}.groups.g"

REFUSED_ON_PARSE = [
    ({**base(), "engnie": "local"}, "engnie: unknown key"),
    ({**base(), "engine": "flink"}, "engine: must be one of spark, local"),
    (base(batchsize=10), f"{G}.batchsize: unknown key"),
    ({"topics": {TOPIC: {"group": {}}}}, f"topics.{TOPIC}.group: unknown key"),
    ({**base(), "spark": {"mastr": "x"}}, "spark.mastr: unknown key"),
    (base(interval="5"), f"{G}.interval: '5' is not a duration"),
    (base(interval="5h"), f"{G}.interval: '5h' is not a duration"),
    (base(interval=5), f"{G}.interval: 5 is not a duration"),
    (base(timeout="fast"), f"{G}.timeout: 'fast' is not a duration"),
    (base(interval="0ms"), f"{G}.interval: must be more than 0"),
    (
        base(endpoint="ftp://example.com/in"),
        f"{G}.endpoint: 'ftp://example.com/in' is not an http:// or https://",
    ),
    (base(endpoint="localhost:8080/in"), f"{G}.endpoint: 'localhost:8080/in' is not an http:// or https://"),
    (base(endpoint="http:///in"), f"{G}.endpoint: 'http:///in' names no host"),
    (base(endpoint=42), f"{G}.endpoint: must be an http:// or https:// URL"),
    ({"topics": {TOPIC: {"groups": {"g": {"batch_size": 5}}}}}, f"{G}.endpoint: missing"),
    (base(batch_size=0), f"{G}.batch_size: must be an integer from 1"),
    (base(batch_size="50"), f"{G}.batch_size: must be an integer from 1"),
    (base(batch_size=True), f"{G}.batch_size: must be an integer from 1"),
    (base(partitions=[]), f"{G}.partitions: must be a non-empty list"),
    (base(partitions=[0, -1]), f"{G}.partitions: must be a non-empty list"),
    (base(partitions=[1, 1]), f"{G}.partitions: partition 1 is listed twice"),
    (base(headers={"Bad Name": "x"}), f"{G}.headers: 'Bad Name' is not a valid HTTP header name"),
    (base(headers={"X-A": 1}), f"{G}.headers.X-A: must be a one-line string"),
    (base(headers={"X-A": "a\r\nInjected: 1"}), f"{G}.headers.X-A: must be a one-line string"),
    (base(headers={"Content-Type": "text/plain"}), f"{G}.headers.Content-Type: the worker sets this header"),
    (
        {"topics": {"bad name": {"groups": {"g": {"endpoint": "http://x"}}}}},
        "topics.bad name: invalid topic name",
    ),
    (
        {"topics": {TOPIC: {"groups": {"g/1": {"endpoint": "http://x"}}}}},
        f"topics.{TOPIC}.groups.g/1: invalid group",
    ),
    ({"engine": "local"}, "topics: names no topic"),
    ({"topics": {TOPIC: {"groups": {}}}}, f"topics.{TOPIC}.groups: names no group"),
    ({"topics": []}, "topics: must be a table"),
    (
        {
            "topics": {
                TOPIC: {
                    "groups": {
                        "g": [
                            {"endpoint": "http://a", "partitions": [0, 1]},
                            {"endpoint": "http://b", "partitions": [1, 2]},
                        ]
                    }
                }
            }
        },
        f"{G}[1]: group 'g' already takes partition 1 of topic 'orders' in {G}[0]",
    ),
    (
        {
            "topics": {
                TOPIC: {
                    "groups": {"g": [{"endpoint": "http://a"}, {"endpoint": "http://b", "partitions": [3]}]}
                }
            }
        },
        f"{G}[1]: group 'g' already takes all partitions of topic 'orders' in {G}[0]",
    ),
]


@pytest.mark.parametrize(
    ("raw", "message"), REFUSED_ON_PARSE, ids=[m.split(":")[0] for _, m in REFUSED_ON_PARSE]
)
def test_bad_configuration_is_refused_naming_the_key(raw, message):
    with pytest.raises(tidelog.ConfigurationError) as e:
        WorkerConfig.parse(raw)
    assert message in str(e.value)


def test_a_good_configuration_takes_defaults_and_units():
    cfg = WorkerConfig.parse(
        {
            "topics": {
                TOPIC: {
                    "groups": {
                        "a": {"endpoint": "https://x/in", "interval": "1.5s", "timeout": "2m"},
                        "b": {"endpoint": "http://y", "interval": "250ms", "partitions": [2, 0]},
                    }
                }
            }
        }
    )
    a, b = cfg.feeds
    assert cfg.engine == "spark" and cfg.work_dir == ".tidelog-worker"
    assert (a.interval_ms, a.timeout_ms, a.batch_size, a.partitions) == (1500, 120_000, 100, None)
    assert (b.interval_ms, b.timeout_ms, b.partitions) == (250, 10_000, (0, 2))


def test_configuration_is_checked_against_the_log(tmp_path):
    db = str(tmp_path / "w.db")
    fill(db, {0: 1, 1: 1, 2: 1, 3: 1})
    with tidelog.open(db) as log:
        resolved = WorkerConfig.parse(base()).resolve(log)
        assert resolved.feeds[0].partitions == (0, 1, 2, 3)
        with pytest.raises(
            tidelog.ConfigurationError,
            match=rf"{G}\.partitions: topic 'orders' has partitions 0\.\.3; partition 7 does not exist",
        ):
            WorkerConfig.parse(base(partitions=[0, 7])).resolve(log)
        missing = {"topics": {"nope": {"groups": {"g": {"endpoint": "http://x"}}}}}
        with pytest.raises(
            tidelog.ConfigurationError, match=r"topics\.nope\.groups\.g: topic 'nope' does not exist"
        ):
            WorkerConfig.parse(missing).resolve(log)
        assert [t.name for t in log.topics()] == [TOPIC]  # nothing created


def test_config_files_toml_and_json_and_their_duplicates(tmp_path):
    toml = tmp_path / "w.toml"
    toml.write_text(
        f'engine = "local"\n[topics.{TOPIC}.groups.g]\nendpoint = "http://x/in"\nbatch_size = 5\n'
    )
    assert load(toml).feeds[0].batch_size == 5
    as_json = tmp_path / "w.json"
    as_json.write_text(json.dumps(base(batch_size=7)))
    assert load(as_json).feeds[0].batch_size == 7

    # One group given twice: TOML refuses the table, JSON would silently keep the last.
    toml.write_text(
        f'[topics.{TOPIC}.groups.g]\nendpoint = "http://a"\n[topics.{TOPIC}.groups.g]\nendpoint = "http://b"\n'
    )
    with pytest.raises(tidelog.ConfigurationError, match="not valid TOML"):
        load(toml)
    as_json.write_text(
        '{"topics": {"orders": {"groups": {"g": {"endpoint": "http://a"}, "g": {"endpoint": "http://b"}}}}}'
    )
    with pytest.raises(tidelog.ConfigurationError, match="key 'g' appears twice"):
        load(as_json)
    other = tmp_path / "w.yaml"
    other.write_text("engine: local")
    with pytest.raises(tidelog.ConfigurationError, match=r"ends in \.toml or \.json"):
        load(other)
    with pytest.raises(tidelog.ConfigurationError, match="cannot read"):
        load(tmp_path / "missing.toml")


def test_a_refused_configuration_posts_and_commits_nothing(tmp_path):
    db = str(tmp_path / "w.db")
    fill(db, {0: 10, 1: 10})
    with Endpoint() as endpoint:
        with pytest.raises(tidelog.ConfigurationError, match="partition 5 does not exist"):
            tidelog.worker.run(db, config(endpoint.url, partitions=[0, 5]))
        with tidelog.open(db) as log, pytest.raises(tidelog.ConfigurationError, match="needs the log's URL"):
            tidelog.worker.run(log, {**config(endpoint.url), "engine": "spark"})
        assert endpoint.snapshot() == []
    with tidelog.open(db) as log:
        assert log.groups() == []


# the command line ---------------------------------------------------------------------


def test_cli_refuses_a_bad_configuration_with_exit_1_naming_the_key(tmp_path):
    db = str(tmp_path / "w.db")
    fill(db, {0: 3})
    path = tmp_path / "worker.toml"
    path.write_text(f'[topics.{TOPIC}.groups.g]\nendpoint = "http://x/in"\ninterval = "5 seconds"\n')
    result = CliRunner().invoke(cli, ["worker", "--config", str(path), "--db", db, "--engine", "local"])
    assert result.exit_code == 1
    assert f"{G}.interval: '5 seconds' is not a duration" in result.output
    path.write_text(f'[topics.{TOPIC}.groups.g]\nendpoint = "mailto:ops@example.com"\n')
    result = CliRunner().invoke(cli, ["worker", "--config", str(path), "--db", db])
    assert result.exit_code == 1 and f"{G}.endpoint" in result.output
    result = CliRunner().invoke(cli, ["worker", "--db", db])
    assert result.exit_code == 2 and "--config" in result.output
    with tidelog.open(db) as log:
        assert log.groups() == []


def test_cli_help_lists_the_worker():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0 and "worker" in result.output
    result = CliRunner().invoke(cli, ["worker", "--help"])
    assert "--metrics-port" in result.output and "--engine" in result.output

    with pytest.raises(tidelog.ConfigurationError, match="a .toml or .json path or a dict"):
        load(42)


def test_a_metrics_port_in_use_is_refused_before_anything_is_posted(tmp_path):
    db = str(tmp_path / "w.db")
    fill(db, {0: 3})
    with Endpoint() as endpoint, socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        with pytest.raises(tidelog.ConfigurationError, match="cannot serve /metrics on port"):
            tidelog.worker.run(db, config(endpoint.url), metrics_port=taken.getsockname()[1])
        assert endpoint.snapshot() == []


def test_a_missing_spark_names_the_extra_and_the_local_engine(tmp_path):
    db = str(tmp_path / "w.db")
    fill(db, {0: 1})
    path = tmp_path / "worker.toml"
    path.write_text(f'[topics.{TOPIC}.groups.g]\nendpoint = "http://127.0.0.1:9/in"\n')
    # The default engine is Spark; run the command as a machine without pyarrow would.
    hide = "import sys; sys.modules['pyarrow'] = None; from tidelog.cli import main; main()"
    out = subprocess.run(
        [sys.executable, "-c", hide, "--db", db, "worker", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stderr
    assert (
        "pyarrow" in out.stderr and "--engine local" in out.stderr and "tidelog[spark,worker]" in out.stderr
    )
    with tidelog.open(db) as log:
        assert log.groups() == []
