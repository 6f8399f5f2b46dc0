"""Several `tidelog serve` processes over one PostgreSQL database are peers."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import httpx
import pytest

import tidelog
from pgschema import postgres_schema
from tidelog.server.http.thread import free_port

pytestmark = pytest.mark.slow

SERVE = "import sys, tidelog.server as s; s.serve(sys.argv[1], port=int(sys.argv[2]), log_enabled=False)"


def start_server(url: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVE, url, str(port)], stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"server on {base} did not start: {proc.communicate()[1]}")


def test_two_servers_over_one_database():
    with postgres_schema() as url:
        with tidelog.open(url) as direct:
            direct.create_topic("shared", partitions=4)
        (a_proc, a_url), (b_proc, b_url) = start_server(url), start_server(url)
        try:
            a, b = tidelog.open(a_url), tidelog.open(b_url)
            # A long-poll on server A wakes when server B appends (LISTEN/NOTIFY).
            woke: list[bool] = []
            waiter = threading.Thread(
                target=lambda: woke.append(a.wait_for_records("shared", 3, 0, timeout=20))
            )
            waiter.start()
            time.sleep(0.3)
            b.producer().send("shared", b"first", partition=3)
            waiter.join()
            assert woke == [True]

            # Produce through both at once.
            def produce(log: tidelog.Log, name: str) -> None:
                producer = log.producer(id=name)
                for i in range(100):
                    producer.send("shared", f"{name}-{i}", partition=i % 4)
                producer.send_batch("shared", [f"{name}-batch-{j}" for j in range(20)], partition=1)

            threads = [threading.Thread(target=produce, args=(log, n)) for log, n in ((a, "a"), (b, "b"))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            # Consume through both: partitions 0-1 through A, 2-3 through B.
            delivered = []
            for log, partitions in ((a, (0, 1)), (b, (2, 3))):
                consumer = log.consumer("readers")
                for p in partitions:
                    while msgs := consumer.fetch("shared", p, max_messages=50):
                        assert [m.offset for m in msgs] == list(range(msgs[0].offset, msgs[-1].offset + 1))
                        delivered.extend((m.partition, m.offset, m.data) for m in msgs)
                        consumer.commit(msgs[-1])
            for p in range(4):
                offsets = [o for part, o, _ in delivered if part == p]
                assert offsets == list(range(1, len(offsets) + 1))  # dense, from both servers
            values = [d for _, _, d in delivered]
            assert len(values) == len(set(values)) == 1 + 2 * (100 + 20)
            with tidelog.open(url) as direct:
                assert sum(x.lag for x in direct.describe_group("readers", ["shared"])) == 0
            a.close()
            b.close()
        finally:
            for proc in (a_proc, b_proc):
                proc.terminate()
                proc.communicate(timeout=30)
