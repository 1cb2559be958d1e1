"""The memory-mapped, fixed-entry-size file shared by `.index` and `.timeindex` (Kafka's `AbstractIndex`).

File layout: a flat array of fixed-size, big-endian entries and nothing else (no header, no checksum)::

    [entry 0][entry 1]...[entry entries-1][unused preallocated tail, zeros]

| kind         | entry size | key (sorted)                 | value                         |
|--------------|------------|------------------------------|-------------------------------|
| `.index`     | 8 bytes    | int32 offset - base_offset   | int32 byte position in `.log` |
| `.timeindex` | 12 bytes   | int64 timestamp (ms)         | int32 offset - base_offset    |

Invariants and lifecycle:
- A file created here is preallocated (sparse `ftruncate`) to `max_index_size` rounded DOWN to a multiple of
  the entry size, and holds 0 entries. Only a missing file counts as new.
- An existing file is assumed valid and FULL: `entries = length // entry_size`. Nothing in the file says how
  many entries are used, so an index must be trimmed to `entries * entry_size` (`close`,
  `trim_to_valid_size`) before anyone reopens it; the log's active segment then calls
  `resize(max_index_size)` to get room to append again.
- Entries are kept sorted by key; lookups binary-search them, touching O(log n) entries and never reading a
  slot at or beyond `entries`.

Crash behaviour: appends write straight into the shared mapping and are not atomic; nothing here is trusted
after an unclean shutdown. A crash before trimming leaves a preallocated file whose zero tail reads as
entries, which is why the log loader runs `sanity_check` and rebuilds indexes of recovered segments from
`.log`. A crash between creating and preallocating a file leaves it 0 bytes long: it reopens as an empty,
full index and is resized like any other.
"""

from __future__ import annotations

import abc
import contextlib
import mmap
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

from storage.errors import CorruptIndexError, IndexOffsetOverflowError, KafkaStorageError, StorageError

# Kafka's `segment.index.bytes` default: 10 MiB, i.e. 1,310,720 offset entries or 873,813 time entries.
DEFAULT_MAX_INDEX_SIZE_BYTES = 10 * 1024 * 1024

# Relative offsets and positions are stored as int32.
INT32_MAX = 2**31 - 1

# Lookups first binary-search only the last 8 KiB of entries (KAFKA-6432). Nearly every lookup (followers
# and consumers that keep up) targets the tail, but a plain binary search over a 10 MiB index starts in the
# middle of the file and probes pages nobody else touches, so the page cache evicts them and each in-sync
# fetch can stall on a disk read. Restricting the first search to a fixed tail keeps the set of pages that
# in-sync lookups touch small and always hot. 8 KiB spans at most 3 pages of 4 KiB, is 1024 offset entries
# (with the 4 KiB `index.interval.bytes` default, ~4 MiB of log behind the head) or 682 time entries; a
# smaller section would miss readers that lag a little, a larger one would let pages in it go cold.
WARM_SECTION_BYTES = 8192

_INT32 = struct.Struct(">i")

EntryT = TypeVar("EntryT")


class IndexBase(abc.ABC, Generic[EntryT]):
    """A sorted array of fixed-size entries in a memory-mapped file; subclasses define the entry.

    Every entry stores an int32 `offset - base_offset` at byte `RELATIVE_OFFSET_AT` of the entry.
    Not thread-safe: one owner (the segment's actor) serialises calls.
    """

    ENTRY_SIZE: ClassVar[int]
    RELATIVE_OFFSET_AT: ClassVar[int]

    def __init__(
        self,
        path: str | Path,
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE_BYTES,
        writable: bool = True,
    ) -> None:
        self._path = Path(path)
        self._base_offset = base_offset
        self._max_index_size = self._round_down(max(0, max_index_size))
        self._writable = writable
        self._warm_entries = WARM_SECTION_BYTES // self.ENTRY_SIZE
        self._mmap: mmap.mmap | None = None
        self._closed = False
        newly_created = False
        fd = None
        try:
            if writable:
                try:
                    fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                    newly_created = True
                    os.ftruncate(fd, self._max_index_size)
                except FileExistsError:
                    fd = os.open(self._path, os.O_RDWR | os.O_CLOEXEC)
            else:
                fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
            self._length = os.fstat(fd).st_size
            self._map(fd)
        except OSError as exc:
            self._unmap()
            raise KafkaStorageError(f"cannot open index: {exc.strerror}", path=self._path) from exc
        finally:
            if fd is not None:
                os.close(fd)
        self._max_entries = self._length // self.ENTRY_SIZE
        self._entries = 0 if newly_created else self._max_entries

    @property
    def path(self) -> Path:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def max_index_size(self) -> int:
        """The preallocation size in bytes, already rounded down to a multiple of the entry size."""
        return self._max_index_size

    @property
    def writable(self) -> bool:
        return self._writable

    @property
    def entries(self) -> int:
        """Entries in use."""
        return self._entries

    @property
    def max_entries(self) -> int:
        """Entries the current file length has room for."""
        return self._max_entries

    @property
    def length_bytes(self) -> int:
        """Current file length (preallocated tail included)."""
        return self._length

    @property
    def size_in_bytes(self) -> int:
        """Bytes of used entries: the length the file is trimmed to."""
        return self._entries * self.ENTRY_SIZE

    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    def relative_offset(self, offset: int) -> int:
        """`offset - base_offset`, which must fit the int32 an entry stores."""
        relative = offset - self._base_offset
        if not 0 <= relative <= INT32_MAX:
            raise IndexOffsetOverflowError(
                f"offset does not fit an int32 relative to base offset {self._base_offset}",
                path=self._path,
                offset=offset,
            )
        return relative

    def can_append_offset(self, offset: int) -> bool:
        """Whether `offset` can be stored relative to this index's base offset."""
        return 0 <= offset - self._base_offset <= INT32_MAX

    def sanity_check(self) -> None:
        """Raise `CorruptIndexError` if the file cannot be a valid index (Kafka's O(1) checks, no scan)."""
        self._check_open()
        if self._length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"index length {self._length} is not a multiple of the entry size {self.ENTRY_SIZE}",
                path=self._path,
                position=self._length,
            )
        self._check_entries()

    def resize(self, new_size: int) -> bool:
        """Set the file length to `new_size` rounded down to the entry size; False if it already was.

        Entries past the new end are dropped; growing adds zero (sparse) slots.
        """
        self._check_writable()
        rounded = self._round_down(max(0, new_size))
        if rounded == self._length:
            return False
        try:
            with self._reopened() as fd:
                # The old mapping is replaced, never closed nor set to None first: a reader thread may be
                # searching it (the partition actor reads while its writer rolls) and must find a mapping at
                # every moment. It only touches used entries, which stay inside the new length, and the old
                # mapping is unmapped when its last reference goes.
                os.ftruncate(fd, rounded)
                self._length = rounded
                self._map(fd)
        except OSError as exc:
            raise KafkaStorageError(f"cannot resize index to {rounded} bytes: {exc.strerror}", path=self._path) from exc
        self._max_entries = rounded // self.ENTRY_SIZE
        self._entries = min(self._entries, self._max_entries)
        return True

    def trim_to_valid_size(self) -> bool:
        """Cut the preallocated tail so that a reopen sees exactly the used entries."""
        return self.resize(self.size_in_bytes)

    def reset(self) -> None:
        """Drop every entry and make room for `max_index_size` bytes again (before an index rebuild)."""
        self.truncate()
        self.resize(self._max_index_size)

    def truncate(self) -> None:
        """Drop every entry; the file keeps its length."""
        self._check_writable()
        self._entries = 0

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= `offset` (an exact match is dropped too)."""
        self._check_writable()
        self._truncate_to_entries(self._entries_below(offset - self._base_offset, self._relative_offset_at))

    def entry(self, n: int) -> EntryT:
        """The n-th entry (0-based)."""
        self._check_open()
        self._check_slot(n)
        return self._read(n)

    def entries_list(self) -> list[EntryT]:
        """Every used entry, in file order."""
        self._check_open()
        return [self._read(slot) for slot in range(self._entries)]

    def flush(self) -> None:
        """Write dirty pages of the mapping and the file length to disk (msync + fsync)."""
        self._check_open()
        if not self._writable:
            return
        try:
            if self._mmap is not None:
                self._mmap.flush()
            with self._reopened() as fd:
                os.fsync(fd)
        except OSError as exc:
            raise KafkaStorageError(f"cannot flush index: {exc.strerror}", path=self._path) from exc

    def close(self) -> None:
        """Trim a writable index to its used entries, then unmap it. Closing twice is harmless, and so is closing an
        index whose file is gone (its folder deleted): there is nothing left to trim."""
        if self._closed:
            return
        try:
            if self._writable and self._path.exists():
                self.trim_to_valid_size()
        finally:
            self._closed = True
            self._release()

    def delete_if_exists(self) -> bool:
        """Close without trimming and unlink the file; whether a file was there to delete."""
        self._closed = True
        self._release()
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise KafkaStorageError(f"cannot delete index: {exc.strerror}", path=self._path) from exc
        return True

    def rename_to(self, new_path: str | Path) -> None:
        """Rename the file (atomically replacing `new_path`); the open mapping stays valid on POSIX systems.

        A missing file is not an error (a deleted segment may still be renamed), but the new path is kept.
        """
        target = Path(new_path)
        try:
            os.replace(self._path, target)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise KafkaStorageError(f"cannot rename index to {target}: {exc.strerror}", path=self._path) from exc
        self._path = target

    @abc.abstractmethod
    def _check_entries(self) -> None:
        """Raise `CorruptIndexError` if the used entries break the kind's ordering rules."""

    @abc.abstractmethod
    def _read(self, slot: int) -> EntryT:
        """The entry in `slot`, with its offset made absolute."""

    def _relative_offset_at(self, slot: int) -> int:
        relative_offset: int = _INT32.unpack_from(
            self._buffer_for_read(), slot * self.ENTRY_SIZE + self.RELATIVE_OFFSET_AT
        )[0]
        return relative_offset

    def _largest_lower_bound_slot(self, target: int, value_at: Callable[[int], int]) -> int:
        """The largest slot whose value is <= `target`, or -1; values must be non-decreasing by slot."""
        entries = self._entries
        if entries == 0:
            return -1
        warm_start = max(0, entries - self._warm_entries)
        if value_at(warm_start) <= target:
            low, high = warm_start, entries - 1
        elif warm_start == 0 or value_at(0) > target:
            return -1
        else:
            low, high = 0, warm_start - 1
        # value_at(low) <= target holds throughout; the answer lies in [low, high].
        while low < high:
            middle = (low + high + 1) // 2
            if value_at(middle) <= target:
                low = middle
            else:
                high = middle - 1
        return low

    def _smallest_upper_bound_slot(self, target: int, value_at: Callable[[int], int]) -> int:
        """The smallest slot whose value is >= `target`, or -1; values must be non-decreasing by slot."""
        entries = self._entries
        if entries == 0 or value_at(entries - 1) < target:
            return -1
        warm_start = max(0, entries - self._warm_entries)
        if value_at(warm_start) >= target:
            low, high = 0, warm_start
        else:
            low, high = warm_start + 1, entries - 1
        # value_at(high) >= target holds throughout; the answer lies in [low, high].
        while low < high:
            middle = (low + high) // 2
            if value_at(middle) >= target:
                high = middle
            else:
                low = middle + 1
        return low

    def _entries_below(self, target: int, value_at: Callable[[int], int]) -> int:
        """How many leading entries have a value < `target` (where `truncate_to` cuts)."""
        slot = self._smallest_upper_bound_slot(target, value_at)
        return self._entries if slot < 0 else slot

    def _truncate_to_entries(self, entries: int) -> None:
        self._check_writable()
        self._entries = min(self._entries, max(0, entries))

    def _buffer_for_append(self) -> mmap.mmap:
        """The mapping to write the next entry into; callers have checked there is a free slot."""
        self._check_writable()
        if self._mmap is None or self._entries >= self._max_entries:
            raise StorageError("no free slot to append to", path=self._path, position=self.size_in_bytes)
        return self._mmap

    def _buffer_for_read(self) -> mmap.mmap:
        self._check_open()
        if self._mmap is None:
            raise StorageError("index has no mapped entries", path=self._path)
        return self._mmap

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self._entries:
            raise StorageError(
                f"entry {slot} is out of range: the index has {self._entries} entries",
                path=self._path,
                position=slot * self.ENTRY_SIZE,
            )

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("index is closed", path=self._path)

    @contextlib.contextmanager
    def _reopened(self) -> Iterator[int]:
        """A descriptor of the open index's file for the block, closed after it: the index keeps none of its own (its
        mapping holds the file), so a partition costs one descriptor per index, as Kafka's mapped indexes do."""
        self._check_open()
        fd = os.open(self._path, os.O_RDWR | os.O_CLOEXEC)
        try:
            yield fd
        finally:
            os.close(fd)

    def _check_writable(self) -> None:
        self._check_open()
        if not self._writable:
            raise StorageError("index was opened read-only", path=self._path)

    def _round_down(self, size: int) -> int:
        return size - size % self.ENTRY_SIZE

    def _map(self, fd: int) -> None:
        # mmap cannot map 0 bytes; an empty file simply has no mapping and no entries.
        if self._length == 0:
            self._mmap = None
            return
        access = mmap.ACCESS_WRITE if self._writable else mmap.ACCESS_READ
        self._mmap = mmap.mmap(fd, self._length, access=access)
        # Lookups binary-search and appends touch one slot: no access is sequential. Without this hint the first
        # fault reads ahead a window of the preallocated, sparse file, ~1.7 ms of CPU (measured on a new 10 MiB
        # index, against ~15 us with it): one such fault per index in every new segment's first append.
        self._mmap.madvise(mmap.MADV_RANDOM)

    def _unmap(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    def _release(self) -> None:
        try:
            self._unmap()
        except OSError as exc:
            raise KafkaStorageError(f"cannot close index: {exc.strerror}", path=self._path) from exc
