"""Key to partition: Kafka's default partitioner, so keys land where a Kafka
producer would put them.

murmur2 (the 32-bit variant Kafka's Java client uses, seed 0x9747b28c),
made positive by masking the sign bit, modulo the partition count. Stable on
every process, platform and Python version, unlike the salted `hash()`.
"""

from __future__ import annotations

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of `data` as an unsigned 32-bit integer."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end = length & ~3
    for i in range(0, end, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[end + 2] << 16
    if tail >= 2:
        h ^= data[end + 1] << 8
    if tail >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition a key always goes to: murmur2 of the key modulo the partition count (Kafka's default partitioner)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
