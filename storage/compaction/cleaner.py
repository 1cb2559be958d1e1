"""Log compaction, the algorithm (Kafka's `Cleaner`): keep the latest record per key, offsets unchanged.

One pass over a log with cleaner checkpoint `first_dirty_offset`:

1. Pre-scan of every segment's batch headers up to the log end: each producer's latest batch (for the
   RETAIN_EMPTY rule below). The aborted transactions come from the `.txnindex` files of the range cleaned.
2. `first_uncleanable_offset` = min(last stable offset, active segment base, base of the first dirty
   non-active segment whose largest timestamp > now - `min.compaction.lag.ms`), rounded down to its segment's
   base. The active segment, records younger than the lag and undecided transactions are never touched.
3. Offset map over [first_dirty, first_uncleanable): key -> latest offset (`offset_map.SkimpyOffsetMap`).
   Aborted data is not mapped. If the map fills (as in Kafka, the first keyed record that finds it at its
   load ends the mapping, even when its key is mapped already), the pass ends at `map.latest_offset + 1` and
   the next pass continues from there; otherwise it ends at `first_uncleanable_offset`.
4. Segments below the end offset are grouped (`group_segments_by_size`: total `.log` <= segment.bytes,
   each index total <= segment.index.bytes, offset span <= 2**31 - 1) and each group is rewritten into
   ONE segment named after the group's first base offset with the `.cleaned` suffix, with its own `.txnindex`
   (the aborted transactions whose ABORT markers it keeps), then swapped in.

Both the map and the rewrite read a segment ~1 MiB of batches at a time (`batch_columns`): the records of
a chunk are decoded into columns, their keys go through the map in one call, and the rule below is applied
to all of them at once with numpy; only the batch-level decisions (transactions, horizons, copy or rebuild)
are taken batch by batch. Measured on the `compaction` benchmark's log (1 MB batches, half of the records
superseded): one record at a time, MD5 and probing the map in Python took ~60 % of a pass and building
`Record` objects ~20 %.

What a rewritten segment holds, batch by batch (Kafka's `MemoryRecords.filterTo` rules):

- A record is kept if its offset is past the map's latest offset, or it has a key, its offset is >= the
  map's offset for that key, and it has a value or its batch's delete horizon has not passed. Records
  without a key are dropped (counted as invalid). Data of aborted transactions is dropped whatever its key.
- Offsets never change: a kept batch keeps its base offset, last offset (even when its last record goes),
  producer id/epoch, base sequence, leader epoch and flags. A batch that keeps every record and needs no
  new horizon is copied byte for byte; otherwise it is rebuilt (`retained_batch`), record offset deltas
  preserved, and recompressed with its own codec.
- Tombstones (v2): the first cleaning that copies a batch holding a tombstone, or a transaction marker
  whose transaction has no data left, sets attribute bit 6 and baseTimestamp = now + delete.retention.ms
  (the delete horizon); later cleanings drop the tombstones, and the marker, once now >= horizon.
- Transaction markers: a COMMIT/ABORT marker stays while any data batch of its transaction was seen in
  this pass; after that it gets a horizon and goes when the horizon passes.
- A batch emptied by cleaning is dropped, unless it is the last batch of a producer that is still active
  (last write within `producer.id.expiration.ms`, Kafka's 1-day default): then its 61-byte header is kept
  with no records, so the producer's last sequence and epoch survive.
- Tombstones (legacy magic 0/1, which has no delete horizon field): Kafka's rule on segment mtimes. The
  legacy horizon is the mtime of the last segment below the first dirty offset minus delete.retention.ms
  (0 when no segment is clean yet, so the first cleaning keeps every tombstone); a legacy tombstone is dropped
  when its segment's mtime is not after that horizon. Cleaned segments keep their source's mtime (below), so
  a tombstone goes once the clean section has grown delete.retention.ms past it.
- Legacy entries cannot be rewritten here (raybroker writes only magic 2): an entry is dropped whole when
  every record in it would be dropped by the rules above (superseded, no key, or an expired tombstone), and
  copied byte for byte otherwise, so a tombstone inside a compressed wrapper that keeps other records stays
  until they go too.

Two phases, two places (Kafka's `doClean`, then `replaceSegments`): a pass starts from a `LogSnapshot` the log's
owner takes under its lock (`snapshot_for_cleaning`: the segment list with each segment's size, the offsets,
the config), which is plain values, so the heavy phase can run in another process on the same node (the node's
`log.cleaner.threads` cleaner actors, `actors.server.cleaner_actor`) while the owner keeps appending. That phase,
`Cleaner.clean_snapshot`, opens the snapshot's segments read-only, each bounded to its size then
(`SnapshotLog`), does steps 1-4 without any lock, and writes every group's `.cleaned` segment, fsynced, its
indexes trimmed and its `.log` mtime set to the last source segment's mtime (time retention sees the same
age). It never reads the active segment's records past the snapshot, and never cleans it. The owner then swaps
all the groups in under its lock (`swap_cleaned`), after checking that every segment the pass read is still
in the log with the size it had, that the active segment was not truncated back below the first uncleanable
offset, that the log is open and that each `.cleaned` segment has the size the cleaner wrote; otherwise every
`.cleaned` file of the pass is deleted and the pass ends with `aborted=True` (nothing to checkpoint): a
segment deleted by retention, a truncation, a topic deleted or a restarted owner in between do no harm. A
first phase that fails while the log changed (a segment file renamed or cut under it) is aborted the same way
(`changed_since`), one that fails on an unchanged log raises. Truncation that later re-appends the same sizes
cannot be detected this way: a caller that truncates logs must not do so while a pass runs on that log.
`Cleaner.clean` runs both phases in the calling process (a partition actor's own `clean`, for a caller holding
its handle; the `compaction` benchmark).

Unlike Kafka, which swaps each group as soon as it is written, the groups of a pass are swapped together at its
end: a pass needs free disk for its whole output (at most what it reads) rather than one group's.

Crash safety: `Log.replace_segments` renames `.cleaned` -> `.swap`, old segments -> `.deleted`, `.swap` -> final,
group after group in offset order. A crash at any step is resolved by the log loader
(`storage.partition.log_loader`): leftover `.cleaned` files are deleted, `.swap` files complete the swap (a
`.swap` below every `.cleaned` base belongs to a group whose swap had begun). A pass deletes every `.cleaned`
file of the folder before writing its own: one pass runs per partition at a time, so any found is what a
cleaner that died left, and must not be taken for part of this pass by the loader.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from storage import file_names
from storage.clock import Clock
from storage.compaction.batch_columns import ChunkRecords, chunks, decode_chunk
from storage.compaction.clean_result import CleanedGroup, CleanedLog, CleanResult, PassCounts, aborted_pass
from storage.compaction.cleanable_range import dirty_segments, first_uncleanable_offset, floor_base_offset
from storage.compaction.cleaned_swap import changed_since, delete_cleaned_files, swap_cleaned
from storage.compaction.cleaned_transactions import ProducerScan, TransactionTracker, scan_producers
from storage.compaction.log_snapshot import (
    LogSnapshot,
    ReadableLog,
    SegmentSnapshot,
    SnapshotLog,
    snapshot_for_cleaning,
)
from storage.compaction.offset_map import SkimpyOffsetMap
from storage.compaction.retained_batch import build_retained_batch
from storage.compaction.segment_groups import group_segments_by_size, segment_sizes
from storage.compaction.throttler import Throttler, real_sleep_ms
from storage.config.cleaner_config import CleanerConfig
from storage.errors import CorruptRecordError, KafkaStorageError
from storage.partition.log_loader import new_segment
from storage.records.compression import CompressionType
from storage.records.file_records import AnyBatch
from storage.records.record_batch import (
    RecordBatch,
    encode_attributes,
    encode_batch,
)
from storage.segment.log_segment import LogSegment
from storage.segment.transaction_index import collect_aborted_transactions

if TYPE_CHECKING:
    from storage.partition.log import Log


@dataclass
class _Pass:
    log: ReadableLog
    now_ms: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    end_offset: int
    scan: ProducerScan
    tracker: TransactionTracker
    offset_map: SkimpyOffsetMap
    max_batch_bytes: int
    stats: PassCounts
    # Legacy tombstones in a segment whose mtime is not after this are dropped (module docstring).
    legacy_delete_horizon_ms: int


# What the cleaner writes for a kept batch: its bytes, their max timestamp, and how many records they hold.
_Retained = tuple[bytes, int, int]


@dataclass(frozen=True, slots=True)
class _Fate:
    """The transaction rules' verdict on a v2 batch, before its records are looked at."""

    is_control: bool
    # No data of its transaction is left (a marker) or it belongs to an aborted transaction (data).
    can_discard: bool
    # Every record goes: aborted data, or a marker whose delete horizon has passed.
    discard_records: bool
    # Emptied, it still stays as a bare header: the last batch of a producer still active.
    retain_empty: bool


# --- the cleaner ---------------------------------------------------------------------------------------


class Cleaner:
    """Cleans one log at a time (one Kafka cleaner thread); reuse it: its offset map is allocated once."""

    def __init__(
        self,
        config: CleanerConfig,
        clock: Clock,
        *,
        offset_map: SkimpyOffsetMap | None = None,
        sleep_ms: Callable[[int], None] = real_sleep_ms,
    ) -> None:
        self.config = config
        self._clock = clock
        self._offset_map = offset_map
        self._throttler = Throttler(config.log_cleaner_io_max_bytes_per_second, clock, sleep_ms)

    @property
    def offset_map(self) -> SkimpyOffsetMap:
        """The dedupe map, allocated on first use (`log.cleaner.dedupe.buffer.size` / threads)."""
        if self._offset_map is None:
            self._offset_map = SkimpyOffsetMap(
                self.config.dedupe_buffer_bytes_per_thread, self.config.log_cleaner_io_buffer_load_factor
            )
        return self._offset_map

    def clean(self, log: Log, first_dirty_offset: int, first_uncleanable: int | None = None) -> CleanResult:
        """One whole pass over `log` in this process: its snapshot, `clean_snapshot`, then `swap_cleaned` (see the
        module docstring).

        `first_uncleanable` (from the cleaner manager) bounds the pass further; open transactions always do.
        Raises `OffsetOutOfRangeError` for a first dirty offset outside [log start, log end], and the storage
        errors of a corrupt or unreadable segment; the log is left as it was.
        """
        snapshot = snapshot_for_cleaning(log, first_dirty_offset, first_uncleanable)
        try:
            cleaned = self.clean_snapshot(snapshot)
        except Exception:
            if changed_since(log, snapshot):
                return aborted_pass(snapshot)
            raise
        return swap_cleaned(log, cleaned)

    def clean_snapshot(self, snapshot: LogSnapshot) -> CleanedLog:
        """The first phase of a pass, in any process on the log's node: reads the snapshot's segments read-only
        and writes the `.cleaned` segments that the owner swaps in (`swap_cleaned`). Raises the storage errors of
        a corrupt or unreadable segment, having deleted the `.cleaned` files it wrote."""
        start_ns = self._clock.nanoseconds()
        now_ms = self._clock.milliseconds()
        log = SnapshotLog(snapshot, self._clock)
        try:
            return self._clean_log(log, snapshot, now_ms, start_ns)
        finally:
            log.close()

    def _clean_log(self, log: SnapshotLog, snapshot: LogSnapshot, now_ms: int, start_ns: int) -> CleanedLog:
        first_dirty_offset = snapshot.first_dirty_offset
        segments = log.log_segments()
        scan = scan_producers(segments)
        upper = first_uncleanable_offset(log, first_dirty_offset, now_ms, segments)
        if snapshot.first_uncleanable_offset is not None:
            upper = min(upper, floor_base_offset(segments, snapshot.first_uncleanable_offset))
        max_batch_bytes = max(log.config.max_message_bytes, self.config.io_buffer_bytes_per_thread)
        offset_map = self.offset_map
        map_tracker = TransactionTracker(collect_aborted_transactions(segments, first_dirty_offset, upper))
        stats = PassCounts()
        full = self._build_offset_map(
            segments, first_dirty_offset, upper, offset_map, map_tracker, max_batch_bytes, stats
        )
        end_offset = max(offset_map.latest_offset + 1, first_dirty_offset) if full else max(upper, first_dirty_offset)
        clean_pass = _Pass(
            log,
            now_ms,
            first_dirty_offset,
            upper,
            end_offset,
            scan,
            TransactionTracker(collect_aborted_transactions(segments, segments[0].base_offset, end_offset)),
            offset_map,
            max_batch_bytes,
            stats,
            legacy_delete_horizon_ms(log, segments, first_dirty_offset),
        )
        groups: list[CleanedGroup] = []
        if end_offset > first_dirty_offset:
            to_clean = [segment for segment in segments[:-1] if segment.base_offset < end_offset]
            by_base = {segment.base_offset: segment for segment in to_clean}
            delete_cleaned_files(log.directory)
            try:
                for group in group_segments_by_size(
                    [segment_sizes(segment) for segment in to_clean],
                    log.config.segment_bytes,
                    log.config.segment_index_bytes,
                    upper,
                ):
                    groups.append(self._clean_group(clean_pass, [by_base[sizes.base_offset] for sizes in group]))
            except Exception:
                delete_cleaned_files(log.directory)
                raise
        result = CleanResult(
            first_dirty_offset,
            upper,
            end_offset,
            map_entries=offset_map.size,
            segments_written=len(groups),
            aborted=False,
            duration_ms=(self._clock.nanoseconds() - start_ns) / 1_000_000,
            **asdict(stats),
        )
        return CleanedLog(snapshot, tuple(groups), result)

    # --- offset map ----------------------------------------------------------------------------------

    def _build_offset_map(
        self,
        segments: Sequence[LogSegment],
        start: int,
        end: int,
        offset_map: SkimpyOffsetMap,
        tracker: TransactionTracker,
        max_batch_bytes: int,
        stats: PassCounts,
    ) -> bool:
        """Maps keys of [start, end); True when the map filled before `end`."""
        offset_map.clear()
        for segment in dirty_segments(segments, start, end):
            position = segment.offset_index.lookup(start).position if segment.base_offset <= start else 0
            for chunk in chunks(segment.log.batches(position)):
                if self._map_chunk(chunk, start, offset_map, tracker, max_batch_bytes, stats):
                    return True
        return False

    def _map_chunk(
        self,
        chunk: list[AnyBatch],
        start: int,
        offset_map: SkimpyOffsetMap,
        tracker: TransactionTracker,
        max_batch_bytes: int,
        stats: PassCounts,
    ) -> bool:
        """Puts the keys of `chunk` at offsets >= `start` in order; True when the map filled on the way
        (`latest_offset` then covers what was mapped: the batches before the one that filled it, and its
        records that were stored)."""
        for batch in chunk:
            _check_batch_size(batch, max_batch_bytes)
            stats.map_bytes_read += batch.size_in_bytes
            self._throttler.maybe_throttle(batch.size_in_bytes)
        records = decode_chunk(chunk, [self._maps_records(batch, tracker) for batch in chunk])
        stats.map_messages_read += sum(
            batch.records_count if isinstance(batch, RecordBatch) else int(count)
            for batch, count in zip(chunk, np.diff(records.bounds), strict=True)
        )
        keyed = ~records.null_keys & (records.offsets >= start)
        indexes = np.flatnonzero(keyed)
        stored = offset_map.put_many(records.key_digests(keyed, offset_map), records.offsets[indexes])
        full = stored < len(indexes)
        # Batches whose records were all mapped (or had none to map) move the mapped range to their last offset.
        mapped_batches = int(np.searchsorted(records.bounds, indexes[stored], side="right")) - 1 if full else len(chunk)
        last_offsets = [batch.last_offset for batch in chunk[:mapped_batches] if batch.last_offset >= start]
        if last_offsets:
            offset_map.update_latest_offset(max(last_offsets))
        return full

    @staticmethod
    def _maps_records(batch: AnyBatch, tracker: TransactionTracker) -> bool:
        """Whether the keys of `batch` go into the map: not for markers and aborted data."""
        if not isinstance(batch, RecordBatch):
            return True
        if batch.is_control:
            tracker.on_control_batch_read(batch)
            return False
        return not tracker.on_batch_read(batch)

    # --- rewriting -----------------------------------------------------------------------------------

    def _clean_group(self, clean_pass: _Pass, group: list[LogSegment]) -> CleanedGroup:
        """Rewrites `group` into one `.cleaned` segment, fsynced, with the mtime of the group's last segment, and
        its `.txnindex` holding the aborted transactions whose markers it keeps for their data."""
        log = clean_pass.log
        cleaned = new_segment(
            log.directory, group[0].base_offset, log.config, self._clock, suffix=file_names.CLEANED_SUFFIX
        )
        clean_pass.tracker.cleaned_index = cleaned.txn_index
        try:
            for segment in group:
                self._clean_into(clean_pass, segment, cleaned)
            cleaned.on_become_inactive_segment()
            cleaned.flush()
            modified_ms = group[-1].last_modified_ms()
            try:
                cleaned.log.set_last_modified_ms(modified_ms)
            except OSError as exc:
                raise KafkaStorageError(
                    f"cannot set the cleaned segment's mtime: {exc}", path=cleaned.log.path
                ) from exc
            return CleanedGroup(
                cleaned.base_offset,
                cleaned.size,
                tuple(SegmentSnapshot(segment.base_offset, segment.size) for segment in group),
            )
        finally:
            cleaned.close_handlers()

    def _clean_into(self, clean_pass: _Pass, source: LogSegment, dest: LogSegment) -> None:
        stats = clean_pass.stats
        end_position = 0
        retain_legacy_deletes = source.last_modified_ms() > clean_pass.legacy_delete_horizon_ms
        for chunk in chunks(source.log.batches(0)):
            for batch in chunk:
                _check_batch_size(batch, clean_pass.max_batch_bytes)
                batch.ensure_valid()
                end_position = batch.position + batch.size_in_bytes
                stats.bytes_read += batch.size_in_bytes
                self._throttler.maybe_throttle(batch.size_in_bytes)
            for batch, retained in zip(
                chunk, self._filter_chunk(clean_pass, source, chunk, retain_legacy_deletes), strict=True
            ):
                if retained is None:
                    continue
                data, max_timestamp, records_written = retained
                dest.append(batch.last_offset, max_timestamp, batch.last_offset, data)
                stats.bytes_written += len(data)
                stats.messages_written += records_written
                self._throttler.maybe_throttle(len(data))
        if end_position != source.size:
            raise CorruptRecordError(
                f"{source.size - end_position} bytes at the end of the segment do not form a record batch; "
                "log segment may be corrupt",
                path=source.log.path,
                position=end_position,
            )
        stats.segments_read += 1

    def _filter_chunk(
        self, clean_pass: _Pass, source: LogSegment, chunk: list[AnyBatch], retain_legacy_deletes: bool
    ) -> list[_Retained | None]:
        """What to keep of each batch of `chunk` (bytes, max timestamp, records), None to drop it. The records of
        every data batch are decided together (`_retained`); markers, emptied and legacy batches one by one."""
        fates = [self._fate(clean_pass, batch) if isinstance(batch, RecordBatch) else None for batch in chunk]
        records = decode_chunk(
            chunk, [fate is not None and not fate.discard_records and not fate.is_control for fate in fates]
        )
        keep = self._retained(clean_pass, chunk, records)
        kept = _running_count(keep)
        kept_tombstones = _running_count(keep & records.null_values)
        results: list[_Retained | None] = []
        for index, (batch, fate) in enumerate(zip(chunk, fates, strict=True)):
            if not isinstance(batch, RecordBatch) or fate is None:
                results.append(self._filter_legacy_entry(clean_pass, source, batch, retain_legacy_deletes))
            elif fate.discard_records:
                clean_pass.stats.messages_read += batch.records_count
                results.append(_empty_batch(batch) if fate.retain_empty else None)
            elif fate.is_control:
                results.append(self._filter_marker(clean_pass, batch, fate))
            else:
                first, stop = int(records.bounds[index]), int(records.bounds[index + 1])
                clean_pass.stats.messages_read += stop - first
                results.append(
                    self._filter_data(
                        clean_pass,
                        batch,
                        fate,
                        keep[first:stop],
                        int(kept[stop] - kept[first]),
                        kept_tombstones[stop] > kept_tombstones[first],
                    )
                )
        return results

    @staticmethod
    def _fate(clean_pass: _Pass, batch: RecordBatch) -> _Fate:
        """The transaction rules' verdict on `batch`; calls the tracker, so batches must come in offset order."""
        now_ms = clean_pass.now_ms
        if batch.is_control:
            can_discard = clean_pass.tracker.on_control_batch_read(batch)
            horizon = batch.delete_horizon_ms
            discard_records = can_discard and horizon is not None and horizon <= now_ms
        else:
            can_discard = discard_records = clean_pass.tracker.on_batch_read(batch)
        retain_empty = batch.producer_id >= 0 and clean_pass.scan.is_last_batch_of_active_producer(batch, now_ms)
        return _Fate(batch.is_control, can_discard, discard_records, retain_empty)

    @staticmethod
    def _retained(clean_pass: _Pass, chunk: list[AnyBatch], records: ChunkRecords) -> np.ndarray:
        """Per decoded record, whether it stays: past the map's latest offset, or keyed, not superseded, and
        a value or a tombstone whose batch's delete horizon has not passed. Unkeyed records in range are
        dropped and counted as invalid."""
        offset_map = clean_pass.offset_map
        offsets = records.offsets
        beyond = offsets > offset_map.latest_offset
        lookup = ~beyond & ~records.null_keys
        clean_pass.stats.invalid_messages += int(np.count_nonzero(~beyond & records.null_keys))
        latest = np.full(len(records), -1, dtype=np.int64)
        if lookup.any():
            latest[lookup] = offset_map.get_many(records.key_digests(lookup, offset_map))
        now_ms = clean_pass.now_ms
        horizon_open = [
            not isinstance(batch, RecordBatch) or batch.delete_horizon_ms is None or now_ms < batch.delete_horizon_ms
            for batch in chunk
        ]
        tombstone_kept = np.repeat(np.array(horizon_open, dtype=bool), np.diff(records.bounds))
        keep: np.ndarray = beyond | (lookup & (offsets >= latest) & (~records.null_values | tombstone_kept))
        return keep

    @staticmethod
    def _filter_marker(clean_pass: _Pass, batch: RecordBatch, fate: _Fate) -> _Retained | None:
        """A transaction marker stays as it is until its transaction has no data left; it then gets a delete
        horizon (and goes, in a later pass, once the horizon has passed: `_fate`)."""
        records = batch.records()
        clean_pass.stats.messages_read += len(records)
        if not records:
            return _empty_batch(batch) if fate.retain_empty else None
        if not fate.can_discard or batch.delete_horizon_ms is not None:
            return bytes(batch.raw()), batch.max_timestamp, len(records)
        horizon_ms = clean_pass.now_ms + clean_pass.log.config.delete_retention_ms
        rebuilt = build_retained_batch(batch, np.ones(len(records), dtype=bool), horizon_ms)
        return rebuilt, RecordBatch(rebuilt).max_timestamp, len(records)

    @staticmethod
    def _filter_data(
        clean_pass: _Pass, batch: RecordBatch, fate: _Fate, keep: np.ndarray, kept: int, has_tombstone: bool
    ) -> _Retained | None:
        """A data batch with its `kept` records (`keep` per record): copied as it is when every record stays and
        it needs no new delete horizon (a kept tombstone sets one), rebuilt otherwise."""
        if not kept:
            return _empty_batch(batch) if fate.retain_empty else None
        needs_horizon = has_tombstone and batch.delete_horizon_ms is None
        if kept == len(keep) and not needs_horizon:
            return bytes(batch.raw()), batch.max_timestamp, kept
        horizon_ms = (
            clean_pass.now_ms + clean_pass.log.config.delete_retention_ms if needs_horizon else batch.delete_horizon_ms
        )
        rebuilt = build_retained_batch(batch, keep, horizon_ms)
        return rebuilt, RecordBatch(rebuilt).max_timestamp, kept

    @staticmethod
    def _filter_legacy_entry(
        clean_pass: _Pass, source: LogSegment, entry: AnyBatch, retain_deletes: bool
    ) -> _Retained | None:
        offset_map = clean_pass.offset_map
        records = entry.records()
        clean_pass.stats.messages_read += len(records)
        droppable = all(
            record.offset <= offset_map.latest_offset
            and (
                record.key is None
                or offset_map.get(record.key) > record.offset
                or (record.value is None and not retain_deletes)
            )
            for record in records
        )
        if droppable:
            clean_pass.stats.invalid_messages += sum(1 for record in records if record.key is None)
            return None
        return source.log.read(entry.position, entry.size_in_bytes), entry.max_timestamp, len(records)


def legacy_delete_horizon_ms(log: ReadableLog, segments: Sequence[LogSegment], first_dirty_offset: int) -> int:
    """Kafka's `legacyDeleteHorizonMs`: the mtime of the last segment below `first_dirty_offset` minus
    delete.retention.ms, or 0 when no segment starts below it."""
    clean = [segment for segment in segments if segment.base_offset < first_dirty_offset]
    if not clean:
        return 0
    return clean[-1].last_modified_ms() - log.config.delete_retention_ms


def _running_count(flags: np.ndarray) -> np.ndarray:
    """`counts[i]` = how many of `flags[:i]` are set (so a range's count is a difference)."""
    counts = np.zeros(len(flags) + 1, dtype=np.int64)
    np.cumsum(flags, out=counts[1:])
    return counts


def _check_batch_size(batch: AnyBatch, max_batch_bytes: int) -> None:
    if batch.size_in_bytes > max_batch_bytes:
        raise CorruptRecordError(
            f"record batch of {batch.size_in_bytes} bytes is larger than the cleaner's limit of {max_batch_bytes} "
            "(max of max.message.bytes and the cleaner I/O buffer); log segment may be corrupt",
            position=batch.position,
            offset=batch.base_offset if isinstance(batch, RecordBatch) else batch.last_offset,
        )


def _empty_batch(batch: RecordBatch) -> _Retained:
    """A kept batch with no records: the 61-byte header only (Kafka's `writeEmptyHeader`)."""
    if batch.records_count == 0:
        return bytes(batch.raw()), batch.max_timestamp, 0
    attributes = encode_attributes(
        CompressionType.NONE,
        batch.timestamp_type,
        is_transactional=batch.is_transactional,
        is_control=batch.is_control,
        has_delete_horizon=False,
    )
    data = encode_batch(
        base_offset=batch.base_offset,
        partition_leader_epoch=batch.partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=batch.last_offset_delta,
        base_timestamp=batch.max_timestamp,
        max_timestamp=batch.max_timestamp,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        records_count=0,
        payload=b"",
    )
    return data, batch.max_timestamp, 0
