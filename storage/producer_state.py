"""Idempotent-producer state of one partition (Kafka's `ProducerStateManager`, idempotence part).

A producer with an id (`producerId >= 0`) numbers its batches with sequences; the partition remembers,
per producer, its epoch and the metadata of its last 5 batches (Kafka's
`NUM_BATCHES_TO_RETAIN`, the most in-flight requests an idempotent producer may have). An append is:

- a duplicate when a retained batch has the same first and last sequence: nothing is written and the
  original offsets are returned (a retry of an acknowledged batch that lost its answer);
- in order when its first sequence follows the last one (wrapping at 2**31-1 to 0), or when the
  producer is new, or when a higher epoch starts again at sequence 0;
- otherwise refused: `OutOfOrderSequenceError`, or `InvalidProducerEpochError` for an older epoch.

Snapshot file `<offset>.snapshot` (Kafka's format, version 1, big-endian), the state as of `<offset>`::

    version int16 (1) | crc uint32: CRC-32C of every byte after this field | count int32
    count x: producerId int64 | producerEpoch int16 | lastSequence int32 | lastOffset int64
             | offsetDelta int32 (lastOffset - first offset of the last batch) | timestamp int64
             | coordinatorEpoch int32 (-1) | currentTxnFirstOffset int64 (-1: no open transaction)

A snapshot keeps only each producer's last batch, as Kafka's does. Snapshots are written on roll (at
the new base offset) and on clean close (at the log end), so after a crash only the batches after the
newest snapshot are replayed. A snapshot that fails its CRC or framing is ignored (the state is rebuilt
from the log), never fatal.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from storage import file_names
from storage.checkpoint_file import write_atomically
from storage.errors import CorruptCheckpointError, InvalidProducerEpochError, OutOfOrderSequenceError

logger = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_VERSION = 1
SEQUENCE_MODULUS = 2**31
_HEADER = struct.Struct(
    ">"
    "h"  # version
    "I"  # crc
    "i"  # entry count
)
_ENTRY = struct.Struct(
    ">"
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # lastSequence
    "q"  # lastOffset
    "i"  # offsetDelta
    "q"  # timestamp
    "i"  # coordinatorEpoch
    "q"  # currentTxnFirstOffset
)
_CRC_START = struct.calcsize(">hI")


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
    """One producer's epoch and its last batches, oldest first."""

    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


def next_sequence(sequence: int) -> int:
    return (sequence + 1) % SEQUENCE_MODULUS


class ProducerStateManager:
    """Producer entries of one partition; the owning Log serialises every call."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._producers: dict[int, ProducerEntry] = {}

    @property
    def producers(self) -> dict[int, ProducerEntry]:
        return self._producers

    def find_duplicate(
        self, producer_id: int, epoch: int, first_sequence: int, last_sequence: int
    ) -> BatchMetadata | None:
        """The retained batch this one repeats, if any."""
        entry = self._producers.get(producer_id)
        if entry is None or entry.epoch != epoch:
            return None
        for batch in entry.batches:
            if batch.first_sequence == first_sequence and batch.last_sequence == last_sequence:
                return batch
        return None

    def check_sequence(self, producer_id: int, epoch: int, first_sequence: int) -> None:
        """Raises unless a batch starting at `first_sequence` may follow what this producer wrote."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than the current epoch {entry.epoch}"
            )
        if epoch > entry.epoch:
            if first_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} new epoch {epoch} must start at sequence 0, not {first_sequence}"
                )
            return
        if entry.batches and first_sequence != next_sequence(entry.last_sequence):
            raise OutOfOrderSequenceError(
                f"producer {producer_id} sent sequence {first_sequence}, expected {next_sequence(entry.last_sequence)}"
            )

    def update(self, producer_id: int, epoch: int, batch: BatchMetadata) -> None:
        """Records a written batch (also used when replaying the log, without checks)."""
        entry = self._producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = ProducerEntry(producer_id, epoch)
            self._producers[producer_id] = entry
        entry.batches.append(batch)

    def clear(self) -> None:
        self._producers.clear()

    # --- snapshots -------------------------------------------------------------------------------

    def write_snapshot(self, offset: int) -> Path:
        """Writes the state as of `offset` to `<offset>.snapshot` (atomically)."""
        entries = []
        for entry in self._producers.values():
            if not entry.batches:
                continue
            last = entry.batches[-1]
            entries.append(
                _ENTRY.pack(
                    entry.producer_id,
                    entry.epoch,
                    last.last_sequence,
                    last.last_offset,
                    last.last_offset - last.first_offset,
                    last.timestamp,
                    -1,
                    -1,
                )
            )
        body = struct.pack(">i", len(entries)) + b"".join(entries)
        data = struct.pack(">hI", SNAPSHOT_VERSION, crc32c.crc32c(body)) + body
        path = file_names.producer_snapshot_file(self.directory, offset)
        write_atomically(path, data)
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

    def load_latest_snapshot(self, at_or_below: int) -> int | None:
        """Loads the newest readable snapshot with offset <= `at_or_below`; returns its offset, or None."""
        for offset in reversed(self.snapshot_offsets()):
            if offset > at_or_below:
                continue
            path = file_names.producer_snapshot_file(self.directory, offset)
            try:
                self._producers = read_snapshot(path)
                return offset
            except CorruptCheckpointError as exc:
                logger.warning("%s: ignoring unreadable producer snapshot (%s)", self.directory, exc)
        self._producers = {}
        return None

    def delete_snapshots_above(self, offset: int) -> None:
        """Removes snapshots newer than `offset` (after a truncation)."""
        for snapshot in self.snapshot_offsets():
            if snapshot > offset:
                file_names.producer_snapshot_file(self.directory, snapshot).unlink(missing_ok=True)

    def delete_snapshots_below(self, offset: int, keep: int = 2) -> None:
        """Removes snapshots older than `offset`, always keeping the newest `keep`."""
        offsets = self.snapshot_offsets()
        for snapshot in offsets[: max(0, len(offsets) - keep)]:
            if snapshot < offset:
                file_names.producer_snapshot_file(self.directory, snapshot).unlink(missing_ok=True)


def read_snapshot(path: Path) -> dict[int, ProducerEntry]:
    """Parses a snapshot file strictly; `CorruptCheckpointError` on a bad version, CRC or length."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CorruptCheckpointError(f"cannot read producer snapshot: {exc}", path=path) from exc
    if len(data) < _HEADER.size:
        raise CorruptCheckpointError(f"producer snapshot of {len(data)} bytes is too short", path=path)
    version, crc, count = _HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptCheckpointError(f"unknown producer snapshot version {version}", path=path)
    if crc32c.crc32c(data[_CRC_START:]) != crc:
        raise CorruptCheckpointError("producer snapshot CRC mismatch", path=path)
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise CorruptCheckpointError(f"producer snapshot count {count} does not match its size", path=path)
    producers: dict[int, ProducerEntry] = {}
    for index in range(count):
        pid, epoch, last_seq, last_offset, delta, timestamp, _, _ = _ENTRY.unpack_from(
            data, _HEADER.size + index * _ENTRY.size
        )
        entry = ProducerEntry(pid, epoch)
        span = last_offset - (last_offset - delta)
        entry.batches.append(
            BatchMetadata((last_seq - span) % SEQUENCE_MODULUS, last_seq, last_offset - delta, last_offset, timestamp)
        )
        producers[pid] = entry
    return producers
