"""What became of a job, from the shell and over HTTP (issue 31):
`tidelog jobs status | result | cancel | schedules` against an embedded log
(SQLite, PostgreSQL) and a served one (`--db http://...`), in-process and
through the installed command, and GET /v1/jobs/{id} with its cancel. The
runner of the served case runs on the http:// store, so its records of each
run travel through the server too. Refused input changes nothing (a dump of
the store before and after). Python and asyncio: tests/conformance/test_job_results.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import tidelog
from dumps import dump
from pgschema import postgres_schema
from tidelog.cli.app import cli

SCRIPT = Path(sys.executable).with_name("tidelog")
TIDELOG = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "tidelog.cli"]


class Where:
    """A log the commands run against (`db`: their --db) and the store behind it (`store`)."""

    def __init__(self, db: str, store: str, server: Any = None):
        self.db = db
        self.store = store
        self.server = server

    def run(self, *args: str) -> Any:
        return CliRunner().invoke(cli, ["--db", self.db, *args], catch_exceptions=False)


@pytest.fixture(params=["sqlite", "postgres", "served"])
def where(request: pytest.FixtureRequest, tmp_path: Path, serve: Any) -> Iterator[Where]:
    if request.param == "sqlite":
        path = str(tmp_path / "jobs.db")
        yield Where(path, path)
    elif request.param == "postgres":
        with postgres_schema() as url:
            yield Where(url, url)
    else:
        path = str(tmp_path / "served.db")
        server = serve(path, clean_interval=0)
        yield Where(server.url, path, server)


@pytest.fixture
def finished(where: Where) -> Iterator[dict[str, str]]:
    yield three_jobs(where.db)


def three_jobs(db: str) -> dict[str, str]:
    """A runner on `db` (on a server: through the http:// store) that finished
    one job, dead-lettered one, and left a delayed one waiting: their ids."""
    with tidelog.open(db) as log:
        return _three_jobs(log)


def _three_jobs(log: tidelog.Log) -> dict[str, str]:
    jobs = tidelog.Jobs(log, queue="work", max_deliveries=1)

    @jobs.job("greet")
    def greet(name: str) -> str:
        return f"hello {name}"

    @jobs.job("fail")
    def fail(_: Any) -> None:
        raise ValueError("bad input")

    done, dead = jobs.enqueue("greet", "ada"), jobs.enqueue("fail")
    later = jobs.enqueue("greet", "bob", delay=3600)
    runner = threading.Thread(target=jobs.run, kwargs={"poll": 0.05, "install_signals": False})
    runner.start()
    try:
        assert done.result(timeout=20) == "hello ada"
        with pytest.raises(tidelog.JobFailed):
            dead.result(timeout=20)
    finally:
        jobs.stop()
        runner.join(20)
    return {"done": done.id, "dead": dead.id, "later": later.id}


def test_status_result_and_cancel_from_the_shell(where: Where, finished: dict[str, str]) -> None:
    out = where.run("jobs", "status", finished["done"], "--queue", "work", "--json")
    assert out.exit_code == 0, out.output
    status = json.loads(out.stdout)
    assert (status["status"], status["result"], status["attempts"]) == ("done", "hello ada", 1)
    human = where.run("jobs", "status", finished["dead"], "--queue", "work")
    assert "dead-lettered" in human.stdout and "ValueError: bad input" in human.stdout
    result = where.run("jobs", "result", finished["done"], "--queue", "work")
    assert (result.exit_code, json.loads(result.stdout)) == (0, "hello ada")
    failed = where.run("jobs", "result", finished["dead"], "--queue", "work")
    assert failed.exit_code == 1 and "dead-lettered: ValueError: bad input" in failed.output
    waiting = where.run("jobs", "result", finished["later"], "--queue", "work", "--wait", "0.2")
    assert waiting.exit_code == 1 and "has not finished" in waiting.output
    delayed = where.run("groups", "describe", "work", "--json")
    assert json.loads(delayed.stdout)["delayed"] == 1
    cancelled = where.run("jobs", "cancel", finished["later"], "--queue", "work", "--json")
    assert json.loads(cancelled.stdout)["status"] == "cancelled"
    # Cancelled, the job is finished: no longer counted as delayed while its delay runs.
    described = json.loads(where.run("groups", "describe", "work", "--json").stdout)
    assert (described["available"], described["in_flight"], described["delayed"]) == (0, 0, 0)
    # Through the installed command too.
    real = subprocess.run(
        [*TIDELOG, "--db", where.db, "jobs", "status", finished["later"], "--queue", "work", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert real.returncode == 0, real.stderr
    assert json.loads(real.stdout)["status"] == "cancelled"


def test_refused_shell_requests_change_nothing(where: Where, finished: dict[str, str]) -> None:
    before = dump(where.store)
    refused = [
        (["jobs", "cancel", finished["done"], "--queue", "work"], "is done"),
        (["jobs", "status", "0-999", "--queue", "work"], "no job '0-999'"),
        (["jobs", "result", "3-1", "--queue", "work"], "no job '3-1'"),
        (["jobs", "cancel", "0-999", "--queue", "work"], "no job"),
        (["jobs", "status", "nope", "--queue", "work"], "a job id is <partition>-<offset>"),
        (["jobs", "status", finished["done"], "--queue", "bad name"], "queue"),
    ]
    for args, says in refused:
        out = where.run(*args)
        assert out.exit_code != 0 and says in out.output, (args, out.output)
    assert dump(where.store) == before


def test_status_of_a_record_that_was_never_a_job_says_so(where: Where) -> None:
    # What a reader who followed the job-queue guide's queue-group part finds on the topic.
    with tidelog.open(where.db) as log:
        sent = log.queue("emails", group="mailer").send({"to": "a@b.c"})
    before = dump(where.store)
    for verb in ("status", "cancel"):
        out = where.run("jobs", verb, f"{sent.partition}-{sent.offset}", "--queue", "emails")
        assert (out.exit_code, out.stdout) == (1, ""), out.output
        assert out.stderr == (
            "Error: '0-1' of queue 'emails' is not a job: the record at emails/0 offset 1 was not "
            'enqueued by a job runner (a job\'s value is {"job": name, "payload": ...})\n'
        )
    assert dump(where.store) == before


def test_the_http_api_answers_status_result_error_and_cancel(tmp_path: Path, serve: Any) -> None:
    server = serve(str(tmp_path / "served.db"), clean_interval=0)
    where = Where(server.url, str(tmp_path / "served.db"), server)
    ids = three_jobs(server.url)
    base = server.url + "/v1/jobs/"
    done = httpx.get(base + ids["done"], params={"queue": "work"}).json()
    assert (done["status"], done["result"], done["error"]) == ("done", "hello ada", None)
    dead = httpx.get(base + ids["dead"], params={"queue": "work"}).json()
    assert (dead["status"], dead["error"]) == ("dead-lettered", "ValueError: bad input")
    assert httpx.get(base + ids["later"], params={"queue": "work"}).json()["status"] == "delayed"
    before = dump(where.store)
    refusals = [
        (httpx.get(base + "0-99", params={"queue": "work"}), 404, "unknown_job"),
        (httpx.get(base + "x-1", params={"queue": "work"}), 400, "invalid_request"),
        (httpx.get(base + ids["done"], params={"queue": "no/such"}), 400, "invalid_name"),
        (httpx.post(base + ids["done"] + "/cancel", params={"queue": "work"}), 409, "job_conflict"),
        (httpx.post(base + "0-99/cancel", params={"queue": "work"}), 404, "unknown_job"),
        (
            httpx.post(base + ids["later"] + "/cancel", params={"queue": "work"}, json={"x": 1}),
            400,
            "invalid_request",
        ),
        (
            httpx.post(base + ids["later"] + "/finish", params={"queue": "work"}, json={"state": "won"}),
            400,
            None,
        ),
        (
            httpx.post(
                base + ids["later"] + "/start", params={"queue": "work"}, json={"attempts": 0, "ttl_ms": 1}
            ),
            400,
            None,
        ),
    ]
    for response, status, code in refusals:
        assert response.status_code == status, response.text
        if code:
            assert response.json()["error"]["code"] == code
    assert dump(where.store) == before
    cancelled = httpx.post(base + ids["later"] + "/cancel", params={"queue": "work"})
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"


def test_schedules_are_listed_with_their_last_and_next_tick(where: Where, tmp_path: Path) -> None:
    class Clock:
        now = 1_800_000_000_000

        def __call__(self) -> int:
            return self.now

    clock = Clock()
    with tidelog.open(where.db, clock=clock) as log:
        jobs = tidelog.Jobs(log, queue="work")
        jobs.periodic("*/10 * * * *", name="sweep", tz="Europe/Paris")(lambda tick: None)
        jobs.tick()
        clock.now += 10 * 60_000
        assert [t.tick for t in jobs.tick()] == [clock.now]
    out = where.run("jobs", "schedules", "--queue", "work", "--json")
    assert out.exit_code == 0, out.output
    listed = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(s["name"], s["cron"], s["tz"], s["last_tick"]) for s in listed] == [
        ("sweep", "*/10 * * * *", "Europe/Paris", clock.now)
    ]
    table = where.run("jobs", "schedules", "--queue", "work").stdout
    assert "sweep" in table and "LAST TICK" in table and "2027-01-15T08:10:00Z" in table


def test_schedules_of_a_module_are_listed_before_they_tick(tmp_path: Path, monkeypatch: Any) -> None:
    db = str(tmp_path / "cron.db")
    (tmp_path / "cron_jobs.py").write_text(
        "import tidelog\n"
        f"jobs = tidelog.Jobs(tidelog.open({db!r}), queue='maintenance')\n"
        "jobs.periodic('0 3 * * *', name='nightly', missed='catch_up')(lambda tick: None)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_runner puts the directory first
    out = CliRunner().invoke(cli, ["--db", db, "jobs", "schedules", "cron_jobs:jobs", "--json"])
    assert out.exit_code == 0, out.output
    [listed] = [json.loads(line) for line in out.stdout.splitlines()]
    assert (listed["name"], listed["missed"], listed["last_tick"]) == ("nightly", "catch_up", None)
    assert listed["next_tick"] % 86_400_000 == 3 * 3_600_000  # 03:00 UTC
    sys.modules.pop("cron_jobs", None)
