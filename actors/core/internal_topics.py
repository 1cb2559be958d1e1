"""What both coordinators need of their internal topics (`__consumer_offsets`, `__transaction_state`), whichever
host runs them: creating the topic (`ensure_internal_topic`, through the controller's `TopicAdmin`), replaying a
partition when the coordinator loads it (`internal_batches` over an `InternalPartition`, `load_reachable`), and the
in-process broker's leader replicas as the coordinators append to them (`InProcessInternalPartition`; the Ray
actors' are `actors.server.internal_partition_leaders`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from actors.core.controller.topic_metadata import TopicMetadata
from actors.core.replication.partition_server import PartitionServer
from actors.core.replication.replica import ACKS_ALL
from storage.errors import CoordinatorLoadInProgressError, CorruptRecordError, RaybrokerError, TopicExistsError
from storage.partition.log import LogAppendInfo
from storage.records.record_batch import RecordBatch, iter_batches

logger = logging.getLogger(__name__)


class InternalPartition(Protocol):
    """The leader replica of one partition of an internal topic, as a coordinator loads it."""

    def offsets(self) -> tuple[int, int, int]:
        """(log start offset, high watermark, log end offset)."""
        ...

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from `offset`, up to the high watermark."""
        ...


def internal_batches(handle: InternalPartition, name: str, chunk_bytes: int) -> Iterator[RecordBatch]:
    """Every batch of the partition `name` from its log start to its log end, read `chunk_bytes` at a time: what a
    coordinator replays when it loads a partition of its internal topic. Kafka's coordinators load to the log end:
    a leader just elected holds every state its predecessor had acknowledged, but learns that they are replicated
    (its high watermark) only once its followers fetch from it. Reads stop at the high watermark, so until it
    reaches the log end this raises `CoordinatorLoadInProgressError` (retriable) rather than load older states
    (a transaction's partitions forgotten, its markers never written). `CorruptRecordError` if a read below the
    high watermark returns no batch (the loop could not move on)."""
    log_start_offset, high_watermark, log_end_offset = handle.offsets()
    if high_watermark < log_end_offset:
        raise CoordinatorLoadInProgressError(
            f"{name}: high watermark {high_watermark} below the log end {log_end_offset}; loaded once it reaches it"
        )
    offset = log_start_offset
    while offset < high_watermark:
        next_offset = offset
        for batch in iter_batches(handle.read(offset, chunk_bytes)):
            yield batch
            next_offset = batch.next_offset
        if next_offset <= offset:
            raise CorruptRecordError(
                f"{name}: a read at offset {offset} below the high watermark {high_watermark} returned no batch",
                offset=offset,
            )
        offset = next_offset


def load_reachable(name: str, partitions: int, load: Callable[[int], object]) -> None:
    """`load(p)` for every partition of the internal topic `name`; a partition that fails retriably (hosted by a
    broker that is not up yet) is logged and left to load on its first use."""
    for partition in range(partitions):
        try:
            load(partition)
        except RaybrokerError as exc:
            if not exc.retriable:
                raise
            logger.warning("%s-%d not loaded yet: %s", name, partition, exc)


class TopicAdmin(Protocol):
    """What creating an internal topic needs of the controller (the plain `Controller` is one; on Ray, a client
    of the controller actor): only Kafka's CreateTopics with every setting of the topic given, never a validation
    alone or the broker's default replication factor."""

    def brokers(self) -> list[str]: ...

    def create_topic(
        self, name: str, partitions: int, config: Mapping[str, str], *, replication_factor: int
    ) -> TopicMetadata: ...

    def describe_topic(self, name: str) -> TopicMetadata: ...

    def list_topics(self, include_internal: bool = False) -> list[str]: ...


def ensure_internal_topic(
    controller: TopicAdmin,
    name: str,
    partitions: int,
    replication_factor: int,
    config: Mapping[str, str],
    replication_key: str,
) -> TopicMetadata:
    """The internal topic `name` as the controller has it, created first if it does not exist, with `partitions`
    partitions, `config`, and `replication_factor` replicas capped at the brokers running (with a warning naming
    the broker key `replication_key` that asked for more). An existing topic is left as it is."""
    brokers = len(controller.brokers())
    replicas = max(min(replication_factor, brokers), 1)
    with contextlib.suppress(TopicExistsError):
        created = controller.create_topic(name, partitions, config, replication_factor=replicas)
        if replicas < replication_factor:
            logger.warning(
                "%s is %d but %d broker(s) run: %s was created with %d replica(s)",
                replication_key,
                replication_factor,
                brokers,
                name,
                replicas,
            )
        return created
    return controller.describe_topic(name)


class InProcessInternalPartition:
    """An internal topic's leader replica as the in-process coordinators use it (the group coordinator's
    `OffsetsPartition`, the transaction coordinator's `TransactionLogPartition`): each append answers once every
    in-sync replica has it, as Kafka's coordinators append with acks -1."""

    def __init__(self, server: PartitionServer) -> None:
        self.server = server

    def leader_epoch(self) -> int:
        """The leader epoch the controller elected this replica in (`Replica.leader_epoch`)."""
        return self.server.replica.leader_epoch

    def offsets(self) -> tuple[int, int, int]:
        return self.server.offsets()

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from `offset` up to the high watermark, read from the leader."""
        return bytes(self.server.fetch(offset, max_bytes).records)

    def append_replicated(self, batch: bytes) -> LogAppendInfo:
        return self.server.await_replicated(self.server.append(batch, ACKS_ALL))

    def delete_records(self, offset: int) -> int:
        """DeleteRecords up to `offset` on the leader; its log start offset now."""
        return self.server.delete_records(offset)

    def append_from_coordinator(self, batch: bytes) -> LogAppendInfo:
        return self.server.await_replicated(self.server.append_from_coordinator(batch))
