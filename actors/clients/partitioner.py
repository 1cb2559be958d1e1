"""Kafka's default partitioner: murmur2 of the key bytes for keyed records, KIP-480 sticky choice for null keys.

A keyed record goes to `to_positive(murmur2(key)) % num_partitions`, exactly as Kafka's Java producer
(`BuiltInPartitioner.partitionForKey`, formerly `DefaultPartitioner`) and kafka-python place it, so a topic
written by raybroker and by a Kafka client agrees on which partition holds a key.

murmur2 is Kafka's `Utils.murmur2`, MurmurHash2 in 32 bits:

| step          | rule                                                                                   |
|---------------|----------------------------------------------------------------------------------------|
| constants     | seed 0x9747b28c, m 0x5bd1e995, r 24                                                    |
| start         | h = seed ^ len(data)                                                                   |
| each 4 bytes  | k = little-endian uint32; k *= m; k ^= k >>> r; k *= m; h *= m; h ^= k                 |
| 1..3 left     | h ^= byte[2] << 16, byte[1] << 8, byte[0] (those present, from the last), then h *= m |
| finish        | h ^= h >>> 13; h *= m; h ^= h >>> 15                                                   |

All arithmetic wraps at 32 bits; Java returns the result as a signed int, and so does `murmur2` here (kafka-python
returns the same bits unsigned). `to_positive` clears the sign bit (`n & 0x7fffffff`), not `abs`, which would
map Integer.MIN_VALUE to itself.

Null keys (KIP-480): `StickyPartitionCache` keeps one partition per topic and sends every null-key record there
until the producer reports, through `on_new_batch(topic, previous_partition, ...)`, that the batch for that
partition filled or was sent; only then does it pick another partition at random, never the previous one when
two or more are eligible. Java clients since 3.3 (KIP-794) replaced this with an adaptive choice weighted by
queue sizes; the keyed placement is the same in both.
"""

from __future__ import annotations

import random
import struct
import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from storage.arguments import is_int

SEED = 0x9747B28C
M = 0x5BD1E995
R = 24
MASK_32 = 0xFFFFFFFF
POSITIVE_MASK = 0x7FFFFFFF
# Distinct keys whose murmur2 `partition_for_key` remembers (a few MiB at most for keys of ~100 bytes).
KEY_HASH_CACHE_SIZE = 16384


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's `Utils.murmur2` of `data`, as a signed 32-bit int."""
    view = memoryview(data).cast("B")
    length = len(view)
    words = length // 4
    h = (SEED ^ length) & MASK_32
    for k in struct.unpack_from(f"<{words}I", view):
        k = (k * M) & MASK_32
        k ^= k >> R
        k = (k * M) & MASK_32
        h = ((h * M) & MASK_32) ^ k
    tail = words * 4
    extra = length - tail
    if extra == 3:
        h ^= view[tail + 2] << 16
    if extra >= 2:
        h ^= view[tail + 1] << 8
    if extra >= 1:
        h ^= view[tail]
        h = (h * M) & MASK_32
    h ^= h >> 13
    h = (h * M) & MASK_32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's `Utils.toPositive`: the low 31 bits, so every int32 maps to 0..2**31-1."""
    return number & POSITIVE_MASK


# murmur2 of recent distinct `bytes` keys, made positive; emptied when full. A dict, not `functools.lru_cache`:
# the cache wraps a bytes argument in a new list-like key on every call (~0.3 us, a tenth of a `send`).
_KEY_HASHES: dict[bytes, int] = {}


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Kafka's producer picks for a record with these serialized key bytes."""
    if type(num_partitions) is not int or num_partitions < 1:
        _check_num_partitions(num_partitions)
    return key_hash(key) % num_partitions


def key_hash(key: bytes | bytearray | memoryview) -> int:
    """`to_positive(murmur2(key))`, the number Kafka's producer takes modulo the partition count. The hashes of up
    to `KEY_HASH_CACHE_SIZE` distinct `bytes` keys are remembered: keys repeat (users, devices, orders), and
    murmur2 in Python costs ~3 us, a third of a `send`, where a cache hit costs ~0.1 us."""
    if type(key) is not bytes:
        return to_positive(murmur2(key))
    hashed = _KEY_HASHES.get(key)
    if hashed is None:
        if len(_KEY_HASHES) >= KEY_HASH_CACHE_SIZE:
            _KEY_HASHES.clear()
        hashed = _KEY_HASHES[key] = to_positive(murmur2(key))
    return hashed


def murmur2_many(keys: Sequence[bytes]) -> npt.NDArray[np.int32]:
    """`murmur2` of every key, as an int32 array in the order given; vectorized over keys of equal length."""
    result = np.empty(len(keys), dtype=np.int32)
    by_length: dict[int, list[int]] = {}
    for index, key in enumerate(keys):
        by_length.setdefault(len(key), []).append(index)
    m = np.uint32(M)
    for length, indices in by_length.items():
        rows = np.frombuffer(b"".join(bytes(keys[i]) for i in indices), dtype=np.uint8).reshape(len(indices), length)
        h = np.full(len(indices), (SEED ^ length) & MASK_32, dtype=np.uint32)
        words = length // 4
        block = np.ascontiguousarray(rows[:, : words * 4]).view("<u4")
        for column in range(words):
            k = block[:, column] * m
            k ^= k >> np.uint32(R)
            k *= m
            h *= m
            h ^= k
        tail = words * 4
        extra = length - tail
        if extra == 3:
            h ^= rows[:, tail + 2].astype(np.uint32) << np.uint32(16)
        if extra >= 2:
            h ^= rows[:, tail + 1].astype(np.uint32) << np.uint32(8)
        if extra >= 1:
            h ^= rows[:, tail].astype(np.uint32)
            h *= m
        h ^= h >> np.uint32(13)
        h *= m
        h ^= h >> np.uint32(15)
        result[indices] = h.view(np.int32)
    return result


def partitions_for_keys(keys: Sequence[bytes], num_partitions: int) -> npt.NDArray[np.int64]:
    """`partition_for_key` of every key, vectorized."""
    _check_num_partitions(num_partitions)
    return (murmur2_many(keys).astype(np.int64) & POSITIVE_MASK) % num_partitions


def _check_num_partitions(num_partitions: int) -> None:
    if not is_int(num_partitions) or num_partitions < 1:
        raise ValueError(f"num_partitions must be a positive int, got {num_partitions!r}")


class StickyPartitionCache:
    """The sticky partition of each topic for null-key records (Kafka's `StickyPartitionCache`, KIP-480).

    `available`, when given and not empty, lists the partitions the caller can reach (Kafka: those with a known
    leader; ids outside 0..num_partitions-1 are ignored); the choice is made among them, else among all
    `num_partitions`. Thread-safe. Pass a seeded `random.Random` for reproducible choices.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int, available: Sequence[int] = ()) -> int:
        """The topic's sticky partition, chosen now if the topic has none yet."""
        _check_num_partitions(num_partitions)
        with self._lock:
            current = self._sticky.get(topic)
            # A topic deleted and re-created with fewer partitions leaves a stale choice behind.
            if current is None or current >= num_partitions:
                current = self._choose(topic, num_partitions, available, avoid=None)
            return current

    def on_new_batch(
        self, topic: str, previous_partition: int, num_partitions: int, available: Sequence[int] = ()
    ) -> int:
        """The producer started a new batch because the one for `previous_partition` filled or was sent.

        Moves the topic to another partition only if `previous_partition` is still its sticky partition, so the
        reports of several batches closing at once cause one move, not several. Returns the sticky partition.
        """
        _check_num_partitions(num_partitions)
        with self._lock:
            current = self._sticky.get(topic)
            if current is None or current == previous_partition or current >= num_partitions:
                current = self._choose(topic, num_partitions, available, avoid=current)
            return current

    def _choose(self, topic: str, num_partitions: int, available: Sequence[int], avoid: int | None) -> int:
        pool = [partition for partition in available if 0 <= partition < num_partitions] or range(num_partitions)
        candidates = [partition for partition in pool if partition != avoid] or list(pool)
        chosen = candidates[self._rng.randrange(len(candidates))]
        self._sticky[topic] = chosen
        return chosen


__all__ = [
    "StickyPartitionCache",
    "murmur2",
    "murmur2_many",
    "partition_for_key",
    "partitions_for_keys",
    "to_positive",
]
