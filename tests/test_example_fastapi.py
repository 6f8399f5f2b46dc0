"""examples/fastapi_app.py under a real ASGI server (granian, a free loopback
port, its own process), driven over HTTP with httpx."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import need_service

httpx = pytest.importorskip("httpx")

ROOT = Path(__file__).parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def app_url(tmp_path):
    for module in ("fastapi", "granian"):
        try:
            __import__(module)
        except ImportError as e:
            need_service(module, f"{e}; pip install 'tidelog[dev]'")
    port = free_port()
    env = dict(
        os.environ,
        TIDELOG_URL=str(tmp_path / "orders.db"),
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port)]
        + ["--working-dir", str(ROOT / "examples"), "fastapi_app:app"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:  # until the server answers (its lifespan has opened the log)
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"the example app did not start:\n{server.communicate()[0]}")
        time.sleep(0.1)
    yield url, server
    if server.poll() is None:
        server.kill()
        server.communicate()


def test_orders_are_enqueued_fulfilled_by_the_background_consumer_and_healthy(app_url):
    url, server = app_url
    with httpx.Client(base_url=url, timeout=40) as client:
        placed = [client.post("/orders", json={"item": item, "qty": n}) for n, item in enumerate("abc", 1)]
        assert [r.status_code for r in placed] == [202, 202, 202]
        assert [r.json()["order"] for r in placed] == [1, 2, 3]
        bad = client.post("/orders", json={"item": "d", "qty": 0})
        assert bad.status_code == 422

        receipts: list[dict] = []
        for _ in range(10):  # each request long-polls on the server's event loop
            receipts += client.get("/receipts", params={"after": len(receipts), "wait": 10}).json()
            if len(receipts) >= 3:
                break
        assert receipts == [
            {"order": 1, "item": "a", "qty": 1},
            {"order": 2, "item": "b", "qty": 2},
            {"order": 3, "item": "c", "qty": 3},
        ]
        health = client.get("/healthz").json()
        assert health == {"ok": True, "orders_waiting": 0, "orders_in_flight": 0}

    # A graceful stop runs the lifespan's shutdown: the consumer is cancelled, the log closed.
    server.send_signal(signal.SIGINT)
    output = server.communicate(timeout=30)[0]
    assert server.returncode == 0, output
    assert "Traceback" not in output
