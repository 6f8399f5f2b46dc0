"""The README's first command on a fresh clone: `make run` installs the server extra
alone into the clone's own venv and serves HTTP, Redis and Kafka (issue 38: a fresh
clone's `make run` crashed on an import the suite, which installs every extra, never
missed). Its bad inputs answer in one line, exit non-zero and create nothing.

A "fresh clone" is the checkout's tracked files, as they are in the working tree,
copied to a temporary folder: what `git clone` gives, with this change in it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import need_service
from tidelog.server.http.thread import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[1]
START_TIMEOUT_S = 180  # a venv, uv from PyPI, the server extra from uv's cache


def make_env() -> dict[str, str]:
    """The environment of a person's shell: no venv active, no outer make's flags."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VIRTUAL_ENV")
    }
    env.pop("TIDELOG_KAFKA_PORT", None)  # set by conftest for the suite's own servers
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(ROOT)))
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("make") is None:
        need_service("make", "apt-get install make")
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        need_service("git and the checkout's history", str(e))
    target = tmp_path_factory.mktemp("clone")
    for name in listed.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():  # a file deleted in the working tree is not in the clone
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def make(clone: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=clone,
        env=make_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def entries(clone: Path) -> set[str]:
    """The clone's top-level entries: a venv or a database made shows here."""
    return {p.name for p in clone.iterdir()}


class Running:
    """`make run` in its own process group, with the ports it was given."""

    def __init__(self, clone: Path, db: Path):
        self.port, self.redis_port, self.kafka_port = free_port(), free_port(), free_port()
        self.log = clone / "make-run.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    "make",
                    "--no-print-directory",
                    "run",
                    f"PORT={self.port}",
                    f"REDIS_PORT={self.redis_port}",
                    f"KAFKA_PORT={self.kafka_port}",
                    f"DB={db}",
                    f"PYTHON={sys._base_executable}",
                ],
                cwd=clone,
                env=make_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def wait_healthy(self) -> httpx.Response:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                return httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=2)
            except httpx.HTTPError:
                if self.proc.poll() is not None:
                    pytest.fail(f"make run ended with {self.proc.returncode}:\n{self.output()}")
                if time.monotonic() > deadline:
                    pytest.fail(f"make run did not answer in {START_TIMEOUT_S} s:\n{self.output()}")
                time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture(scope="module")
def running(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    db = tmp_path_factory.mktemp("served") / "tidelog.db"
    server = Running(clone, db)
    try:
        yield server
    finally:
        server.stop()


def test_a_port_that_is_not_one_stops_make_run_before_it_installs_anything(clone):
    before = entries(clone)
    for setting in ("PORT=notaport", "REDIS_PORT=70000", "KAFKA_PORT=", "PORT=-1"):
        result = make(clone, "run", setting)
        assert result.returncode != 0, result
        name, _, value = setting.partition("=")
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert f"{name} must be a port number from 0 to 65535, not '{value}'" in lines[0]
        assert entries(clone) == before  # no .venv, no database


def test_make_run_on_a_fresh_clone_serves_http_redis_and_kafka(running, clone):
    health = running.wait_healthy()
    assert health.status_code == 200, health.text
    # The venv holds the server extra and nothing more (make run installs what serving needs).
    python = clone / ".venv" / "bin" / "python"
    absent = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.util as u; print([m for m in ('pytest', 'psycopg', 'pyspark') if u.find_spec(m)])",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert absent.stdout.strip() == "[]", absent

    sent = httpx.post(
        f"http://127.0.0.1:{running.port}/v1/topics/hello/records", json={"records": [{"value": "hi"}]}
    )
    assert sent.status_code in (200, 201), sent.text

    redis = pytest.importorskip("redis")
    client = redis.Redis(port=running.redis_port, socket_timeout=5)
    try:
        assert client.ping() is True
        assert client.xlen("hello") == 1
    finally:
        client.close()

    kafka = pytest.importorskip("confluent_kafka.admin")
    admin = kafka.AdminClient({"bootstrap.servers": f"127.0.0.1:{running.kafka_port}"})
    metadata = admin.list_topics(topic="hello", timeout=10)
    assert metadata.topics["hello"].error is None
    assert list(metadata.topics["hello"].partitions) == [0]


def test_make_run_refuses_a_directory_for_the_database_in_one_line(running, clone, tmp_path):
    running.wait_healthy()  # the venv is there now; this run stops at the database
    folder = tmp_path / "a-folder"
    folder.mkdir()
    result = make(clone, "run", f"DB={folder}", f"PORT={free_port()}", "REDIS_PORT=0", "KAFKA_PORT=0")
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if not line.startswith("make: ***")]
    assert errors == [f"Error: '{folder}' is a directory: name the database file (e.g. {folder}/tidelog.db)"]
    assert list(folder.iterdir()) == []


def test_tidelog_serve_without_the_server_extra_names_it(clone, tmp_path):
    uv = Path(sys.executable).with_name("uv")
    if not uv.exists():
        need_service("uv", "make test installs it into .venv")
    venv = tmp_path / "cli-only"
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True, timeout=60)
    subprocess.run(
        [
            str(uv),
            "pip",
            "install",
            "--quiet",
            "--python",
            str(venv / "bin" / "python"),
            "-e",
            f"{clone}[cli]",
        ],
        check=True,
        timeout=120,
        env=make_env(),
    )
    db = tmp_path / "never.db"
    result = subprocess.run(
        [str(venv / "bin" / "tidelog"), "serve", "--db", str(db), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env=make_env(),
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: tidelog serve needs the server extra (")
    assert lines[0].endswith("missing): pip install 'tidelog[server]'")
    assert not db.exists()
