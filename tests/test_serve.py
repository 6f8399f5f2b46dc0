"""`tidelog serve` as a real process: HTTP and the Redis protocol on one log,
the background cleaner, and a clean stop on SIGTERM."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tidelog.server.http.thread import free_port

redis = pytest.importorskip("redis")
pytest.importorskip("hiredis")
from redis.backoff import NoBackoff  # noqa: E402
from redis.retry import Retry  # noqa: E402

START_TIMEOUT_S = 20


@pytest.fixture
def served(tmp_path):
    port, resp_port = free_port(), free_port()
    env = {**os.environ, "TIDELOG_TOKEN": "s3cret"}
    argv = [sys.executable, "-m", "tidelog.cli", "serve", "--db", str(tmp_path / "t.db")]
    argv += ["--port", str(port), "--resp-port", str(resp_port), "--clean-interval", "0.2"]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": "Bearer s3cret"})
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            http.get("/healthz")
            with redis.Redis(port=resp_port, password="s3cret") as probe:
                probe.ping()
            break
        except (httpx.HTTPError, redis.ConnectionError):
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"tidelog serve did not start: {proc.stderr.read()[-2000:]}")
            time.sleep(0.05)
    yield proc, http, resp_port
    http.close()
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    proc.stderr.close()


def test_http_and_redis_on_one_log(served):
    proc, http, resp_port = served
    no_retry = Retry(NoBackoff(), 0)  # redis-py retries for seconds by default
    r = redis.Redis(port=resp_port, password="s3cret", decode_responses=True, retry=no_retry)
    entry = r.xadd("orders", {"value": "from redis"})
    assert entry.endswith("-1")
    (record,) = http.get("/v1/topics/orders/partitions/0/records").json()["records"]
    assert (record["format"], base64.b64decode(record["value"]), record["offset"]) == (
        "bytes",
        b"from redis",
        1,
    )
    http.post("/v1/topics/orders/records", json={"records": [{"value": "from http", "format": "text"}]})
    assert [fields["value"] for _, fields in r.xrange("orders")] == ["from redis", "from http"]
    # The token guards both fronts.
    with (
        pytest.raises(redis.AuthenticationError),
        redis.Redis(port=resp_port, password="wrong", retry=no_retry) as wrong,
    ):
        wrong.ping()
    assert httpx.get(str(http.base_url.join("/v1/topics"))).status_code == 401

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    with pytest.raises(redis.ConnectionError):
        r.ping()
    r.close()


def test_the_background_cleaner_applies_retention(served):
    _, http, _ = served
    http.post("/v1/topics", json={"name": "short", "config": {"retention_ms": "300ms"}})
    http.post("/v1/topics/short/records", json={"records": [{"value": i} for i in range(5)]})
    deadline = time.monotonic() + 15
    while (desc := http.get("/v1/topics/short").json())["records"] and time.monotonic() < deadline:
        time.sleep(0.1)
    # Nobody asked: the cleaner in `tidelog serve` removed them, offsets kept.
    assert desc["records"] == 0
    assert desc["offsets"][0]["first_offset"] == 6
    assert desc["last_clean"] is not None


def test_tune_gc_freezes_the_start_up_heap_and_raises_the_first_threshold():
    # In a fresh interpreter: freezing is process-wide and would leak into the test session.
    code = (
        "import gc, tidelog.server.http.run as run; "
        "before = gc.get_freeze_count(); run.tune_gc(); "
        "print(before, gc.get_freeze_count(), *gc.get_threshold())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, frozen, gen0, gen1, gen2 = map(int, out.split())
    from tidelog.server.http.run import GC_GEN0_THRESHOLD

    assert before == 0 and frozen > 1000  # the imported modules' objects, at least
    assert (gen0, gen1, gen2) == (GC_GEN0_THRESHOLD, 10, 10)
