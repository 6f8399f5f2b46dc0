"""Reads take the limit the caller asks for (kafka-python's max_records,
Redis's XRANGE COUNT): the store is read a chunk at a time, and `Log.iter`
walks a whole partition holding one chunk."""

from __future__ import annotations

import pytest

import tidelog
from tidelog.log import READ_CHUNK

N = READ_CHUNK + 2345  # past one chunk, so a read needs several store queries


@pytest.fixture
def filled(log):
    log.create_topic("big", partitions=2)
    log.producer().send_batch("big", list(range(N)), partition=1)
    return log


def test_a_read_serves_a_limit_past_one_chunk(filled):
    everything = filled.read("big", 1, limit=1_000_000)
    assert [m.offset for m in everything] == list(range(1, N + 1))
    assert [m.data for m in everything[-3:]] == [N - 3, N - 2, N - 1]
    middle = filled.read("big", 1, after=5, limit=READ_CHUNK + 1)
    assert (middle[0].offset, middle[-1].offset, len(middle)) == (6, READ_CHUNK + 6, READ_CHUNK + 1)
    assert filled.read("big", 0, limit=1_000_000) == []


def test_a_consumer_fetch_serves_a_large_max(filled):
    consumer = filled.consumer("g")
    assert len(consumer.fetch("big", 1, max_messages=1_000_000)) == N
    assert consumer.position("big", 1) == N
    assert consumer.fetch("big", 1, max_messages=1_000_000) == []


def test_iter_walks_the_whole_partition_a_chunk_at_a_time(filled):
    offsets = [m.offset for m in filled.iter("big", 1)]
    assert offsets == list(range(1, N + 1))
    small = filled.iter("big", 1, after=N - 10, chunk=3)
    assert [m.data for m in small] == list(range(N - 10, N))
    assert list(filled.iter("big", 0)) == []


def test_iter_and_read_refuse_bad_input_at_once(filled):
    with pytest.raises(tidelog.UnknownTopic):
        filled.iter("missing", 0)  # at the call, not at the first next()
    with pytest.raises(tidelog.UnknownPartition):
        filled.iter("big", 2)
    for bad in (0, -1, 1.5, "10"):
        with pytest.raises(tidelog.InvalidRequest, match="limit"):
            filled.read("big", 1, limit=bad)
    with pytest.raises(tidelog.InvalidRequest, match="chunk"):
        filled.iter("big", 1, chunk=READ_CHUNK + 1)
