"""Spark's Kafka connector (spark-sql-kafka-0-10) for the tests: its jars from Maven
Central, and a Spark driver that holds them, in a process of its own.

    jars = connector_jars()                     # fetched once into a cache outside the checkout
    with ConnectorProcess(jars, log) as spark:  # kafka_job.py serve: a driver with the connector
        spark.call("read", options={...})       # runs one step, answers with its result

The jars come through tests/tools/spark-kafka/pom.xml, copied once into
`$XDG_CACHE_HOME/tidelog/spark-kafka-<pyspark version>/jars` (a marker file
says the copy is whole and names the connector's version) and reused by
every run. The pom leaves out what pyspark's own jars directory holds
(Scala, Hadoop's client, slf4j, the codecs): the copy is the connector,
Spark's token provider for Kafka, kafka-clients and commons-pool2.

The connector's version is the installed pyspark's. Maven Central has
Spark 4.3.0's spark-core and spark-sql but not its spark-sql-kafka-0-10
(December 2026), so for 4.3.0 the newest connector it has, 4.2.0, stands
in, tried only when the exact one is missing; the tests show it runs.

Why a process of its own: PySpark starts its JVM once a process, with the
classpath of the first session, and spark.jars reaches a driver only as it
starts. The tests' shared session (tests/spark/conftest.py) was started
without the connector and cannot take it later.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from conftest import need_service  # tests/conftest.py
from worker_process import kill_all  # tests/worker_process.py

POM = Path(__file__).parent.parent / "tools" / "spark-kafka" / "pom.xml"
JOB = Path(__file__).parent / "kafka_job.py"
COPY_TIMEOUT_S = 600
START_TIMEOUT_S = 240
# Connector versions Maven Central lacks, and the release that stands in for each.
STAND_INS = {"4.3.0": "4.2.0"}


def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tidelog" / f"spark-kafka-{spark_version()}"


def connector_version() -> str:
    """The connector's version in the cache (connector_jars() fetches it first)."""
    connector_jars()
    return (cache_dir() / "jars" / ".complete").read_text().strip()


def connector_jars() -> list[str]:
    """The connector's jars, copied from Maven Central on first use (under a lock);
    skips without Java or Maven (fails under CI)."""
    cache = cache_dir()
    done = cache / "jars" / ".complete"
    if not done.exists():
        _copy(cache)
    return sorted(str(p) for p in done.parent.glob("*.jar"))


def _copy(cache: Path) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        need_service("Java", "install a JDK 17 or later (apt-get install openjdk-17-jre-headless)")
    mvn = shutil.which("mvn")
    if mvn is None:
        need_service(
            "Maven", "install Maven 3.8 or later (apt-get install maven) to fetch Spark's Kafka connector"
        )
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / ".lock"):
        done = cache / "jars" / ".complete"
        if done.exists():  # another process copied them while this one waited
            return
        failures = []
        wanted = spark_version()
        for version in dict.fromkeys([wanted, STAND_INS.get(wanted, wanted)]):
            partial = Path(tempfile.mkdtemp(prefix="jars-", dir=cache))
            argv = [mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies"]
            argv += [f"-DoutputDirectory={partial}", f"-Dspark.version={version}"]
            copied = subprocess.run(argv, capture_output=True, text=True, timeout=COPY_TIMEOUT_S)
            if copied.returncode == 0 and list(partial.glob("spark-sql-kafka-0-10_*.jar")):
                shutil.rmtree(cache / "jars", ignore_errors=True)  # a copy cut short by a kill
                partial.rename(cache / "jars")
                done.write_text(version + "\n")
                return
            shutil.rmtree(partial, ignore_errors=True)
            failures.append(f"{version}: {(copied.stdout + copied.stderr)[-1500:]}")
        need_service("Spark's Kafka connector", "mvn failed: " + " | ".join(failures))


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def job_argv(mode: str, jars: list[str], *args: str) -> list[str]:
    """The command line of kafka_job.py in `mode` ("run" or "serve")."""
    return [sys.executable, str(JOB), mode, ",".join(jars), *args]


class ConnectorProcess:
    """kafka_job.py serve: a Spark driver with the connector that runs the steps the
    test sends (one JSON line each on its stdin) and answers each with one JSON line.
    Spark's own output goes to `log`."""

    def __init__(self, jars: list[str], log: Path) -> None:
        self.jars = jars
        self.log = log
        self.proc: subprocess.Popen[str] | None = None
        self._answers: queue.Queue[str | None] = queue.Queue()

    def start(self) -> ConnectorProcess:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                job_argv("serve", self.jars),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,
            )
        # A thread reads the answers, so a call can wait with a timeout on a queue.
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()
        self.call("ready", timeout=START_TIMEOUT_S)
        return self

    def _read(self, stream: Any) -> None:
        for line in stream:
            self._answers.put(line)
        self._answers.put(None)

    def call(self, step: str, timeout: float = START_TIMEOUT_S, **args: Any) -> Any:
        """Run `step` with `args` in the process; its result, or AssertionError with the process's error."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"step": step, **args}) + "\n")
        self.proc.stdin.flush()
        try:
            line = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"{step} took more than {timeout} s: {self.tail()}") from None
        if line is None:
            raise AssertionError(f"the Spark process exited during {step}: {self.tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise AssertionError(f"{step} failed in Spark: {answer['error']}")
        return answer["result"]

    def tail(self) -> str:
        try:
            return self.log.read_text()[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # end of input: the process stops its session and exits
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                kill_all(self.proc)

    def __enter__(self) -> ConnectorProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
