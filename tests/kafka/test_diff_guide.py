"""The Kafka guide's table of deliberate differences is the suite's (kafka_diff.DIFFERENCES):
every difference a test names is in the table as the suite words it, and nothing else is."""

from __future__ import annotations

import re
from pathlib import Path

from kafka_diff import DIFFERENCES

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "kafka.md"
HEADER = "| difference | what Apache Kafka does, and what tidelog does |\n| --- | --- |\n"


def table() -> str:
    """The table as the guide must carry it."""
    return HEADER + "".join(f"| `{key}` | {text} |\n" for key, text in sorted(DIFFERENCES.items()))


def test_the_guide_lists_the_suites_differences():
    text = GUIDE.read_text()
    start = text.index(HEADER)
    end = text.index("\n\n", start)
    assert text[start : end + 1] == table(), "docs/guides/kafka.md's table should read:\n" + table()


def test_every_difference_is_named_by_a_test():
    sources = "".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    sources += (ROOT / "tests" / "kafka_diff.py").read_text()
    named = set(re.findall(r'differs\("([a-z0-9-]+)"\)', sources))
    assert named == set(DIFFERENCES)
