"""The client matrix's programs (tests/kafka/test_clients_*.py): Kafka clients in other
languages, each a small program under tests/tools/ that pytest runs with arguments and
reads one JSON document from.

    franz = go_program("franz")                  # built once, reused by every run
    answer = run_json([franz, bootstrap, "produce", json.dumps({...})])

Each is built once into a cache outside the checkout, under a directory named by
a digest of its sources (a change builds it again; nothing is built in the work
tree): Go programs with `go build` (tests/tools/go, go.mod and go.sum pin
franz-go and sarama), kafkajs with `npm ci` from tests/tools/kafkajs's
package-lock.json, the Java program with Maven against the kafka-clients jar of
the reference broker (kafka_reference.KAFKA_VERSION). A missing toolchain skips
the tests with the reason on a laptop and fails them under CI (`need_service`).
The versions the docs' table of tested clients states are read from the same
files (`versions`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka_reference import KAFKA_VERSION, RUN_ENV, _locked, cache_dir, java, libs, need

TOOLS = Path(__file__).parent / "tools"
GO = TOOLS / "go"
KAFKAJS = TOOLS / "kafkajs"
JAVA = TOOLS / "java-clients"
BUILD_TIMEOUT_S = 600
RUN_TIMEOUT_S = 120


def _digest(root: Path, patterns: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for path in sorted(p for pattern in patterns for p in root.glob(pattern)):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _built(name: str, digest: str, build: Callable[[Path], None]) -> Path:
    """The cache directory of `name` at `digest`, `build(directory)` run into it once
    (under a lock, into a temporary directory renamed when whole)."""
    base = cache_dir().parent / f"clients-{name}"
    final = base / digest
    if (final / ".complete").exists():
        return final
    base.mkdir(parents=True, exist_ok=True)
    with _locked(base / ".lock"):
        if (final / ".complete").exists():
            return final
        partial = Path(tempfile.mkdtemp(prefix="build-", dir=base))
        try:
            build(partial)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        (partial / ".complete").touch()
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
    return final


def _run_build(argv: list[str], what: str, **kwargs: Any) -> None:
    """Run a build step (niced: it shares the machine with the tests); a failed build fails."""
    done = subprocess.run(["nice", *argv], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(
            f"building {what}: {' '.join(argv[:3])} failed: {(done.stdout + done.stderr)[-3000:]}"
        )


GO_PROGRAMS = ("franz", "sarama")


def go_program(name: str) -> Path:
    """tests/tools/go/<name> built (GO_PROGRAMS, built together): the binary's path."""
    go = shutil.which("go")
    if go is None:
        need("Go", "install Go 1.26 or later to build the franz-go and sarama programs")
    digest = _digest(GO, ("go.mod", "go.sum", "**/*.go"))

    def build(into: Path) -> None:
        argv = [str(go), "build", "-o", f"{into}/", *(f"./{p}" for p in GO_PROGRAMS)]
        _run_build(argv, "the Go client programs", cwd=GO)

    return _built("go", digest, build) / name


def kafkajs() -> list[str]:
    """The argv that runs tests/tools/kafkajs/clients.js with kafkajs from its package-lock.json."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        need("Node.js", "install Node.js 18 or later and npm to run kafkajs")
    digest = _digest(KAFKAJS, ("package.json", "package-lock.json"))

    def build(into: Path) -> None:
        for f in ("package.json", "package-lock.json"):
            shutil.copy(KAFKAJS / f, into / f)
        _run_build([str(npm), "ci", "--no-audit", "--no-fund", "--ignore-scripts"], "kafkajs", cwd=into)

    modules = _built("kafkajs", digest, build) / "node_modules"
    return [str(node), str(KAFKAJS / "clients.js"), str(modules)]


def java_clients() -> list[str]:
    """The argv that runs tests/tools/java-clients (kafka-clients KAFKA_VERSION, the reference's jars)."""
    jvm = java()
    mvn = shutil.which("mvn")
    if mvn is None:
        need("Maven", "install Maven 3.8 or later (apt-get install maven) to build the Java client program")
    jars = libs()
    digest = _digest(JAVA, ("pom.xml", "src/**/*.java")) + "-" + KAFKA_VERSION

    def build(into: Path) -> None:
        argv = [str(mvn), "-q", "-B", "-f", str(JAVA / "pom.xml"), "compile"]
        argv += [f"-Dkafka.version={KAFKA_VERSION}", f"-Dbuild.dir={into}"]
        _run_build(argv, "the Java client program")

    classes = _built("java", digest, build) / "classes"
    flags = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m"]
    return [jvm, *flags, "-cp", f"{classes}:{jars}/*", "tidelog.tests.Clients"]


def run_json(argv: list[str], timeout: float = RUN_TIMEOUT_S) -> Any:
    """Run a client program; its stdout's JSON document. Fails with its stderr when it fails."""
    env = {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        raise AssertionError(f"{Path(argv[0]).name} exited {done.returncode}: {done.stderr[-3000:]}")
    return json.loads(done.stdout)


def call(program: list[str], bootstrap: str, command: str, **args: Any) -> Any:
    """`program BOOTSTRAP COMMAND JSON`, the programs' common command line."""
    return run_json([*program, bootstrap, command, json.dumps(args)])


# The versions the tests run, from the files that pin them --------------------------------


def versions() -> dict[str, str]:
    """Each client's version as the tests pin it: the table in docs/guides/kafka.md must agree."""
    gomod = (GO / "go.mod").read_text()
    lock = json.loads((KAFKAJS / "package-lock.json").read_text())
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()

    def go(module: str) -> str:
        return re.search(rf"^\s*{re.escape(module)} (v\S+)", gomod, re.M).group(1)  # type: ignore[union-attr]

    def py(name: str) -> str:
        return re.search(rf'"{re.escape(name)}(>=[^"]+)"', pyproject).group(1)  # type: ignore[union-attr]

    return {
        "Java kafka-clients": KAFKA_VERSION,
        "Kafka's command-line tools": KAFKA_VERSION,
        "confluent-kafka": py("confluent-kafka"),
        "kafka-python": py("kafka-python"),
        "aiokafka": py("aiokafka"),
        "kafkajs": lock["packages"]["node_modules/kafkajs"]["version"],
        "franz-go": go("github.com/twmb/franz-go"),
        "franz-go kadm": go("github.com/twmb/franz-go/pkg/kadm"),
        "sarama": go("github.com/IBM/sarama"),
    }


def make_topic(target: Any, topic: str, partitions: int) -> None:
    """CreateTopics of `topic` on `target` (a kafka_diff.Target), then wait until every
    broker of it knows the topic (Kafka's brokers learn of it from the controller)."""
    from kafka_diff import until

    with target.wire() as wire:
        made = wire.call(
            19,
            7,
            {
                "topics": [
                    {
                        "name": topic,
                        "num_partitions": partitions,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout": 30_000,
                "validate_only": False,
            },
        )
    assert made.topics[0].error_code == 0, made
    for which in range(len(target.bootstraps)):

        def known(which: int = which) -> bool:
            with target.wire(which) as wire:
                meta = wire.call(
                    3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False}
                )
            return meta.topics[0].error_code == 0 and len(meta.topics[0].partitions) == partitions

        until(known, f"{target} to know {topic}")


# Kafka's answers, once a run ---------------------------------------------------------


def run_name(prefix: str) -> str:
    """A topic or group name of this run, the same in every worker: a scenario runs under
    one name on Kafka and on each tidelog cluster (separate clusters), so the names in what
    the clients print compare equal."""
    run = os.environ[RUN_ENV]
    return f"{prefix}-{hashlib.sha256(run.encode()).hexdigest()[:8]}"


def jsonable(value: Any) -> Any:
    """`value` as JSON gives it back (tuples as lists, bytes as text): how an answer is kept."""
    return json.loads(json.dumps(value, default=lambda b: b.decode("utf-8", "replace")))


def reference(key: str, scenario: Callable[[], Any]) -> Any:
    """Apache Kafka's answer to `scenario`, run once a run whatever the number of xdist
    workers (a file in the run's directory, under a lock), as `jsonable` keeps it. The
    tidelog fixture's stores often land on two workers, and a scenario's JVM tools and
    clients on Kafka cost as much as on tidelog: each run once instead of twice."""
    run = Path(os.environ[RUN_ENV])
    kept = run / f"reference-{key}.json"
    with _locked(run / f"reference-{key}.lock"):
        if kept.exists():
            return json.loads(kept.read_text())
        answer = jsonable(scenario())
        kept.write_text(json.dumps(answer))
    return answer
