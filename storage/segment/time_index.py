"""The sparse time index, `<base offset>.timeindex` (Kafka's `TimeIndex`).

An entry (T, O) says: the largest timestamp among the segment's records up to offset O is T, so every record
with a timestamp > T comes after O. Entry layout, 12 bytes, big-endian, no padding, no checksum:

| bytes | field           | type  | meaning                              |
|-------|-----------------|-------|--------------------------------------|
| 0-7   | timestamp       | int64 | milliseconds since the epoch         |
| 8-11  | relative offset | int32 | offset - base_offset, 0..2**31-1     |

Invariants: timestamps strictly increase; offsets never decrease. The last slot is reserved: `is_full()`
is true one entry early, so that rolling or closing the segment can always append its final
(max timestamp, offset of max timestamp) entry with `skip_full_check=True`; that is why every non-empty
segment Kafka closed has at least one time entry. The 10 MiB default preallocates 10,485,756 bytes
(873,813 entries). Rebuilt from `.log` on crash recovery (see `storage.segment.index_base`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from storage.errors import CorruptIndexError, InvalidOffsetError, InvalidTimestampError
from storage.records.layout import NO_TIMESTAMP
from storage.segment.index_base import IndexBase

_ENTRY = struct.Struct(
    ">"
    "q"  # timestamp in ms
    "i"  # relative offset: offset - base_offset
)
_TIMESTAMP = struct.Struct(">q")

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A timestamp and the absolute offset of the record (batch) that carries it."""

    timestamp: int
    offset: int


class TimeIndex(IndexBase[TimestampOffset]):
    """Timestamp -> offset entries of one segment."""

    ENTRY_SIZE = _ENTRY.size
    RELATIVE_OFFSET_AT = _TIMESTAMP.size  # the relative offset follows the 8-byte timestamp

    def is_full(self) -> bool:
        """True one slot early: the last slot is kept for the final entry written on roll or close."""
        return self._entries >= self._max_entries - 1

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or (-1, base_offset) when the index is empty."""
        self._check_open()
        if self._entries == 0:
            return TimestampOffset(NO_TIMESTAMP, self._base_offset)
        return self._read(self._entries - 1)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) if `timestamp` is greater than the last entry's; otherwise do nothing.

        An offset below the last entry's, or a timestamp below it, is a caller bug and raises
        `InvalidOffsetError`. `skip_full_check` lets the final roll/close entry use the reserved slot; an entry
        that would not be appended never fails for lack of room (a trimmed, reopened index stays closable).
        An empty index compares against NO_TIMESTAMP (-1), so records without timestamps add no entry.
        """
        self._check_writable()
        if not skip_full_check and self.is_full():
            raise self._full_error(offset)
        last = self.last_entry
        if self._entries > 0 and offset < last.offset:
            raise InvalidOffsetError(
                f"cannot append an offset smaller than the last entry's offset {last.offset}",
                path=self._path,
                offset=offset,
            )
        if self._entries > 0 and timestamp < last.timestamp:
            raise InvalidOffsetError(
                f"cannot append timestamp {timestamp}, smaller than the last entry's timestamp {last.timestamp}",
                path=self._path,
                offset=offset,
            )
        if timestamp <= last.timestamp:
            return
        if self._entries >= self._max_entries:
            raise self._full_error(offset)
        relative = self.relative_offset(offset)
        if not _INT64_MIN <= timestamp <= _INT64_MAX:
            raise InvalidTimestampError(f"timestamp {timestamp} does not fit an int64", path=self._path, offset=offset)
        _ENTRY.pack_into(self._buffer_for_append(), self.size_in_bytes, timestamp, relative)
        self._entries += 1

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= `target_timestamp`, or (-1, base_offset) if there is none."""
        self._check_open()
        slot = self._largest_lower_bound_slot(target_timestamp, self._timestamp_at)
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self._base_offset)
        return self._read(slot)

    def _check_entries(self) -> None:
        if self._entries == 0:
            return
        first = self._read(0)
        last = self._read(self._entries - 1)
        last_position = (self._entries - 1) * self.ENTRY_SIZE
        if last.timestamp < first.timestamp:
            raise CorruptIndexError(
                f"last timestamp {last.timestamp} of a non-empty time index is below its first timestamp "
                f"{first.timestamp}",
                path=self._path,
                position=last_position,
                offset=last.offset,
            )
        if last.offset < self._base_offset:
            raise CorruptIndexError(
                f"last offset {last.offset} of a non-empty time index is below its base offset {self._base_offset}",
                path=self._path,
                position=last_position,
                offset=last.offset,
            )

    def _full_error(self, offset: int) -> InvalidOffsetError:
        return InvalidOffsetError(
            f"cannot append: time index is full ({self._entries} of {self._max_entries} slots)",
            path=self._path,
            offset=offset,
        )

    def _read(self, slot: int) -> TimestampOffset:
        timestamp, relative = _ENTRY.unpack_from(self._buffer_for_read(), slot * self.ENTRY_SIZE)
        return TimestampOffset(timestamp, self._base_offset + relative)

    def _timestamp_at(self, slot: int) -> int:
        timestamp: int = _TIMESTAMP.unpack_from(self._buffer_for_read(), slot * self.ENTRY_SIZE)[0]
        return timestamp
