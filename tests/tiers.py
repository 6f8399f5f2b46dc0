"""The suite's tiers, and how `pytest -n N` (pytest-xdist) deals the suite to its workers.

Tiers are marks, so `-m` picks them (docs/development.md):

- `spark`: tests/spark. A process holds one SparkSession (a JVM that takes
  seconds to start), so one worker runs the tier's local-session tests and
  others the modules with Spark of their own (OWN_SPARK_MODULES, OWN_SPARK).
- `slow`: multi-process, crash, chaos and soak tests.
- the rest.

`make test` runs every tier in one xdist run. Waiting, not CPU, is what the
suite spends its time on (servers starting, leases expiring, processes being
killed and restarted), so several workers overlap it on two cores. The
scheduler below starts the longest work first, so the long tiers overlap the
rest instead of running alone at the end.

xdist's own `--dist loadgroup` would keep a group on one worker, but 3.8
renames the tests of a group through an attribute pytest 9 no longer reads,
so every test ends up in a group of its own; this scheduler groups by node id.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

# Modules whose module-scoped fixtures (a server, a browser, a Spark cluster) cost
# more than their tests: one worker runs all of the module's tests, so the fixture
# starts once. Every other module's tests are dealt one by one.
WHOLE_MODULES = frozenset(
    {
        "tests/test_console_browser.py",
        "tests/test_docs_browser.py",
        "tests/test_kafka.py",
        "tests/test_kafka_brokers.py",
        "tests/test_kafka_groups.py",
        "tests/test_kafka_limits.py",
        "tests/test_serve.py",
        # schemathesis against one server a store: dealt test by test, its SQLite server
        # answered nothing for 10 s after the /stream cases once (load 7, 4 workers).
        "tests/test_http_schema.py",
    }
)


# Spark tests that start Spark in processes of their own (a pipeline stopped with Ctrl-C, a
# worker killed and restarted) and never touch the shared session: each is a unit of its own,
# so they overlap the session's unit instead of lengthening it (it is the run's longest).
OWN_SPARK = frozenset(
    {
        "tests/spark/test_example.py::test_ctrl_c_on_follow_stops_the_queries_without_a_traceback",
        "tests/spark/test_worker_engine.py::"
        "test_spark_worker_process_killed_restarted_and_terminated_loses_nothing",
    }
)


# Spark modules whose Spark is not the shared local session and whose tests share a fixture
# that starts it: one unit a module, beside the session's, so the fixture starts once.
# test_cluster.py: a standalone cluster and a session on it (the longest unit);
# test_kafka_connector.py: drivers with Kafka's connector in processes of their own.
OWN_SPARK_MODULES = frozenset({"tests/spark/test_cluster.py", "tests/spark/test_kafka_connector.py"})


def unit_of(nodeid: str) -> str:
    """The work unit a test belongs to: tests of one unit run on one worker, in order."""
    path, _, name = nodeid.partition("::")
    if path in OWN_SPARK_MODULES:
        return path
    if nodeid in OWN_SPARK:
        return nodeid
    if path.startswith("tests/spark/"):
        return "spark"
    if path in WHOLE_MODULES:
        return path
    if path == "tests/test_docs.py" and name.startswith("test_snippet["):
        # A page's blocks build on the ones before them (one directory, one namespace).
        return "docs:" + name.removeprefix("test_snippet[").rsplit(":", 1)[0]
    return nodeid


class TierScheduling(LoadScopeScheduling):
    """xdist's loadscope with units from `unit_of`, dealt in collection order.

    conftest.py sorts the collection longest tier first; loadscope would
    instead reorder the units by their number of tests, which puts a page of
    many quick doc blocks before a minute-long chaos test.
    """

    def __init__(self, config, log=None):
        super().__init__(config, log)
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)
