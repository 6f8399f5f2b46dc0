"""Probes of how `tidelog serve` runs as processes, and of the console's security.

    python bench/probes/operations.py --src PATH [--no-postgres]

Starts real servers from the tidelog `src` tree at PATH (`PYTHONPATH=PATH
python -m tidelog serve ...`, default limits, so it runs on a tree from
before the changes too) on loopback, and prints one JSON object a line:
{"probe": ..., "measure": ..., "value": ..., "unit": ...}. A value is null
where the tree cannot do the thing (a flag it lacks) or a step never
happened within its bound. About 40 s in all (more with --postgres on a
busy machine); every wait is bounded.

Probes: a second `serve` on a port already served; a port another
program holds; SIGKILL of each worker and of the supervisor; the
console's login rate, session cookies, logout and a form posted from
another origin; the token in the process list; a private PostgreSQL
restarted under load (skipped without PostgreSQL's server binaries).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

TOKEN = "probe-token-0123456789"
START_S = 30  # a server that does not answer /healthz by then did not start
BOUND_S = 10  # other waits


def emit(probe: str, measure: str, value: Any, unit: str = "") -> None:
    print(json.dumps({"probe": probe, "measure": measure, "value": value, "unit": unit}), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(FileNotFoundError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
    return found


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class Served:
    """A `tidelog serve` from the probed tree: its process, ports, stderr and temp directory."""

    def __init__(self, src: str, where: Path, name: str, port: int, resp_port: int, *flags: str, env=None):
        self.where, self.port, self.resp_port = where, port, resp_port
        self.tmp = where / f"{name}-tmp"
        self.tmp.mkdir()
        self.db = where / f"{name}.db"
        self.errors = open(where / f"{name}.err", "w+")  # noqa: SIM115 - closed in stop()
        argv = [sys.executable, "-m", "tidelog", "serve", "--db", str(self.db), "--port", str(port)]
        argv += ["--resp-port", str(resp_port), "--clean-interval", "0", *flags]
        if (Path(src) / "tidelog" / "server" / "kafka").is_dir():  # a tree with the Kafka listener:
            argv += ["--kafka-port", "0"]  # not its default 9092, which two servers cannot share
        environment = {**os.environ, "PYTHONPATH": src, "TMPDIR": str(self.tmp), **(env or {})}
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.errors, env=environment)
        self.base = f"http://127.0.0.1:{port}"

    def ready(self, timeout: float = START_S) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.base + "/healthz", timeout=2).status_code == 200:
                    return True
            time.sleep(0.05)
        return False

    def settle(self) -> int | None:
        """Its exit code once it ended, or None when it says ready (and a moment after) instead."""
        deadline = time.monotonic() + BOUND_S
        while self.proc.poll() is None and "ready" not in self.stderr() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # what it says after its ready line
        return self.proc.poll()

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stderr(self) -> str:
        self.errors.flush()
        self.errors.seek(0)
        return self.errors.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if self.wait(20) is None:
                self.proc.kill()
                self.proc.wait()
        for pid in children(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.errors.close()


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


# --- the probes ----------------------------------------------------------------------------------


def second_serve(src: str, where: Path, first: Served) -> None:
    """A second `tidelog serve` on the first one's HTTP port, over another file."""
    httpx.post(first.base + "/v1/topics", json={"name": "first-only"}, headers=auth(), timeout=10)
    second = Served(src, where, "second", first.port, free_port(), "--workers", "2")
    code = second.settle()
    answers = []
    for _ in range(12):  # new connections, spread by the kernel among whoever listens
        with contextlib.suppress(httpx.HTTPError):
            answers.append(httpx.get(first.base + "/v1/topics", headers=auth(), timeout=5).json())
    from_second = sum(1 for a in answers if [t["name"] for t in a.get("topics", [])] != ["first-only"])
    said_ready = "ready" in second.stderr()
    second.stop()
    emit("second_serve_same_port", "exit_code", code)
    emit("second_serve_same_port", "said_ready", said_ready)
    emit("second_serve_same_port", "requests_answered_from_the_second_store", from_second, "of 12")
    emit("second_serve_same_port", "second_db_created", second.db.exists())


def port_held(src: str, where: Path) -> None:
    """`serve` on a port another program listens on (no SO_REUSEPORT)."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        served = Served(src, where, "held", port, free_port(), "--workers", "1")
        code = served.settle()
        lines = served.stderr().strip().splitlines()
        served.stop()
    finally:
        holder.close()
    emit("port_held_by_another_program", "exit_code", code)
    emit("port_held_by_another_program", "said_ready", any("ready" in line for line in lines))
    emit("port_held_by_another_program", "stderr_lines", len(lines), "lines")
    emit("port_held_by_another_program", "last_line_names_the_port", bool(lines) and str(port) in lines[-1])
    emit("port_held_by_another_program", "db_created", served.db.exists())


def console(served: Served) -> None:
    base = served.base
    with httpx.Client(base_url=base, timeout=10) as guesser:
        started = time.monotonic()
        statuses = [
            guesser.post("/console/login", data={"token": f"guess-{i}"}).status_code for i in range(300)
        ]
        took = time.monotonic() - started
    emit("console_login", "wrong_tokens_answered_401", statuses.count(401), "of 300")
    emit("console_login", "wrong_tokens_refused_429", statuses.count(429), "of 300")
    emit("console_login", "attempts_per_second", round(300 / took), "1/s")

    # Sessions: from a fresh address the throttle has not seen? Loopback is one address:
    # wait out the throttle where there is one (at most 10 tries refill in 60 s; one is enough).
    def login() -> httpx.Client | None:
        client = httpx.Client(base_url=base, timeout=10)
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            answer = client.post("/console/login", data={"token": TOKEN})
            if answer.status_code == 303:
                return client
            time.sleep(float(answer.headers.get("retry-after", "1")))
        client.close()
        return None

    first, second = login(), login()
    if first is None or second is None:
        emit("console_session", "logged_in", False)
        return
    cookie = first.cookies.get("tidelog_console")
    emit("console_session", "same_cookie_on_two_logins", cookie == second.cookies.get("tidelog_console"))
    page = first.get("/console/").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    emit("console_forms", "csrf_token_on_the_page", csrf is not None)

    # A reset posted from another port of 127.0.0.1, with the session cookie (and the page's token).
    api = httpx.Client(base_url=base, headers=auth(), timeout=10)
    api.post("/v1/topics/audit/records", json={"records": [{"value": i} for i in range(3)]})
    api.post("/v1/groups/dash/commit", json={"topic": "audit", "partition": 0, "offset": 3})
    form = {"topic": "audit", "to": "earliest", "confirm": "yes"}
    if csrf:
        form["csrf"] = csrf.group(1)
    refused = first.post("/console/groups/dash/reset", data=form, headers={"origin": "http://127.0.0.1:1"})
    committed = api.get("/v1/groups/dash/topics/audit/partitions/0").json().get("committed")
    emit("console_forms", "cross_origin_reset_status", refused.status_code)
    emit("console_forms", "cross_origin_reset_changed_the_store", committed != 3)

    # Logout, then the same cookie again.
    logout = {"csrf": re.search(r'name="csrf" value="([^"]+)"', first.get("/console/").text)}
    first.post("/console/logout", data={"csrf": logout["csrf"].group(1)} if logout["csrf"] else {})
    with httpx.Client(base_url=base, cookies={"tidelog_console": cookie or ""}, timeout=10) as replay:
        emit(
            "console_session",
            "cookie_opens_the_console_after_logout",
            replay.get("/console/").status_code == 200,
        )
    for client in (first, second, api):
        client.close()


def kill_workers(served: Served) -> None:
    """SIGKILL each worker in turn (the second, then the members' home)."""
    for index, probe in ((1, "sigkill_second_worker"), (0, "sigkill_member_home")):
        workers = children(served.proc.pid)
        if served.proc.poll() is not None or len(workers) < 2:
            emit(probe, "seconds_until_a_replacement", None, "s")
            emit(probe, "supervisor_alive_after", False)
            continue
        victim = max(workers) if index else min(workers)  # the home was forked first
        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        replaced = None
        deadline = killed + BOUND_S
        while time.monotonic() < deadline and served.proc.poll() is None:
            if set(children(served.proc.pid)) - set(workers):
                replaced = round(time.monotonic() - killed, 2)
                break
            time.sleep(0.02)
        time.sleep(1)
        serving = False
        with contextlib.suppress(httpx.HTTPError):
            serving = (
                httpx.post(
                    served.base + "/publish/after-kill", content=b"x", headers=auth(), timeout=5
                ).status_code
                == 201
            )
        emit(probe, "seconds_until_a_replacement", replaced, "s")
        emit(probe, "supervisor_alive_after", served.proc.poll() is None)
        emit(probe, "server_answers_201_after", serving)
        if index == 1:
            said = ("was killed", "exited", "cannot serve")
            last = [line for line in served.stderr().splitlines() if any(w in line for w in said)][-1:] or [
                ""
            ]
            emit(probe, "supervisor_says", last[0].split(": ", 1)[-1][:160])


def kill_supervisor(served: Served) -> None:
    workers = children(served.proc.pid)
    dirs_before = len(os.listdir(served.tmp))
    served.proc.kill()
    served.proc.wait()
    deadline = time.monotonic() + BOUND_S
    while any(running(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    emit("sigkill_supervisor", "runtime_dirs_while_serving", dirs_before)
    emit("sigkill_supervisor", "workers_running_after", sum(running(w) for w in workers))
    emit("sigkill_supervisor", "runtime_dirs_left", len(os.listdir(served.tmp)))


def token_in_process_list(served: Served, by: str) -> None:
    with open(f"/proc/{served.proc.pid}/cmdline", "rb") as f:
        visible = TOKEN.encode() in f.read()
    emit("token", "given_by", by)
    emit("token", "visible_in_the_process_list", visible)


# --- PostgreSQL restarted under load -------------------------------------------------------------


@contextlib.contextmanager
def private_postgres() -> Iterator[tuple[str, Any] | None]:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    if not found:
        yield None
        return
    bindir = found[-1].parent
    prefix: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="tidelog-probe-pg-"))
    if os.getuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = free_port()

    def ctl(*args: str) -> None:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(root / "data"), *args],
            check=True,
            capture_output=True,
            timeout=60,
        )

    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    try:
        subprocess.run(
            [
                *prefix,
                str(bindir / "initdb"),
                "-D",
                str(root / "data"),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        ctl("-l", str(root / "log"), "-o", options, "-w", "start")
        yield (
            f"postgresql://postgres@127.0.0.1:{port}/postgres",
            (
                lambda: ctl("-m", "fast", "-w", "stop"),
                lambda: ctl("-l", str(root / "log"), "-o", options, "-w", "start"),
            ),
        )
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            ctl("-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


def postgres_restart(src: str, where: Path, outage: float = 4.0) -> None:
    with private_postgres() as cluster:
        if cluster is None:
            emit("postgres_restart", "skipped", "no PostgreSQL server binaries")
            return
        url, (stop, start) = cluster
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "tidelog",
            "serve",
            "--db",
            url,
            "--port",
            str(port),
            "--resp-port",
            "0",
            "--workers",
            "1",
        ]
        proc = subprocess.Popen(
            argv, env={**os.environ, "PYTHONPATH": src}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        base = f"http://127.0.0.1:{port}"
        answers: list[tuple[float, float, int]] = []  # (sent, answered, status)
        acked: list[tuple[int, bytes]] = []
        halt = threading.Event()

        def produce() -> None:
            with httpx.Client(base_url=base, timeout=30) as client:
                i = 0
                while not halt.is_set():
                    sent = time.monotonic()
                    try:
                        answer = client.post("/publish/restart", content=f"v{i}".encode())
                    except httpx.HTTPError:
                        answers.append((sent, time.monotonic(), 0))
                        continue
                    answers.append((sent, time.monotonic(), answer.status_code))
                    if answer.status_code == 201:
                        acked.append((answer.json()["offset"], f"v{i}".encode()))
                        i += 1
                    time.sleep(0.01)

        try:
            deadline = time.monotonic() + START_S
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                        break
                if time.monotonic() > deadline or proc.poll() is not None:
                    emit("postgres_restart", "skipped", "the server did not start")
                    return
                time.sleep(0.05)
            thread = threading.Thread(target=produce, daemon=True)
            thread.start()
            time.sleep(1.0)
            down = time.monotonic()
            stop()
            time.sleep(outage)
            start()
            up = time.monotonic()
            deadline = up + 20
            while not any(s == 201 and t >= up for _, t, s in answers) and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.5)
            halt.set()
            thread.join(35)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        during = [(s, t, a) for s, t, a in answers if down <= t < up]
        first_201 = next((t for _, t, s in answers if s == 201 and t >= up), None)
        emit("postgres_restart", "outage", outage, "s")
        emit("postgres_restart", "answers_503_during_the_outage", sum(1 for _, _, a in during if a == 503))
        in_flight = [t - s for s, t, _ in answers if s < up and t > down]  # sent before it was back
        emit(
            "postgres_restart", "longest_request_in_the_outage", round(max(in_flight, default=0) * 1000), "ms"
        )
        emit(
            "postgres_restart",
            "first_201_after_postgres_is_back",
            None if first_201 is None else round((first_201 - up) * 1000),
            "ms",
        )
        sys.path.insert(0, src)
        import tidelog

        with tidelog.open(url) as log:
            stored = {m.offset: m.value for m in log.read("restart", 0, limit=10**6)}
        emit("postgres_restart", "acked_records", len(acked))
        emit("postgres_restart", "acked_records_lost", sum(1 for o, v in acked if stored.get(o) != v))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", required=True, help="a tidelog src directory (its parent of tidelog/)")
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL restart probe")
    args = parser.parse_args()
    src = str(Path(args.src).resolve())
    with tempfile.TemporaryDirectory(prefix="tidelog-probe-") as tmp:
        where = Path(tmp)
        # Two servers at once: one to probe, one whose supervisor is SIGKILLed (given the token
        # from a file where the tree has --token-file, else on the command line).
        first = Served(
            src, where, "first", free_port(), free_port(), "--workers", "2", env={"TIDELOG_TOKEN": TOKEN}
        )
        token_file = where / "token"
        token_file.write_text(TOKEN + "\n")
        token_file.chmod(0o600)
        other = Served(
            src, where, "other", free_port(), free_port(), "--workers", "2", "--token-file", str(token_file)
        )
        by = "--token-file"
        if other.wait(3) == 2:  # no such option in this tree
            other.stop()
            other = Served(src, where, "other2", free_port(), free_port(), "--workers", "2", "--token", TOKEN)
            by = "--token"
        try:
            if not first.ready() or not other.ready():
                emit("setup", "servers_started", False)
                return
            token_in_process_list(other, by)
            kill_supervisor(other)
            second_serve(src, where, first)
            port_held(src, where)
            console(first)
            kill_workers(first)
        finally:
            first.stop()
            other.stop()
        if not args.no_postgres:
            postgres_restart(src, where)


if __name__ == "__main__":
    main()
