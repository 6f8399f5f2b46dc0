"""Apache Kafka itself, the reference the differential suite (tests/kafka/) compares tidelog with.

    broker = shared_broker()          # one KRaft node for the whole run, started on first use
    broker.bootstrap                  # "127.0.0.1:PORT"
    run_tool("kafka-topics", "--bootstrap-server", broker.bootstrap, "--list")

Kafka's jars come from Maven Central through the pom beside the tests
(tests/tools/kafka/pom.xml), copied once into a cache outside the checkout
(`$XDG_CACHE_HOME/tidelog/kafka-<version>/libs`, a marker file says the copy
is whole) and reused by every run. A node is one JVM, `kafka.Kafka` in
KRaft combined mode (broker and controller) on two free loopback ports,
with Kafka's own defaults but for what one node needs (replication factors
of 1, as Kafka's sample server.properties sets them).

One broker serves the whole run, whatever the number of xdist workers: a JVM
a worker would cost each of them a start (seconds of CPU on a 2-core
machine) and a heap. The controller names a run directory before its workers
start (`plan_run`, from tests/conftest.py); the first worker that asks for the
broker starts it under a file lock there and writes its address to a state
file; the others read it; the controller stops it at the end (`stop_run`).
Tests share it, so each uses topic and group names of its own (`unique`).
The JVM runs under a watchdog (this module run as a script) that stops it
when the controller's process is gone, so a run killed mid-way leaves no broker.

Java 17 and Maven are needed: without them the tests skip with the reason on
a laptop and fail under CI (`need_service`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from locks import locked as _locked  # kafka_clients.py takes it from here too

KAFKA_VERSION = "4.4.0"
POM = Path(__file__).parent / "tools" / "kafka" / "pom.xml"
RUN_ENV = "TIDELOG_KAFKA_RUN"  # the run directory, named by the controller for its workers
OWNER_ENV = "TIDELOG_KAFKA_OWNER"  # the controller's pid: the broker lives while it does
START_TIMEOUT_S = 90
TOOL_TIMEOUT_S = 60
COPY_TIMEOUT_S = 600
# A node of the tests: a small heap, the client compiler alone and one GC thread (most
# of what a broker does here is start and answer a few requests), no bytecode checks.
JVM_FLAGS = [
    "-Xms64m",
    "-Xmx512m",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-XX:+UnlockDiagnosticVMOptions",
    "-XX:-BytecodeVerificationRemote",
    "-Djava.awt.headless=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
]
# A command-line tool: the same, and quiet (its output is what a test reads).
TOOL_FLAGS = [*JVM_FLAGS[2:], "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=error"]


def need(what: str, reason: str) -> None:
    from conftest import need_service

    need_service(what, reason)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tidelog" / f"kafka-{KAFKA_VERSION}"


def java() -> str:
    path = shutil.which("java")
    if path is None:
        need("Java", "install a JDK 17 or later (apt-get install openjdk-17-jre-headless)")
    return str(path)


def libs() -> Path:
    """The directory of Kafka's jars, copied from Maven Central on first use (under a lock)."""
    cache = cache_dir()
    done = cache / "libs" / ".complete"
    if done.exists():
        return done.parent
    java()
    mvn = shutil.which("mvn")
    if mvn is None:
        need("Maven", "install Maven 3.8 or later (apt-get install maven) to fetch Apache Kafka's jars")
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / ".lock"):
        if done.exists():  # another process copied them while this one waited
            return done.parent
        partial = Path(tempfile.mkdtemp(prefix="libs-", dir=cache))
        argv = [str(mvn), "-q", "-B", "-f", str(POM), "dependency:copy-dependencies"]
        argv += [f"-DoutputDirectory={partial}", f"-Dkafka.version={KAFKA_VERSION}"]
        copied = subprocess.run(argv, capture_output=True, text=True, timeout=COPY_TIMEOUT_S)
        if copied.returncode != 0 or not list(partial.glob("kafka_2.13-*.jar")):
            shutil.rmtree(partial, ignore_errors=True)
            need("Apache Kafka's jars", f"mvn failed: {(copied.stdout + copied.stderr)[-2000:]}")
        shutil.rmtree(cache / "libs", ignore_errors=True)  # a copy cut short by a kill
        partial.rename(cache / "libs")
        done.touch()
    return done.parent


# Kafka's command-line scripts and the main class each runs (bin/*.sh of Kafka's distribution).
TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-storage": "kafka.tools.StorageTool",
}


def java_argv(main_class: str, *args: str, flags: list[str] | None = None) -> list[str]:
    return [java(), *(TOOL_FLAGS if flags is None else flags), "-cp", f"{libs()}/*", main_class, *args]


def run_tool(tool: str, *args: str, timeout: float = TOOL_TIMEOUT_S, input: str | None = None):
    """Run one of Kafka's command-line tools with `args`, by its script's name (TOOLS:
    "kafka-topics", "kafka-consumer-groups", ...) or a main class; its CompletedProcess (text)."""
    env = {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}
    return subprocess.run(
        java_argv(TOOLS.get(tool, tool), *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        env=env,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes in URL-safe base64, not starting with '-' (Kafka's Uuid)."""
    while True:
        text = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def server_properties(data: Path, port: int, controller_port: int) -> str:
    """One KRaft node, broker and controller, on loopback; Kafka's defaults otherwise,
    but the replication factors of Kafka's sample config (one node has one replica)."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data),
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        # Kafka's sample config: a lone consumer is not kept waiting 3 s for others to join.
        "group.initial.rebalance.delay.ms": "0",
    }
    return "".join(f"{k}={v}\n" for k, v in settings.items())


@dataclass(frozen=True)
class Broker:
    """A running reference node: where clients find it, and the watchdog that holds its JVM."""

    host: str
    port: int
    pid: int
    cluster_id: str
    log: str

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def stderr(self) -> str:
        try:
            return Path(self.log).read_text()[-3000:]
        except OSError:
            return ""


def start(directory: Path, owner: int) -> Broker:
    """Format a node's storage in `directory` and start it; return once it answers
    Metadata and a group coordinator (the offsets topic made), or fail with its log."""
    directory.mkdir(parents=True, exist_ok=True)
    port, controller_port = free_port(), free_port()
    config = directory / "server.properties"
    config.write_text(server_properties(directory / "data", port, controller_port))
    cid = cluster_id()
    formatted = run_tool("kafka-storage", "format", "-t", cid, "-c", str(config), "--ignore-formatted")
    if formatted.returncode != 0:
        raise RuntimeError(f"kafka-storage format failed: {formatted.stdout}{formatted.stderr}")
    log = directory / "broker.log"
    env = {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}
    argv = [sys.executable, __file__, "watch", str(owner), "--"]
    argv += java_argv("kafka.Kafka", str(config), flags=JVM_FLAGS)
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out, env=env, start_new_session=True)
    broker = Broker("127.0.0.1", port, proc.pid, cid, str(log))
    try:
        _wait_ready(broker, proc)
    except BaseException:
        stop(broker.pid)
        raise
    return broker


def _wait_ready(broker: Broker, proc: subprocess.Popen[bytes]) -> None:
    from kafka_wire import KafkaWire

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"Apache Kafka exited with {proc.returncode}: {broker.stderr()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"Apache Kafka did not answer in {START_TIMEOUT_S} s: {broker.stderr()}")
        try:
            with KafkaWire(broker.host, broker.port) as wire:
                meta = wire.call(3, 12, {"topics": None, "allow_auto_topic_creation": False})
                if not meta.brokers:
                    raise ConnectionError("no broker registered yet")
                # The first group request makes __consumer_offsets (50 partitions): done
                # here once, so no test sees COORDINATOR_NOT_AVAILABLE while it is made.
                found = wire.call(10, 4, {"key_type": 0, "coordinator_keys": ["tidelog-warm-up"]})
                if found.coordinators[0].error_code == 0:
                    return
        except (OSError, ConnectionError, struct.error):
            pass
        time.sleep(0.2)  # a JVM starting: nothing to wait on but its port and its answers


def stop(pid: int) -> None:
    """Stop a broker's watchdog (it stops the JVM, Kafka's clean shutdown, then waits)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


# One broker a run -------------------------------------------------------------------


def plan_run() -> None:
    """In the controller, before its workers start: name the run's directory for them."""
    if RUN_ENV not in os.environ:
        os.environ[RUN_ENV] = tempfile.mkdtemp(prefix="tl-kafka-run-")
        os.environ[OWNER_ENV] = str(os.getpid())


def stop_run() -> None:
    """In the controller, at the end: stop the run's broker, if one was started, and clean up."""
    run = os.environ.get(RUN_ENV)
    if run is None or os.environ.get(OWNER_ENV) != str(os.getpid()):
        return
    state = Path(run) / "broker.json"
    if state.exists():
        with contextlib.suppress(ValueError, KeyError):
            stop(json.loads(state.read_text())["pid"])
    shutil.rmtree(run, ignore_errors=True)


_shared: Broker | None = None


def shared_broker() -> Broker:
    """The run's broker: started by the first process that asks, read from the state file by the rest.
    A start that failed is recorded, so the others fail at once with its reason."""
    global _shared
    if _shared is not None:
        return _shared
    libs()  # skips (or fails under CI) without Java or Maven, before any lock is taken
    plan_run()  # a process that is not under pytest's controller owns its own run
    run = Path(os.environ[RUN_ENV])
    state, failed = run / "broker.json", run / "failed.txt"
    with _locked(run / "lock"):
        if failed.exists():
            raise RuntimeError(f"the run's Apache Kafka failed to start: {failed.read_text()}")
        if not state.exists():
            try:
                broker = start(run / "broker", int(os.environ[OWNER_ENV]))
            except Exception as e:
                failed.write_text(str(e))
                raise
            state.write_text(json.dumps(broker.__dict__))
        _shared = Broker(**json.loads(state.read_text()))
    return _shared


def unique(prefix: str) -> str:
    """A topic or group name no other test of the run uses (they share one broker)."""
    return f"{prefix}-{secrets.token_hex(4)}"


# The watchdog: `python kafka_reference.py watch OWNER -- java ...` ------------------------


def _watch(owner: int, argv: list[str]) -> int:
    """Run `argv` until it exits, this process is told to stop, or `owner` is gone;
    then stop it (SIGTERM: Kafka's clean shutdown) and wait, SIGKILL after 20 s."""
    child = subprocess.Popen(argv)
    stopping = False

    def on_term(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    while child.poll() is None:
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            stopping = True
        if stopping:
            child.terminate()
            try:
                return child.wait(20)
            except subprocess.TimeoutExpired:
                child.kill()
                return child.wait()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(1)
    return child.returncode


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "watch" and sys.argv[3] == "--":
        sys.exit(_watch(int(sys.argv[2]), sys.argv[4:]))
    sys.exit("usage: kafka_reference.py watch OWNER_PID -- COMMAND...")
