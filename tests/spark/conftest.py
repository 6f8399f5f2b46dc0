"""One local SparkSession for all Spark tests (it takes seconds to start).

Spark is a service here: without pyspark or Java the tests skip on a laptop
and fail under CI.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import need_service  # tests/conftest.py

# Small and quiet: two cores, few shuffle partitions, no UI, no retries of
# failed tasks (a failure should show, not be hidden by a second attempt).
SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.streaming.stopTimeout": "60s",
    "spark.python.worker.reuse": "true",
    "spark.driver.memory": "1g",
}


def spark_available() -> str | None:
    """Why Spark cannot run here, or None when it can."""
    try:
        import tidelog.spark
    except Exception as e:  # ConfigurationError naming the extra
        return str(e)
    try:
        tidelog.spark.check_java()
    except Exception as e:
        return str(e)
    return None


class Sessions:
    """The process's one SparkSession (a process holds one SparkContext at a
    time): the local one most tests share, or one on a cluster for a module
    that asks for it. Switching stops the other; the next test that wants
    the local one starts it again."""

    def __init__(self) -> None:
        self.current: Any = None
        self.master: str | None = None

    def get(self, master: str, **conf: Any) -> Any:
        if self.current is not None and self.master == master:
            return self.current
        self.stop()
        import tidelog.spark

        session = tidelog.spark.session(master, "tidelog-tests", **{**SPARK_CONF, **conf})
        session.sparkContext.setLogLevel("ERROR")
        self.current, self.master = session, master
        return session

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()
        self.current = self.master = None


@pytest.fixture(scope="session")
def spark_sessions() -> Iterator[Sessions]:
    missing = spark_available()
    if missing:
        need_service("Spark", missing)
    sessions = Sessions()
    yield sessions
    sessions.stop()


@pytest.fixture
def spark(spark_sessions: Sessions) -> Any:
    return spark_sessions.get("local[2]")


@pytest.fixture
def db(tmp_path: Any) -> str:
    return str(tmp_path / "spark.db")


@pytest.fixture
def checkpoint(tmp_path: Any) -> Iterator[str]:
    path = tmp_path / "checkpoint"
    yield str(path)
    shutil.rmtree(path, ignore_errors=True)
