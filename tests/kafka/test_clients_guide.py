"""The Kafka guide's table of tested clients and tools states the versions the matrix's
tests run (kafka_clients.versions: the files that pin them), and names every client."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from kafka_clients import versions

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "kafka.md"
HEADER = "| client or tool | version | what runs |"


def stated() -> dict[str, str]:
    """The table's client -> version."""
    text = GUIDE.read_text()
    rows = text[text.index(HEADER) :].split("\n\n", 1)[0].splitlines()[2:]
    return {cells[1].strip(): cells[2].strip() for cells in (row.split("|") for row in rows)}


def test_the_guide_states_the_versions_the_tests_run():
    assert stated() == versions()


def test_each_client_in_the_table_has_a_test_module():
    modules = "".join(p.read_text() for p in Path(__file__).parent.glob("test_clients_*.py"))
    for needle in (
        "java_clients",
        "run_tool",
        "confluent_kafka",
        '"kafka"',
        "aiokafka",
        "kafkajs",
        "franz",
        "sarama",
    ):
        assert needle in modules, needle


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "aiokafka"])
def test_the_python_clients_the_tests_run_are_the_ones_the_table_allows(client):
    assert version(client) in SpecifierSet(stated()[client])
