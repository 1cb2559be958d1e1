"""A broker's copy of the controller's metadata log (`__cluster_metadata-0`), as a KRaft broker keeps one.

The controller writes its metadata log on its own node and sends every batch to the copies of up to
`metadata.replication.factor` - 1 other brokers (`actors.core.controller.metadata_replication`); a controller
started on a node whose disk lost the log takes the newest copy first. A copy lives in its broker's first log dir,
in `__cluster_metadata-1` (`MIRROR_PARTITION`): beside the folder of the controller's own log,
`__cluster_metadata-0`, on the controller's node, so the two never share a file; Kafka's log dirs and raybroker's
skip every `__cluster_metadata` folder when they load partitions. A copy holds the controller's batches byte for
byte: the same offsets, and each batch's partition leader epoch is the epoch of the controller that wrote it (its
leader-epoch-checkpoint follows them, as a follower's does).

Fencing: a copy remembers the highest controller epoch that wrote to it or truncated it (at least the newest epoch
its batches carry, so a restarted broker forgets nothing a successor wrote) and refuses an older one with
`StaleControllerEpochError` (Kafka's STALE_CONTROLLER_EPOCH): a controller that stood still while a successor took
over learns so from its first write and stops acting. Reads (`state`, `end_offset_for_epoch`, `read`) are not
fenced: a controller starting up reads before it writes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from storage import file_names
from storage.clock import Clock
from storage.config.log_config import LogConfig
from storage.errors import InvalidRequestError, StaleControllerEpochError
from storage.logdir.log_dirs import METADATA_TOPIC
from storage.partition.log import Log
from storage.records.record_batch import iter_batches

# The metadata log's own config, the same on the controller and on every copy: compacted by key.
# A topic is one record (its every partition's assignment and state: ~330 bytes a partition), so the batch limit is
# KRaft's own (`KafkaRaftClient`'s 8 MiB batches) rather than a topic's default 1 MiB, which refused topics of more
# than ~3,000 partitions.
METADATA_MAX_BATCH_BYTES = 8 * 1024 * 1024
METADATA_LOG_CONFIG = LogConfig(
    cleanup_policy="compact", segment_index_bytes=1024 * 1024, max_message_bytes=METADATA_MAX_BATCH_BYTES
)
# The partition number of a copy's folder; the controller's log is partition 0.
MIRROR_PARTITION = 1
# A copy with no batch yet (its leader-epoch-checkpoint empty) answers this as its newest epoch.
NO_EPOCH = -1


@dataclass(frozen=True)
class MirrorState:
    """Where a copy of the metadata log stands: its end offset and the newest epoch among its batches (`NO_EPOCH`
    if none)."""

    end_offset: int
    latest_epoch: int

    @property
    def position(self) -> tuple[int, int]:
        """What makes one copy newer than another: a later controller's batches first, then more of them."""
        return (self.latest_epoch, self.end_offset)


def open_metadata_log(metadata_dir: Path, clock: Clock, partition: int = 0) -> Log:
    """The controller's metadata log in a log dir (a broker's copy with `MIRROR_PARTITION`), opened (created empty
    if missing)."""
    folder = metadata_dir / file_names.partition_dir_name(METADATA_TOPIC, partition)
    return Log.open(folder, METADATA_LOG_CONFIG, clock=clock)


def read_whole_batches(log: Log, offset: int, max_bytes: int) -> bytes:
    """A metadata log's whole batches from `offset` within `max_bytes` (the first even above it); empty at the end.
    A log's read may end inside a batch (Kafka's fetch semantics), and a copy appends whole batches only."""
    if offset >= log.log_end_offset:
        return b""
    records = log.read(offset, max_bytes).records
    return bytes(records[: sum(batch.size_in_bytes for batch in iter_batches(records))])


def log_state(log: Log) -> MirrorState:
    """A metadata log's `MirrorState`."""
    entries = log.epoch_entries()
    return MirrorState(log.log_end_offset, entries[-1].epoch if entries else NO_EPOCH)


class MetadataMirror:
    """One broker's copy of the metadata log; see the module docstring. Thread-safe."""

    def __init__(self, metadata_dir: Path, clock: Clock) -> None:
        self._log = open_metadata_log(metadata_dir, clock, MIRROR_PARTITION)
        self._lock = threading.Lock()
        self._fence_epoch = log_state(self._log).latest_epoch

    def state(self) -> MirrorState:
        return log_state(self._log)

    def append(self, controller_epoch: int, offset: int, batches: bytes) -> MirrorState:
        """Appends the controller's `batches` (offsets assigned by it) if they start at this copy's end offset;
        answers the state after, from which a controller sees whether the copy follows it or must be caught up
        (then nothing was appended)."""
        with self._lock:
            self._check_epoch(controller_epoch)
            if offset == self._log.log_end_offset and batches:
                self._log.append_as_follower(batches)
                self._log.flush()
            return log_state(self._log)

    def truncate_to(self, controller_epoch: int, offset: int) -> MirrorState:
        """Removes every batch from `offset` on: the part of this copy a newer controller's log does not have."""
        if offset < 0:
            raise InvalidRequestError(f"a metadata copy cannot be truncated to {offset}")
        with self._lock:
            self._check_epoch(controller_epoch)
            self._log.truncate_to(offset)
            self._log.flush()
            return log_state(self._log)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch on this copy (`Log.end_offset_for_epoch`)."""
        return self._log.end_offset_for_epoch(epoch)

    def read(self, offset: int, max_bytes: int) -> bytes:
        """`read_whole_batches` of this copy."""
        return read_whole_batches(self._log, offset, max_bytes)

    def close(self) -> None:
        with self._lock:
            self._log.close()

    def _check_epoch(self, controller_epoch: int) -> None:
        if controller_epoch < self._fence_epoch:
            raise StaleControllerEpochError(
                f"controller epoch {controller_epoch} is stale: a controller of epoch {self._fence_epoch} took over"
            )
        self._fence_epoch = controller_epoch
