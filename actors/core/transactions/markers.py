"""The transaction coordinator's seam to the partitions' leaders: COMMIT/ABORT markers (Kafka's WriteTxnMarkers).

Kafka's coordinator sends one WriteTxnMarkers request per broker holding a transaction's partitions, to every such
broker at once, so a transaction's completion costs one round trip however many partitions it wrote. `write_markers`
is that call: every partition's marker is under way before the first answer is waited for. `write_marker` is the
one-partition form (Admin's `abortTransaction`, a WriteTxnMarkers request from a client).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

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
        has it (Kafka appends markers with acks -1); a marker on `__consumer_offsets` also completes the producer's
        transactional offsets in the group coordinator (Kafka's `onTransactionCompleted`). Returns the partitions
        whose marker was not written, each with its typed error (`InvalidProducerEpochError`,
        `TransactionCoordinatorFencedError`, `UnknownTopicOrPartitionError`, `BrokerNotAvailableError`...); the
        others have theirs."""
        ...


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
