"""A real `tidelog serve` with its Kafka listener on free loopback ports, for the Kafka tests.

    with KafkaServe(tmp_path / "k.db") as served:
        Producer({"bootstrap.servers": served.bootstrap})

Its log goes to a file beside the store (a pipe would fill and stall it);
`served.stderr()` reads it for a failure's message.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import need_service
from tidelog.server.http.thread import free_port

START_TIMEOUT_S = 30


def kcat() -> str:
    """Debian's kcat, else skip (fail under CI: .ci/run installs it)."""
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        need_service("kcat", "apt-get install kcat")
    return str(path)


class KafkaServe:
    def __init__(
        self,
        target: str | Path,
        *args: str,
        token: str | None = None,
        log_dir: Path | None = None,
        tls: tuple[str, str, str] | None = None,
    ):
        self.target = str(target)
        self.args = list(args)
        self.token = token
        self.tls = tls  # (certificate, key, the CA that signed it): HTTPS, and TLS on the Kafka port
        self.port = free_port()
        self.kafka_port = free_port()
        self.log_path = (log_dir or Path(self.target).parent) / f"serve-{self.kafka_port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def http_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """confluent-kafka's settings for this server (with SASL PLAIN when it has a token,
        over TLS when it serves it)."""
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap}
        if self.tls:
            config.update({"security.protocol": "SSL", "ssl.ca.location": self.tls[2]})
        if self.token:
            config.update(
                {
                    "security.protocol": "SASL_SSL" if self.tls else "SASL_PLAINTEXT",
                    "sasl.mechanisms": "PLAIN",
                    "sasl.username": "anyone",
                    "sasl.password": self.token,
                }
            )
        config.update(extra)
        return config

    def stderr(self) -> str:
        try:
            return self.log_path.read_text()[-3000:]
        except OSError:
            return ""

    def start(self) -> KafkaServe:
        env = {**os.environ}
        if self.token:
            env["TIDELOG_TOKEN"] = self.token
        argv = [sys.executable, "-m", "tidelog.cli", "serve", "--db", self.target, "--workers", "1"]
        argv += ["--port", str(self.port), "--resp-port", "0", "--kafka-port", str(self.kafka_port)]
        argv += ["--clean-interval", "0", *self.args]
        if self.tls:
            argv += ["--tls-cert", self.tls[0], "--tls-key", self.tls[1]]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + START_TIMEOUT_S
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.kafka_port), timeout=1):
                    pass
                verify = ssl.create_default_context(cafile=self.tls[2]) if self.tls else True
                httpx.get(
                    f"{self.http_url}/healthz", headers=headers, timeout=1, verify=verify
                ).raise_for_status()
                return self
            except (OSError, httpx.HTTPError):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    pytest.fail(f"tidelog serve did not start: {self.stderr()}")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> KafkaServe:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
