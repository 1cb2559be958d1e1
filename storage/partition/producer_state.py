"""Producer state of one partition (Kafka's `ProducerStateManager` and `ProducerStateEntry`): idempotent
producers' sequences and epochs, and the transactions open on the partition.

A producer with an id (`producerId >= 0`) numbers its batches with sequences; the partition remembers, per
producer, its epoch, the metadata of its last 5 batches (Kafka's `NUM_BATCHES_TO_RETAIN`, the most in-flight
requests an idempotent producer may have), its last timestamp, the epoch of the transaction coordinator that
wrote its last marker, and the first offset of its open transaction. What an append may do is judged by
`producer_append.PendingAppend`; this module keeps the result.

Transactions (KIP-98): a transactional data batch from a producer with no open transaction opens one at its
first offset (an "ongoing" transaction); a COMMIT or ABORT marker closes it into a `CompletedTxn`, which stays
"unreplicated" until the high watermark passes its marker. The first unstable offset is the smallest first offset
of an ongoing or unreplicated transaction: the last stable offset (LSO) that read_committed consumers read up to
is min(first unstable offset, high watermark), so a consumer never reads past a transaction whose outcome it
could not yet know, nor past one whose marker a new leader might not have (Kafka's `unreplicatedTxns`).

Snapshots (`producer_snapshot`, written as `<offset>.snapshot`): written on roll (at the new base offset) and on
close (at the log end) when the state changed since the last one, a state rebuilt by replaying the log included, so
after a crash only the batches after the newest snapshot are replayed. Every producer is written, one with only
markers too (Kafka's rule), and the open transaction's first offset with it, so the ongoing transactions are rebuilt
from a snapshot. Entries are written in the order of Kafka's Java `HashMap` (`producer_snapshot`), so a snapshot a
Kafka broker wrote is rewritten byte for byte, and so is one rebuilt from a log Kafka wrote. Snapshots above the log
end are stale and deleted on open and truncation. A snapshot that fails its version, CRC or framing is deleted (as
Kafka does) and the state is rebuilt from the log: never fatal. Snapshots below the log start offset describe
deleted records: they go when the log start moves (retention, DeleteRecords), and the snapshot of a segment the
cleaner merges away goes with it, as in Kafka, so there is at most one snapshot per segment, plus the one at the log
end.

Expiration (`producer.id.expiration.ms`): a producer is expired when its last timestamp is at least that long
before now and it has no transaction open (an open transaction never expires). Expired producers are dropped
when a snapshot is loaded and by `remove_expired_producers`, which the log manager runs every
`producer.id.expiration.check.interval.ms`; a producer whose id expired is then unknown, and may start again
from any sequence. Without it every short-lived idempotent producer (each takes a new id) stays in memory and in
every snapshot for as long as the broker lives.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from storage import file_names
from storage.errors import CorruptCheckpointError, KafkaStorageError
from storage.file_io import write_atomically
from storage.partition.producer_snapshot import (
    SnapshotEntry,
    encode_snapshot,
    java_hash_map_order,
    read_snapshot_file,
)
from storage.records.layout import NO_SEQUENCE, SEQUENCE_MODULUS

logger = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
# Kafka's producer.id.expiration.ms default: one day.
PRODUCER_ID_EXPIRATION_MS = 86_400_000
# A producer's coordinator epoch before any marker, and an entry's "no open transaction".
NO_COORDINATOR_EPOCH = -1
NO_TXN = -1


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    """One producer of a partition as Kafka's DescribeProducers shows it (what kafka-transactions.sh reads to find
    the producer of a hanging transaction): `current_txn_start_offset` is the first offset of its open
    transaction on the partition, -1 for none."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is remembered of one batch: its sequence range, offset range and max timestamp."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    """One producer's state: epoch, last batches (oldest first), last timestamp, coordinator epoch, open txn."""

    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int = NO_TXN
    last_timestamp: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        """Last offset of the producer's last data batch, -1 without one (Kafka's `lastDataOffset`)."""
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def has_open_transaction(self) -> bool:
        return self.current_txn_first_offset >= 0

    def copy(self) -> ProducerEntry:
        """A copy whose batches can change apart (per append: 0.5 us, where `dataclasses.replace` took 1.6)."""
        return ProducerEntry(
            self.producer_id,
            self.epoch,
            self.batches.copy(),
            self.coordinator_epoch,
            self.current_txn_first_offset,
            self.last_timestamp,
        )

    def maybe_update_epoch(self, epoch: int) -> None:
        """A new epoch forgets the batches of the old one (their sequences no longer count)."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        self.maybe_update_epoch(epoch)
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp

    def end_transaction(self, epoch: int, coordinator_epoch: int, timestamp: int) -> None:
        """A COMMIT/ABORT marker: the epoch and coordinator epoch it carries, and no transaction open."""
        self.maybe_update_epoch(epoch)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = NO_TXN
        self.last_timestamp = timestamp

    def to_snapshot(self) -> SnapshotEntry:
        last = self.batches[-1] if self.batches else None
        return SnapshotEntry(
            self.producer_id,
            self.epoch,
            NO_SEQUENCE if last is None else last.last_sequence,
            -1 if last is None else last.last_offset,
            0 if last is None else last.last_offset - last.first_offset,
            self.last_timestamp,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )

    @classmethod
    def from_snapshot(cls, entry: SnapshotEntry) -> ProducerEntry:
        """Kafka's `readSnapshot`: a batch only when the entry has a data offset; any negative txn offset is none."""
        loaded = cls(
            entry.producer_id,
            entry.epoch,
            coordinator_epoch=entry.coordinator_epoch,
            current_txn_first_offset=entry.current_txn_first_offset if entry.current_txn_first_offset >= 0 else NO_TXN,
            last_timestamp=entry.timestamp,
        )
        if entry.last_offset >= 0:
            loaded.batches.append(
                BatchMetadata(
                    (entry.last_sequence - entry.offset_delta) % SEQUENCE_MODULUS,
                    entry.last_sequence,
                    entry.last_offset - entry.offset_delta,
                    entry.last_offset,
                    entry.timestamp,
                )
            )
        return loaded


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a COMMIT/ABORT marker closed: its first data offset and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def next_sequence(sequence: int) -> int:
    return (sequence + 1) % SEQUENCE_MODULUS


class ProducerStateManager:
    """Producer entries and transactions of one partition; the owning Log serialises every call."""

    def __init__(self, directory: Path, producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> None:
        self.directory = Path(directory)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerEntry] = {}
        # Open transactions: first offset -> producer id.
        self._ongoing: dict[int, int] = {}
        # Transactions whose marker is at or above the high watermark: first offset -> (producer id, marker offset).
        self._unreplicated: dict[int, tuple[int, int]] = {}
        # False while the newest snapshot at or below the log end, plus the batches after it, rebuilds exactly
        # this state; `Log.close` writes a snapshot only when it is True.
        self.changed_since_snapshot = False

    @property
    def producers(self) -> dict[int, ProducerEntry]:
        return self._producers

    def active_producers(self) -> list[ActiveProducer]:
        """Every producer the partition remembers, by producer id."""
        return [
            ActiveProducer(
                entry.producer_id,
                entry.epoch,
                entry.last_sequence,
                entry.last_timestamp,
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
            )
            for _, entry in sorted(self._producers.items())
        ]

    def put_entries(self, entries: dict[int, ProducerEntry], started_txns: list[tuple[int, int]]) -> None:
        """Makes the entries of an append the current ones and opens the transactions it started (first offset,
        producer id); see `producer_append.PendingAppend.commit`."""
        self._producers.update(entries)
        for first_offset, producer_id in started_txns:
            self._ongoing[first_offset] = producer_id
        if entries:
            self.changed_since_snapshot = True

    def clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self.changed_since_snapshot = True

    # --- transactions ----------------------------------------------------------------------------

    @property
    def ongoing_transactions(self) -> dict[int, int]:
        """The open transactions, first offset -> producer id (a copy)."""
        return dict(self._ongoing)

    def first_undecided_offset(self) -> int | None:
        """The first offset of the oldest open transaction (Kafka's `firstUndecidedOffset`)."""
        return min(self._ongoing, default=None)

    def first_unstable_offset(self, high_watermark: int | None = None) -> int | None:
        """The first offset of the oldest transaction that is open, or closed by a marker not yet below the high
        watermark (Kafka's `firstUnstableOffset`). Completed transactions leave when `on_high_watermark_updated`
        passes their marker; until then `high_watermark`, when given, decides, so that a log opened with its
        high watermark at the log end and lowered to its replicated value (a replica restarting) keeps them."""
        unreplicated = (
            self._unreplicated
            if high_watermark is None
            else [first for first, (_, marker) in self._unreplicated.items() if marker >= high_watermark]
        )
        return min((*self._ongoing, *unreplicated), default=None)

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """What a `.txnindex` entry for `completed` records: the first offset of the oldest transaction still open
        of another producer, else the marker's offset + 1 (Kafka's `lastStableOffset(CompletedTxn)`)."""
        others = [first for first, producer_id in self._ongoing.items() if producer_id != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """Moves a transaction from open to unreplicated, until the high watermark passes its marker."""
        if self._ongoing.pop(completed.first_offset, None) is None:
            raise KafkaStorageError(
                f"transaction of producer {completed.producer_id} at offset {completed.first_offset} was not open",
                path=self.directory,
                offset=completed.first_offset,
            )
        self._unreplicated[completed.first_offset] = (completed.producer_id, completed.last_offset)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Completed transactions whose marker lies below the high watermark are stable from now on."""
        self._drop_unreplicated_below(high_watermark)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """Completed transactions whose marker was deleted are gone (Kafka's `onLogStartOffsetIncremented`)."""
        self._drop_unreplicated_below(log_start_offset)

    def _drop_unreplicated_below(self, offset: int) -> None:
        for first, (_, marker_offset) in list(self._unreplicated.items()):
            if marker_offset < offset:
                del self._unreplicated[first]

    # --- expiration ------------------------------------------------------------------------------

    def is_producer_expired(self, entry: ProducerEntry, now_ms: int) -> bool:
        """Idle at least `producer_id_expiration_ms` (by its last timestamp) and no transaction open."""
        return not entry.has_open_transaction and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forgets every expired producer (see the module docstring); returns how many."""
        expired = [pid for pid, entry in self._producers.items() if self.is_producer_expired(entry, now_ms)]
        for pid in expired:
            del self._producers[pid]
        if expired:
            self.changed_since_snapshot = True
        return len(expired)

    # --- snapshots -------------------------------------------------------------------------------

    def write_snapshot(self, offset: int) -> Path:
        """Writes the state as of `offset` to `<offset>.snapshot` (atomically)."""
        path = file_names.producer_snapshot_file(self.directory, offset)
        entries = (self._producers[pid].to_snapshot() for pid in java_hash_map_order(self._producers))
        write_atomically(path, encode_snapshot(entries))
        self.changed_since_snapshot = False
        return path

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files in the folder, ascending."""
        offsets = []
        for entry in self.directory.iterdir():
            if entry.name.endswith(file_names.PRODUCER_SNAPSHOT_SUFFIX):
                stem = entry.name[: -len(file_names.PRODUCER_SNAPSHOT_SUFFIX)]
                if len(stem) == file_names.OFFSET_DIGITS and stem.isdigit():
                    offsets.append(int(stem))
        return sorted(offsets)

    def load_latest_snapshot(self, at_or_below: int, now_ms: int) -> int | None:
        """Loads the newest readable snapshot with offset <= `at_or_below`, without the producers expired at
        `now_ms`, and the transactions they have open; returns its offset, or None (the state is then empty).

        An unreadable snapshot is deleted, as Kafka does, so that it is not read again on every open.
        """
        self.changed_since_snapshot = False
        self._ongoing.clear()
        self._unreplicated.clear()
        for offset in reversed(self.snapshot_offsets()):
            if offset > at_or_below:
                continue
            path = file_names.producer_snapshot_file(self.directory, offset)
            try:
                loaded = read_snapshot(path)
            except CorruptCheckpointError as exc:
                logger.warning("%s: deleting unreadable producer snapshot (%s)", self.directory, exc)
                path.unlink(missing_ok=True)
                continue
            self._producers = {
                pid: entry for pid, entry in loaded.items() if not self.is_producer_expired(entry, now_ms)
            }
            for pid, entry in self._producers.items():
                if entry.has_open_transaction:
                    self._ongoing[entry.current_txn_first_offset] = pid
            return offset
        self._producers = {}
        return None

    def delete_snapshots_above(self, offset: int) -> None:
        """Removes snapshots newer than `offset` (after a truncation)."""
        for snapshot in self.snapshot_offsets():
            if snapshot > offset:
                file_names.producer_snapshot_file(self.directory, snapshot).unlink(missing_ok=True)

    def delete_snapshot(self, offset: int) -> None:
        """Removes the snapshot at `offset`, if any (that of a segment deleted or merged away)."""
        file_names.producer_snapshot_file(self.directory, offset).unlink(missing_ok=True)

    def delete_snapshots_before(self, offset: int) -> None:
        """Removes snapshots below `offset`, the log start offset (Kafka's `deleteSnapshotsBefore`).

        When none is left, the state can no longer be rebuilt from a snapshot and the log (the batches that
        named its producers are gone), so it counts as changed: the next close snapshots it.
        """
        offsets = self.snapshot_offsets()
        for snapshot in offsets:
            if snapshot < offset:
                file_names.producer_snapshot_file(self.directory, snapshot).unlink(missing_ok=True)
        if offsets and offsets[-1] < offset:
            self.changed_since_snapshot = True


def read_snapshot(path: Path) -> dict[int, ProducerEntry]:
    """The producers of the snapshot file at `path`, in file order; `CorruptCheckpointError` when it does not parse."""
    return {entry.producer_id: ProducerEntry.from_snapshot(entry) for entry in read_snapshot_file(path)}
