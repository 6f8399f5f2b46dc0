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


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    missing = spark_available()
    if missing:
        need_service("Spark", missing)
    import tidelog.spark

    session = tidelog.spark.session("local[2]", "tidelog-tests", **SPARK_CONF)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def db(tmp_path: Any) -> str:
    return str(tmp_path / "spark.db")


@pytest.fixture
def checkpoint(tmp_path: Any) -> Iterator[str]:
    path = tmp_path / "checkpoint"
    yield str(path)
    shutil.rmtree(path, ignore_errors=True)
