"""The cleaner's dedupe map: record key -> latest offset, in a fixed memory budget (Kafka's `SkimpyOffsetMap`).

Kafka sizes the map in bytes, not entries: every slot holds a 16-byte MD5 digest of the key and an 8-byte
offset, so `slots = memory_bytes // 24`, and a pass stops adding keys once `slots * load_factor` slots are
in use (`log.cleaner.io.buffer.load.factor`, 0.9 by default: 128 MiB -> 5,592,405 slots -> 5,033,164 keys).
This map keeps exactly that layout, in three flat `array`s allocated once, so the memory it takes is the
budget (24 bytes per slot, plus a constant), never more as keys arrive:

    slot i:  digest_high[i] uint64 | digest_low[i] uint64 | offset[i] int64 (-1 = empty slot)

Keys are identified by their MD5 digest only, as in Kafka: two keys with the same digest would be taken
for one (odds of about 2**-128 per pair). Probing follows Kafka's `positionOf`: attempt a < 13 reads the
big-endian 32-bit word at digest byte a, later attempts step linearly from the last word, so every slot
is eventually visited and a lookup always ends (at an empty slot, or after `slots` attempts).

Why not a `dict`: a Python dict entry with a 16-byte key costs about 120 bytes (bytes object, int object,
table slot), so a 128 MiB budget would really take ~650 MiB. The arrays keep the budget honest at the
price of slower operations: a put or get costs a few microseconds (MD5 plus Python-level probing, ~2
probes on average at half load, ~10 for a miss at 0.9), several times a dict's.
"""

from __future__ import annotations

import hashlib
from array import array

from storage.errors import InvalidConfigError, StorageError

HASH_SIZE_BYTES = 16  # MD5
OFFSET_SIZE_BYTES = 8
BYTES_PER_ENTRY = HASH_SIZE_BYTES + OFFSET_SIZE_BYTES
EMPTY = -1
# Attempts 0..12 read the 32-bit word at digest byte `attempt` (the 13 windows of a 16-byte digest).
_WORD_ATTEMPTS = HASH_SIZE_BYTES - 4 + 1


class SkimpyOffsetMap:
    """key -> latest offset in `memory_bytes // 24` slots, filled at most to `load_factor` (see module docstring)."""

    def __init__(self, memory_bytes: int, load_factor: float = 0.9) -> None:
        if not 0 < load_factor <= 1:
            raise InvalidConfigError(f"offset map load factor must be in (0, 1], got {load_factor}")
        self.slots = memory_bytes // BYTES_PER_ENTRY
        self.max_entries = int(self.slots * load_factor)
        if self.max_entries < 1:
            raise InvalidConfigError(
                f"offset map of {memory_bytes} bytes at load factor {load_factor} cannot hold a single key "
                f"({BYTES_PER_ENTRY} bytes per slot)"
            )
        self.load_factor = load_factor
        self.memory_bytes = self.slots * BYTES_PER_ENTRY
        self._high = array("Q", bytes(self.slots * 8))
        self._low = array("Q", bytes(self.slots * 8))
        self._offsets = array("q", [EMPTY]) * self.slots
        self._entries = 0
        self._latest_offset = -1

    @property
    def allocated_bytes(self) -> int:
        """Bytes held by the three slot arrays: `slots * 24`, whatever the number of keys."""
        return sum(len(part) * part.itemsize for part in (self._high, self._low, self._offsets))

    @property
    def size(self) -> int:
        """Distinct keys stored."""
        return self._entries

    @property
    def latest_offset(self) -> int:
        """The highest offset put (or passed to `update_latest_offset`) since the last `clear`; -1 if none."""
        return self._latest_offset

    @property
    def utilization(self) -> float:
        """Fraction of slots in use."""
        return self._entries / self.slots

    @property
    def is_full(self) -> bool:
        """True once `max_entries` keys are stored: the cleaner adds no new key after that."""
        return self._entries >= self.max_entries

    def clear(self) -> None:
        """Empties the map (every slot, like Kafka's) and resets `latest_offset`."""
        if self._entries:
            self._offsets = array("q", [EMPTY]) * self.slots
        self._entries = 0
        self._latest_offset = -1

    def put(self, key: bytes, offset: int) -> None:
        """Records `offset` as the latest for `key`. Adding a new key beyond `max_entries` raises `StorageError`."""
        if offset < 0:
            raise ValueError(f"offsets in the map must be >= 0, got {offset}")
        digest = _digest(key)
        high, low = digest >> 64, digest & 0xFFFF_FFFF_FFFF_FFFF
        slot = self._find(digest, high, low)
        if slot < 0 or self._offsets[slot] == EMPTY:
            if slot < 0 or self._entries >= self.max_entries:
                raise StorageError(f"offset map is full ({self._entries} keys); cannot add another")
            self._high[slot] = high
            self._low[slot] = low
            self._entries += 1
        self._offsets[slot] = offset
        self._latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset stored for `key`, or -1."""
        digest = _digest(key)
        slot = self._find(digest, digest >> 64, digest & 0xFFFF_FFFF_FFFF_FFFF)
        return EMPTY if slot < 0 else self._offsets[slot]

    def update_latest_offset(self, offset: int) -> None:
        """Raises `latest_offset` to `offset` (batches without keys still move the cleaned range forward)."""
        self._latest_offset = max(self._latest_offset, offset)

    def _find(self, digest: int, high: int, low: int) -> int:
        """The slot holding `digest`, or the empty slot where it would go; -1 when neither exists."""
        slots = self.slots
        offsets, highs, lows = self._offsets, self._high, self._low
        # The first attempt settles nearly every call below the 0.9 load cap (~1.1 probes per hit at half
        # load); checking it before setting up the loop makes a put or get ~2x faster.
        slot = (digest >> 96) % slots
        if offsets[slot] == EMPTY or (lows[slot] == low and highs[slot] == high):
            return slot
        for attempt in range(1, slots + _WORD_ATTEMPTS):
            slot = ((digest >> (96 - 8 * attempt)) & 0xFFFF_FFFF) % slots if attempt < _WORD_ATTEMPTS else slot + 1
            if slot == slots:
                slot = 0
            if offsets[slot] == EMPTY or (lows[slot] == low and highs[slot] == high):
                return slot
        return -1


def _digest(key: bytes) -> int:
    return int.from_bytes(hashlib.md5(key, usedforsecurity=False).digest(), "big")


__all__ = ["BYTES_PER_ENTRY", "SkimpyOffsetMap"]
