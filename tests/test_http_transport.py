"""HTTP/2 (cleartext h2c and TLS with ALPN), and `serve()` in a real process."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import threading
import time

import httpx
import pytest

import tidelog


def test_h2c_prior_knowledge(serve):
    server = serve()
    with httpx.Client(base_url=server.url, http1=False, http2=True) as h2:
        created = h2.post("/v1/topics", json={"name": "t"})
        assert created.http_version == "HTTP/2" and created.status_code == 201
        h2.post("/v1/topics/t/records", json={"records": [{"value": {"n": 1}}]})
        got = h2.get("/v1/topics/t/partitions/0/records")
        assert got.http_version == "HTTP/2"
        assert got.json()["records"][0]["value"] == {"n": 1}
    with httpx.Client(base_url=server.url) as h1:
        assert h1.get("/healthz").http_version == "HTTP/1.1"


@pytest.fixture
def tls_files(tmp_path):
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_path, key_path, ca_path = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    ca.cert_pem.write_to_path(str(ca_path))
    return str(cert_path), str(key_path), str(ca_path)


def test_tls_with_http2_and_http1(serve, tls_files, monkeypatch):
    cert, key, ca = tls_files
    server = serve(tls_cert=cert, tls_key=key)
    assert server.url.startswith("https://")
    context = ssl.create_default_context(cafile=ca)
    with httpx.Client(base_url=server.url, http2=True, verify=context) as h2:
        r = h2.post("/api/topics", json={"name": "secure"})
        assert r.status_code == 201 and r.http_version == "HTTP/2"  # negotiated by ALPN
    with httpx.Client(base_url=server.url, verify=context) as h1:
        assert h1.get("/v1/topics").http_version == "HTTP/1.1"
    with httpx.Client(base_url=server.url) as untrusting, pytest.raises(httpx.ConnectError):
        untrusting.get("/healthz")  # a self-signed chain the client does not trust
    # The https:// store trusts what SSL_CERT_FILE names.
    from tidelog.store import http as client

    monkeypatch.setenv("SSL_CERT_FILE", ca)
    client._tls_context.cache_clear()
    try:
        with tidelog.open(server.url) as log:
            log.producer().send("secure", {"over": "tls"})
            assert log.read("secure", 0)[0].data == {"over": "tls"}
    finally:
        client._tls_context.cache_clear()


def test_serve_in_a_real_process(tmp_path):
    from tidelog.server.http.thread import free_port

    db = tmp_path / "proc.db"
    port = free_port()
    env = {**os.environ, "TIDELOG_TOKEN": "from-env"}
    code = f"import tidelog.server as s; s.serve({str(db)!r}, port={port}, log_level='error')"
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=log_file, stderr=subprocess.STDOUT
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/healthz")
                break
            except httpx.TransportError:
                assert proc.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.05)
        assert httpx.get(f"{base}/v1/topics").status_code == 401  # the token came from TIDELOG_TOKEN
        with tidelog.open(f"http://:from-env@127.0.0.1:{port}") as log:
            log.create_topic("p", partitions=2)
            log.producer().send("p", {"n": 1}, partition=1)
            # A long-poll in flight must not hold up shutdown.
            with httpx.Client(base_url=base, headers={"Authorization": "Bearer from-env"}) as http:
                answered = []
                poll = threading.Thread(
                    target=lambda: answered.append(http.get("/v1/topics/p/partitions/0/records?wait=30"))
                )
                poll.start()
                time.sleep(0.3)
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=15) == 0
                poll.join(10)
                assert answered and answered[0].json()["records"] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with tidelog.open(str(db)) as log:  # the file is whole and holds what was sent
        assert log.read("p", 1)[0].data == {"n": 1}
