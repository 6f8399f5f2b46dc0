"""The SQLite file gives space back after a topic is emptied."""

from __future__ import annotations

import os

import tidelog


def test_file_shrinks_after_a_topic_is_emptied(tmp_path):
    path = str(tmp_path / "space.db")
    now = [1_800_000_000_000]
    with tidelog.open(path, clock=lambda: now[0]) as log:
        log.create_topic("big", partitions=1, retention_ms="1h")
        producer = log.producer()
        for _ in range(20):
            producer.send_batch("big", [os.urandom(1000)] * 500)
        log.store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        full = os.path.getsize(path)
        assert full > 10_000_000
        now[0] += 3_600_001
        (report,) = log.clean("big")
        assert report.removed == 10_000
        log.store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        emptied = os.path.getsize(path)
    assert emptied < full / 10
