"""One Log shared by threads."""

from __future__ import annotations

import threading

import tidelog


def test_threads_share_one_log(tmp_path):
    log = tidelog.open(str(tmp_path / "threads.db"))
    log.create_topic("t", partitions=2)
    errors: list[BaseException] = []
    acked: list[tuple[int, int]] = []
    lock = threading.Lock()

    def produce(n: int) -> None:
        try:
            producer = log.producer()
            for i in range(200):
                if i % 10 == 0:
                    s = producer.send_batch("t", [b"b"] * 5, partition=n % 2)
                    got = [(s.partition, s.first_offset + k) for k in range(5)]
                else:
                    s = producer.send("t", b"s", partition=n % 2)
                    got = [(s.partition, s.offset)]
                with lock:
                    acked.extend(got)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def consume() -> None:
        try:
            consumer = log.consumer("readers")
            for _ in range(200):
                for msg in consumer.fetch("t", 0, max_messages=10):
                    consumer.commit(msg)
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
    threads += [threading.Thread(target=consume) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(acked) == len(set(acked)) == 4 * (180 + 20 * 5)
    for partition in (0, 1):
        offsets = [m.offset for m in log.read("t", partition, limit=10_000)]
        assert offsets == list(range(1, len(offsets) + 1))
    log.close()
