"""The differential suite's clusters (a plugin of tests/conftest.py: a conftest.py in
tests/kafka/ would be a second module named `conftest`, and tests/kafka cannot be a
package, whose name would hide kafka-python's): Apache Kafka (one node for the whole run, shared by
every worker) and tidelog (`tidelog serve` on SQLite; two serves over one PostgreSQL),
each started once a worker and shared by its tests, which use names of their own."""

from __future__ import annotations

import pytest

from kafka_diff import Target
from kafka_reference import shared_broker
from kafka_serve import KafkaServe


@pytest.fixture(scope="session")
def kafka() -> Target:
    """Apache Kafka, the reference."""
    try:
        broker = shared_broker()
    except RuntimeError as e:
        pytest.fail(str(e))
    return Target("kafka", (broker.bootstrap,))


@pytest.fixture(scope="session")
def tidelog_sqlite(tmp_path_factory):
    path = tmp_path_factory.mktemp("kafka-diff") / "diff.db"
    with KafkaServe(path) as served:
        yield Target("sqlite", (served.bootstrap,), str(path))


@pytest.fixture(scope="session")
def tidelog_postgres(tmp_path_factory):
    from pgschema import postgres_schema

    logs = tmp_path_factory.mktemp("kafka-diff-pg")
    with (
        postgres_schema() as url,
        KafkaServe(url, log_dir=logs) as first,
        KafkaServe(url, log_dir=logs) as second,
    ):
        yield Target("postgres", (first.bootstrap, second.bootstrap), url)


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def tidelog(request) -> Target:
    """tidelog serve: on SQLite, and on PostgreSQL with two brokers."""
    return request.getfixturevalue(f"tidelog_{request.param}")
