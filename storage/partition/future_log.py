"""A partition's future log: the copy of its folder being filled in another log dir of the same broker while the log
serves, which then replaces it (Kafka's future replica, filled by its `ReplicaAlterLogDirsThread` and swapped in by
`LogManager.replaceCurrentWithFutureLog`; KIP-113, AlterReplicaLogDirs).

The copy lives in `<target dir>/<topic>-<partition>.<32-hex>-future` (`file_names.future_dir_name`), which no
listing takes for a live partition. Unlike Kafka's future replica, which fetches batches from the current log and
appends them as a follower (its segments then roll where its own config says), the copy here is of the files
themselves, so the moved log is byte for byte the one it replaces: the same segments, indexes, `.txnindex` files,
producer snapshots, `leader-epoch-checkpoint` and `partition.metadata`.

`copy(max_bytes)` is one round of the copy, outside the log's lock but for a moment to list the segments: each
segment's `.log` is copied from where the last round stopped, up to its size (bytes below a segment's size are
never rewritten while the log is not cut), and a sealed segment's indexes and `.txnindex` once it is copied whole
(a roll trims them, and they change no more). What changed under the copy is found again at the next round: a
segment removed (retention, DeleteRecords) loses its copy, a segment object replaced (the cleaner's swap, a roll
of an empty segment) is copied again, and any truncation of the log (`Log.truncations`: a follower cutting its
tail rewrites bytes in place) makes the whole copy start over, as it is rare. A round answers whether the copy
has caught up (less than `CAUGHT_UP_BYTES` left).

`swap()` ends the move under the log's lock, so appends pause for its length (the last bytes, the active segment's
indexes, the small files, two renames and a load of the copied segments, trusted as after a clean shutdown): the
copy is completed and fsynced, renamed `<topic>-<partition>` in its dir, loaded, and the log continues from it
(`Log.move_to`: offsets, high watermark, producer state, leader epochs and open transactions are the log's own
objects, unchanged); then the old folder is renamed `<topic>-<partition>.<32-hex>-delete`, for its log manager to
remove after `file.delete.delay.ms`, and its segments are deleted the way retention deletes one: a reader in the
middle of one keeps reading its open file, a read that chose one before the swap starts again on the moved log
(`SegmentDeletedError`), and a same-node reader holding a path finds it gone and asks the log's owner again. The
copy is renamed before the old folder, as Kafka does: a crash between the two renames leaves the partition in both
dirs, which the next startup refuses to choose between (Kafka's rule), rather than in none.

Crash behaviour: a `-future` folder is only ever a copy. If the partition is still in another dir, the log manager
starts its move again at startup (`storage.logdir.log_manager`), and the copy is taken up where it stood (`create`,
`_adopt`): what of each segment's `.log` equals the log's is kept and the rest copied, as Kafka reloads a future log
it finds and fetches on from its end. Otherwise the log manager deletes the folder.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from storage import file_names
from storage.errors import KafkaStorageError, LogClosedError, StorageError
from storage.file_io import fsync_dir
from storage.partition.log import Log
from storage.partition.log_loader import LogLoader
from storage.segment.log_segment import LogSegment

logger = logging.getLogger(__name__)

# One read and one write of the copy: large enough for few system calls, small enough to stay in the page cache.
COPY_CHUNK_BYTES = 1 << 20
# The copy swaps once less than this is left: the rest is copied under the log's lock, which pauses appends for it
# (about a millisecond per MiB from the page cache).
CAUGHT_UP_BYTES = 1 << 20
# What one round copies at most by default: a round runs on the partition's maintenance thread, beside retention.
ROUND_BYTES = 64 << 20
# The small files of a partition folder that go with it (the high-watermark file and `.lock` are its owner's).
_FOLDER_FILES = (file_names.LEADER_EPOCH_CHECKPOINT, file_names.PARTITION_METADATA)


@dataclass(slots=True)
class _CopiedSegment:
    """How far a segment of the log is copied: the segment object copied from, the bytes of its `.log` copied, and
    whether its indexes and `.txnindex` are (once it is sealed and copied whole)."""

    segment: LogSegment
    log_bytes: int = 0
    indexed: bool = False


@dataclass(frozen=True, slots=True)
class SwappedLog:
    """What `swap` did: the log's folder now, and the old folder, renamed `-delete` (`renamed` True) or left under its
    name when the rename failed (its dir is then failing)."""

    directory: Path
    old_folder: Path
    renamed: bool


class FutureLog:
    """The copy of `log`'s folder in `folder` (see the module docstring)."""

    def __init__(self, log: Log, folder: Path, *, resume: bool = False) -> None:
        """Creates `folder` (empty: what a crash left there is discarded first), or with `resume` takes up the copy a
        stopped move left in it (`_adopt`)."""
        self._log = log
        self.directory = folder
        self._copied: dict[int, _CopiedSegment] = {}
        self._truncations = log.truncations
        # Where the copy stands after the last round, for describing it: the offset it has reached (in the first
        # segment not copied whole, as far as its offset index shows, to within two `index.interval.bytes`; the log
        # end once all is) and the `.log` bytes copied.
        self.log_end_offset = log.log_start_offset
        self.size_bytes = 0
        try:
            if resume:
                self._adopt()
                return
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
        except OSError as exc:
            raise KafkaStorageError(f"cannot create the future log folder: {exc}", path=folder) from exc

    @classmethod
    def create(cls, log: Log, log_dir: Path) -> FutureLog:
        """A copy of `log` in `log_dir`: the one a stopped move left there in a `-future` folder of this partition, if
        any (Kafka reloads such a folder as the future replica and goes on copying), else a new one in a `-future`
        folder of a new name. Of several such folders the one holding the most bytes is taken up and the others are
        deleted."""
        topic_partition = file_names.parse_partition_dir_name(log.directory.name)
        if topic_partition is None:
            raise KafkaStorageError("only a partition's log can move between log dirs", path=log.directory)
        try:
            left = sorted(
                (
                    entry
                    for entry in log_dir.iterdir()
                    if entry.is_dir() and file_names.parse_future_dir_name(entry.name) == topic_partition
                ),
                key=lambda folder: -sum(path.stat().st_size for path in folder.iterdir() if path.is_file()),
            )
        except OSError as exc:
            raise KafkaStorageError(f"cannot list the log dir: {exc}", path=log_dir) from exc
        for extra in left[1:]:
            shutil.rmtree(extra, ignore_errors=True)
        if left:
            return cls(log, left[0], resume=True)
        return cls(log, log_dir / file_names.future_dir_name(*topic_partition, uuid.uuid4().hex))

    def _adopt(self) -> None:
        """Takes up the copy in the folder: each segment's `.log` there keeps the part equal to the log's (compared
        chunk by chunk: bytes past the copy's last fsync may be lost in a crash, and the log may have been cut by its
        recovery or rewritten by the cleaner since) and is copied on from there; every other file goes (the files of
        segments the log no longer has, indexes and small files, copied again once their segments are whole and at
        the swap)."""
        log = self._log
        with log.lock:
            segments = log.log_segments()
        kept = set()
        for segment in segments:
            path = file_names.log_file(self.directory, segment.base_offset)
            if not path.is_file():
                continue
            same = _equal_prefix(segment, path)
            os.truncate(path, same)
            self._copied[segment.base_offset] = _CopiedSegment(segment, same)
            kept.add(path.name)
        for entry in self.directory.iterdir():
            if entry.name not in kept:
                if entry.is_dir():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        self.size_bytes = sum(copied.log_bytes for copied in self._copied.values())
        logger.info("%s: taking up its copy in %s (%d bytes kept)", log.directory, self.directory, self.size_bytes)

    @property
    def log_dir(self) -> Path:
        return self.directory.parent

    # --- the copy ----------------------------------------------------------------------------------

    def copy(self, max_bytes: int = ROUND_BYTES) -> bool:
        """One round: up to `max_bytes` more of the log copied; True once less than `CAUGHT_UP_BYTES` are left."""
        log = self._log
        with log.lock:
            if log.closed:
                raise LogClosedError("log is closed", path=log.directory)
            segments = log.log_segments()
            end_offset = log.log_end_offset
            truncations = log.truncations
        if truncations != self._truncations:
            logger.info("%s was cut while being copied to %s: copying it again", log.directory, self.log_dir)
            for base in list(self._copied):
                self._forget(base)
            self._truncations = truncations
        current = {segment.base_offset: segment for segment in segments}
        for base, copied in list(self._copied.items()):
            if current.get(base) is not copied.segment:
                self._forget(base)
        budget = max_bytes
        try:
            for segment in segments:
                budget -= self._copy_segment(segment, segment is not segments[-1], budget)
        except (StorageError, OSError) as exc:
            # A segment deleted or swapped under the copy is found at the next round; one still in the log failed.
            with log.lock:
                if log.log_segments() == segments and log.truncations == truncations:
                    raise KafkaStorageError(f"copying the log failed: {exc}", path=log.directory) from exc
            return False
        left = 0
        self.log_end_offset = end_offset
        for segment in segments:
            done = self._copied.get(segment.base_offset)
            missing = segment.size - (0 if done is None else done.log_bytes)
            if missing > 0 and left == 0:
                self.log_end_offset = _indexed_offset_below(segment, 0 if done is None else done.log_bytes)
            left += max(missing, 0)
        self.size_bytes = sum(copied.log_bytes for copied in self._copied.values())
        return left < CAUGHT_UP_BYTES

    def _copy_segment(self, segment: LogSegment, sealed: bool, budget: int) -> int:
        """Copies up to `budget` more bytes of `segment`'s `.log`, then its indexes if it is sealed and whole; returns
        the bytes copied."""
        base = segment.base_offset
        copied = self._copied.get(base)
        if copied is None:
            copied = self._copied[base] = _CopiedSegment(segment)
            _write_file(file_names.log_file(self.directory, base), b"")
        size = segment.size
        done = 0
        if copied.log_bytes < size and budget > 0:
            fd = os.open(file_names.log_file(self.directory, base), os.O_WRONLY)
            try:
                while copied.log_bytes < size and done < budget:
                    wanted = min(COPY_CHUNK_BYTES, size - copied.log_bytes, budget - done)
                    chunk = segment.log.read(copied.log_bytes, wanted)
                    if not chunk:
                        break
                    os.pwrite(fd, chunk, copied.log_bytes)
                    copied.log_bytes += len(chunk)
                    done += len(chunk)
            finally:
                os.close(fd)
        if sealed and copied.log_bytes >= size and not copied.indexed:
            _fsync_file(file_names.log_file(self.directory, base))
            self._copy_indexes(segment)
            copied.indexed = True
        return done

    def _copy_indexes(self, segment: LogSegment) -> None:
        """The segment's offset and time indexes (their entries: what a trim leaves) and `.txnindex`, fsynced."""
        base = segment.base_offset
        for index, target in (
            (segment.offset_index, file_names.index_file(self.directory, base)),
            (segment.time_index, file_names.time_index_file(self.directory, base)),
        ):
            with open(index.path, "rb") as source:
                _write_file(target, source.read(index.size_in_bytes), fsync=True)
        txn_index = file_names.txn_index_file(self.directory, base)
        if segment.txn_index_path.exists():
            _write_file(txn_index, segment.txn_index_path.read_bytes(), fsync=True)
        else:
            txn_index.unlink(missing_ok=True)

    def _forget(self, base: int) -> None:
        """A segment whose copy no longer holds: its files in the copy go."""
        del self._copied[base]
        for path in file_names.segment_files(self.directory, base):
            path.unlink(missing_ok=True)

    # --- the swap ----------------------------------------------------------------------------------

    def swap(self) -> SwappedLog:
        """Completes the copy and puts it in the log's place (see the module docstring)."""
        log = self._log
        log.wait_for_background_flushes()
        with log.lock:
            self.copy(sys.maxsize)
            try:
                self._copy_rest()
            except OSError as exc:
                raise KafkaStorageError(f"cannot complete the future log: {exc}", path=self.directory) from exc
            source = log.directory
            target = self.log_dir / source.name
            try:
                os.rename(self.directory, target)
                fsync_dir(self.log_dir)
            except OSError as exc:
                raise KafkaStorageError(f"cannot rename the future log folder: {exc}", path=self.directory) from exc
            try:
                loaded = LogLoader(
                    target,
                    log.config,
                    log.clock,
                    had_clean_shutdown=True,
                    recovery_point=log.log_end_offset,
                    log_start_offset_checkpoint=log.log_start_offset,
                ).load()
                if loaded.log_end_offset != log.log_end_offset:
                    raise KafkaStorageError(
                        f"the copy ends at {loaded.log_end_offset}, the log at {log.log_end_offset}", path=target
                    )
            except BaseException:
                # The log goes on where it is; the copy is a future log again, deleted by its owner.
                os.rename(target, self.directory)
                raise
            for segment in loaded.segments:
                copied = self._copied.get(segment.base_offset)
                if copied is not None:
                    segment.take_state_of(copied.segment)
            old_segments = log.move_to(target, loaded.segments)
            self.directory = target
            return self._set_aside(source, old_segments)

    def _copy_rest(self) -> None:
        """Under the log's lock, after the last round: the active segment's indexes and `.txnindex`, the producer
        snapshots and the folder's small files, then an fsync of what was not fsynced yet."""
        log = self._log
        active = log.active_segment
        self._copy_indexes(active)
        _fsync_file(file_names.log_file(self.directory, active.base_offset))
        source = log.directory
        wanted = {
            entry.name
            for entry in source.iterdir()
            if entry.name in _FOLDER_FILES or entry.name.endswith(file_names.PRODUCER_SNAPSHOT_SUFFIX)
        }
        for entry in self.directory.iterdir():
            stale = entry.name not in wanted and entry.name.endswith(file_names.PRODUCER_SNAPSHOT_SUFFIX)
            if stale or entry.name in _FOLDER_FILES:
                entry.unlink()
        for name in sorted(wanted):
            _write_file(self.directory / name, (source / name).read_bytes(), fsync=True)
        fsync_dir(self.directory)

    def _set_aside(self, source: Path, old_segments: tuple[LogSegment, ...]) -> SwappedLog:
        """The old folder renamed `-delete` and its segments deleted (their open files closed once their readers are
        done); a folder that cannot be renamed is left as it is, its segments' files closed."""
        topic, partition = file_names.parse_partition_dir_name(source.name) or ("", 0)
        renamed = source.parent / file_names.delete_dir_name(topic, partition, uuid.uuid4().hex)
        try:
            os.rename(source, renamed)
        except OSError as exc:
            logger.error("%s moved to %s, but its old folder cannot be renamed: %s", source, self.log_dir, exc)
            for segment in old_segments:
                segment.close_handlers()
            return SwappedLog(self.directory, source, False)
        for segment in old_segments:
            segment.delete_files()
        return SwappedLog(self.directory, renamed, True)

    def delete(self) -> None:
        """Removes the copy (a move abandoned, or replaced by one to another dir)."""
        shutil.rmtree(self.directory, ignore_errors=True)


def _write_file(path: Path, data: bytes, *, fsync: bool = False) -> None:
    """`path` holds `data` and nothing else."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _indexed_offset_below(segment: LogSegment, position: int) -> int:
    """An offset every record below which lies in the segment's first `position` bytes, from its offset index (a
    binary search; entries grow in offset and position alike): an entry names the last offset of the append starting
    at its position, so the append of the last entry at or before `position` may still be cut, and the one before it
    is whole; the segment's base offset without two such entries."""
    index = segment.offset_index
    low, high = 0, index.entries
    while low < high:
        middle = (low + high) // 2
        if index.entry(middle).position <= position:
            low = middle + 1
        else:
            high = middle
    return segment.base_offset if low < 2 else index.entry(low - 2).offset + 1


def _equal_prefix(segment: LogSegment, copy: Path) -> int:
    """The bytes at the start of `copy` equal to the segment's `.log`, in whole `COPY_CHUNK_BYTES` chunks (and the
    last, shorter one)."""
    size = min(segment.size, copy.stat().st_size)
    same = 0
    with open(copy, "rb") as copied:
        while same < size:
            wanted = min(COPY_CHUNK_BYTES, size - same)
            if copied.read(wanted) != segment.log.read(same, wanted):
                break
            same += wanted
    return same


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
