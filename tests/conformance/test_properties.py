"""Property tests for the invariants of DESIGN.md: dense offsets, monotonic commits."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_settings = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

sends = st.lists(
    st.tuples(st.integers(0, 2), st.lists(st.binary(max_size=20), min_size=1, max_size=5), st.booleans()),
    min_size=1,
    max_size=25,
)


@_settings
@given(ops=sends)
def test_offsets_are_dense_in_append_order(store, ops):
    log = store.open()
    try:
        log.delete_topic("p")
        log.create_topic("p", partitions=3)
        producer = log.producer()
        expected: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
        for partition, values, batched in ops:
            if batched:
                sent = producer.send_batch("p", values, partition=partition)
                assert sent.first_offset == len(expected[partition]) + 1
                expected[partition].extend(values)
            else:
                for value in values:
                    assert (
                        producer.send("p", value, partition=partition).offset == len(expected[partition]) + 1
                    )
                    expected[partition].append(value)
        for partition, values in expected.items():
            msgs = log.read("p", partition, limit=1000)
            assert [m.offset for m in msgs] == list(range(1, len(values) + 1))
            assert [m.value for m in msgs] == values
    finally:
        log.close()


@_settings
@given(commits=st.lists(st.tuples(st.sampled_from(["commit", "seek"]), st.integers(0, 30)), max_size=30))
def test_committed_moves_forward_except_through_seek(store, commits):
    log = store.open()
    try:
        log.delete_topic("c")
        log.create_topic("c", partitions=1)
        log.producer().send_batch("c", [b"x"] * 30)
        consumer = log.consumer("g-props")
        consumer.seek("c", 0, 0)
        model = 0
        for op, offset in commits:
            if op == "commit":
                consumer.commit("c", 0, offset)
                model = max(model, offset)
            else:
                consumer.seek("c", 0, offset)
                model = offset
            assert consumer.committed("c", 0) == model
            with store.open() as other:
                assert other.consumer("g-props").committed("c", 0) == model
    finally:
        log.close()
