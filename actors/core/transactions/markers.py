"""The transaction coordinator's seam to the partitions' leaders: COMMIT/ABORT markers (Kafka's WriteTxnMarkers).

Kafka's coordinator sends one WriteTxnMarkers request per broker holding a transaction's partitions, to every such
broker at once, so a transaction's completion costs one round trip however many partitions it wrote. `write_markers`
is that call: every partition's marker is under way before the first answer is waited for. `write_marker` is the
one-partition form (Admin's `abortTransaction`, a WriteTxnMarkers request from a client).

A marker on a `__consumer_offsets` partition also completes the producer's transactional offsets in the group
coordinator (Kafka's `GroupCoordinator.onTransactionCompleted`): `OffsetsCompletingMarkers` decides that once, over
whichever host's marker writer (the partition actors on Ray, the in-process broker's replicas).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Protocol

from actors.core.controller.topic_metadata import CONSUMER_OFFSETS_TOPIC
from storage.errors import RaybrokerError
from storage.records.layout import ControlRecordType
from storage.topic_partition import TopicPartition


class TransactionMarkers(Protocol):
    """Writes COMMIT/ABORT markers on partitions' leaders; see the module docstring."""

    def write_markers(
        self,
        partitions: Collection[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        result: ControlRecordType,
    ) -> dict[TopicPartition, RaybrokerError]:
        """Writes the producer's marker on each partition, all at once, each answered once every in-sync replica
        has it (Kafka appends markers with acks -1). Returns the partitions whose marker was not written, each with
        its typed error (`InvalidProducerEpochError`, `TransactionCoordinatorFencedError`,
        `UnknownTopicOrPartitionError`, `BrokerNotAvailableError`...); the others have theirs."""
        ...


class OffsetsCompletingMarkers:
    """`markers`, plus what a marker on `__consumer_offsets` means to the group coordinator: once the marker of
    partition P is written, `complete(P, producer_id, commit)` makes the producer's pending transactional offsets of
    P's groups committed or drops them. A completion that fails counts as the marker's failure, so the coordinator
    writes both again later (a second marker of the same transaction is harmless; the completion then finds the
    offsets it left)."""

    def __init__(self, markers: TransactionMarkers, complete: Callable[[int, int, bool], None]) -> None:
        self._markers = markers
        self._complete = complete

    def write_markers(
        self,
        partitions: Collection[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        result: ControlRecordType,
    ) -> dict[TopicPartition, RaybrokerError]:
        failed = self._markers.write_markers(partitions, producer_id, producer_epoch, coordinator_epoch, result)
        for topic, partition in partitions:
            if topic == CONSUMER_OFFSETS_TOPIC and (topic, partition) not in failed:
                try:
                    self._complete(partition, producer_id, result == ControlRecordType.COMMIT)
                except RaybrokerError as exc:
                    failed[(topic, partition)] = exc
        return failed


def write_marker(
    markers: TransactionMarkers,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    result: ControlRecordType,
) -> None:
    """Writes one marker through `markers`, raising its typed error if it was not written."""
    failed = markers.write_markers([(topic, partition)], producer_id, producer_epoch, coordinator_epoch, result)
    if failed:
        raise failed[(topic, partition)]
