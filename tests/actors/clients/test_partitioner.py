"""Kafka's default partitioner: murmur2 against Kafka's and kafka-python's vectors, and KIP-480 sticky choice."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from kafka.partitioner import DefaultPartitioner
from kafka.partitioner import murmur2 as kafka_python_murmur2

from actors.clients.partitioner import (
    KEY_HASH_CACHE_SIZE,
    StickyPartitionCache,
    murmur2,
    murmur2_many,
    partition_for_key,
    partitions_for_keys,
    to_positive,
)

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


def random_keys(count: int, max_length: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randrange(max_length + 1)) for _ in range(count)]


class FakeCluster:
    """The three calls kafka-python's DefaultPartitioner makes on its ClusterMetadata."""

    def __init__(self, topic: str, num_partitions: int) -> None:
        self.topic = topic
        self.num_partitions = num_partitions

    def topics(self) -> set[str]:
        return {self.topic}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self.num_partitions))

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self.num_partitions))


# --- murmur2 --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafkas_utils_test_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@pytest.mark.parametrize(
    ("key", "partition"),
    [(b"", 681), (b"a", 524), (b"ab", 434), (b"abc", 107), (b"123456789", 566), (b"\x00 ", 742)],
)
def test_partition_for_key_matches_the_java_producer_over_1000_partitions(key: bytes, partition: int) -> None:
    assert partition_for_key(key, 1000) == partition


def test_murmur2_matches_kafka_python_on_random_keys() -> None:
    for key in random_keys(5000, 64, seed=480):
        ours = murmur2(key)
        assert INT32_MIN <= ours <= INT32_MAX
        assert ours & 0xFFFFFFFF == kafka_python_murmur2(key), key


def test_murmur2_results_are_signed_like_javas_int() -> None:
    results = [murmur2(key) for key in random_keys(200, 16, seed=1)]
    assert min(results) < 0 < max(results)


def test_murmur2_accepts_any_bytes_like_object() -> None:
    data = b"a-little-bit-long-string"
    assert murmur2(bytearray(data)) == murmur2(memoryview(data)) == murmur2(data)


@pytest.mark.parametrize(
    ("number", "positive"),
    [(0, 0), (5, 5), (INT32_MAX, INT32_MAX), (-1, INT32_MAX), (INT32_MIN, 0), (-973932308, 1173551340)],
)
def test_to_positive_clears_the_sign_bit(number: int, positive: int) -> None:
    assert to_positive(number) == positive


@pytest.mark.parametrize("num_partitions", [1, 2, 3, 7, 50, 1000])
def test_partition_for_key_agrees_with_kafka_pythons_default_partitioner(num_partitions: int) -> None:
    cluster = FakeCluster("orders", num_partitions)
    partitioner = DefaultPartitioner()
    for key in random_keys(500, 32, seed=num_partitions):
        expected = partitioner.partition("orders", key, key, None, None, cluster)
        assert partition_for_key(key, num_partitions) == expected


@pytest.mark.parametrize("num_partitions", [0, -1, True, 2.0])
def test_partition_count_must_be_a_positive_int(num_partitions: object) -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for_key(b"k", num_partitions)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_partitions"):
        partitions_for_keys([b"k"], num_partitions)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_partitions"):
        StickyPartitionCache().partition("t", num_partitions)  # type: ignore[arg-type]


# --- vectorized -----------------------------------------------------------------------------------------


def test_murmur2_many_equals_murmur2_in_input_order() -> None:
    keys = [b"", b"abc", *random_keys(3000, 41, seed=7), b"", b"21"]
    hashes = murmur2_many(keys)
    assert hashes.dtype == np.int32
    assert hashes.tolist() == [murmur2(key) for key in keys]


def test_murmur2_many_of_no_keys_is_empty() -> None:
    hashes = murmur2_many([])
    assert hashes.dtype == np.int32
    assert hashes.shape == (0,)


def test_partitions_for_keys_equals_partition_for_key() -> None:
    keys = random_keys(2000, 24, seed=11)
    assert partitions_for_keys(keys, 12).tolist() == [partition_for_key(key, 12) for key in keys]


def test_remembered_hashes_agree_with_kafka_python_past_the_cache_size() -> None:
    """More distinct keys than the cache holds, twice over, each asked twice in a row (a hit after a miss):
    every answer is kafka-python's, whichever of them the cache had."""
    cluster = FakeCluster("orders", 7)
    partitioner = DefaultPartitioner()
    keys = random_keys(KEY_HASH_CACHE_SIZE + 500, 16, seed=3)
    expected = [partitioner.partition("orders", key, key, None, None, cluster) for key in keys]
    for _ in range(2):
        assert [partition_for_key(key, 7) for key in keys] == expected
        assert [partition_for_key(bytes(key), 7) for key in keys] == expected
    assert [partition_for_key(bytearray(key), 7) for key in keys[:200]] == expected[:200]


# --- sticky partitioner (null keys) ---------------------------------------------------------------------


def test_null_keys_stick_to_one_partition_until_a_new_batch() -> None:
    cache = StickyPartitionCache(random.Random(3))
    first = cache.partition("t", 6)
    assert {cache.partition("t", 6) for _ in range(100)} == {first}
    second = cache.on_new_batch("t", first, 6)
    assert second != first
    assert {cache.partition("t", 6) for _ in range(100)} == {second}


def test_new_batch_never_returns_the_previous_partition() -> None:
    for num_partitions in (2, 3, 5):
        cache = StickyPartitionCache(random.Random(num_partitions))
        current = cache.partition("t", num_partitions)
        for _ in range(1000):
            following = cache.on_new_batch("t", current, num_partitions)
            assert following != current
            assert 0 <= following < num_partitions
            current = following


def test_new_batches_spread_over_every_partition() -> None:
    cache = StickyPartitionCache(random.Random(99))
    current = cache.partition("t", 4)
    counts: Counter[int] = Counter()
    for _ in range(4000):
        current = cache.on_new_batch("t", current, 4)
        counts[current] += 1
    assert sorted(counts) == [0, 1, 2, 3]
    assert min(counts.values()) > 800


def test_stale_new_batch_reports_move_the_topic_once() -> None:
    cache = StickyPartitionCache(random.Random(5))
    first = cache.partition("t", 8)
    moved = cache.on_new_batch("t", first, 8)
    assert cache.on_new_batch("t", first, 8) == moved
    assert cache.partition("t", 8) == moved


def test_single_partition_topic_stays_on_partition_zero() -> None:
    cache = StickyPartitionCache(random.Random(1))
    assert cache.partition("t", 1) == 0
    assert cache.on_new_batch("t", 0, 1) == 0


def test_topics_have_independent_sticky_partitions() -> None:
    cache = StickyPartitionCache(random.Random(8))
    a, b = cache.partition("a", 10), cache.partition("b", 10)
    cache.on_new_batch("a", a, 10)
    assert cache.partition("b", 10) == b


def test_choice_is_made_among_available_partitions() -> None:
    cache = StickyPartitionCache(random.Random(2))
    current = cache.partition("t", 10, available=[3, 7])
    assert current in (3, 7)
    for _ in range(50):
        following = cache.on_new_batch("t", current, 10, available=[3, 7])
        assert {current, following} == {3, 7}
        current = following


def test_only_available_partition_is_kept_even_if_it_was_the_previous_one() -> None:
    cache = StickyPartitionCache(random.Random(2))
    assert cache.partition("t", 4, available=[2]) == 2
    assert cache.on_new_batch("t", 2, 4, available=[2]) == 2


def test_topic_recreated_with_fewer_partitions_gets_a_new_choice() -> None:
    cache = StickyPartitionCache(random.Random(4))
    cache.partition("t", 100, available=[99])
    assert cache.partition("t", 3) in (0, 1, 2)


def test_seeded_caches_choose_the_same_sequence() -> None:
    def sequence(seed: int) -> list[int]:
        cache = StickyPartitionCache(random.Random(seed))
        current = cache.partition("t", 16)
        chosen = [current]
        for _ in range(20):
            current = cache.on_new_batch("t", current, 16)
            chosen.append(current)
        return chosen

    assert sequence(42) == sequence(42)
