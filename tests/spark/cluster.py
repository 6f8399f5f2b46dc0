"""A Spark standalone cluster on loopback, started from the pyspark package.

A master and two workers, each its own JVM started with `spark-class`
(pip's pyspark ships `bin/` but not the `sbin/` start scripts). Every
process is started in a session of its own and stopped by PID, with the
executors and Python workers under it, so a failing test leaves nothing
behind and a test may SIGKILL one executor on purpose.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.server.http.thread import free_port
from worker_process import process_tree  # tests/worker_process.py

EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
START_TIMEOUT_S = 180


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


@dataclass
class Cluster:
    """`master` is the spark:// URL; `workers` their PIDs; logs under `root`."""

    root: Path
    cores_per_worker: int = 2
    worker_memory: str = "1g"
    master: str = ""
    master_pid: int = 0
    workers: list[int] = field(default_factory=list)
    _procs: list[subprocess.Popen] = field(default_factory=list)

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SPARK_HOME": spark_home(),
            # Bind the daemons and their web UIs to loopback, and name them by it.
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_PUBLIC_DNS": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            "SPARK_LOG_DIR": str(self.root),
        }

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        with open(self.root / f"{name}.log", "ab") as out:
            proc = subprocess.Popen(
                [os.path.join(spark_home(), "bin", "spark-class"), *args],
                env=self._env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,  # apart from the tests' process group
            )
        self._procs.append(proc)
        return proc

    def start(self, workers: int = 2) -> Cluster:
        self.root.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.master = f"spark://127.0.0.1:{port}"
        master = self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"),
        )
        self.master_pid = master.pid  # spark-class execs java: the PID is the JVM's
        for i in range(workers):
            proc = self._spawn(
                f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                *("--host", "127.0.0.1", "--webui-port", "0"),
                *("--cores", str(self.cores_per_worker), "--memory", self.worker_memory),
                *("--work-dir", str(self.root / f"work-{i}"), self.master),
            )
            self.workers.append(proc.pid)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(self._registered(i) for i in range(workers)):
            dead = [p for p in self._procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(p.read_text(errors="replace")[-1500:] for p in self.root.glob("*.log"))
                self.stop()
                raise RuntimeError(f"the Spark cluster did not start:\n{logs}")
            time.sleep(0.2)
        return self

    def _registered(self, i: int) -> bool:
        log = self.root / f"worker-{i}.log"
        return log.exists() and "Successfully registered with master" in log.read_text(errors="replace")

    def executors(self, app_id: str | None = None) -> list[int]:
        """PIDs of the executor JVMs the workers run (of one application, if given)."""
        found = []
        for worker in self.workers:
            for pid in process_tree(worker)[1:]:
                args = _cmdline(pid)
                if EXECUTOR in args and (app_id is None or app_id in args):
                    found.append(pid)
        return found

    def kill_executor(self, app_id: str) -> int:
        """SIGKILL one executor of `app_id` and its Python workers, as a lost machine would."""
        deadline = time.monotonic() + 60
        while not (pids := self.executors(app_id)):
            if time.monotonic() > deadline:
                raise AssertionError(f"no executor of {app_id} runs on the cluster")
            time.sleep(0.1)
        victim = pids[0]
        for pid in process_tree(victim):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return victim

    def stop(self) -> None:
        """Stop every process started here, and all under them, by PID."""
        # (pid, start time): a PID freed meanwhile and reused by another process is left alone.
        tree = [(pid, _started(pid)) for proc in self._procs for pid in process_tree(proc.pid)]
        for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            for pid, started in tree:
                if started is not None and _started(pid) == started:
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and any(p.poll() is None for p in self._procs):
                time.sleep(0.1)
        for proc in self._procs:
            proc.wait(10)
        self._procs.clear()


def _started(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
