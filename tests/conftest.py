"""Shared fixtures. Services a test needs skip on a laptop and fail under CI."""

from __future__ import annotations

import os

import pytest

CI = bool(os.environ.get("CI"))
# The differential suite's fixtures (tests/kafka/): Apache Kafka and tidelog side by side.
pytest_plugins = ["kafka_fixtures"]
# `tidelog serve` listens for Kafka on 9092 by default; the servers the tests
# start (and their children) leave it off unless a test asks for a port, so
# runs in parallel never fight over 9092.
os.environ.setdefault("TIDELOG_KAFKA_PORT", "0")
# Every JVM the tests start (Spark's driver, the standalone cluster's master, workers
# and executors, pipelines run as processes of their own) compiles with C1 alone and
# collects with one thread: short jobs on small data, where C2 and a parallel GC cost
# more CPU than they give back. Measured (docs/development.md): the Spark tiers' CPU
# 300 -> 226 s (local session) and 286 -> 216 s (cluster), the same tests passing.
# Nor does it verify the bytecode of Spark's jars as it loads them (a diagnostic
# option, hence the unlock; its VM messages go to stderr, as Spark's launcher reads its
# child's stdout): the Spark tier 304 -> 266 CPU s, a JVM's start 8.2 -> 7.2 s.
os.environ.setdefault(
    "JAVA_TOOL_OPTIONS",
    "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    " -XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote -XX:+DisplayVMOutputToStderr",
)
# N > 1: every `serve` fixture runs `tidelog serve --workers N` instead of a thread.
# Unset, the front modules' tests run on both (FRONT_MODULES), the rest on a thread.
WORKERS = int(os.environ.get("TIDELOG_TEST_WORKERS") or 1)
SERVE_VARIANTS = {"thread": 1, "workers2": 2}
FRONT_MODULES = frozenset(
    {
        "test_http_api",
        "test_http_groups",
        "test_http_limits",
        "test_http_queues",
        "test_http_transport",
        "test_http_v1",
        "test_miniqueue",
        "test_auto_create",
        "test_subscribe_limits",
        "test_http_exposed",
    }
)


# What the fault and fuzz tests tried, printed at the end of the run (`tried` fixture).
# Kept on the test reports (user_properties), so it reaches the summary from
# xdist's workers too.
_TRIED: list[tuple[str, str]] = []


@pytest.fixture
def tried(request):
    """tried(**counts): record what this test tried (cases, kills, probes, ...), for the run's summary."""

    def record(**counts: object) -> None:
        request.node.user_properties.append(("tried", ", ".join(f"{k}={v}" for k, v in counts.items())))

    return record


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        _TRIED.extend((report.nodeid, v) for k, v in report.user_properties if k == "tried")


def pytest_configure(config):
    # The controller names the run's directory for the Apache Kafka its workers share
    # (tests/kafka_reference.py); the first test that needs the broker starts it there.
    if not hasattr(config, "workerinput"):
        from kafka_reference import plan_run

        plan_run()


def pytest_sessionfinish(session, exitstatus):
    # Once a run, in the process that ran it all (xdist's controller, or the only one).
    if not hasattr(session.config, "workerinput"):
        from kafka_reference import stop_run
        from pgschema import vacuum

        stop_run()
        vacuum()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _TRIED:
        terminalreporter.section("what the fault and fuzz tests tried")
        for nodeid, counts in _TRIED:
            terminalreporter.write_line(f"{nodeid}: {counts}")


def pytest_generate_tests(metafunc):
    # The fronts' tests run on a server thread and on `tidelog serve --workers 2`, in one run.
    if (
        "serve" in metafunc.fixturenames
        and "TIDELOG_TEST_WORKERS" not in os.environ
        and metafunc.module.__name__.rpartition(".")[2] in FRONT_MODULES
    ):
        metafunc.parametrize("serve", list(SERVE_VARIANTS.values()), ids=list(SERVE_VARIANTS), indirect=True)


def pytest_collection_modifyitems(config, items):
    """Mark tests/spark `spark`; put the long tiers first (spark, then slow), so that
    under xdist they start first and overlap the rest (tiers.py)."""
    spark = pytest.mark.spark
    for item in items:
        if "spark" in item.path.parts and item.get_closest_marker("spark") is None:
            item.add_marker(spark)
    items.sort(
        key=lambda item: (
            0 if item.get_closest_marker("spark") else 1 if item.get_closest_marker("slow") else 2
        )
    )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") == "load":  # -n N without --dist; another --dist is left to xdist
        from tiers import TierScheduling

        return TierScheduling(config, log)
    return None


def need_service(name: str, reason: str) -> None:
    """Skip a test whose service is missing, or fail it when running in CI."""
    message = f"{name} is not available: {reason}"
    if CI:
        pytest.fail(message + " (CI must run this test)")
    pytest.skip(message)


@pytest.fixture
def serve(request, tmp_path):
    """Start real tidelog servers (granian, free loopback port, a thread) on fresh files.

    serve(**options) -> ServerThread; every server started is stopped after the test.
    In the variant [workers2] (or with TIDELOG_TEST_WORKERS=N) each is `tidelog serve
    --workers N` instead: a test that needs the in-process server skips there.
    """
    workers = getattr(request, "param", WORKERS)
    try:
        from tidelog.server.http.thread import ServerThread
    except ImportError as e:
        need_service("the tidelog server", f"{e}; pip install 'tidelog[server,client]'")
    started = []

    def start(target=None, **options):
        target = target or str(tmp_path / f"served-{len(started)}.db")
        if workers > 1:
            from workers_server import WorkersServer

            server = WorkersServer(target, workers, **options)
        else:
            server = ServerThread(target, **options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def server_tmp():
    """A TMPDIR for a `tidelog serve`, where its runtime directory shows. In /tmp, not in
    tmp_path: the members' Unix socket in it must fit in a socket path's 107 bytes."""
    import shutil
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp(prefix="tl-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
