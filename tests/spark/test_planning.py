"""Options, positions and planning: plain Python over the core, no Spark session.

(pyspark must be installed for the package to import, as with the others.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import tidelog
from conftest import CI  # tests/conftest.py
from tidelog import ConfigurationError

try:
    from tidelog.spark import offsets
    from tidelog.spark.options import SinkOptions, SourceOptions
except ConfigurationError as e:  # the spark extra is missing
    if CI:
        raise
    pytest.skip(str(e), allow_module_level=True)


def test_positions_serialise_the_same_whatever_the_order_they_were_made_in():
    a = {("b", 10): 5, ("a", 2): 1, ("b", 9): 7, ("a", 0): 3}
    b = dict(reversed(list(a.items())))
    assert json.dumps(offsets.to_json(a)) == json.dumps(offsets.to_json(b))
    assert json.dumps(offsets.to_json(a)) == '{"a": {"0": 3, "2": 1}, "b": {"9": 7, "10": 5}}'
    assert offsets.from_json(offsets.to_json(a)) == a


def test_admission_shares_the_limit_in_proportion_to_backlog():
    start = {("t", 0): 1, ("t", 1): 1, ("t", 2): 1}
    latest = {("t", 0): 61, ("t", 1): 31, ("t", 2): 11}
    assert offsets.admit(start, latest, 20) == {("t", 0): 13, ("t", 1): 7, ("t", 2): 3}
    # Rounding leftovers go to the largest fractions; the total is exact.
    end = offsets.admit(start, latest, 7)
    assert sum(end[tp] - start[tp] for tp in start) == 7
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)
    # A backlog within the limit is read whole; a new partition starts at offset 1.
    assert offsets.admit(start, latest, 1000) == latest
    assert offsets.admit({}, {("new", 0): 4}, 2) == {("new", 0): 3}


def test_plan_cuts_long_ranges_for_min_partitions_without_gaps_or_overlap():
    start = {("t", 0): 1, ("t", 1): 5}
    end = {("t", 0): 91, ("t", 1): 15, ("t", 2): 1}
    plain = offsets.plan(start, end, None)
    assert plain == [offsets.OffsetRange("t", 0, 1, 91), offsets.OffsetRange("t", 1, 5, 15)]
    cut = offsets.plan(start, end, 7)
    assert len(cut) >= 7
    for p in (0, 1):
        pieces = [r for r in cut if r.partition == p]
        assert pieces[0].start == start[("t", p)] and pieces[-1].end == end[("t", p)]
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))
        assert all(r.end > r.start for r in pieces)


def test_resolve_reads_earliest_latest_json_and_refuses_offsets_past_the_end(tmp_path):
    url = str(tmp_path / "p.db")
    with tidelog.open(url) as log:
        log.create_topic("t", partitions=2)
        log.producer().send_batch("t", [b"x"] * 5, partition=0)
        opts = SourceOptions.parse({"url": url, "subscribe": "t"}, streaming=False)
        held = offsets.bounds(log, opts, strict=True)
        assert held == {("t", 0): offsets.Bounds(1, 6), ("t", 1): offsets.Bounds(1, 1)}
        assert offsets.resolve(log, "earliest", held, default="earliest") == {("t", 0): 1, ("t", 1): 1}
        assert offsets.resolve(log, "latest", held, default="earliest") == {("t", 0): 6, ("t", 1): 1}
        assert offsets.resolve(log, {"t": {0: 3}}, held, default="latest") == {("t", 0): 3, ("t", 1): 1}
        with pytest.raises(tidelog.OffsetOutOfRange, match="past its end"):
            offsets.resolve(log, {"t": {0: 7}}, held, default="latest")
        with pytest.raises(tidelog.UnknownPartition):
            offsets.resolve(log, {"t": {5: 1}}, held, default="latest")


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "t"}, False, "needs option url"),
        ({"url": ":memory:", "subscribe": "t"}, False, "private to one process"),
        ({"url": "x.db", "subscribePattern": "("}, True, "not a valid regex"),
        ({"url": "x.db", "assign": '{"t": "0"}'}, True, "list of partition numbers"),
        (
            {"url": "x.db", "subscribe": "t", "startingOffsets": '{"t": {"0": 0}}'},
            True,
            "next offset to read",
        ),
        ({"url": "x.db", "subscribe": "t", "endingOffsets": "latest"}, True, "batch queries only"),
        ({"url": "x.db", "subscribe": "t", "maxOffsetsPerTrigger": "10"}, False, "streaming queries only"),
        ({"url": "x.db", "subscribe": "t", "failOnDataLoss": "maybe"}, True, "true or false"),
        ({"url": "x.db", "subscribe": "t", "group": "no spaces"}, True, "invalid group name"),
    ],
)
def test_bad_source_options_are_configuration_errors(options, streaming, message):
    with pytest.raises(ConfigurationError, match=message):
        SourceOptions.parse(options, streaming=streaming)


def test_options_are_case_insensitive_and_default_as_kafkas_do():
    stream = SourceOptions.parse({"URL": "x.db", "SUBSCRIBE": "b,a, a"}, streaming=True)
    assert (stream.subscribe, stream.starting, stream.fail_on_data_loss) == (("a", "b"), "latest", True)
    batch = SourceOptions.parse({"url": "x.db", "subscribe": "a"}, streaming=False)
    assert (batch.starting, batch.ending) == ("earliest", "latest")
    assert SinkOptions.parse({"url": "x.db", "topic": "out"}).topic == "out"


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_a_missing_pyspark_names_the_extra_to_install():
    # Hide pyspark from a fresh interpreter, as if the extra were not installed.
    code = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pyspark' or name.startswith('pyspark.'):\n"
        "            raise ModuleNotFoundError(\"No module named 'pyspark'\", name='pyspark')\n"
        "sys.meta_path.insert(0, Hide())\n"
        "import tidelog\n"
        "try:\n"
        "    import tidelog.spark\n"
        "except tidelog.ConfigurationError as e:\n"
        "    print('refused:', e)\n"
    )
    out = run_python(code, dict(os.environ))
    assert "refused: tidelog.spark needs pyspark" in out.stdout, out.stderr
    assert "pip install 'tidelog[spark]'" in out.stdout


def test_a_missing_java_is_named_before_spark_starts(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java here
    code = (
        "import tidelog, tidelog.spark\n"
        "try:\n"
        "    tidelog.spark.session()\n"
        "except tidelog.ConfigurationError as e:\n"
        "    print('refused:', e)\n"
    )
    out = run_python(code, env)
    assert "refused: Spark needs Java 17 or newer" in out.stdout, out.stderr
