"""A segment's transaction index, `<base>.txnindex` (Kafka's `TransactionIndex` and `AbortedTxn`).

One entry per aborted transaction whose ABORT marker lies in the segment, in marker order; committed
transactions are not recorded. A flat array of 34-byte big-endian entries, no header, no checksum::

    offset  size  field
    0       2     version              int16, 0. Readers look at byte 0 only (Kafka's `buffer.get(0)`), and refuse
                                       a value above 0
    2       8     producer_id          int64
    10      8     first_offset         int64, the transaction's first data offset (it may lie in an earlier segment)
    18      8     last_offset          int64, the ABORT marker's offset; strictly increasing from entry to entry
    26      8     last_stable_offset   int64, the first offset of another producer's transaction still open when the
                                       marker was written, else the marker's offset + 1

Lifecycle (Kafka's): the file is created by the first append, so a segment without aborted transactions has none;
entries are appended when an ABORT marker that closes a transaction with data is written, by a leader and a
follower alike; recovery resets it and rebuilds it from the `.log`; truncation drops the entries whose
`last_offset` is at or past the cut; it is renamed and deleted with its segment. Bytes past the last whole entry
(an append cut short by a crash) are ignored when reading and overwritten by the next append.

Searching (`collect_aborted_transactions`, Kafka's `collectAbortedTxns` walked over segments): for a fetch of
[fetch_offset, upper_bound) an entry counts when `last_offset >= fetch_offset` and `first_offset < upper_bound`.
The walk starts at the segment holding the fetch offset, because a transaction spanning several segments is
indexed only in its marker's, and it stops after the first entry whose `last_stable_offset >= upper_bound`: every
transaction aborted later started at or after that offset, beyond the range.

The entries are read once and kept in memory (a segment rarely holds more than a few); the owner serialises
writes (the log's lock). A read-only index (the cleaner's view from another process) never writes.
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from storage.errors import CorruptIndexError, InvalidOffsetError, KafkaStorageError

CURRENT_VERSION = 0
ENTRY = struct.Struct(
    ">"
    "h"  # version
    "q"  # producer_id
    "q"  # first_offset
    "q"  # last_offset
    "q"  # last_stable_offset
)
ENTRY_SIZE = ENTRY.size  # 34
_VERSION_BYTE = struct.Struct(">b")


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One entry: an aborted transaction, its ABORT marker's offset and the last stable offset at that marker."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = CURRENT_VERSION

    def pack(self) -> bytes:
        return ENTRY.pack(self.version, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    """The entries of one index that overlap a fetch range, and whether the search may stop at this segment."""

    aborted_transactions: tuple[AbortedTxn, ...]
    complete: bool


def read_entries(data: bytes, path: Path | None = None) -> list[AbortedTxn]:
    """The whole entries of a `.txnindex` file's bytes (a torn tail is ignored); `CorruptIndexError` for an entry
    whose version byte is above `CURRENT_VERSION`."""
    entries = []
    for position in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        (version_byte,) = _VERSION_BYTE.unpack_from(data, position)
        if version_byte > CURRENT_VERSION:
            raise CorruptIndexError(
                f"unexpected aborted transaction version {version_byte}, current version is {CURRENT_VERSION}",
                path=path,
                position=position,
            )
        version, producer_id, first, last, stable = ENTRY.unpack_from(data, position)
        entries.append(AbortedTxn(producer_id, first, last, stable, version))
    return entries


class TransactionIndex:
    """The `.txnindex` of the segment at `base_offset` (see the module docstring)."""

    def __init__(self, path: Path, base_offset: int, *, read_only: bool = False) -> None:
        self._path = Path(path)
        self.base_offset = base_offset
        self.read_only = read_only
        self._entries: list[AbortedTxn] | None = None
        # Readers (lock-free fetches) may load the entries while the owner appends: one loads, once.
        self._load_lock = threading.Lock()
        self._fd: int | None = None
        # Bytes of the file holding whole entries; a longer file ends with a torn append.
        self._valid_bytes = 0

    @property
    def path(self) -> Path:
        return self._path

    @property
    def entries(self) -> tuple[AbortedTxn, ...]:
        """Every entry, in file order (Kafka's `allAbortedTxns`)."""
        return tuple(self._loaded())

    @property
    def last_offset(self) -> int | None:
        """The last entry's marker offset, None without entries."""
        entries = self._loaded()
        return entries[-1].last_offset if entries else None

    def _loaded(self) -> list[AbortedTxn]:
        entries = self._entries
        if entries is not None:
            return entries
        with self._load_lock:
            if self._entries is None:
                try:
                    data = self._path.read_bytes()
                except FileNotFoundError:
                    data = b""
                except OSError as exc:
                    raise KafkaStorageError(f"cannot read the transaction index: {exc}", path=self._path) from exc
                loaded = read_entries(data, self._path)
                self._valid_bytes = len(loaded) * ENTRY_SIZE
                self._entries = loaded
            return self._entries

    def append(self, txn: AbortedTxn) -> None:
        """Adds an entry at the end; `InvalidOffsetError` unless its marker offset is above the last one's."""
        entries = self._loaded()
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise InvalidOffsetError(
                f"the last offset of appended transactions must increase: {txn.last_offset} is not above "
                f"{entries[-1].last_offset}",
                path=self._path,
                offset=txn.last_offset,
            )
        try:
            fd = self._open_for_writing()
            os.pwrite(fd, txn.pack(), self._valid_bytes)
        except OSError as exc:
            raise KafkaStorageError(f"cannot append to the transaction index: {exc}", path=self._path) from exc
        entries.append(txn)
        self._valid_bytes += ENTRY_SIZE

    def _open_for_writing(self) -> int:
        if self.read_only:
            raise KafkaStorageError("transaction index is read-only", path=self._path)
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            if os.fstat(self._fd).st_size > self._valid_bytes:
                os.ftruncate(self._fd, self._valid_bytes)
        return self._fd

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """The entries overlapping [fetch_offset, upper_bound_offset), and whether the search is complete."""
        found = []
        for txn in self._loaded():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(tuple(found), True)
        return TxnIndexSearchResult(tuple(found), False)

    def truncate_to(self, offset: int) -> None:
        """Removes the entries whose marker offset is at or past `offset`."""
        entries = self._loaded()
        keep = next((index for index, txn in enumerate(entries) if txn.last_offset >= offset), len(entries))
        if keep < len(entries):
            self._truncate_entries(keep)

    def reset(self) -> None:
        """Removes every entry (recovery rebuilds them); the file, if any, stays, empty."""
        self._entries = []
        self._valid_bytes = 0
        if self._fd is not None or self._path.exists():
            self._truncate_entries(0)

    def _truncate_entries(self, count: int) -> None:
        try:
            os.ftruncate(self._open_for_writing(), count * ENTRY_SIZE)
        except OSError as exc:
            raise KafkaStorageError(f"cannot truncate the transaction index: {exc}", path=self._path) from exc
        self._entries = self._loaded()[:count]
        self._valid_bytes = count * ENTRY_SIZE

    def sanity_check(self) -> None:
        """`CorruptIndexError` for an unreadable entry, a marker offset below the segment's base, or marker
        offsets that do not increase."""
        previous = None
        for index, txn in enumerate(self._loaded()):
            if txn.last_offset < self.base_offset or (previous is not None and txn.last_offset <= previous):
                raise CorruptIndexError(
                    f"aborted transaction {txn} is out of order in the index of segment {self.base_offset}",
                    path=self._path,
                    position=index * ENTRY_SIZE,
                )
            previous = txn.last_offset

    def flush(self) -> None:
        """fsyncs the file, if this index wrote it."""
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError as exc:
                raise KafkaStorageError(f"cannot flush the transaction index: {exc}", path=self._path) from exc

    def rename_to(self, path: Path) -> None:
        """Moves the file (if there is one) to `path`; the index follows it."""
        try:
            if self._fd is not None or self._path.exists():
                os.replace(self._path, path)
        except OSError as exc:
            raise KafkaStorageError(f"cannot rename the transaction index: {exc}", path=self._path) from exc
        self._path = Path(path)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


class HasTransactionIndex(Protocol):
    """What the search reads of a segment."""

    @property
    def base_offset(self) -> int: ...

    @property
    def txn_index(self) -> TransactionIndex: ...


def collect_aborted_transactions(
    segments: Sequence[HasTransactionIndex], fetch_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """The aborted transactions overlapping [fetch_offset, upper_bound_offset) in `segments` (oldest first), from
    the segment holding `fetch_offset` on (Kafka's `LocalLog.collectAbortedTransactions`)."""
    start = max(bisect.bisect_right(segments, fetch_offset, key=_base_offset) - 1, 0)
    found: list[AbortedTxn] = []
    for segment in segments[start:]:
        result = segment.txn_index.collect(fetch_offset, upper_bound_offset)
        found.extend(result.aborted_transactions)
        if result.complete:
            break
    return found


def _base_offset(segment: HasTransactionIndex) -> int:
    return segment.base_offset
