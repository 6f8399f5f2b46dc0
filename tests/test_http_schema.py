"""Fuzz the server against its own /openapi.json: no input may cause a 5xx.

Bounded: a few examples per operation. Long-polls are held to a short cap on
this server so that generated `wait=` values do not make the run slow; the
SSE stream, which never ends by design, is tested in test_http_v1.
"""

from __future__ import annotations

import httpx
import pytest
from hypothesis import HealthCheck, settings

schemathesis = pytest.importorskip("schemathesis")
from tidelog.server.http.openapi import spec  # noqa: E402

schema = (
    schemathesis.openapi.from_dict(spec())
    .exclude(path="/v1/topics/{topic}/stream")
    .exclude(path="/subscribe/{topic}")  # a WebSocket, tested in test_http_queues
)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from tidelog.server.http.thread import ServerThread

    server = ServerThread(str(tmp_path_factory.mktemp("fuzz") / "fuzz.db"), max_wait=0.05).start()
    with httpx.Client(base_url=server.url) as http:
        # Give the fuzzer something to find besides 404s.
        for name in ("0", "a", "A", "orders"):
            http.post("/v1/topics", json={"name": name, "partitions": 2})
            http.post(
                f"/v1/topics/{name}/records", json={"records": [{"value": 1}, {"value": "x", "key": "k"}]}
            )
        assert http.get("/openapi.json").json() == spec()  # what we fuzz is what the server serves
    yield server.url
    server.stop()


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_makes_a_server_error(case, served):
    response = case.call(base_url=served, timeout=10)
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.text[:500]}"
    if response.status_code >= 400 and response.status_code != 405:
        error = response.json()["error"]
        assert error["code"] and error["message"]
