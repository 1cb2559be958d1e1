"""Which leader epoch wrote which offsets: a partition's `leader-epoch-checkpoint` kept in memory (Kafka's
`LeaderEpochFileCache`).

Each entry is `(epoch, start_offset)`: the first offset written under that epoch. Entries grow in both epoch and
start offset. A replica that comes back asks the leader for the end offset of its own latest epoch
(OffsetForLeaderEpoch) and truncates where the two logs diverge; a consumer asks the same to detect a truncated
position. The rules are Kafka's:

- `assign(epoch, start)` adds an entry only if the epoch differs from the latest or starts earlier; entries that
  would break the order (an epoch at or above the new one, or a start at or after it) are removed first.
- `end_offset_for(epoch, log_end_offset)`: the latest epoch ends at the log end offset; an older epoch ends where
  the next known epoch starts, answered with the largest known epoch at or below the requested one (or the
  requested epoch itself when it is older than every entry); an unknown newer epoch, or -1, has no end (-1, -1).
- Truncating the log's tail removes the entries starting at or after the new end; moving the log start forward
  removes the entries before it, the last of them kept with its start moved to the new log start.

Every change is written to the checkpoint at once (atomically, as every checkpoint here); Kafka writes
truncations in the background and fixes a stale file on the next load, which `Log.open` does too (it truncates
the loaded entries to the log's offsets).

A damaged checkpoint (bad version, count or line, not UTF-8) takes Kafka's log dir offline. Here it is repaired
instead: every batch carries the epoch of the leader that wrote it, so `Log.open` rebuilds the entries from the
log's batches (`load` reports the damage and starts the file again empty).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from storage import file_names
from storage.errors import CorruptCheckpointError, InvalidRequestError
from storage.files.checkpoint_file import EpochEntry, LeaderEpochCheckpointFile

logger = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """A partition's epoch entries, oldest first, mirrored to its `leader-epoch-checkpoint`. Not thread-safe:
    the log calls it under its own lock."""

    def __init__(self, checkpoint: LeaderEpochCheckpointFile, entries: Iterable[EpochEntry] = ()) -> None:
        self._checkpoint = checkpoint
        self._entries: list[EpochEntry] = []
        for entry in entries:
            self._add(EpochEntry(*entry))

    @classmethod
    def load(cls, directory: Path) -> tuple[LeaderEpochCache, bool]:
        """The cache of the partition folder `directory`, from its checkpoint (none yet: empty), and whether the
        file was damaged: then it is logged, written again empty, and the caller rebuilds the entries from the log's
        batches (`note_recovered_batch` on each). An I/O error raises `KafkaStorageError`."""
        checkpoint = LeaderEpochCheckpointFile(directory / file_names.LEADER_EPOCH_CHECKPOINT)
        try:
            return cls(checkpoint, checkpoint.read()), False
        except CorruptCheckpointError as exc:
            logger.warning("%s: %s; rebuilding the leader epochs from the log's batches", directory.name, exc.message)
        checkpoint.write([])
        return cls(checkpoint), True

    def move_to(self, directory: Path) -> None:
        """The partition's folder is `directory` from now on, a copy holding this cache's checkpoint as it is
        (`storage.partition.future_log`): the next change writes the checkpoint there."""
        self._checkpoint = LeaderEpochCheckpointFile(directory / file_names.LEADER_EPOCH_CHECKPOINT)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        """The epoch of the newest entry, None while there is none."""
        return self._entries[-1].epoch if self._entries else None

    def earliest_covering(self, offset: int) -> int | None:
        """The oldest entry's epoch if it starts at or before `offset`, else None (Kafka's check of the earliest entry
        against the log start: a log written partly in an older format has no epoch for its first records)."""
        return self._entries[0].epoch if self._entries and self._entries[0].start_offset <= offset else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Records that `epoch` starts at `start_offset` (see the module docstring); True if the entries changed,
        which writes the checkpoint."""
        if not self._add(EpochEntry(epoch, start_offset)):
            return False
        self._write()
        return True

    def note_recovered_batch(self, epoch: int, base_offset: int) -> None:
        """Recovery's rule for a batch it re-read: its epoch starts at its base offset if the epoch is newer than
        every entry (-1, written by no leader, is skipped)."""
        latest = self.latest_epoch
        if epoch >= 0 and (latest is None or epoch > latest):
            self.assign(epoch, base_offset)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """`(epoch, end offset)` for OffsetForLeaderEpoch (see the module docstring)."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._entries[-1].epoch:
            return requested_epoch, log_end_offset
        higher = next((entry for entry in self._entries if entry.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = [entry for entry in self._entries if entry.epoch <= requested_epoch]
        return (floor[-1].epoch if floor else requested_epoch), higher.start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Drops the entries starting at or after `end_offset` (the log was truncated to it)."""
        kept = [entry for entry in self._entries if entry.start_offset < end_offset]
        if end_offset >= 0 and len(kept) != len(self._entries):
            self._replace(kept)

    def truncate_from_start(self, start_offset: int) -> None:
        """Drops the entries that begin at or before `start_offset` (the log start moved there), keeping the last of
        them with its start moved to `start_offset`."""
        before = [entry for entry in self._entries if entry.start_offset <= start_offset]
        if not before:
            return
        if before == [EpochEntry(before[-1].epoch, start_offset)]:
            return
        self._replace([EpochEntry(before[-1].epoch, start_offset), *self._entries[len(before) :]])

    def clear(self) -> None:
        """Drops every entry (the log restarted empty)."""
        if self._entries:
            self._replace([])

    def _add(self, entry: EpochEntry) -> bool:
        if not isinstance(entry.epoch, int) or not isinstance(entry.start_offset, int):
            raise InvalidRequestError(f"leader epoch entry {entry} must hold integers")
        if entry.epoch < 0 or entry.start_offset < 0:
            raise InvalidRequestError(f"invalid leader epoch entry: epoch {entry.epoch}, start {entry.start_offset}")
        latest = self._entries[-1] if self._entries else None
        if latest is not None and latest.epoch == entry.epoch and entry.start_offset >= latest.start_offset:
            return False
        kept = list(self._entries)
        while kept and (kept[-1].epoch >= entry.epoch or kept[-1].start_offset >= entry.start_offset):
            kept.pop()
        removed = self._entries[len(kept) :]
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            logger.warning(
                "%s: new leader epoch entry %s removed the conflicting entries %s",
                self._checkpoint.path.parent.name,
                tuple(entry),
                [tuple(old) for old in removed],
            )
        self._entries = [*kept, entry]
        return True

    def _replace(self, entries: list[EpochEntry]) -> None:
        self._entries = entries
        self._write()

    def _write(self) -> None:
        self._checkpoint.write(self._entries)
