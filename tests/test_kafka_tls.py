"""TLS on the Kafka port: `tidelog serve --tls-cert --tls-key` serves Kafka's SSL, and
SASL_SSL with a token, on the port it serves Kafka on; a plaintext client's connection
ends in the handshake, having written nothing; kcat and confluent-kafka go through."""

from __future__ import annotations

import socket
import struct
import subprocess
from collections.abc import Iterator

import confluent_kafka as ck
import pytest

from dumps import dump
from kafka_serve import KafkaServe, kcat

TOKEN = "tls-s3cret"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    where = tmp_path_factory.mktemp("tls")
    cert, key, ca_pem = where / "cert.pem", where / "key.pem", where / "ca.pem"
    leaf.cert_chain_pems[0].write_to_path(cert)
    leaf.private_key_pem.write_to_path(key)
    ca.cert_pem.write_to_path(ca_pem)
    return str(cert), str(key), str(ca_pem)


@pytest.fixture(params=["SSL", "SASL_SSL"])
def served(request, tmp_path, certificates) -> Iterator[KafkaServe]:
    token = TOKEN if request.param == "SASL_SSL" else None
    with KafkaServe(tmp_path / "tls.db", token=token, tls=certificates) as server:
        yield server


def test_a_client_produces_and_consumes_over_tls(served):
    producer = ck.Producer(served.client_config())
    for i in range(5):
        producer.produce("secure", key=b"k", value=b"v%d" % i)
    assert producer.flush(30) == 0
    consumer = ck.Consumer(served.client_config(**{"group.id": "g", "auto.offset.reset": "earliest"}))
    consumer.subscribe(["secure"])
    got: list[bytes] = []
    for _ in range(30):
        got += [m.value() for m in consumer.consume(10, 1.0) if m.error() is None]
        if len(got) == 5:
            break
    consumer.close()
    assert got == [b"v%d" % i for i in range(5)]
    assert served.stderr().count("security.protocol=" + served.client_config()["security.protocol"]) == 1


def test_a_plaintext_client_on_the_tls_port_is_refused_and_writes_nothing(served):
    before = dump(served.target)
    # ApiVersions v0 in plain bytes: the server reads it as a TLS record and hangs up.
    request = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
    with socket.create_connection(("127.0.0.1", served.kafka_port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        sock.settimeout(10)
        said = b""
        try:
            while chunk := sock.recv(4096):
                said += chunk
        except ConnectionResetError:
            pass
    assert not said.startswith(struct.pack(">i", len(said) - 4))  # no Kafka answer came back
    plain = ck.Producer({"bootstrap.servers": served.bootstrap, "message.timeout.ms": 3000})
    reports: list[object] = []
    plain.produce("plain", b"x", on_delivery=lambda err, msg: reports.append(err))
    plain.flush(15)
    assert len(reports) == 1 and reports[0] is not None  # not delivered: it timed out
    assert dump(served.target) == before


def test_kcat_over_tls(served):
    binary = kcat()
    args = [
        binary,
        "-b",
        served.bootstrap,
        "-X",
        f"security.protocol={served.client_config()['security.protocol']}",
    ]
    args += ["-X", f"ssl.ca.location={served.tls[2]}"]
    if served.token:
        args += [
            "-X",
            "sasl.mechanisms=PLAIN",
            "-X",
            "sasl.username=u",
            "-X",
            f"sasl.password={served.token}",
        ]
    subprocess.run([*args, "-P", "-t", "kc", "-K:"], input=b"a:1\nb:2\n", check=True, timeout=60)
    read = subprocess.run(
        [*args, "-C", "-t", "kc", "-o", "beginning", "-e", "-f", "%k=%s\\n"], capture_output=True, timeout=60
    )
    assert read.stdout.decode().splitlines() == ["a=1", "b=2"], read.stderr
