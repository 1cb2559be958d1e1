"""The sparse offset index, `<base offset>.index` (Kafka's `OffsetIndex`).

Each entry maps a record offset to the byte position in the segment's `.log` where the batch holding it
starts. Entry layout, 8 bytes, big-endian, no padding, no checksum:

| bytes | field           | type  | meaning                                             |
|-------|-----------------|-------|-----------------------------------------------------|
| 0-3   | relative offset | int32 | offset - base_offset, 0..2**31-1                    |
| 4-7   | position        | int32 | byte position of the batch in `.log`, 0..2**31-1   |

Invariants: relative offsets strictly increase; positions never decrease. The index is sparse: the log
segment adds an entry only after more than `index.interval.bytes` (4096) of log since the previous one, so a
lookup lands at or before the wanted batch and the caller scans forward in `.log`. The 10 MiB default
preallocation holds 1,310,720 entries. The file is rebuilt from `.log` on crash recovery (see
`storage.segment.index_base` for preallocation, trimming and crash behaviour).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from storage.errors import CorruptIndexError, InvalidOffsetError
from storage.segment.index_base import INT32_MAX, IndexBase

_ENTRY = struct.Struct(
    ">"
    "i"  # relative offset: offset - base_offset
    "i"  # position: byte position of the batch in .log
)
_INT32 = struct.Struct(">i")
_POSITION_FIELD_AT = _INT32.size  # the position follows the 4-byte relative offset


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    """An absolute offset and the `.log` byte position of the batch that holds it."""

    offset: int
    position: int


class OffsetIndex(IndexBase[OffsetPosition]):
    """Offset -> `.log` position entries of one segment."""

    ENTRY_SIZE = _ENTRY.size
    RELATIVE_OFFSET_AT = 0  # the relative offset is the first field of an entry

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or the base offset when the index is empty."""
        if self._entries == 0:
            return self._base_offset
        return self._base_offset + self._relative_offset_at(self._entries - 1)

    def append(self, offset: int, position: int) -> None:
        """Add an entry; `offset` must exceed `last_offset` and there must be a free slot."""
        self._check_writable()
        if self.is_full():
            raise InvalidOffsetError(
                f"cannot append: index is full ({self._entries} entries)", path=self._path, offset=offset
            )
        if self._entries > 0 and offset <= self.last_offset:
            raise InvalidOffsetError(
                f"cannot append an offset no larger than the last offset {self.last_offset}",
                path=self._path,
                offset=offset,
            )
        relative = self.relative_offset(offset)
        if not 0 <= position <= INT32_MAX:
            raise InvalidOffsetError(
                f"log position {position} does not fit an int32", path=self._path, position=position, offset=offset
            )
        _ENTRY.pack_into(self._buffer_for_append(), self.size_in_bytes, relative, position)
        self._entries += 1

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= `target_offset`, or (base_offset, 0) if there is none."""
        self._check_open()
        slot = self._largest_lower_bound_slot(target_offset - self._base_offset, self._relative_offset_at)
        if slot < 0:
            return OffsetPosition(self._base_offset, 0)
        found = self._read(slot)
        if found.position < 0:
            # Only a damaged entry (a flipped sign bit) holds a negative position: reading the .log there fails
            # with EINVAL, an I/O error that takes the whole log dir offline. A scan from the segment start is
            # always right, only slower.
            return OffsetPosition(self._base_offset, 0)
        return found

    def fetch_upper_bound_offset(self, fetch_start: OffsetPosition, fetch_size: int) -> OffsetPosition | None:
        """The first entry whose position is >= `fetch_start.position + fetch_size`, or None.

        Bounds the offsets a fetch of `fetch_size` bytes can reach (used to bound transaction-index scans).
        """
        self._check_open()
        slot = self._smallest_upper_bound_slot(fetch_start.position + fetch_size, self._position_at)
        if slot < 0:
            return None
        return self._read(slot)

    def _check_entries(self) -> None:
        if self._entries > 0 and self.last_offset < self._base_offset:
            raise CorruptIndexError(
                f"last offset {self.last_offset} of a non-empty offset index is below its base offset "
                f"{self._base_offset}",
                path=self._path,
                position=(self._entries - 1) * self.ENTRY_SIZE,
                offset=self.last_offset,
            )

    def _read(self, slot: int) -> OffsetPosition:
        relative, position = _ENTRY.unpack_from(self._buffer_for_read(), slot * self.ENTRY_SIZE)
        return OffsetPosition(self._base_offset + relative, position)

    def _position_at(self, slot: int) -> int:
        position: int = _INT32.unpack_from(self._buffer_for_read(), slot * self.ENTRY_SIZE + _POSITION_FIELD_AT)[0]
        return position
