"""SkimpyOffsetMap against a dict oracle: latest offset per key, capacity from the memory budget, full map."""

from __future__ import annotations

import random

import numpy as np
import pytest

from storage.compaction.offset_map import BYTES_PER_ENTRY, SkimpyOffsetMap
from storage.errors import InvalidConfigError, StorageError


def test_slots_and_capacity_come_from_the_memory_budget() -> None:
    offset_map = SkimpyOffsetMap(24 * 1000 + 23, load_factor=0.9)
    assert BYTES_PER_ENTRY == 24
    assert offset_map.slots == 1000
    assert offset_map.max_entries == 900
    assert offset_map.memory_bytes == 24_000


def test_kafka_default_budget_holds_five_million_keys() -> None:
    slots = 134217728 // BYTES_PER_ENTRY
    assert slots == 5_592_405
    assert int(slots * 0.9) == 5_033_164


def test_put_and_get_match_a_dict_oracle() -> None:
    rng = random.Random(7)
    offset_map = SkimpyOffsetMap(24 * 4096)
    oracle: dict[bytes, int] = {}
    for offset in range(3000):
        key = b"key-%d" % rng.randrange(1500)
        offset_map.put(key, offset)
        oracle[key] = offset
    assert offset_map.size == len(oracle)
    assert offset_map.latest_offset == 2999
    for key, offset in oracle.items():
        assert offset_map.get(key) == offset
    for missing in range(200):
        assert offset_map.get(b"absent-%d" % missing) == -1
    assert offset_map.utilization == pytest.approx(len(oracle) / 4096)


def test_keys_are_compared_by_their_bytes() -> None:
    offset_map = SkimpyOffsetMap(24 * 64)
    offset_map.put(b"a", 1)
    offset_map.put(b"a\x00", 2)
    offset_map.put(b"", 3)
    assert (offset_map.get(b"a"), offset_map.get(b"a\x00"), offset_map.get(b"")) == (1, 2, 3)


def test_full_map_refuses_new_keys_but_updates_existing_ones() -> None:
    offset_map = SkimpyOffsetMap(24 * 10, load_factor=0.5)
    for offset in range(5):
        offset_map.put(b"k%d" % offset, offset)
    assert offset_map.is_full
    offset_map.put(b"k0", 9)
    assert offset_map.get(b"k0") == 9
    with pytest.raises(StorageError, match="full"):
        offset_map.put(b"new", 10)
    assert offset_map.size == 5


def test_completely_full_map_still_answers_absent_keys() -> None:
    offset_map = SkimpyOffsetMap(24 * 8, load_factor=1.0)
    for offset in range(8):
        offset_map.put(b"k%d" % offset, offset)
    assert offset_map.utilization == 1.0
    assert offset_map.get(b"absent") == -1
    assert [offset_map.get(b"k%d" % offset) for offset in range(8)] == list(range(8))


def test_clear_empties_the_map_for_the_next_pass() -> None:
    offset_map = SkimpyOffsetMap(24 * 32)
    for offset in range(20):
        offset_map.put(b"k%d" % offset, offset)
    offset_map.clear()
    assert (offset_map.size, offset_map.latest_offset, offset_map.is_full) == (0, -1, False)
    assert offset_map.get(b"k3") == -1
    offset_map.put(b"k3", 40)
    assert offset_map.get(b"k3") == 40


def test_latest_offset_moves_only_forward() -> None:
    offset_map = SkimpyOffsetMap(24 * 32)
    offset_map.update_latest_offset(10)
    offset_map.update_latest_offset(4)
    assert offset_map.latest_offset == 10
    offset_map.put(b"k", 12)
    assert offset_map.latest_offset == 12


def test_memory_does_not_grow_with_keys() -> None:
    offset_map = SkimpyOffsetMap(24 * 2048)
    before = offset_map.allocated_bytes
    assert before == 24 * 2048
    for offset in range(1800):
        offset_map.put(b"k%d" % offset, offset)
    assert offset_map.allocated_bytes == before


@pytest.mark.parametrize(("memory_bytes", "load_factor"), [(23, 0.9), (24, 0.5), (240, 0.0), (240, 1.5)])
def test_budgets_that_hold_no_key_are_rejected(memory_bytes: int, load_factor: float) -> None:
    with pytest.raises(InvalidConfigError):
        SkimpyOffsetMap(memory_bytes, load_factor)


def test_negative_offsets_are_rejected() -> None:
    with pytest.raises(ValueError):
        SkimpyOffsetMap(240).put(b"k", -1)


def _oracle_put_many(oracle: dict[bytes, int], keys: list[bytes], offsets: list[int], max_entries: int) -> int:
    """Kafka's cleaner loop, one key at a time: a key is stored only while the map holds fewer than
    `max_entries` keys, else the loop stops there (even for a key already in the map)."""
    for index, (key, offset) in enumerate(zip(keys, offsets, strict=True)):
        if len(oracle) >= max_entries:
            return index
        oracle[key] = offset
    return len(keys)


@pytest.mark.parametrize("seed", range(6))
def test_put_many_and_get_many_match_a_dict_oracle_with_kafkas_stop_rule(seed: int) -> None:
    rng = random.Random(seed)
    slots = rng.choice([16, 97, 1000])
    offset_map = SkimpyOffsetMap(24 * slots, load_factor=rng.choice([0.5, 0.9, 1.0]))
    oracle: dict[bytes, int] = {}
    offset = 0
    while True:
        # Batches with repeated keys inside them, keys already mapped and new ones.
        count = rng.randint(1, 60)
        keys = [b"key-%d" % rng.randrange(slots * 2) for _ in range(count)]
        offsets = list(range(offset, offset + count))
        offset += count
        stored = offset_map.put_many(offset_map.digests(keys), np.array(offsets, dtype=np.int64))
        expected = _oracle_put_many(oracle, keys, offsets, offset_map.max_entries)
        assert stored == expected
        assert offset_map.size == len(oracle)
        if stored:
            assert offset_map.latest_offset == offsets[stored - 1]
        probes = [*oracle, *(b"absent-%d" % index for index in range(20))]
        assert offset_map.get_many(offset_map.digests(probes)).tolist() == [oracle.get(key, -1) for key in probes]
        if stored < count:
            break


def test_put_many_stops_at_a_known_key_once_the_map_is_at_its_load() -> None:
    offset_map = SkimpyOffsetMap(24 * 4, load_factor=0.5)
    keys = [b"k0", b"k1", b"k0", b"k2"]
    assert offset_map.put_many(offset_map.digests(keys), np.arange(4, dtype=np.int64)) == 2
    assert (offset_map.get(b"k0"), offset_map.get(b"k1"), offset_map.latest_offset) == (0, 1, 1)


def test_put_many_keeps_the_highest_offset_of_a_key_repeated_in_one_call() -> None:
    offset_map = SkimpyOffsetMap(24 * 64)
    keys = [b"a", b"b", b"a", b"a", b"b", b"c"]
    assert offset_map.put_many(offset_map.digests(keys), np.arange(6, dtype=np.int64)) == 6
    assert [offset_map.get(key) for key in (b"a", b"b", b"c")] == [3, 4, 5]
    assert offset_map.size == 3


def test_short_keys_are_their_own_digest_and_long_keys_a_seeded_hash() -> None:
    first, second = SkimpyOffsetMap(240), SkimpyOffsetMap(240)
    short, long = b"fifteen bytes!!", b"sixteen bytes!!!"
    assert first.digests([short]).tobytes() == short + bytes([15])
    assert first.digests([b""]).tobytes() == bytes(16)
    assert first.digests([short]).tobytes() == second.digests([short]).tobytes()
    assert first.digests([long]).tobytes() != second.digests([long]).tobytes()
    # A hashed key's last byte has its top bit set; a packed key's last byte is its length (< 16).
    assert first.digests([long]).tobytes()[15] >= 0x80


def test_digests_at_positions_match_digests_of_the_keys() -> None:
    rng = random.Random(3)
    keys = [rng.randbytes(rng.choice([0, 1, 14, 15, 16, 40])) for _ in range(300)]
    offset_map = SkimpyOffsetMap(240)
    data = b"".join(keys) + b"tail"
    lengths = np.array([len(key) for key in keys], dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    assert offset_map.digests_at(data, starts, lengths).tolist() == offset_map.digests(keys).tolist()
    assert len({offset_map.digests([key]).tobytes() for key in set(keys)}) == len(set(keys))


@pytest.mark.parametrize("length", [1, 15, 16, 64])
def test_keys_of_every_length_match_a_dict_oracle(length: int) -> None:
    rng = random.Random(length)
    offset_map = SkimpyOffsetMap(24 * 8192)
    oracle: dict[bytes, int] = {}
    keys = [rng.randbytes(length) for _ in range(1000)] + [b"same-prefix".ljust(length, b"\0")[:length]]
    for offset, key in enumerate(rng.choices(keys, k=4000)):
        oracle[key] = offset
        offset_map.put(key, offset)
    assert offset_map.get_many(offset_map.digests(list(oracle))).tolist() == list(oracle.values())
