"""A partition's log as a reader on its machine sees it without asking the log's owner: where a fetch's bytes lie.

`storage.partition.file_slices` locates a fetch's bytes from the `Log` object, in the process that owns it; a reader
in another process (the Kafka listener) must ask that process, a round trip per fetch. `LocalLogView` answers the
same question from what the owner publishes and what the reader learned itself, with no `Log`:

- the high-watermark file (`storage.partition.high_watermark_file`), rewritten by the owner after every change:
  the high watermark, last stable offset, log start and log end offsets, the leader epoch, whether the replica
  leads, and the active segment's file (device, inode) with the byte position of the high watermark in it;
- the segment files themselves: `<base>.log` files in the partition's folder, a sealed segment's size (its file's:
  a roll trims a preallocated file to its batches), and the `.txnindex` files for a read_committed fetch;
- positions it may vouch for (`learn`, each `read`'s own end, and the published high watermark's position for a read
  at the end of the log): "the fetch from offset O starts at byte P of the segment file (device, inode), as learned
  in leader epoch E". A consumer's next fetch starts at the offset after
  the last whole batch of its previous answer, so in the steady state each read finds its start among them.

`read(offset, max_bytes, isolation)` answers a `LocalRead` (the `FileSlice` to send, the published offsets, the
aborted transactions at read_committed, the offset after the last whole batch) or None when it cannot vouch for the
answer, and the caller then asks the owner (`locate`), whose answer and typed errors apply as before:

- the file cannot be read, is closed, or names a follower (the owner answers NOT_LEADER_OR_FOLLOWER);
- `offset` lies outside [log start, high watermark] (OFFSET_OUT_OF_RANGE after DeleteRecords or retention);
- no position is known for `offset` (a first fetch, a seek), or it was learned in another leader epoch: a replica
  truncates its log in place only while it follows, and leads again only in a newer epoch;
- the position's file is no longer at its path with the same inode (retention renamed it to `.deleted`, the
  cleaner swapped a compacted copy in, a roll replaced an empty segment), is shorter than the position, or its
  segment lies past the published active one;
- the high watermark's position is not published (it lags the log end: followers have not fetched yet);
- the bytes do not walk as batches whose first one holds `offset`.

What is answered is what `Log.read` answers for the published state: the batch holding `offset` first and always
whole (even above `max_bytes`), bytes of one segment only, nothing from a batch at or past the bound (the high
watermark; the last stable offset for `txn_committed`), a last batch cut short by `max_bytes` included as Kafka
does. A sealed segment's bytes all lie below the high watermark (it is in a later segment); the active segment's
end at the high watermark is the published position, and batches are checked against the bound anyway, since a
publish racing an append may name a position past the high watermark. Reaching a sealed segment's end, the read
goes on in the next segment, `<next offset>.log`, the file a roll created there (a compacted log whose next segment
starts higher is asked of the owner).

Aborted transactions (read_committed) are read from the `.txnindex` files of the segment holding `offset` and every
later one up to the published active segment (Kafka's `collectAbortedTransactions`), up to the published last stable
offset, as the owner's `located_aborted_transactions` answers. An aborted transaction starting below the published
last stable offset had its ABORT marker (and index entry) written before that offset was published.

`latest_offset(isolation)` answers ListOffsets' latest offset as the leader does (`Log.list_offset`): the published
high watermark (the last stable offset for `txn_committed`) with the newest epoch of the log's leader-epoch cache,
and the leader epoch a client's `current_leader_epoch` is checked against; None under the same conditions as the
first above. A leader publishes a readable state only while it answers that offset (`high_watermark_file`).

Races it shares with the owner's located reads and Kafka's own `FileRecords` slices: bytes are sent after the answer
is built, from a file opened and checked at that time; a file unlinked meanwhile stays readable, and segment files
are append-only below their size while the replica leads.
"""

from __future__ import annotations

import os
import struct
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from storage import file_names
from storage.errors import CorruptIndexError, CorruptRecordError, KafkaStorageError
from storage.partition.file_slices import CONSUMER_ISOLATIONS, FileSlice, map_pages, open_identified
from storage.partition.high_watermark_file import HighWatermarkReader, PublishedWatermark
from storage.records.file_records import TimestampAndOffset, iter_any_batches
from storage.records.layout import (
    BASE_OFFSET_OFFSET,
    CURRENT_MAGIC,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
)
from storage.records.record_batch import batch_size_at
from storage.segment.transaction_index import AbortedTxn, TransactionIndex, collect_aborted_transactions

# Positions kept per partition: one per consumer reading it at its own pace; the oldest goes first.
MAX_POSITIONS = 16
# Segments one read may step over to find its start: a fetch at a sealed segment's end reads the next one; a next
# segment that is empty too (a log rolled twice without appends) is left to the owner.
MAX_SEGMENT_STEPS = 2
# Batches `_walk_headers` reads one header `pread` at a time: from 32 KiB batches on, a 1 MiB fetch takes at most
# that many (~1 us each); smaller batches are walked through one mapping of the bytes.
HEADER_WALK_MAX_BATCHES = 32
_BASE_OFFSET = struct.Struct(">q")
_LAST_OFFSET_DELTA = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class _Position:
    """The fetch from some offset starts at byte `position` of segment `base_offset`'s `.log` file (`path`,
    `device`, `inode`), as learned while the replica led in `leader_epoch`."""

    base_offset: int
    path: str
    device: int
    inode: int
    position: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class _SegmentIndex:
    """A segment as the aborted-transaction search reads it (`HasTransactionIndex`): its base offset and index."""

    base_offset: int
    txn_index: TransactionIndex


@dataclass(frozen=True, slots=True)
class _Listing:
    """The partition folder's segments (base offsets, ascending) and those with a `.txnindex`, listed while the
    segment at `active_base_offset` was the active one."""

    active_base_offset: int
    segments: tuple[int, ...]
    indexed: frozenset[int]


@dataclass(frozen=True, slots=True)
class LocalRead:
    """A fetch answered from the view: `file_slice` (None when there is nothing to read) with the published offsets,
    the aborted transactions overlapping it at read_committed (None at read_uncommitted), the offset after the
    last whole batch of the slice (`offset` itself when it is empty), and the leader epoch published with those
    offsets (the one a client's `current_leader_epoch` is checked against, without asking the owner)."""

    file_slice: FileSlice | None
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    aborted_transactions: tuple[AbortedTxn, ...] | None
    next_offset: int
    leader_epoch: int


class LocalLogView:
    """One partition's log as seen through its high-watermark file and segment files; see the module docstring.
    Not thread-safe: one caller (the listener's event loop) uses it."""

    def __init__(self, reader: HighWatermarkReader) -> None:
        self._reader = reader
        self._directory = reader.directory
        self._positions: OrderedDict[int, _Position] = OrderedDict()
        self._listing: _Listing | None = None
        # The `.txnindex` files the last read_committed read used, by base offset, with the file identity (leader
        # epoch, device, inode, size, modification time) they were loaded at (`_txn_index`).
        self._txn_indexes: dict[int, tuple[tuple[int, int, int, int, int], TransactionIndex]] = {}

    @classmethod
    def open(cls, high_watermark_file: str) -> LocalLogView | None:
        """The view of the partition whose high-watermark file is at `high_watermark_file`, None when it cannot be
        opened (or is not named: "")."""
        reader = HighWatermarkReader.open(high_watermark_file) if high_watermark_file else None
        return None if reader is None else cls(reader)

    @property
    def high_watermark_file(self) -> str:
        """The path of the high-watermark file it reads: a partition moved to another log dir names another one."""
        return self._reader.path

    def leader_epoch(self) -> int | None:
        """The leader epoch published now; None when the file says nothing a reader may act on. A caller about to ask
        the owner where a fetch's bytes lie reads it first and passes it to `learn`: the position the owner answers
        is then vouched for in that epoch or a later one."""
        published = self._reader.read()
        return None if published is None else published.leader_epoch

    def latest_offset(self, isolation: str = "high_watermark") -> tuple[TimestampAndOffset, int] | None:
        """ListOffsets' latest offset at `isolation` as the leader answers it, and the leader epoch published with
        it; None when the owner must answer (see the module docstring)."""
        if isolation not in CONSUMER_ISOLATIONS:
            return None
        published = self._reader.read()
        if published is None:
            return None
        offset = published.last_stable_offset if isolation == "txn_committed" else published.high_watermark
        epoch = None if published.latest_epoch < 0 else published.latest_epoch
        return TimestampAndOffset(NO_TIMESTAMP, offset, epoch), published.leader_epoch

    def learn(self, offset: int, file_slice: FileSlice, leader_epoch: int) -> None:
        """The owner located the fetch from `offset` at `file_slice` (its bytes start with the batch holding
        `offset`), with the file publishing `leader_epoch` before it was asked."""
        parsed = file_names.parse_segment_name(Path(file_slice.path).name)
        if parsed is None or parsed[1:] != (file_names.LOG_SUFFIX, ""):
            return
        self._remember(
            offset,
            _Position(
                parsed[0], file_slice.path, file_slice.device, file_slice.inode, file_slice.position, leader_epoch
            ),
        )

    def read(self, offset: int, max_bytes: int, isolation: str = "high_watermark") -> LocalRead | None:
        """The fetch from `offset` of at most `max_bytes` (the first batch whole) at `isolation` (`high_watermark`
        or `txn_committed`), or None when the owner must answer; see the module docstring."""
        if isolation not in CONSUMER_ISOLATIONS or max_bytes < 0:
            return None
        published = self._reader.read()
        if published is None or not published.log_start_offset <= offset <= published.high_watermark:
            return None
        committed = isolation == "txn_committed"
        upper_offset = published.last_stable_offset if committed else published.high_watermark
        if offset >= upper_offset:
            known = self._positions.get(offset)
            stale = known is None or known.leader_epoch != published.leader_epoch
            if offset == published.high_watermark and published.has_position and stale:
                # A reader at the end of the log reads the next appends from where the high watermark lies now.
                path = str(file_names.log_file(self._directory, published.segment_base_offset))
                self._remember(
                    offset,
                    _Position(
                        published.segment_base_offset,
                        path,
                        published.device,
                        published.inode,
                        published.position,
                        published.leader_epoch,
                    ),
                )
            return _answer(published, None, () if committed else None, offset)
        start = self._positions.get(offset)
        if start is None or start.leader_epoch != published.leader_epoch or not published.has_position:
            return None
        located = self._locate(start, offset, max_bytes, upper_offset, published)
        if located is None:
            return None
        file_slice, whole_bytes, next_offset, base_offset = located
        aborted = None
        if committed:
            aborted = self._aborted_transactions(base_offset, offset, published)
            if aborted is None:
                return None
        self._remember(
            next_offset,
            _Position(
                base_offset,
                file_slice.path,
                file_slice.device,
                file_slice.inode,
                file_slice.position + whole_bytes,
                published.leader_epoch,
            ),
        )
        return _answer(published, file_slice, aborted, next_offset)

    def known_offsets(self) -> list[int]:
        """The offsets whose fetch start the view knows, oldest learned first."""
        return list(self._positions)

    def close(self) -> None:
        self._positions.clear()
        self._reader.close()

    def _remember(self, offset: int, position: _Position) -> None:
        self._positions[offset] = position
        self._positions.move_to_end(offset)
        while len(self._positions) > MAX_POSITIONS:
            self._positions.popitem(last=False)

    def _locate(
        self, start: _Position, offset: int, max_bytes: int, upper_offset: int, published: PublishedWatermark
    ) -> tuple[FileSlice, int, int, int] | None:
        """(the slice, its bytes up to the end of its last whole batch, the offset after that batch, its segment's
        base offset) for the fetch from `offset` starting at `start`; None when it cannot be vouched for."""
        for _ in range(MAX_SEGMENT_STEPS):
            active = start.base_offset == published.segment_base_offset
            if start.base_offset > published.segment_base_offset or (
                active and (start.device, start.inode) != (published.device, published.inode)
            ):
                return None
            opened = open_identified(start.path, start.device, start.inode)
            if opened is None:
                return None
            fd, size_bytes = opened
            try:
                end = published.position if active else size_bytes
                if end > size_bytes or start.position > end:
                    return None
                if start.position < end:
                    walked = _walk(fd, start.position, end, offset, max_bytes, upper_offset)
                    if walked is None:
                        return None
                    length, whole_bytes, next_offset = walked
                    file_slice = FileSlice(start.path, start.position, length, start.device, start.inode)
                    return file_slice, whole_bytes, next_offset, start.base_offset
            except OSError:
                return None
            finally:
                os.close(fd)
            if active:
                # The high watermark's position, yet `offset` is below the high watermark: not this state's file.
                return None
            following = self._next_segment(offset, start.leader_epoch)
            if following is None:
                return None
            start = following
        return None

    def _next_segment(self, base_offset: int, leader_epoch: int) -> _Position | None:
        """The start of the segment a roll created at `base_offset`, identified by the file there now."""
        path = file_names.log_file(self._directory, base_offset)
        try:
            status = os.stat(path)
        except OSError:
            return None
        return _Position(base_offset, str(path), status.st_dev, status.st_ino, 0, leader_epoch)

    def _listed(self, active_base_offset: int, *, fresh: bool = False) -> _Listing | None:
        """The folder's segments, listed again when the active segment changed since the last listing (a roll) or
        when `fresh`; None when the folder cannot be listed."""
        listing = self._listing
        if fresh or listing is None or listing.active_base_offset != active_base_offset:
            try:
                names = os.listdir(self._directory)
            except OSError:
                return None
            segments, indexed = set(), set()
            for name in names:
                parsed = file_names.parse_segment_name(name)
                if parsed is not None and parsed[2] == "":
                    if parsed[1] == file_names.LOG_SUFFIX:
                        segments.add(parsed[0])
                    elif parsed[1] == file_names.TXN_INDEX_SUFFIX:
                        indexed.add(parsed[0])
            listing = self._listing = _Listing(active_base_offset, tuple(sorted(segments)), frozenset(indexed))
        return listing

    def _aborted_transactions(
        self, base_offset: int, offset: int, published: PublishedWatermark
    ) -> tuple[AbortedTxn, ...] | None:
        """The aborted transactions overlapping [offset, the published last stable offset), from the `.txnindex` of
        the segment at `base_offset` and of every later one up to the published active segment; None when the
        folder or an index cannot be read. A sealed segment has an index only if it had one when the folder was
        listed, after it was sealed (markers are appended to the active segment); the active one's is read always."""
        active = published.segment_base_offset
        bases = [base_offset]
        if base_offset != active:
            listing = self._listed(active)
            if listing is None or base_offset not in listing.segments:
                listing = self._listed(active, fresh=True)
            if listing is None:
                return None
            bases = [
                base
                for base in listing.segments
                if base_offset <= base <= active and (base == active or base in listing.indexed)
            ]
        indexes = []
        for base in bases:
            index = self._txn_index(base, published.leader_epoch)
            if index is None:
                return None
            indexes.append(_SegmentIndex(base, index))
        self._txn_indexes = {index.base_offset: self._txn_indexes[index.base_offset] for index in indexes}
        try:
            return tuple(collect_aborted_transactions(indexes, offset, published.last_stable_offset))
        except (CorruptIndexError, KafkaStorageError):
            return None

    def _txn_index(self, base_offset: int, leader_epoch: int) -> TransactionIndex | None:
        """The `.txnindex` of the segment at `base_offset` as its file is now, loaded again only when the file
        changed (its inode, size or modification time; an index is truncated in place only while its replica
        follows, so also in each new leader epoch): a read_committed consumer's every fetch reads the active
        segment's index, and reading it afresh cost ~25 us where a `stat` costs ~3. None when it cannot be
        `stat`ed (a missing file is an empty index)."""
        path = file_names.txn_index_file(self._directory, base_offset)
        try:
            status = os.stat(path)
        except FileNotFoundError:
            identity = (leader_epoch, -1, 0, 0, 0)
        except OSError:
            return None
        else:
            identity = (leader_epoch, status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
        cached = self._txn_indexes.get(base_offset)
        if cached is not None and cached[0] == identity:
            return cached[1]
        index = TransactionIndex(path, base_offset, read_only=True)
        self._txn_indexes[base_offset] = (identity, index)
        return index


class _NotBatchesError(Exception):
    """The bytes do not walk as batches from one holding the offset (`_walk_headers`); never escapes `_walk`."""


def _walk(
    fd: int, position: int, end: int, offset: int, max_bytes: int, upper_offset: int
) -> tuple[int, int, int] | None:
    """(bytes to send, bytes up to the end of the last whole batch, the offset after that batch) from `position` of
    the open `.log` file `fd`, which holds batches up to `end`: at most `max_bytes` but the first batch whole, none
    from a batch at or past `upper_offset`. None when the bytes do not walk as batches from one holding `offset`.
    v2 batches are walked by their headers (`_walk_headers`), others and many small ones through a mapping."""
    available = end - position
    length = min(available, max_bytes)
    try:
        walked = _walk_headers(fd, position, available, length, offset, upper_offset)
    except _NotBatchesError:
        return None
    if walked is not None:
        return walked
    # The bytes looked at reach a little past those sent: the base offset of a batch `max_bytes` cuts short.
    data = map_pages(fd, position, min(available, max(length, LOG_OVERHEAD) + _BASE_OFFSET.size), populate=False)
    try:
        if length < available:
            # Kafka's min-one-message rule: the first batch goes whole even above `max_bytes`.
            first_size = batch_size_at(data, 0)
            if first_size > length:
                length = min(available, first_size)
                data.release()
                data = map_pages(fd, position, min(available, length + _BASE_OFFSET.size), populate=False)
        return _walked(data, length, offset, upper_offset)
    except (CorruptRecordError, IndexError):
        return None
    finally:
        data.release()


def _walk_headers(
    fd: int, position: int, available: int, length: int, offset: int, upper_offset: int
) -> tuple[int, int, int] | None:
    """`_walk`'s answer read from the 61-byte header of each v2 batch (one `pread` each, where mapping the bytes
    costs ~15 us), as `FileRecords.search_for_offset_with_size` reads them; None when the general walk must answer
    (another magic, more than `HEADER_WALK_MAX_BATCHES` batches); `_NotBatchesError` when they do not walk."""
    next_offset: int | None = None
    whole_bytes = 0
    for _ in range(HEADER_WALK_MAX_BATCHES):
        if whole_bytes == length:
            break
        header = os.pread(fd, RECORD_BATCH_OVERHEAD, position + whole_bytes)
        if len(header) < RECORD_BATCH_OVERHEAD or header[MAGIC_OFFSET] != CURRENT_MAGIC:
            return None
        try:
            size = batch_size_at(header, 0)
        except CorruptRecordError as exc:
            raise _NotBatchesError from exc
        if size < RECORD_BATCH_OVERHEAD:
            raise _NotBatchesError
        (base_offset,) = _BASE_OFFSET.unpack_from(header, BASE_OFFSET_OFFSET)
        if base_offset >= upper_offset:
            # The bound: what is sent ends with the last batch below it.
            if next_offset is None:
                raise _NotBatchesError
            return whole_bytes, whole_bytes, next_offset
        if next_offset is None and size > length:
            length = min(available, size)  # Kafka's min-one-message rule: the first batch goes whole
        if whole_bytes + size > length:
            if whole_bytes + size > available:
                # A batch past the end the file was published or sealed with: not this state's bytes.
                if next_offset is None:
                    raise _NotBatchesError
                return whole_bytes, whole_bytes, next_offset
            # A last batch cut short by `max_bytes`, sent as Kafka sends it (its base offset is below the bound).
            assert next_offset is not None, "the first batch is whole: `length` was raised to its size"
            return length, whole_bytes, next_offset
        (last_offset_delta,) = _LAST_OFFSET_DELTA.unpack_from(header, LAST_OFFSET_DELTA_OFFSET)
        last_offset = base_offset + last_offset_delta
        if last_offset < offset or (next_offset is not None and base_offset < next_offset):
            raise _NotBatchesError
        next_offset = last_offset + 1
        whole_bytes += size
    else:
        if whole_bytes < length:
            return None
    return None if next_offset is None else (whole_bytes, whole_bytes, next_offset)


def _walked(data: memoryview, length: int, offset: int, upper_offset: int) -> tuple[int, int, int] | None:
    """`_walk`'s answer for the first `length` bytes of the mapped `data` (which may hold the header of the batch
    after them)."""
    next_offset: int | None = None
    whole_bytes = 0
    for batch in iter_any_batches(data[:length]):
        if batch.base_offset >= upper_offset:
            # The bound: what is sent ends with the last batch below it.
            return None if next_offset is None else (whole_bytes, whole_bytes, next_offset)
        if batch.last_offset < offset or (next_offset is not None and batch.base_offset < next_offset):
            return None
        next_offset = batch.last_offset + 1
        whole_bytes += batch.size_in_bytes
    if next_offset is None:
        return None
    # A last batch cut short by `max_bytes` is sent as Kafka sends it, if its base offset shows it below the bound.
    if whole_bytes < length and len(data) >= whole_bytes + BASE_OFFSET_OFFSET + _BASE_OFFSET.size:
        (tail_base_offset,) = _BASE_OFFSET.unpack_from(data, whole_bytes + BASE_OFFSET_OFFSET)
        if tail_base_offset < upper_offset:
            return length, whole_bytes, next_offset
    return whole_bytes, whole_bytes, next_offset


def _answer(
    published: PublishedWatermark,
    file_slice: FileSlice | None,
    aborted: tuple[AbortedTxn, ...] | None,
    next_offset: int,
) -> LocalRead:
    return LocalRead(
        file_slice,
        published.high_watermark,
        published.log_start_offset,
        published.log_end_offset,
        published.last_stable_offset,
        aborted,
        next_offset,
        published.leader_epoch,
    )


__all__ = ["MAX_POSITIONS", "LocalLogView", "LocalRead"]
